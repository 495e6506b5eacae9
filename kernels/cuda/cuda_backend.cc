// CUDA backend: device memory, cuBLAS GEMMs, and the launchers of kernels/cuda/*.cu, each
// wrapped in CUDA_CHECK (a launcher returns cudaGetLastError() after its launch).
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launchers.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

using cuda::ElemType;

// Device memory with a cache of freed blocks by exact (512-byte rounded) size, as PyTorch's
// caching allocator: a training step allocates the same shapes every iteration, and
// cudaMalloc / cudaFree (which synchronises the device) would otherwise dominate small
// kernels. Reuse is safe without synchronising because every kernel, copy and collective
// of a backend runs on its one stream, in order. When cudaMalloc fails the cache is given
// back and the allocation tried once more, so the tracking allocator's OOM is real.
class DeviceMemory final : public RawMemory {
 public:
  ~DeviceMemory() override { Release(); }
  void* Allocate(int64_t bytes) override {
    const int64_t size = (std::max<int64_t>(bytes, 1) + 511) / 512 * 512;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cached_.find(size);
      if (it != cached_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky allocation error
      Release();
      if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = size;
    return p;
  }
  void Free(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return;
    cached_[it->second].push_back(ptr);
  }
  bool host_accessible() const override { return false; }

 private:
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : cached_) {
      for (void* p : blocks) {
        cudaFree(p);
        sizes_.erase(p);
      }
    }
    cached_.clear();
  }
  std::mutex mu_;
  std::unordered_map<void*, int64_t> sizes_;                 // every live or cached block
  std::unordered_map<int64_t, std::vector<void*>> cached_;   // freed blocks by size
};

