// Residual add: out = a + b (out may alias a or b), fp32 math; scale in place; float casts.
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

template <typename T>
__global__ void ScaleKernel(T* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = FromF<T>(ToF(x[i]) * s);
  }
}

template <typename D, typename S>
__global__ void CastKernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = FromF<D>(ToF(src[i]));
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

cudaError_t scale(ElemType t, void* x, float s, int64_t n, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    ScaleKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(static_cast<T*>(x), s, n);
  });
}

cudaError_t cast(ElemType dst_t, void* dst, ElemType src_t, const void* src, int64_t n,
                 cudaStream_t stream) {
  cudaError_t inner = cudaSuccess;
  const cudaError_t outer = DispatchFloat(dst_t, [&](auto d) {
    using D = decltype(d);
    inner = DispatchFloat(src_t, [&](auto z) {
      using S = decltype(z);
      CastKernel<D, S><<<Blocks(n, 256), 256, 0, stream>>>(static_cast<D*>(dst),
                                                           static_cast<const S*>(src), n);
    });
  });
  return outer != cudaSuccess ? outer : inner;
}

}  // namespace paratune::kernels::cuda
