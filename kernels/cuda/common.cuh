// Device helpers shared by the .cu files: fp32 loads/stores of every storage type, warp
// and block reductions, and the dtype dispatch used by the launchers.
#ifndef PARATUNE_KERNELS_CUDA_COMMON_CUH_
#define PARATUNE_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launchers.h"

namespace paratune::kernels::cuda {

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToF(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF(double v) { return static_cast<float>(v); }

template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half FromF<__half>(float v) { return __float2half(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over a block of up to 1024 threads; every thread gets the result.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? shared[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(v);
}

inline int Blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 32 ? b : 65535 * 32);
}

/// Calls f(T{}) for the floating storage types; cudaErrorInvalidValue otherwise.
template <typename F>
cudaError_t DispatchFloat(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32: f(float{}); break;
    case ElemType::kBF16: f(__nv_bfloat16{}); break;
    case ElemType::kF16: f(__half{}); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace paratune::kernels::cuda

#endif  // PARATUNE_KERNELS_CUDA_COMMON_CUH_
