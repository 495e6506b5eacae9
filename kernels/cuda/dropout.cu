// Dropout with counter-based masks (kernels/hash_random.h): the same elements drop as in
// the CPU twin and on every TP/SP layout. The attention variant indexes probabilities by
// (batch, global head, i, j).
#include "kernels/cuda/common.cuh"
#include "kernels/hash_random.h"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void DropoutForwardKernel(T* y, uint8_t* mask, const T* x, int64_t n, float p,
                                     uint64_t seed, uint64_t offset) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = DropoutKeep(seed, offset + i, p);
    if (mask != nullptr) mask[i] = keep ? 1 : 0;
    y[i] = FromF<T>(keep ? ToF(x[i]) * scale : 0.0f);
  }
}

template <typename T>
__global__ void DropoutBackwardKernel(T* dx, const T* dy, const uint8_t* mask, int64_t n,
                                      float p) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dx[i] = FromF<T>(mask[i] ? ToF(dy[i]) * scale : 0.0f);
  }
}

template <typename T>
__global__ void AttentionDropoutKernel(T* y, uint8_t* mask, const T* x, AttentionArgs a) {
  const int64_t ss = a.seq * a.seq, n = a.batch * a.heads * ss;
  const float scale = 1.0f / (1.0f - a.dropout);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t mat = e / ss, ij = e % ss;
    const int64_t bi = mat / a.heads, hh = mat % a.heads;
    const uint64_t idx = AttentionDropoutIndex(bi, a.head_offset + hh, ij / a.seq, ij % a.seq,
                                               a.global_heads, a.seq);
    const bool keep = DropoutKeep(a.seed, idx, a.dropout);
    mask[e] = keep ? 1 : 0;
    y[e] = FromF<T>(keep ? ToF(x[e]) * scale : 0.0f);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t dropout_forward(ElemType t, void* y, uint8_t* mask, const void* x, int64_t n,
                            float p, uint64_t seed, uint64_t index_offset, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    DropoutForwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(y), mask, static_cast<const T*>(x), n, p, seed, index_offset);
  });
}

cudaError_t dropout_backward(ElemType t, void* dx, const void* dy, const uint8_t* mask,
                             int64_t n, float p, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    DropoutBackwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), mask, n, p);
  });
}

cudaError_t attention_dropout_forward(ElemType t, void* y, uint8_t* mask, const void* x,
                                      const AttentionArgs& args, cudaStream_t stream) {
  const int64_t n = args.batch * args.heads * args.seq * args.seq;
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    AttentionDropoutKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(y), mask, static_cast<const T*>(x), args);
  });
}

}  // namespace paratune::kernels::cuda
