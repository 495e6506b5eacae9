// Fill and dtype conversion (host values travel as fp64 and are converted on the device).
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void FillKernel(T* dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

template <typename T>
__global__ void FromF64Kernel(T* dst, const double* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, uint8_t>) {
      dst[i] = static_cast<T>(src[i]);
    } else {
      dst[i] = FromF<T>(static_cast<float>(src[i]));
    }
  }
}

template <typename T>
__global__ void ToF64Kernel(double* dst, const T* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, uint8_t>) {
      dst[i] = static_cast<double>(src[i]);
    } else {
      dst[i] = static_cast<double>(ToF(src[i]));
    }
  }
}

template <typename F>
cudaError_t DispatchAll(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32: f(float{}); break;
    case ElemType::kBF16: f(__nv_bfloat16{}); break;
    case ElemType::kF16: f(__half{}); break;
    case ElemType::kF64: f(double{}); break;
    case ElemType::kU8: f(uint8_t{}); break;
    case ElemType::kI32: f(int32_t{}); break;
  }
  return cudaGetLastError();
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t fill(ElemType t, void* dst, int64_t n, double value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchAll(t, [&](auto z) {
    using T = decltype(z);
    T v;
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, uint8_t> || std::is_same_v<T, float>) {
      v = static_cast<T>(value);
    } else {
      v = T(static_cast<float>(value));
    }
    FillKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(static_cast<T*>(dst), n, v);
  });
}

cudaError_t convert_from_f64(ElemType t, void* dst, const double* src, int64_t n,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchAll(t, [&](auto z) {
    using T = decltype(z);
    FromF64Kernel<T><<<Blocks(n, 256), 256, 0, stream>>>(static_cast<T*>(dst), src, n);
  });
}

cudaError_t convert_to_f64(ElemType t, double* dst, const void* src, int64_t n,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchAll(t, [&](auto z) {
    using T = decltype(z);
    ToF64Kernel<T><<<Blocks(n, 256), 256, 0, stream>>>(dst, static_cast<const T*>(src), n);
  });
}

}  // namespace paratune::kernels::cuda
