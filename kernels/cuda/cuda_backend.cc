// CUDA backend: device memory, cuBLAS GEMMs, and the launchers of kernels/cuda/*.cu, each
// wrapped in CUDA_CHECK (a launcher returns cudaGetLastError() after its launch).
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launchers.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

using cuda::ElemType;

class DeviceMemory final : public RawMemory {
 public:
  void* Allocate(int64_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky allocation error
      return nullptr;
    }
    return p;
  }
  void Free(void* ptr) override { cudaFree(ptr); }
  bool host_accessible() const override { return false; }
};

absl::StatusOr<ElemType> Elem(DType t) {
  switch (t) {
    case DType::kF32: return ElemType::kF32;
    case DType::kBF16: return ElemType::kBF16;
    case DType::kF16: return ElemType::kF16;
    case DType::kF64: return ElemType::kF64;
    case DType::kU8: return ElemType::kU8;
    case DType::kI32: return ElemType::kI32;
  }
  return absl::InvalidArgumentError("unknown dtype");
}

// Floating storage types the kernels take.
absl::StatusOr<ElemType> FloatElem(DType t) {
  if (t == DType::kF32) return ElemType::kF32;
  if (t == DType::kBF16) return ElemType::kBF16;
  if (t == DType::kF16) return ElemType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype (", DTypeName(t), ") must be fp32, bf16 or fp16 on the cuda backend"));
}

absl::StatusOr<cudaDataType_t> CublasType(DType t) {
  if (t == DType::kF32) return CUDA_R_32F;
  if (t == DType::kBF16) return CUDA_R_16BF;
  if (t == DType::kF16) return CUDA_R_16F;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype (", DTypeName(t), ") has no cuBLAS GEMM here"));
}

#define PT_LAUNCH(dtype, call)                          \
  do {                                                  \
    PT_ASSIGN_OR_RETURN(ElemType et, FloatElem(dtype)); \
    CUDA_CHECK(call);                                   \
  } while (0)

class CudaBackend final : public CudaBackendBase {
 public:
  CudaBackend(int device, int64_t capacity) : device_(device), allocator_(&memory_, capacity) {}
  ~CudaBackend() override {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    return absl::OkStatus();
  }

  BackendKind kind() const override { return BackendKind::kCuda; }
  TrackingAllocator& allocator() override { return allocator_; }
  cudaStream_t stream() const override { return stream_; }
  int device() const override { return device_; }
  absl::Status Synchronize() override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status Fill(const Tensor& t, double value) override {
    PT_ASSIGN_OR_RETURN(ElemType et, Elem(t.dtype()));
    CUDA_CHECK(cuda::fill(et, t.data(), t.numel(), value, stream_));
    return absl::OkStatus();
  }

