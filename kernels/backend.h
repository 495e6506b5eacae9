// One backend interface for the layer code: memory, GEMMs and the elementwise kernels.
// The CPU backend (OpenBLAS sgemm/dgemm + threaded loops, fp32/fp64) and the CUDA backend
// (cuBLAS/cuBLASLt + own kernels, fp32/bf16/fp16 storage with fp32 math) implement it, so
// kernels/transformer_layer.cc runs unchanged on both. Pointers are wherever the backend
// keeps tensors (host or device). Matrices are row-major.
// Thread-safety: a Backend belongs to one rank (one thread).
#ifndef PARATUNE_KERNELS_BACKEND_H_
#define PARATUNE_KERNELS_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/enums.h"
#include "kernels/attention_args.h"
#include "kernels/communicator.h"
#include "kernels/dtype.h"
#include "kernels/step_runner.h"
#include "kernels/tensor.h"

namespace paratune::kernels {

/// C[m,n] = alpha·op(A)·op(B) + beta·C for `batch` matrices at fixed strides (elements).
struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual TrackingAllocator& allocator() = 0;
  /// Waits for queued work (no-op on CPU); timers call it before reading the clock.
  virtual absl::Status Synchronize() = 0;

  absl::StatusOr<Tensor> Empty(std::vector<int64_t> shape, DType dtype, MemoryTag tag) {
    return Tensor::Empty(&allocator(), std::move(shape), dtype, tag);
  }
  absl::StatusOr<Tensor> Zeros(std::vector<int64_t> shape, DType dtype, MemoryTag tag);

  virtual absl::Status Fill(const Tensor& t, double value) = 0;
  /// Host values (any dtype is converted from double).
  virtual absl::Status CopyFromHost(const Tensor& t, const std::vector<double>& values) = 0;
  virtual absl::StatusOr<std::vector<double>> CopyToHost(const Tensor& t) = 0;
  virtual absl::Status Copy(const Tensor& dst, const Tensor& src) = 0;
  /// Where a raw copy's pointers live, for CopyBytes.
  enum class CopyKind { kOnBackend, kHostToBackend, kBackendToHost };
  /// `bytes` from src to dst (memmove on CPU; cudaMemcpy on CUDA). Host-to-backend and
  /// backend-to-host copies are complete on return; on-backend copies are ordered on the
  /// backend's stream.
  virtual absl::Status CopyBytes(void* dst, const void* src, int64_t bytes, CopyKind kind) = 0;
  /// x *= s in place (float dtypes; fp32 math).
  virtual absl::Status Scale(DType dtype, void* x, float s, int64_t n) = 0;
  /// dst = src converted between float dtypes (fp32 ↔ bf16/fp16 on CUDA; fp32 ↔ fp64 on
  /// CPU), e.g. a mixed-precision optimizer's fp32 master weights into 16-bit weights.
  virtual absl::Status Cast(DType dst_dtype, void* dst, DType src_dtype, const void* src,
                            int64_t n) = 0;

