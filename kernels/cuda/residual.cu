// Residual add: out = a + b (out may alias a or b), fp32 math.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void ResidualAddKernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = FromF<T>(ToF(a[i]) + ToF(b[i]));
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t residual_add(ElemType t, void* out, const void* a, const void* b, int64_t n,
                         cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    ResidualAddKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
}

}  // namespace paratune::kernels::cuda
