// LayerNorm and RMSNorm: one 256-thread block per row; statistics in fp32. Backward: dx
// per row as in the CPU twin; the weight gradients are summed over rows into an fp32
// scratch with atomics, then added (+=) to dgamma/dbeta in their storage type, so
// gradients accumulate across micro-batches without bf16 round-off per row.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void LayerNormForwardKernel(T* y, float* mean, float* rstd, const T* x,
                                       const T* gamma, const T* beta, int64_t cols, float eps,
                                       bool rms) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  float m = 0.0f;
  if (!rms) {
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += ToF(xr[c]);
    m = BlockSum(s) / cols;
  }
  float v = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = ToF(xr[c]) - m;
    v += d * d;
  }
  const float rs = rsqrtf(BlockSum(v) / cols + eps);
  T* yr = y + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float o = (ToF(xr[c]) - m) * rs * ToF(gamma[c]);
    yr[c] = FromF<T>(rms ? o : o + ToF(beta[c]));
  }
  if (threadIdx.x == 0) {
    if (!rms) mean[row] = m;
    rstd[row] = rs;
  }
}

template <typename T>
__global__ void LayerNormBackwardKernel(T* dx, float* dgamma_acc, float* dbeta_acc, const T* dy,
                                        const T* x, const T* gamma, const float* mean,
                                        const float* rstd, int64_t cols, bool rms) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float m = rms ? 0.0f : mean[row], rs = rstd[row];
  float s_dn = 0.0f, s_dnx = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (ToF(xr[c]) - m) * rs;
    const float dn = ToF(dyr[c]) * ToF(gamma[c]);
    s_dn += dn;
    s_dnx += dn * xhat;
    atomicAdd(&dgamma_acc[c], ToF(dyr[c]) * xhat);
    if (!rms) atomicAdd(&dbeta_acc[c], ToF(dyr[c]));
  }
  const float mean_dn = rms ? 0.0f : BlockSum(s_dn) / cols;
  const float mean_dnx = BlockSum(s_dnx) / cols;
  T* dxr = dx + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (ToF(xr[c]) - m) * rs;
    dxr[c] = FromF<T>((ToF(dyr[c]) * ToF(gamma[c]) - mean_dn - xhat * mean_dnx) * rs);
  }
}

template <typename T>
__global__ void AccumulateKernel(T* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = FromF<T>(ToF(dst[i]) + src[i]);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t layernorm_forward(ElemType t, void* y, float* mean, float* rstd, const void* x,
                              const void* gamma, const void* beta, int64_t rows, int64_t cols,
                              float eps, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    LayerNormForwardKernel<T><<<rows, kThreads, 0, stream>>>(
        static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(gamma),
        static_cast<const T*>(beta), cols, eps, false);
  });
}

cudaError_t layernorm_backward(ElemType t, void* dx, void* dgamma, void* dbeta, const void* dy,
                               const void* x, const void* gamma, const float* mean,
                               const float* rstd, int64_t rows, int64_t cols, float* scratch,
                               cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(scratch, 0, 2 * cols * sizeof(float), stream);
  if (e != cudaSuccess) return e;
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    LayerNormBackwardKernel<T><<<rows, kThreads, 0, stream>>>(
        static_cast<T*>(dx), scratch, scratch + cols, static_cast<const T*>(dy),
        static_cast<const T*>(x), static_cast<const T*>(gamma), mean, rstd, cols, false);
    AccumulateKernel<T><<<Blocks(cols, 256), 256, 0, stream>>>(static_cast<T*>(dgamma), scratch,
                                                               cols);
    AccumulateKernel<T><<<Blocks(cols, 256), 256, 0, stream>>>(static_cast<T*>(dbeta),
                                                               scratch + cols, cols);
  });
}

cudaError_t rmsnorm_forward(ElemType t, void* y, float* rstd, const void* x, const void* gamma,
                            int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    LayerNormForwardKernel<T><<<rows, kThreads, 0, stream>>>(
        static_cast<T*>(y), nullptr, rstd, static_cast<const T*>(x),
        static_cast<const T*>(gamma), nullptr, cols, eps, true);
  });
}

cudaError_t rmsnorm_backward(ElemType t, void* dx, void* dgamma, const void* dy, const void* x,
                             const void* gamma, const float* rstd, int64_t rows, int64_t cols,
                             float* scratch, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(scratch, 0, cols * sizeof(float), stream);
  if (e != cudaSuccess) return e;
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    LayerNormBackwardKernel<T><<<rows, kThreads, 0, stream>>>(
        static_cast<T*>(dx), scratch, nullptr, static_cast<const T*>(dy),
        static_cast<const T*>(x), static_cast<const T*>(gamma), nullptr, rstd, cols, true);
    AccumulateKernel<T><<<Blocks(cols, 256), 256, 0, stream>>>(static_cast<T*>(dgamma), scratch,
                                                               cols);
  });
}

}  // namespace paratune::kernels::cuda
