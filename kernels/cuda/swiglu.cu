// SwiGLU: x rows are [gate | up] (f each); y = silu(gate)·up. Elementwise over rows·f.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void SwigluForwardKernel(T* y, const T* x, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    const float g = ToF(x[r * 2 * f + c]), u = ToF(x[r * 2 * f + f + c]);
    y[i] = FromF<T>(g / (1.0f + __expf(-g)) * u);
  }
}

template <typename T>
__global__ void SwigluBackwardKernel(T* dx, const T* dy, const T* x, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    const float g = ToF(x[r * 2 * f + c]), u = ToF(x[r * 2 * f + f + c]);
    const float sig = 1.0f / (1.0f + __expf(-g)), d = ToF(dy[i]);
    dx[r * 2 * f + c] = FromF<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
    dx[r * 2 * f + f + c] = FromF<T>(d * g * sig);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t swiglu_forward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                           cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    SwigluForwardKernel<T><<<Blocks(rows * f, 256), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(x), rows, f);
  });
}

cudaError_t swiglu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                            int64_t f, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    SwigluBackwardKernel<T><<<Blocks(rows * f, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), rows, f);
  });
}

}  // namespace paratune::kernels::cuda
