// The CPU backend: OpenBLAS GEMMs and the templated CPU twins in kernels/cpu/, dispatched
// on fp32 (the production type) or fp64 (finite-difference checks).
#include <cblas.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/moe_permute.h"
#include "kernels/cpu/moe_router.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vocab.h"

namespace paratune::kernels {
namespace {

absl::Status BadDType(DType dtype) {
  return absl::InvalidArgumentError(
      absl::StrCat("dtype (", DTypeName(dtype), ") must be fp32 or fp64 on the cpu backend"));
}

// Calls f(T{}) with T = float or double.
template <typename F>
absl::Status Dispatch(DType dtype, F&& f) {
  if (dtype == DType::kF32) {
    f(float{});
    return absl::OkStatus();
  }
  if (dtype == DType::kF64) {
    f(double{});
    return absl::OkStatus();
  }
  return BadDType(dtype);
}

template <typename T>
using P = T*;

class CpuBackend final : public Backend {
 public:
  CpuBackend(int64_t capacity, int threads)
      : allocator_(&host_, capacity), threads_(std::max(1, threads)) {}

  BackendKind kind() const override { return BackendKind::kCpu; }
  TrackingAllocator& allocator() override { return allocator_; }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Fill(const Tensor& t, double value) override {
    if (t.dtype() == DType::kU8) {
      std::memset(t.data(), static_cast<int>(value), t.numel());
      return absl::OkStatus();
    }
    return Dispatch(t.dtype(), [&](auto z) {
      using T = decltype(z);
      std::fill(t.data_as<T>(), t.data_as<T>() + t.numel(), static_cast<T>(value));
    });
  }

  absl::Status CopyFromHost(const Tensor& t, const std::vector<double>& values) override {
    if (static_cast<int64_t>(values.size()) != t.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("values (", values.size(),
                                                     ") must match tensor numel (", t.numel(), ")"));
    }
    if (t.dtype() == DType::kI32) {
      std::copy(values.begin(), values.end(), t.data_as<int32_t>());
      return absl::OkStatus();
    }
    return Dispatch(t.dtype(), [&](auto z) {
      using T = decltype(z);
      std::copy(values.begin(), values.end(), t.data_as<T>());
    });
  }

  absl::StatusOr<std::vector<double>> CopyToHost(const Tensor& t) override {
    std::vector<double> out(t.numel());
    if (t.dtype() == DType::kI32) {
      std::copy(t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel(), out.begin());
      return out;
    }
    absl::Status s = Dispatch(t.dtype(), [&](auto z) {
      using T = decltype(z);
      std::copy(t.data_as<T>(), t.data_as<T>() + t.numel(), out.begin());
    });
    if (!s.ok()) return s;
    return out;
  }

  absl::Status Copy(const Tensor& dst, const Tensor& src) override {
    if (dst.bytes() != src.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("copy of ", src.bytes(), " bytes into ",
                                                     dst.bytes(), " bytes"));
    }
    std::memcpy(dst.data(), src.data(), src.bytes());
    return absl::OkStatus();
  }