  absl::Status CopyFromHost(const Tensor& t, const std::vector<double>& values) override {
    if (static_cast<int64_t>(values.size()) != t.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "values (", values.size(), ") must match tensor numel (", t.numel(), ")"));
    }
    PT_ASSIGN_OR_RETURN(ElemType et, Elem(t.dtype()));
    PT_ASSIGN_OR_RETURN(Tensor staging, Empty({t.numel()}, DType::kF64, MemoryTag::kWorkspace));
    CUDA_CHECK(cudaMemcpyAsync(staging.data(), values.data(), values.size() * sizeof(double),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cuda::convert_from_f64(et, t.data(), staging.data_as<double>(), t.numel(), stream_));
    return Synchronize();  // staging is freed on return
  }

  absl::StatusOr<std::vector<double>> CopyToHost(const Tensor& t) override {
    PT_ASSIGN_OR_RETURN(ElemType et, Elem(t.dtype()));
    PT_ASSIGN_OR_RETURN(Tensor staging, Empty({t.numel()}, DType::kF64, MemoryTag::kWorkspace));
    CUDA_CHECK(cuda::convert_to_f64(et, staging.data_as<double>(), t.data(), t.numel(), stream_));
    std::vector<double> out(t.numel());
    CUDA_CHECK(cudaMemcpyAsync(out.data(), staging.data(), out.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, stream_));
    PT_RETURN_IF_ERROR(Synchronize());
    return out;
  }

  absl::Status Copy(const Tensor& dst, const Tensor& src) override {
    if (dst.bytes() != src.bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy of ", src.bytes(), " bytes into ", dst.bytes(), " bytes"));
    }
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice,
                               stream_));
    return absl::OkStatus();
  }

  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands.
  absl::Status Gemm(DType dtype, const GemmArgs& g) override {
    PT_ASSIGN_OR_RETURN(cudaDataType_t type, CublasType(dtype));
    const float alpha = g.alpha, beta = g.beta;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas_, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha, g.b, type,
        static_cast<int>(g.ldb), g.stride_b, g.a, type, static_cast<int>(g.lda), g.stride_a,
        &beta, g.c, type, static_cast<int>(g.ldc), g.stride_c, static_cast<int>(g.batch),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }

  absl::Status LayerNormForward(DType dtype, void* y, float* mean, float* rstd, const void* x,
                                const void* gamma, const void* beta, int64_t rows,
                                int64_t cols, float eps) override {
    PT_LAUNCH(dtype, cuda::layernorm_forward(et, y, mean, rstd, x, gamma, beta, rows, cols, eps,
                                             stream_));
    return absl::OkStatus();
  }
  absl::Status LayerNormBackward(DType dtype, void* dx, void* dgamma, void* dbeta,
                                 const void* dy, const void* x, const void* gamma,
                                 const float* mean, const float* rstd, int64_t rows,
                                 int64_t cols) override {
    PT_ASSIGN_OR_RETURN(Tensor scratch, Empty({2 * cols}, DType::kF32, MemoryTag::kWorkspace));
    PT_LAUNCH(dtype, cuda::layernorm_backward(et, dx, dgamma, dbeta, dy, x, gamma, mean, rstd,
                                              rows, cols, scratch.data_as<float>(), stream_));
    return Synchronize();  // scratch is freed on return
  }
  absl::Status RmsNormForward(DType dtype, void* y, float* rstd, const void* x,
                              const void* gamma, int64_t rows, int64_t cols,
                              float eps) override {
    PT_LAUNCH(dtype, cuda::rmsnorm_forward(et, y, rstd, x, gamma, rows, cols, eps, stream_));
    return absl::OkStatus();
  }
  absl::Status RmsNormBackward(DType dtype, void* dx, void* dgamma, const void* dy,
                               const void* x, const void* gamma, const float* rstd,
                               int64_t rows, int64_t cols) override {
    PT_ASSIGN_OR_RETURN(Tensor scratch, Empty({cols}, DType::kF32, MemoryTag::kWorkspace));
    PT_LAUNCH(dtype, cuda::rmsnorm_backward(et, dx, dgamma, dy, x, gamma, rstd, rows, cols,
                                            scratch.data_as<float>(), stream_));
    return Synchronize();
  }
  absl::Status CausalSoftmaxForward(DType dtype, void* p, int64_t batch, int64_t seq,
                                    float scale) override {
    PT_LAUNCH(dtype, cuda::causal_softmax_forward(et, p, batch, seq, scale, stream_));
    return absl::OkStatus();
  }
  absl::Status CausalSoftmaxBackward(DType dtype, void* dx, const void* p, const void* dp,
                                     int64_t batch, int64_t seq, float scale) override {
    PT_LAUNCH(dtype, cuda::causal_softmax_backward(et, dx, p, dp, batch, seq, scale, stream_));
    return absl::OkStatus();
  }
  absl::Status GeluForward(DType dtype, void* y, const void* x, int64_t n) override {
    PT_LAUNCH(dtype, cuda::gelu_forward(et, y, x, n, stream_));
    return absl::OkStatus();
  }
  absl::Status GeluBackward(DType dtype, void* dx, const void* dy, const void* x,
                            int64_t n) override {
    PT_LAUNCH(dtype, cuda::gelu_backward(et, dx, dy, x, n, stream_));
    return absl::OkStatus();
  }
  absl::Status SwigluForward(DType dtype, void* y, const void* x, int64_t rows,
                             int64_t f) override {
    PT_LAUNCH(dtype, cuda::swiglu_forward(et, y, x, rows, f, stream_));
    return absl::OkStatus();
  }
  absl::Status SwigluBackward(DType dtype, void* dx, const void* dy, const void* x,
                              int64_t rows, int64_t f) override {
    PT_LAUNCH(dtype, cuda::swiglu_backward(et, dx, dy, x, rows, f, stream_));
    return absl::OkStatus();
  }
  absl::Status DropoutForward(DType dtype, void* y, uint8_t* mask, const void* x, int64_t n,
                              float p, uint64_t seed, uint64_t index_offset) override {
    PT_LAUNCH(dtype, cuda::dropout_forward(et, y, mask, x, n, p, seed, index_offset, stream_));
    return absl::OkStatus();
  }
  absl::Status DropoutBackward(DType dtype, void* dx, const void* dy, const uint8_t* mask,
                               int64_t n, float p) override {
    PT_LAUNCH(dtype, cuda::dropout_backward(et, dx, dy, mask, n, p, stream_));
    return absl::OkStatus();
  }
  absl::Status Add(DType dtype, void* out, const void* a, const void* b, int64_t n) override {
    PT_LAUNCH(dtype, cuda::residual_add(et, out, a, b, n, stream_));
    return absl::OkStatus();
  }
  absl::Status FlashAttentionForward(DType dtype, const AttentionArgs& args,
                                     float* lse) override {
    if (args.head_dim % 32 != 0 || args.head_dim > 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          "head_dim (", args.head_dim, ") must be a multiple of 32 and <= 256 for flash on cuda"));
    }
    PT_LAUNCH(dtype, cuda::flash_attention_forward(et, args, lse, stream_));
    return absl::OkStatus();
  }
  absl::Status FlashAttentionBackward(DType dtype, const AttentionArgs& args, const float* lse,
                                      const void* d_o, void* dq, void* dk, void* dv) override {
    if (args.head_dim % 32 != 0 || args.head_dim > 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          "head_dim (", args.head_dim, ") must be a multiple of 32 and <= 256 for flash on cuda"));
    }
    PT_ASSIGN_OR_RETURN(Tensor scratch, Empty({args.batch * args.heads * args.seq}, DType::kF32,
                                              MemoryTag::kWorkspace));
    PT_LAUNCH(dtype, cuda::flash_attention_backward(et, args, lse, d_o, dq, dk, dv,
                                                    scratch.data_as<float>(), stream_));
    return Synchronize();
  }
  absl::Status AttentionDropoutForward(DType dtype, void* y, uint8_t* mask, const void* x,
                                       const AttentionArgs& args) override {
    PT_LAUNCH(dtype, cuda::attention_dropout_forward(et, y, mask, x, args, stream_));
    return absl::OkStatus();
  }
  absl::Status AdamW(DType dtype, float* param, const void* grad, float* m, float* v,
                     int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int64_t step) override {
    PT_LAUNCH(dtype, cuda::adamw(et, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                                 step, stream_));
    return absl::OkStatus();
  }
  absl::Status EmbeddingForward(DType dtype, void* out, const int32_t* ids, const void* table,
                                int64_t tokens, int64_t hidden, int64_t vocab_start,
                                int64_t vocab_end) override {
    PT_LAUNCH(dtype, cuda::embedding_forward(et, out, ids, table, tokens, hidden, vocab_start,
                                             vocab_end, stream_));
    return absl::OkStatus();
  }
  absl::Status EmbeddingBackward(DType dtype, void* dtable, const int32_t* ids,
                                 const void* dout, int64_t tokens, int64_t hidden,
                                 int64_t vocab_start, int64_t vocab_end) override {
    PT_LAUNCH(dtype, cuda::embedding_backward(et, dtable, ids, dout, tokens, hidden, vocab_start,
                                              vocab_end, stream_));
    return absl::OkStatus();
  }
  absl::Status RowMax(DType dtype, float* out, const void* logits, int64_t rows,
                      int64_t v) override {
    PT_LAUNCH(dtype, cuda::row_max(et, out, logits, rows, v, stream_));
    return absl::OkStatus();
  }
  absl::Status CrossEntropyPartials(DType dtype, float* sumexp, float* target,
                                    const void* logits, const float* max,
                                    const int32_t* targets, int64_t rows, int64_t v,
                                    int64_t vocab_start) override {
    PT_LAUNCH(dtype, cuda::cross_entropy_partials(et, sumexp, target, logits, max, targets, rows,
                                                  v, vocab_start, stream_));
    return absl::OkStatus();
  }
  absl::Status CrossEntropyBackward(DType dtype, void* dlogits, const void* logits,
                                    const float* max, const float* sumexp,
                                    const int32_t* targets, int64_t rows, int64_t v,
                                    int64_t vocab_start, float scale) override {
    PT_LAUNCH(dtype, cuda::cross_entropy_backward(et, dlogits, logits, max, sumexp, targets, rows,
                                                  v, vocab_start, scale, stream_));
    return absl::OkStatus();
  }

 private:
  const int device_;
  DeviceMemory memory_;
  TrackingAllocator allocator_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int device, int64_t capacity_bytes) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device (cudaGetDeviceCount reports none)");
  }
  auto backend = std::make_unique<CudaBackend>(device % count, capacity_bytes);
  PT_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace paratune::kernels
