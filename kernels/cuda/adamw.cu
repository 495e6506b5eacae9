// AdamW on fp32 master parameters and moments; the gradient may be bf16/fp16/fp32.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void AdamWKernel(float* param, const T* grad, float* m, float* v, int64_t n,
                            float lr, float beta1, float beta2, float eps, float wd, float c1,
                            float c2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = ToF(grad[i]);
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * param[i]);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t adamw(ElemType grad_type, float* param, const void* grad, float* m, float* v,
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t step, cudaStream_t stream) {
  const float c1 = 1.0f - powf(beta1, static_cast<float>(step));
  const float c2 = 1.0f - powf(beta2, static_cast<float>(step));
  return DispatchFloat(grad_type, [&](auto z) {
    using T = decltype(z);
    AdamWKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(param, static_cast<const T*>(grad), m, v,
                                                       n, lr, beta1, beta2, eps, weight_decay,
                                                       c1, c2);
  });
}

}  // namespace paratune::kernels::cuda