  virtual absl::Status Gemm(DType dtype, const GemmArgs& args) = 0;
  /// Independent GEMMs of any shapes and transposes in one call, as Gemm one after another
  /// (the default); CUDA runs them as one grouped launch (cuBLAS grouped batched GEMM) when
  /// none is batched. A MoE layer's experts are one group per expert.
  virtual absl::Status GroupedGemm(DType dtype, const std::vector<GemmArgs>& gemms) {
    for (const GemmArgs& g : gemms) {
      if (absl::Status s = Gemm(dtype, g); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  /// y = x̂·gamma + beta per row; stores mean and rstd (fp32, `rows` each).
  virtual absl::Status LayerNormForward(DType dtype, void* y, float* mean, float* rstd,
                                        const void* x, const void* gamma, const void* beta,
                                        int64_t rows, int64_t cols, float eps) = 0;
  /// dx = (overwrite); dgamma, dbeta += (accumulate over micro-batches).
  virtual absl::Status LayerNormBackward(DType dtype, void* dx, void* dgamma, void* dbeta,
                                         const void* dy, const void* x, const void* gamma,
                                         const float* mean, const float* rstd, int64_t rows,
                                         int64_t cols) = 0;
  virtual absl::Status RmsNormForward(DType dtype, void* y, float* rstd, const void* x,
                                      const void* gamma, int64_t rows, int64_t cols,
                                      float eps) = 0;
  virtual absl::Status RmsNormBackward(DType dtype, void* dx, void* dgamma, const void* dy,
                                       const void* x, const void* gamma, const float* rstd,
                                       int64_t rows, int64_t cols) = 0;
  /// In place over `batch` row-major s×s matrices: p = softmax(scale·x) with j > i masked
  /// and, with `window` > 0, j <= i - window too.
  virtual absl::Status CausalSoftmaxForward(DType dtype, void* p, int64_t batch, int64_t seq,
                                            float scale, int64_t window) = 0;
  /// dx = scale·p∘(dp − rowsum(p∘dp)); dx may alias dp.
  virtual absl::Status CausalSoftmaxBackward(DType dtype, void* dx, const void* p,
                                             const void* dp, int64_t batch, int64_t seq,
                                             float scale) = 0;
  /// Tanh-approximated GeLU.
  virtual absl::Status GeluForward(DType dtype, void* y, const void* x, int64_t n) = 0;
  virtual absl::Status GeluBackward(DType dtype, void* dx, const void* dy, const void* x,
                                    int64_t n) = 0;
  /// x is [rows, 2f] = [gate | up]; y[rows, f] = silu(gate)·up.
  virtual absl::Status SwigluForward(DType dtype, void* y, const void* x, int64_t rows,
                                     int64_t f) = 0;
  virtual absl::Status SwigluBackward(DType dtype, void* dx, const void* dy, const void* x,
                                      int64_t rows, int64_t f) = 0;
  /// x is [rows, 2f] = [gate | up]; y[rows, f] = gelu(gate)·up (tanh GeLU).
  virtual absl::Status GegluForward(DType dtype, void* y, const void* x, int64_t rows,
                                    int64_t f) = 0;
  virtual absl::Status GegluBackward(DType dtype, void* dx, const void* dy, const void* x,
                                     int64_t rows, int64_t f) = 0;
  /// y = max(x, 0)² (Nemotron-4's squared ReLU).
  virtual absl::Status SquaredReluForward(DType dtype, void* y, const void* x, int64_t n) = 0;
  virtual absl::Status SquaredReluBackward(DType dtype, void* dx, const void* dy, const void* x,
                                           int64_t n) = 0;
  /// The MLP's activation `act` on FC1's output x ([rows, 2f] for the gated ones, [rows, f]
  /// otherwise) into y [rows, f].
  absl::Status MlpActivationForward(DType dtype, Activation act, void* y, const void* x,
                                    int64_t rows, int64_t f);
  /// Its backward: dx (x's shape) from dy [rows, f].
  absl::Status MlpActivationBackward(DType dtype, Activation act, void* dx, const void* dy,
                                     const void* x, int64_t rows, int64_t f);
  /// y = x·keep/(1−p); keep(i) = hash(seed, index_offset + i) ≥ p; mask (u8) stored if
  /// non-null. Masks are a function of the global element index, hence layout-invariant.
  virtual absl::Status DropoutForward(DType dtype, void* y, uint8_t* mask, const void* x,
                                      int64_t n, float p, uint64_t seed,
                                      uint64_t index_offset) = 0;
  virtual absl::Status DropoutBackward(DType dtype, void* dx, const void* dy,
                                       const uint8_t* mask, int64_t n, float p) = 0;
  /// out = a + b (residual connections; out may alias a or b).
  virtual absl::Status Add(DType dtype, void* out, const void* a, const void* b,
                           int64_t n) = 0;
  /// Flash attention: tiled online softmax; never stores s×s scores. lse: [b, heads, s]
  /// fp32 log-sum-exp of the scaled scores.
  virtual absl::Status FlashAttentionForward(DType dtype, const AttentionArgs& args,
                                             float* lse) = 0;
  /// dq/dk/dv share q/k/v's layout (ld_qkv); dk, dv accumulate over the heads of a group.
  virtual absl::Status FlashAttentionBackward(DType dtype, const AttentionArgs& args,
                                              const float* lse, const void* d_o, void* dq,
                                              void* dk, void* dv) = 0;
  /// Naive-path dropout on probabilities [b, heads, s, s] (global indices as above).
  virtual absl::Status AttentionDropoutForward(DType dtype, void* y, uint8_t* mask,
                                               const void* x, const AttentionArgs& args) = 0;
  /// AdamW on fp32 master values (param, m, v fp32; grad in `dtype`).
  virtual absl::Status AdamW(DType dtype, float* param, const void* grad, float* m, float* v,
                             int64_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, int64_t step) = 0;
  /// out[t, :] = table[ids[t] − vocab_start, :] when the id is in [vocab_start, vocab_end),
  /// else 0 (VocabParallelEmbedding; the caller all-reduces).
  virtual absl::Status EmbeddingForward(DType dtype, void* out, const int32_t* ids,
                                        const void* table, int64_t tokens, int64_t hidden,
                                        int64_t vocab_start, int64_t vocab_end) = 0;
  virtual absl::Status EmbeddingBackward(DType dtype, void* dtable, const int32_t* ids,
                                         const void* dout, int64_t tokens, int64_t hidden,
                                         int64_t vocab_start, int64_t vocab_end) = 0;
  /// Per row of local logits [rows, v]: max (fp32).
  virtual absl::Status RowMax(DType dtype, float* out, const void* logits, int64_t rows,
                              int64_t v) = 0;
  /// Per row: sumexp = Σ exp(x − max), target = x[t − vocab_start] if local else 0.
  virtual absl::Status CrossEntropyPartials(DType dtype, float* sumexp, float* target,
                                            const void* logits, const float* max,
                                            const int32_t* targets, int64_t rows, int64_t v,
                                            int64_t vocab_start) = 0;
  /// dlogits = scale·(exp(x − max)/sum − onehot(target)).
  virtual absl::Status CrossEntropyBackward(DType dtype, void* dlogits, const void* logits,
                                            const float* max, const float* sumexp,
                                            const int32_t* targets, int64_t rows, int64_t v,
                                            int64_t vocab_start, float scale) = 0;

  // ---- Mixture of experts (kernels/moe_layer.h). The router's tensors are fp32 (as
  // Megatron-Core's router), or fp64 for an fp64 layer on the cpu backend; the permuted
  // rows and the probabilities that weight them are in the layer's dtype. ----

  /// scores[T, E] = softmax over the experts (or elementwise sigmoid) of logits[T, E].
  virtual absl::Status MoeRouterScores(DType router_dtype, void* scores, const void* logits,
                                       int64_t tokens, int64_t experts, bool sigmoid) = 0;
  /// Each token's k experts, selected[T, k] (its top-k scores in descending order, ties to
  /// the lower index; with `balanced` the forced uniform assignment (g·k + j) mod E of
  /// global token g = first_token + t), and their probabilities probs[T, k] = scale ·
  /// score / (the k scores' sum when `normalize`).
  virtual absl::Status MoeRouterTopK(DType router_dtype, int32_t* selected, void* probs,
                                     const void* scores, int64_t tokens, int64_t experts, int64_t k,
                                     bool normalize, double scale, bool balanced,
                                     int64_t first_token) = 0;
  /// dlogits[T, E] (overwritten) from dprobs[T, k] through MoeRouterTopK's probabilities
  /// and MoeRouterScores, plus (dp_aux[T, E] non-null: cpu backend only) the gradient of
  /// the auxiliary loss's probabilities.
  virtual absl::Status MoeRouterBackward(DType router_dtype, void* dlogits, const void* dprobs,
                                         const void* scores, const int32_t* selected,
                                         int64_t tokens, int64_t experts, int64_t k, bool sigmoid,
                                         bool normalize, double scale, const void* dp_aux) = 0;
  /// out[i] = x[perm[i] / k] for `rows` rows of width `hidden`.
  virtual absl::Status MoePermute(DType dtype, void* out, const void* x, const int32_t* perm,
                                  int64_t rows, int64_t k, int64_t hidden) = 0;
  /// y[t] = Σ_j probs[t, j] · in[row of assignment t·k + j] (probs null: weights 1), where
  /// row i holds assignment perm[i]; an assignment without a row (dropped: rows < T·k,
  /// cpu backend only) adds nothing.
  virtual absl::Status MoeUnpermute(DType dtype, void* y, const void* in, const void* probs,
                                    const int32_t* perm, int64_t tokens, int64_t k, int64_t hidden,
                                    int64_t rows) = 0;
  /// MoeUnpermute's backward with probabilities: din[i] = probs[perm[i]] · dy[t] and
  /// dprobs[perm[i]] = dy[t] · in[i] (t = perm[i] / k); dprobs of a dropped assignment 0.
  virtual absl::Status MoeUnpermuteBackward(DType dtype, void* din, void* dprobs, const void* dy,
                                            const void* in, const void* probs, const int32_t* perm,
                                            int64_t tokens, int64_t k, int64_t hidden,
                                            int64_t rows) = 0;
};

/// The group of one rank whose copies go through `backend` (MakeSelfCommunicator copies
/// with memmove, which device pointers do not allow).
std::unique_ptr<Communicator> MakeSelfCommunicator(Backend& backend);

/// CPU backend; `threads` for elementwise loops (>= 1). Supports fp32 and fp64.
std::unique_ptr<Backend> MakeCpuBackend(int64_t capacity_bytes, int threads);
/// Sets OpenBLAS's thread count (process-wide).
void SetBlasThreads(int threads);
/// CUDA backend on `device`, or Unimplemented when this binary has no CUDA backend,
/// FailedPrecondition when no device exists.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int device, int64_t capacity_bytes);
/// Number of CUDA devices; Unimplemented without CUDA.
absl::StatusOr<int> CudaDeviceCount();
/// FailedPrecondition unless `ranks` CUDA devices exist (one device per rank: NCCL refuses
/// two ranks on one GPU).
absl::Status CheckCudaDevicesForRanks(int64_t ranks);
/// NCCL communicator on the CUDA backend's stream; rank 0 publishes the unique id through
/// `rendezvous`. Unimplemented without CUDA.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    Backend& backend, std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix,
    int rank, int size);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_BACKEND_H_
