// GeGLU (x rows are [gate | up], f each; y = gelu(gate)·up with the tanh GeLU) and squared
// ReLU (y = max(x, 0)²), elementwise; the twins of kernels/cpu/activations.h.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// ---- kernels ---------------------------------------------------------------------------

__device__ __forceinline__ void GeluAndDerivative(float v, float* g, float* dg) {
  const float u = kGeluScale * (v + 0.044715f * v * v * v);
  const float th = tanhf(u);
  const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * v * v);
  *g = 0.5f * v * (1.0f + th);
  *dg = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
}

template <typename T>
__global__ void GegluForwardKernel(T* y, const T* x, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    float g, dg;
    GeluAndDerivative(ToF(x[r * 2 * f + c]), &g, &dg);
    y[i] = FromF<T>(g * ToF(x[r * 2 * f + f + c]));
  }
}

template <typename T>
__global__ void GegluBackwardKernel(T* dx, const T* dy, const T* x, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    float g, dg;
    GeluAndDerivative(ToF(x[r * 2 * f + c]), &g, &dg);
    const float u = ToF(x[r * 2 * f + f + c]), d = ToF(dy[i]);
    dx[r * 2 * f + c] = FromF<T>(d * u * dg);
    dx[r * 2 * f + f + c] = FromF<T>(d * g);
  }
}

template <typename T>
__global__ void SquaredReluForwardKernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ToF(x[i]);
    y[i] = FromF<T>(v > 0.0f ? v * v : 0.0f);
  }
}

template <typename T>
__global__ void SquaredReluBackwardKernel(T* dx, const T* dy, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ToF(x[i]);
    dx[i] = FromF<T>(v > 0.0f ? 2.0f * v * ToF(dy[i]) : 0.0f);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t geglu_forward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                          cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    GegluForwardKernel<T><<<Blocks(rows * f, 256), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(x), rows, f);
  });
}

cudaError_t geglu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                           int64_t f, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    GegluBackwardKernel<T><<<Blocks(rows * f, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), rows, f);
  });
}

cudaError_t squared_relu_forward(ElemType t, void* y, const void* x, int64_t n,
                                 cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    SquaredReluForwardKernel<T>
        <<<Blocks(n, 256), 256, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n);
  });
}

cudaError_t squared_relu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                                  cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    SquaredReluBackwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), n);
  });
}

}  // namespace paratune::kernels::cuda