absl::StatusOr<ElemType> Elem(DType t) {
  switch (t) {
    case DType::kF32: return ElemType::kF32;
    case DType::kBF16: return ElemType::kBF16;
    case DType::kF16: return ElemType::kF16;
    case DType::kF64: return ElemType::kF64;
    case DType::kU8: return ElemType::kU8;
    case DType::kI32: return ElemType::kI32;
    case DType::kFp8E4M3:
      break;  // the serving KV cache's storage only
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

absl::Status CheckAttention(const AttentionArgs& a) {
  if (a.groups <= 0 || a.heads % a.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attention heads (", a.heads,
                                                   ") must be a multiple of groups (", a.groups,
                                                   ")"));
  }
  return absl::OkStatus();
}

// Bytes of one S / dP̃ buffer of blocked flash attention: 32 MiB, or
// $PARATUNE_CUDA_ATTENTION_BUFFER_BYTES (tests use it to force many small blocks).
int64_t BufferBytes() {
  static const int64_t bytes = [] {
    const char* env = std::getenv("PARATUNE_CUDA_ATTENTION_BUFFER_BYTES");
    const long long v = env == nullptr ? 0 : std::atoll(env);
    return v > 0 ? static_cast<int64_t>(v) : int64_t{32} << 20;
  }();
  return bytes;
}

// Addressing of blocked flash attention: rows are tokens t = i·b + bi with row stride
// b·ld; query head hh = g·pg + r uses kv group g.
struct Attn {
  const AttentionArgs& a;
  int64_t esz, pg, ld, ld_o, block;
  Attn(const AttentionArgs& args, int64_t elem_size)
      : a(args), esz(elem_size), pg(args.heads / args.groups), ld(args.batch * args.ld_qkv),
        ld_o(args.batch * args.ld_o) {
    // The largest multiple of 64 query rows whose [groups, rows, s] buffer fits kBufferBytes
    // (at least 64, at most s).
    const int64_t fit = BufferBytes() / (esz * args.groups * args.seq);
    block = std::min<int64_t>(args.seq, std::max<int64_t>(64, fit / 64 * 64));
  }
  int64_t buffer_elems() const { return a.groups * block * a.seq; }
  // Row i0 of head r of batch element bi in a q-like tensor with leading dimension `ldx`.
  const void* QRows(const void* base, int64_t bi, int64_t r, int64_t i0, int64_t ldx) const {
    return static_cast<const char*>(base) + ((i0 * a.batch + bi) * ldx + r * a.head_dim) * esz;
  }
  void* QRows(void* base, int64_t bi, int64_t r, int64_t i0, int64_t ldx) const {
    return static_cast<char*>(base) + ((i0 * a.batch + bi) * ldx + r * a.head_dim) * esz;
  }
  // Key row k0 of batch element bi in a k-like tensor.
  const void* Kv(const void* base, int64_t bi, int64_t k0) const {
    return static_cast<const char*>(base) + (k0 * a.batch + bi) * a.ld_qkv * esz;
  }
  void* KvMut(void* base, int64_t bi, int64_t k0) const {
    return static_cast<char*>(base) + (k0 * a.batch + bi) * a.ld_qkv * esz;
  }
  // The keys [k0, i0 + rows) the query rows [i0, i0 + rows) see (k0 > 0 with a window).
  int64_t FirstKey(int64_t i0) const { return kernels::FirstKey(a, i0); }
  // S = Q_blk·K[k0, i0 + rows)ᵀ for every kv group (batched; head r of each group).
  GemmArgs Scores(int64_t bi, int64_t r, int64_t i0, int64_t rows, void* s) const {
    const int64_t k0 = FirstKey(i0), kv = i0 + rows - k0;
    GemmArgs g;
    g.trans_b = true;
    g.m = rows, g.n = kv, g.k = a.head_dim;
    g.a = QRows(a.q, bi, r, i0, a.ld_qkv), g.lda = ld, g.stride_a = pg * a.head_dim;
    g.b = Kv(a.k, bi, k0), g.ldb = ld, g.stride_b = a.head_dim;
    g.c = s, g.ldc = kv, g.stride_c = rows * kv, g.batch = a.groups;
    return g;
  }
};

class CudaBackend final : public CudaBackendBase {
 public:
  CudaBackend(int device, int64_t capacity) : device_(device), allocator_(&memory_, capacity) {}
  ~CudaBackend() override {
    if (group_pointers_ != nullptr) cudaFree(group_pointers_);
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

  absl::Status CopyBytes(void* dst, const void* src, int64_t bytes, CopyKind kind) override {
    if (bytes <= 0) return absl::OkStatus();
    const cudaMemcpyKind k = kind == CopyKind::kOnBackend       ? cudaMemcpyDeviceToDevice
                             : kind == CopyKind::kHostToBackend ? cudaMemcpyHostToDevice
                                                                : cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream_));
    // The host side of a transfer may be reused or read as soon as this returns.
    return kind == CopyKind::kOnBackend ? absl::OkStatus() : Synchronize();
  }

  absl::Status Scale(DType dtype, void* x, float s, int64_t n) override {
    PT_ASSIGN_OR_RETURN(ElemType et, FloatElem(dtype));
    CUDA_CHECK(cuda::scale(et, x, s, n, stream_));
    return absl::OkStatus();
  }

  absl::Status Cast(DType dst_dtype, void* dst, DType src_dtype, const void* src,
                    int64_t n) override {
    PT_ASSIGN_OR_RETURN(ElemType dt, FloatElem(dst_dtype));
    PT_ASSIGN_OR_RETURN(ElemType st, FloatElem(src_dtype));
    CUDA_CHECK(cuda::cast(dt, dst, st, src, n, stream_));
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

  // One cuBLAS grouped batched GEMM, each GEMM a group of one, operands swapped as in Gemm.
  // The operand pointer arrays live in device memory (grown as needed, outside the
  // tracking allocator: 24 bytes per GEMM); copying them in is ordered on the stream, so
  // the next call's copy waits for this call's GEMMs.
  absl::Status GroupedGemm(DType dtype, const std::vector<GemmArgs>& gemms) override {
    const bool batched =
        std::any_of(gemms.begin(), gemms.end(), [](const GemmArgs& g) { return g.batch != 1; });
    if (gemms.size() < 2 || batched) return Backend::GroupedGemm(dtype, gemms);
    PT_ASSIGN_OR_RETURN(cudaDataType_t type, CublasType(dtype));
    const size_t n = gemms.size();
    std::vector<cublasOperation_t> ta(n), tb(n);
    std::vector<int> m(n), nn(n), k(n), lda(n), ldb(n), ldc(n), size(n, 1);
    std::vector<float> alpha(n), beta(n);
    std::vector<const void*> ptrs(3 * n);
    for (size_t i = 0; i < n; ++i) {
      const GemmArgs& g = gemms[i];
      ta[i] = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
      tb[i] = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
      m[i] = static_cast<int>(g.n), nn[i] = static_cast<int>(g.m), k[i] = static_cast<int>(g.k);
      lda[i] = static_cast<int>(g.ldb), ldb[i] = static_cast<int>(g.lda);
      ldc[i] = static_cast<int>(g.ldc);
      alpha[i] = g.alpha, beta[i] = g.beta;
      ptrs[i] = g.b, ptrs[n + i] = g.a, ptrs[2 * n + i] = g.c;
    }
    if (group_pointer_capacity_ < 3 * n) {
      if (group_pointers_ != nullptr) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        CUDA_CHECK(cudaFree(group_pointers_));
        group_pointers_ = nullptr;
      }
      CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&group_pointers_), 3 * n * sizeof(void*)));
      group_pointer_capacity_ = 3 * n;
    }
    CUDA_CHECK(cudaMemcpyAsync(group_pointers_, ptrs.data(), 3 * n * sizeof(void*),
                               cudaMemcpyHostToDevice, stream_));
    const void* const* a = group_pointers_;
    const void* const* b = group_pointers_ + n;
    void* const* c = group_pointers_ + 2 * n;
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(cublas_, ta.data(), tb.data(), m.data(), nn.data(),
                                            k.data(), alpha.data(), a, type, lda.data(), b, type,
                                            ldb.data(), beta.data(), c, type, ldc.data(),
                                            static_cast<int>(n), size.data(), CUBLAS_COMPUTE_32F));
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
    return absl::OkStatus();  // scratch's block is reused only by later work on this stream
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
    return absl::OkStatus();
  }
  absl::Status CausalSoftmaxForward(DType dtype, void* p, int64_t batch, int64_t seq, float scale,
                                    int64_t window) override {
    PT_LAUNCH(dtype, cuda::causal_softmax_forward(et, p, batch, seq, scale, window, stream_));
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
  absl::Status GegluForward(DType dtype, void* y, const void* x, int64_t rows, int64_t f) override {
    PT_LAUNCH(dtype, cuda::geglu_forward(et, y, x, rows, f, stream_));
    return absl::OkStatus();
  }
  absl::Status GegluBackward(DType dtype, void* dx, const void* dy, const void* x, int64_t rows,
                             int64_t f) override {
    PT_LAUNCH(dtype, cuda::geglu_backward(et, dx, dy, x, rows, f, stream_));
    return absl::OkStatus();
  }
  absl::Status SquaredReluForward(DType dtype, void* y, const void* x, int64_t n) override {
    PT_LAUNCH(dtype, cuda::squared_relu_forward(et, y, x, n, stream_));
    return absl::OkStatus();
  }
  absl::Status SquaredReluBackward(DType dtype, void* dx, const void* dy, const void* x,
                                   int64_t n) override {
    PT_LAUNCH(dtype, cuda::squared_relu_backward(et, dx, dy, x, n, stream_));
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
  // Blocked flash attention (kernels/cuda/attention.cu explains the algebra): per batch
  // element bi, head-in-group r and block of query rows, cuBLAS batched over the kv groups.
  absl::Status FlashAttentionForward(DType dtype, const AttentionArgs& args,
                                     float* lse) override {
    PT_RETURN_IF_ERROR(CheckAttention(args));
    const Attn at(args, SizeOf(dtype));
    PT_ASSIGN_OR_RETURN(Tensor sbuf, Empty({at.buffer_elems()}, dtype, MemoryTag::kWorkspace));
    for (int64_t bi = 0; bi < args.batch; ++bi) {
      for (int64_t r = 0; r < at.pg; ++r) {
        for (int64_t i0 = 0; i0 < args.seq; i0 += at.block) {
          const int64_t rows = std::min(at.block, args.seq - i0), k0 = at.FirstKey(i0),
                        kv = i0 + rows - k0;
          PT_RETURN_IF_ERROR(Gemm(dtype, at.Scores(bi, r, i0, rows, sbuf.data())));
          PT_LAUNCH(dtype, cuda::attention_block_softmax(et, args, sbuf.data(), lse, bi, r, i0,
                                                         rows, stream_));
          GemmArgs g;  // O_blk = P̃·V
          g.m = rows, g.n = args.head_dim, g.k = kv;
          g.a = sbuf.data(), g.lda = kv, g.stride_a = rows * kv;
          g.b = at.Kv(args.v, bi, k0), g.ldb = at.ld, g.stride_b = args.head_dim;
          g.c = at.QRows(args.o, bi, r, i0, args.ld_o), g.ldc = at.ld_o;
          g.stride_c = at.pg * args.head_dim, g.batch = args.groups;
          PT_RETURN_IF_ERROR(Gemm(dtype, g));
        }
      }
    }
    return absl::OkStatus();  // sbuf's block is reused only by later work on this stream
  }
  absl::Status FlashAttentionBackward(DType dtype, const AttentionArgs& args, const float* lse,
                                      const void* d_o, void* dq, void* dk, void* dv) override {
    PT_RETURN_IF_ERROR(CheckAttention(args));
    const Attn at(args, SizeOf(dtype));
    const int64_t d = args.head_dim;
    PT_ASSIGN_OR_RETURN(Tensor rowdot, Empty({args.batch * args.heads * args.seq}, DType::kF32,
                                             MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(Tensor sbuf, Empty({at.buffer_elems()}, dtype, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(Tensor dpbuf, Empty({at.buffer_elems()}, dtype, MemoryTag::kWorkspace));
    PT_LAUNCH(dtype, cuda::attention_row_dot(et, args, d_o, rowdot.data_as<float>(), stream_));
    if (args.window > 0) {
      // No block sees every key: dK and dV start at zero and every block accumulates.
      const size_t pitch = args.ld_qkv * at.esz, width = args.groups * d * at.esz;
      CUDA_CHECK(cudaMemset2DAsync(dk, pitch, 0, width, args.seq * args.batch, stream_));
      CUDA_CHECK(cudaMemset2DAsync(dv, pitch, 0, width, args.seq * args.batch, stream_));
    }
    for (int64_t bi = 0; bi < args.batch; ++bi) {
      for (int64_t r = 0; r < at.pg; ++r) {
        // Last block first: without a window it sees every key, so its dK/dV products
        // initialise all rows.
        const int64_t last = (args.seq - 1) / at.block * at.block;
        for (int64_t i0 = last; i0 >= 0; i0 -= at.block) {
          const int64_t rows = std::min(at.block, args.seq - i0), k0 = at.FirstKey(i0),
                        kv = i0 + rows - k0;
          const float accumulate = (r == 0 && i0 == last && args.window == 0) ? 0.0f : 1.0f;
          PT_RETURN_IF_ERROR(Gemm(dtype, at.Scores(bi, r, i0, rows, sbuf.data())));
          GemmArgs g;  // dP̃ = dO_blk·Vᵀ
          g.trans_b = true;
          g.m = rows, g.n = kv, g.k = d;
          g.a = at.QRows(d_o, bi, r, i0, args.ld_o), g.lda = at.ld_o;
          g.stride_a = at.pg * d;
          g.b = at.Kv(args.v, bi, k0), g.ldb = at.ld, g.stride_b = d;
          g.c = dpbuf.data(), g.ldc = kv, g.stride_c = rows * kv, g.batch = args.groups;
          PT_RETURN_IF_ERROR(Gemm(dtype, g));
          PT_LAUNCH(dtype, cuda::attention_block_grad(et, args, sbuf.data(), dpbuf.data(), lse,
                                                      rowdot.data_as<float>(), bi, r, i0, rows,
                                                      stream_));
          GemmArgs gv;  // dV += P̃ᵀ·dO_blk
          gv.trans_a = true;
          gv.m = kv, gv.n = d, gv.k = rows;
          gv.a = sbuf.data(), gv.lda = kv, gv.stride_a = rows * kv;
          gv.b = at.QRows(d_o, bi, r, i0, args.ld_o), gv.ldb = at.ld_o, gv.stride_b = at.pg * d;
          gv.beta = accumulate;
          gv.c = at.KvMut(dv, bi, k0), gv.ldc = at.ld, gv.stride_c = d, gv.batch = args.groups;
          PT_RETURN_IF_ERROR(Gemm(dtype, gv));
          GemmArgs gq;  // dQ_blk = dS·K
          gq.m = rows, gq.n = d, gq.k = kv;
          gq.a = dpbuf.data(), gq.lda = kv, gq.stride_a = rows * kv;
          gq.b = at.Kv(args.k, bi, k0), gq.ldb = at.ld, gq.stride_b = d;
          gq.c = at.QRows(dq, bi, r, i0, args.ld_qkv), gq.ldc = at.ld;
          gq.stride_c = at.pg * d, gq.batch = args.groups;
          PT_RETURN_IF_ERROR(Gemm(dtype, gq));
          GemmArgs gk;  // dK += dSᵀ·Q_blk
          gk.trans_a = true;
          gk.m = kv, gk.n = d, gk.k = rows;
          gk.a = dpbuf.data(), gk.lda = kv, gk.stride_a = rows * kv;
          gk.b = at.QRows(args.q, bi, r, i0, args.ld_qkv), gk.ldb = at.ld, gk.stride_b = at.pg * d;
          gk.beta = accumulate;
          gk.c = at.KvMut(dk, bi, k0), gk.ldc = at.ld, gk.stride_c = d, gk.batch = args.groups;
          PT_RETURN_IF_ERROR(Gemm(dtype, gk));
        }
      }
    }
    return absl::OkStatus();  // likewise for the buffers
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
  absl::Status MoeRouterScores(DType rdt, void* scores, const void* logits, int64_t tokens,
                               int64_t experts, bool sigmoid) override {
    PT_RETURN_IF_ERROR(RouterDType(rdt));
    CUDA_CHECK(cuda::moe_router_scores(static_cast<float*>(scores),
                                       static_cast<const float*>(logits), tokens, experts, sigmoid,
                                       stream_));
    return absl::OkStatus();
  }
  absl::Status MoeRouterTopK(DType rdt, int32_t* selected, void* probs, const void* scores,
                             int64_t tokens, int64_t experts, int64_t k, bool normalize,
                             double scale, bool balanced, int64_t first_token) override {
    PT_RETURN_IF_ERROR(RouterDType(rdt));
    float* p = static_cast<float*>(probs);
    const float* sc = static_cast<const float*>(scores);
    if (balanced) {
      CUDA_CHECK(cuda::moe_router_balanced(selected, p, sc, tokens, experts, k, first_token,
                                           normalize, static_cast<float>(scale), stream_));
    } else {
      CUDA_CHECK(cuda::moe_router_topk(selected, p, sc, tokens, experts, k, normalize,
                                       static_cast<float>(scale), stream_));
    }
    return absl::OkStatus();
  }
  absl::Status MoeRouterBackward(DType rdt, void* dlogits, const void* dprobs, const void* scores,
                                 const int32_t* selected, int64_t tokens, int64_t experts,
                                 int64_t k, bool sigmoid, bool normalize, double scale,
                                 const void* dp_aux) override {
    PT_RETURN_IF_ERROR(RouterDType(rdt));
    if (dp_aux != nullptr) {
      return absl::UnimplementedError(
          "the auxiliary loss's router gradient runs on the cpu backend only");
    }
    CUDA_CHECK(
        cuda::moe_router_backward(static_cast<float*>(dlogits), static_cast<const float*>(dprobs),
                                  static_cast<const float*>(scores), selected, tokens, experts, k,
                                  sigmoid, normalize, static_cast<float>(scale), stream_));
    return absl::OkStatus();
  }
  absl::Status MoePermute(DType dtype, void* out, const void* x, const int32_t* perm, int64_t rows,
                          int64_t k, int64_t hidden) override {
    PT_LAUNCH(dtype, cuda::moe_permute(et, out, x, perm, rows, k, hidden, stream_));
    return absl::OkStatus();
  }
  absl::Status MoeUnpermute(DType dtype, void* y, const void* in, const void* probs,
                            const int32_t* perm, int64_t tokens, int64_t k, int64_t hidden,
                            int64_t rows) override {
    PT_RETURN_IF_ERROR(EveryAssignmentRouted(rows, tokens, k));
    PT_ASSIGN_OR_RETURN(Tensor position, Empty({tokens * k}, DType::kI32, MemoryTag::kWorkspace));
    PT_LAUNCH(dtype, cuda::moe_unpermute(et, y, in, probs, perm, position.data_as<int32_t>(),
                                         tokens, k, hidden, stream_));
    return absl::OkStatus();
  }
  absl::Status MoeUnpermuteBackward(DType dtype, void* din, void* dprobs, const void* dy,
                                    const void* in, const void* probs, const int32_t* perm,
                                    int64_t tokens, int64_t k, int64_t hidden,
                                    int64_t rows) override {
    PT_RETURN_IF_ERROR(EveryAssignmentRouted(rows, tokens, k));
    PT_LAUNCH(dtype, cuda::moe_unpermute_backward(et, din, dprobs, dy, in, probs, perm, rows, k,
                                                  hidden, stream_));
    return absl::OkStatus();
  }

 private:
  static absl::Status RouterDType(DType rdt) {
    if (rdt == DType::kF32) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the router's dtype (", DTypeName(rdt), ") must be fp32 on the cuda backend"));
  }
  // The CUDA unpermute inverts the permutation, so it needs a row for every assignment.
  static absl::Status EveryAssignmentRouted(int64_t rows, int64_t tokens, int64_t k) {
    if (rows == tokens * k) return absl::OkStatus();
    return absl::UnimplementedError(
        absl::StrCat("dropped assignments (", tokens * k - rows, " of ", tokens * k,
                     ": capacity routing) are unpermuted on the cpu backend only"));
  }

  const int device_;
  DeviceMemory memory_;
  TrackingAllocator allocator_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void** group_pointers_ = nullptr;  // GroupedGemm's operand pointers, on the device
  size_t group_pointer_capacity_ = 0;
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