  absl::Status CopyBytes(void* dst, const void* src, int64_t bytes, CopyKind) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }

  absl::Status Scale(DType dtype, void* x, float s, int64_t n) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      T* p = static_cast<T*>(x);
      for (int64_t i = 0; i < n; ++i) p[i] *= static_cast<T>(s);
    });
  }

  absl::Status Cast(DType dst_dtype, void* dst, DType src_dtype, const void* src,
                    int64_t n) override {
    absl::Status inner = absl::OkStatus();
    const absl::Status outer = Dispatch(dst_dtype, [&](auto d) {
      using D = decltype(d);
      inner = Dispatch(src_dtype, [&](auto z) {
        using S = decltype(z);
        std::copy(static_cast<const S*>(src), static_cast<const S*>(src) + n, static_cast<D*>(dst));
      });
    });
    return outer.ok() ? inner : outer;
  }

  absl::Status Gemm(DType dtype, const GemmArgs& g) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < g.batch; ++i) {
        cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha,
                  static_cast<const T*>(g.a) + i * g.stride_a, g.lda,
                  static_cast<const T*>(g.b) + i * g.stride_b, g.ldb, g.beta,
                  static_cast<T*>(g.c) + i * g.stride_c, g.ldc);
      }
    });
  }

  absl::Status LayerNormForward(DType dtype, void* y, float* mean, float* rstd, const void* x,
                                const void* gamma, const void* beta, int64_t rows,
                                int64_t cols, float eps) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::layernorm_forward<T>(P<T>(y), mean, rstd, static_cast<const T*>(x),
                                static_cast<const T*>(gamma), static_cast<const T*>(beta), rows,
                                cols, eps, threads_);
    });
  }
  absl::Status LayerNormBackward(DType dtype, void* dx, void* dgamma, void* dbeta,
                                 const void* dy, const void* x, const void* gamma,
                                 const float* mean, const float* rstd, int64_t rows,
                                 int64_t cols) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::layernorm_backward<T>(P<T>(dx), P<T>(dgamma), P<T>(dbeta), static_cast<const T*>(dy),
                                 static_cast<const T*>(x), static_cast<const T*>(gamma), mean,
                                 rstd, rows, cols, threads_);
    });
  }
  absl::Status RmsNormForward(DType dtype, void* y, float* rstd, const void* x,
                              const void* gamma, int64_t rows, int64_t cols,
                              float eps) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::rmsnorm_forward<T>(P<T>(y), rstd, static_cast<const T*>(x),
                              static_cast<const T*>(gamma), rows, cols, eps, threads_);
    });
  }
  absl::Status RmsNormBackward(DType dtype, void* dx, void* dgamma, const void* dy,
                               const void* x, const void* gamma, const float* rstd,
                               int64_t rows, int64_t cols) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::rmsnorm_backward<T>(P<T>(dx), P<T>(dgamma), static_cast<const T*>(dy),
                               static_cast<const T*>(x), static_cast<const T*>(gamma), rstd,
                               rows, cols, threads_);
    });
  }
  absl::Status CausalSoftmaxForward(DType dtype, void* p, int64_t batch, int64_t seq, float scale,
                                    int64_t window) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::causal_softmax_forward<T>(P<T>(p), batch, seq, scale, window, threads_);
    });
  }
  absl::Status CausalSoftmaxBackward(DType dtype, void* dx, const void* p, const void* dp,
                                     int64_t batch, int64_t seq, float scale) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::causal_softmax_backward<T>(P<T>(dx), static_cast<const T*>(p),
                                      static_cast<const T*>(dp), batch, seq, scale, threads_);
    });
  }
  absl::Status GeluForward(DType dtype, void* y, const void* x, int64_t n) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::gelu_forward<T>(P<T>(y), static_cast<const T*>(x), n, threads_);
    });
  }
  absl::Status GeluBackward(DType dtype, void* dx, const void* dy, const void* x,
                            int64_t n) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::gelu_backward<T>(P<T>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), n,
                            threads_);
    });
  }
  absl::Status SwigluForward(DType dtype, void* y, const void* x, int64_t rows,
                             int64_t f) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::swiglu_forward<T>(P<T>(y), static_cast<const T*>(x), rows, f, threads_);
    });
  }
  absl::Status SwigluBackward(DType dtype, void* dx, const void* dy, const void* x,
                              int64_t rows, int64_t f) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::swiglu_backward<T>(P<T>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
                              rows, f, threads_);
    });
  }
  absl::Status GegluForward(DType dtype, void* y, const void* x, int64_t rows, int64_t f) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::geglu_forward<T>(P<T>(y), static_cast<const T*>(x), rows, f, threads_);
    });
  }
  absl::Status GegluBackward(DType dtype, void* dx, const void* dy, const void* x, int64_t rows,
                             int64_t f) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::geglu_backward<T>(P<T>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), rows, f,
                             threads_);
    });
  }
  absl::Status SquaredReluForward(DType dtype, void* y, const void* x, int64_t n) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::squared_relu_forward<T>(P<T>(y), static_cast<const T*>(x), n, threads_);
    });
  }
  absl::Status SquaredReluBackward(DType dtype, void* dx, const void* dy, const void* x,
                                   int64_t n) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::squared_relu_backward<T>(P<T>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
                                    n, threads_);
    });
  }
  absl::Status DropoutForward(DType dtype, void* y, uint8_t* mask, const void* x, int64_t n,
                              float p, uint64_t seed, uint64_t index_offset) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::dropout_forward<T>(P<T>(y), mask, static_cast<const T*>(x), n, p, seed,
                              index_offset, threads_);
    });
  }
  absl::Status DropoutBackward(DType dtype, void* dx, const void* dy, const uint8_t* mask,
                               int64_t n, float p) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::dropout_backward<T>(P<T>(dx), static_cast<const T*>(dy), mask, n, p, threads_);
    });
  }
  absl::Status Add(DType dtype, void* out, const void* a, const void* b, int64_t n) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::residual_add<T>(P<T>(out), static_cast<const T*>(a), static_cast<const T*>(b), n,
                           threads_);
    });
  }
  absl::Status FlashAttentionForward(DType dtype, const AttentionArgs& args,
                                     float* lse) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::flash_attention_forward<T>(args, lse, threads_);
    });
  }
  absl::Status FlashAttentionBackward(DType dtype, const AttentionArgs& args, const float* lse,
                                      const void* d_o, void* dq, void* dk, void* dv) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::flash_attention_backward<T>(args, lse, static_cast<const T*>(d_o), P<T>(dq),
                                       P<T>(dk), P<T>(dv), threads_);
    });
  }
  absl::Status AttentionDropoutForward(DType dtype, void* y, uint8_t* mask, const void* x,
                                       const AttentionArgs& args) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::attention_dropout_forward<T>(P<T>(y), mask, static_cast<const T*>(x), args,
                                        threads_);
    });
  }
  absl::Status AdamW(DType dtype, float* param, const void* grad, float* m, float* v,
                     int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int64_t step) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::adamw<T>(param, static_cast<const T*>(grad), m, v, n, lr, beta1, beta2, eps,
                    weight_decay, step, threads_);
    });
  }
  absl::Status EmbeddingForward(DType dtype, void* out, const int32_t* ids, const void* table,
                                int64_t tokens, int64_t hidden, int64_t vocab_start,
                                int64_t vocab_end) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::embedding_forward<T>(P<T>(out), ids, static_cast<const T*>(table), tokens, hidden,
                                vocab_start, vocab_end);
    });
  }
  absl::Status EmbeddingBackward(DType dtype, void* dtable, const int32_t* ids,
                                 const void* dout, int64_t tokens, int64_t hidden,
                                 int64_t vocab_start, int64_t vocab_end) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::embedding_backward<T>(P<T>(dtable), ids, static_cast<const T*>(dout), tokens,
                                 hidden, vocab_start, vocab_end);
    });
  }
  absl::Status RowMax(DType dtype, float* out, const void* logits, int64_t rows,
                      int64_t v) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::row_max<T>(out, static_cast<const T*>(logits), rows, v);
    });
  }
  absl::Status CrossEntropyPartials(DType dtype, float* sumexp, float* target,
                                    const void* logits, const float* max,
                                    const int32_t* targets, int64_t rows, int64_t v,
                                    int64_t vocab_start) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::cross_entropy_partials<T>(sumexp, target, static_cast<const T*>(logits), max,
                                     targets, rows, v, vocab_start);
    });
  }
  absl::Status CrossEntropyBackward(DType dtype, void* dlogits, const void* logits,
                                    const float* max, const float* sumexp,
                                    const int32_t* targets, int64_t rows, int64_t v,
                                    int64_t vocab_start, float scale) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::cross_entropy_backward<T>(P<T>(dlogits), static_cast<const T*>(logits), max, sumexp,
                                     targets, rows, v, vocab_start, scale);
    });
  }

  absl::Status MoeRouterScores(DType rdt, void* scores, const void* logits, int64_t tokens,
                               int64_t experts, bool sigmoid) override {
    return Dispatch(rdt, [&](auto z) {
      using T = decltype(z);
      cpu::moe_router_scores<T>(P<T>(scores), static_cast<const T*>(logits), tokens, experts,
                                sigmoid);
    });
  }
  absl::Status MoeRouterTopK(DType rdt, int32_t* selected, void* probs, const void* scores,
                             int64_t tokens, int64_t experts, int64_t k, bool normalize,
                             double scale, bool balanced, int64_t first_token) override {
    return Dispatch(rdt, [&](auto z) {
      using T = decltype(z);
      const T* s = static_cast<const T*>(scores);
      cpu::moe_router_select<T>(selected, s, tokens, experts, k, balanced, first_token);
      cpu::moe_router_probs<T>(P<T>(probs), s, selected, tokens, experts, k, normalize,
                               static_cast<T>(scale));
    });
  }
  absl::Status MoeRouterBackward(DType rdt, void* dlogits, const void* dprobs, const void* scores,
                                 const int32_t* selected, int64_t tokens, int64_t experts,
                                 int64_t k, bool sigmoid, bool normalize, double scale,
                                 const void* dp_aux) override {
    return Dispatch(rdt, [&](auto z) {
      using T = decltype(z);
      const T* s = static_cast<const T*>(scores);
      std::vector<T> dscores(tokens * experts);
      cpu::moe_router_probs_backward<T>(dscores.data(), static_cast<const T*>(dprobs), s, selected,
                                        tokens, experts, k, normalize, static_cast<T>(scale));
      if (dp_aux != nullptr) {
        cpu::moe_aux_probs_backward<T>(dscores.data(), static_cast<const T*>(dp_aux), s, tokens,
                                       experts, sigmoid);
      }
      cpu::moe_router_scores_backward<T>(P<T>(dlogits), dscores.data(), s, tokens, experts,
                                         sigmoid);
    });
  }
  absl::Status MoePermute(DType dtype, void* out, const void* x, const int32_t* perm, int64_t rows,
                          int64_t k, int64_t hidden) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::moe_permute<T>(P<T>(out), static_cast<const T*>(x), perm, rows, k, hidden);
    });
  }
  absl::Status MoeUnpermute(DType dtype, void* y, const void* in, const void* probs,
                            const int32_t* perm, int64_t tokens, int64_t k, int64_t hidden,
                            int64_t rows) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::moe_unpermute<T>(P<T>(y), static_cast<const T*>(in), static_cast<const T*>(probs), perm,
                            tokens, k, hidden, rows);
    });
  }
  absl::Status MoeUnpermuteBackward(DType dtype, void* din, void* dprobs, const void* dy,
                                    const void* in, const void* probs, const int32_t* perm,
                                    int64_t tokens, int64_t k, int64_t hidden,
                                    int64_t rows) override {
    return Dispatch(dtype, [&](auto z) {
      using T = decltype(z);
      cpu::moe_unpermute_backward<T>(P<T>(din), P<T>(dprobs), static_cast<const T*>(dy),
                                     static_cast<const T*>(in), static_cast<const T*>(probs), perm,
                                     tokens, k, hidden, rows);
    });
  }

 private:
  HostMemory host_;
  TrackingAllocator allocator_;
  const int threads_;
};

}  // namespace

