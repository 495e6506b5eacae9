// Causal softmax over s×s score matrices (naive attention path): one block per row,
// block-wide max and sum in fp32; columns right of the diagonal (and, with a sliding window
// w > 0, those at or left of i - w) are written as zero.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void CausalSoftmaxForwardKernel(T* p, int64_t seq, float scale, int64_t window) {
  const int64_t row = blockIdx.x, i = row % seq;
  const int64_t lo = window > 0 && i >= window ? i - window + 1 : 0;
  T* r = p + row * seq;
  float mx = -INFINITY;
  for (int64_t j = lo + threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, ToF(r[j]) * scale);
  mx = BlockMax(mx);
  float sum = 0.0f;
  for (int64_t j = lo + threadIdx.x; j <= i; j += blockDim.x) {
    sum += __expf(ToF(r[j]) * scale - mx);
  }
  const float inv = 1.0f / BlockSum(sum);
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    r[j] = FromF<T>(j >= lo && j <= i ? __expf(ToF(r[j]) * scale - mx) * inv : 0.0f);
  }
}

template <typename T>
__global__ void CausalSoftmaxBackwardKernel(T* dx, const T* p, const T* dp, int64_t seq,
                                            float scale) {
  const int64_t row = blockIdx.x, i = row % seq;
  const T* pr = p + row * seq;
  const T* dpr = dp + row * seq;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += ToF(pr[j]) * ToF(dpr[j]);
  dot = BlockSum(dot);  // every thread read its dp before anyone writes dx (dx may alias dp)
  T* dxr = dx + row * seq;
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    dxr[j] = FromF<T>(j <= i ? scale * ToF(pr[j]) * (ToF(dpr[j]) - dot) : 0.0f);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t causal_softmax_forward(ElemType t, void* p, int64_t batch, int64_t seq, float scale,
                                   int64_t window, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    CausalSoftmaxForwardKernel<T>
        <<<batch * seq, 256, 0, stream>>>(static_cast<T*>(p), seq, scale, window);
  });
}

cudaError_t causal_softmax_backward(ElemType t, void* dx, const void* p, const void* dp,
                                    int64_t batch, int64_t seq, float scale,
                                    cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    CausalSoftmaxBackwardKernel<T><<<batch * seq, 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(p), static_cast<const T*>(dp), seq, scale);
  });
}

}  // namespace paratune::kernels::cuda
