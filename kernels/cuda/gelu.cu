// GeLU, tanh approximation (GPT-2 / Megatron), elementwise with a grid-stride loop.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void GeluForwardKernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ToF(x[i]);
    const float u = kGeluScale * (v + 0.044715f * v * v * v);
    y[i] = FromF<T>(0.5f * v * (1.0f + tanhf(u)));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(T* dx, const T* dy, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ToF(x[i]);
    const float u = kGeluScale * (v + 0.044715f * v * v * v);
    const float th = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = FromF<T>(ToF(dy[i]) * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du));
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t gelu_forward(ElemType t, void* y, const void* x, int64_t n, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    GeluForwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(static_cast<T*>(y),
                                                             static_cast<const T*>(x), n);
  });
}

cudaError_t gelu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                          cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    GeluBackwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), n);
  });
}

}  // namespace paratune::kernels::cuda