absl::Status Backend::MlpActivationForward(DType dtype, Activation act, void* y, const void* x,
                                           int64_t rows, int64_t f) {
  switch (act) {
    case Activation::kGelu:
      return GeluForward(dtype, y, x, rows * f);
    case Activation::kSwiglu:
      return SwigluForward(dtype, y, x, rows, f);
    case Activation::kGeglu:
      return GegluForward(dtype, y, x, rows, f);
    case Activation::kSquaredRelu:
      return SquaredReluForward(dtype, y, x, rows * f);
  }
  return absl::InvalidArgumentError("unknown activation");
}

absl::Status Backend::MlpActivationBackward(DType dtype, Activation act, void* dx, const void* dy,
                                            const void* x, int64_t rows, int64_t f) {
  switch (act) {
    case Activation::kGelu:
      return GeluBackward(dtype, dx, dy, x, rows * f);
    case Activation::kSwiglu:
      return SwigluBackward(dtype, dx, dy, x, rows, f);
    case Activation::kGeglu:
      return GegluBackward(dtype, dx, dy, x, rows, f);
    case Activation::kSquaredRelu:
      return SquaredReluBackward(dtype, dx, dy, x, rows * f);
  }
  return absl::InvalidArgumentError("unknown activation");
}

absl::StatusOr<Tensor> Backend::Zeros(std::vector<int64_t> shape, DType dtype, MemoryTag tag) {
  absl::StatusOr<Tensor> t = Empty(std::move(shape), dtype, tag);
  if (!t.ok()) return t.status();
  if (absl::Status s = Fill(*t, 0.0); !s.ok()) return s;
  return t;
}

std::unique_ptr<Backend> MakeCpuBackend(int64_t capacity_bytes, int threads) {
  return std::make_unique<CpuBackend>(capacity_bytes, threads);
}

std::unique_ptr<Communicator> MakeSelfCommunicator(Backend& backend) {
  return MakeSelfCommunicator([&backend](void* dst, const void* src, int64_t bytes) {
    return backend.CopyBytes(dst, src, bytes, Backend::CopyKind::kOnBackend);
  });
}

void SetBlasThreads(int threads) { openblas_set_num_threads(std::max(1, threads)); }

}  // namespace paratune::kernels
