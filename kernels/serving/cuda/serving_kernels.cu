// The serving layer's small device kernels: rotary embedding (the twin of rope.h) and the
// per-row argmax of greedy sampling (the twin of the CPU ServingOps::ArgMax).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/serving/cuda/paged_attention_launcher.h"

namespace paratune::kernels::serving::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

// One thread per (row, head, pair j): (x_j, x_{j+d/2}) rotated by pos·θ^(−2j/d).
__global__ void RopeKernel(float* x, int64_t ld, int64_t rows, const int64_t* positions,
                           int64_t heads, int64_t d, double theta) {
  const int64_t half = d / 2, n = rows * heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % half, hh = (i / half) % heads, r = i / (half * heads);
    const double angle = static_cast<double>(positions[r]) *
                         pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(d));
    const float cs = static_cast<float>(cos(angle)), sn = static_cast<float>(sin(angle));
    float* v = x + r * ld + hh * d;
    const float a = v[j], b = v[j + half];
    v[j] = a * cs - b * sn;
    v[j + half] = b * cs + a * sn;
  }
}

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }

// Whether (v, i) comes before (best, best_i): larger, or equal and earlier.
__device__ __forceinline__ bool Better(float v, int64_t i, float best, int64_t best_i) {
  return v > best || (v == best && i < best_i);
}

// One block per row: strided scan per thread, then a shared-memory reduction.
template <typename T>
__global__ void ArgMaxKernel(const T* logits, int64_t v, float* value, int64_t* index) {
  constexpr int kThreads = 256;
  __shared__ float s_val[kThreads];
  __shared__ int64_t s_idx[kThreads];
  const T* row = logits + blockIdx.x * v;
  float best = -INFINITY;
  int64_t best_i = v;  // no element yet
  for (int64_t j = threadIdx.x; j < v; j += kThreads) {
    const float x = Load(row + j);
    if (best_i == v || Better(x, j, best, best_i)) best = x, best_i = j;
  }
  s_val[threadIdx.x] = best;
  s_idx[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float ov = s_val[threadIdx.x + stride];
      const int64_t oi = s_idx[threadIdx.x + stride];
      if (oi < v &&
          (s_idx[threadIdx.x] == v || Better(ov, oi, s_val[threadIdx.x], s_idx[threadIdx.x]))) {
        s_val[threadIdx.x] = ov;
        s_idx[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    value[blockIdx.x] = s_val[0];
    index[blockIdx.x] = s_idx[0];
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t rope_forward(float* x, int64_t ld, int64_t rows, const int64_t* positions,
                         int64_t heads, int64_t d, double theta, cudaStream_t stream) {
  const int64_t n = rows * heads * (d / 2);
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  RopeKernel<<<blocks, kThreads, 0, stream>>>(x, ld, rows, positions, heads, d, theta);
  return cudaGetLastError();
}

cudaError_t argmax_rows(const void* logits, LogitsType type, int64_t rows, int64_t v, float* value,
                        int64_t* index, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (v <= 0 || rows > 2147483647) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(rows);
  switch (type) {
    case LogitsType::kF32:
      ArgMaxKernel<<<grid, 256, 0, stream>>>(static_cast<const float*>(logits), v, value, index);
      break;
    case LogitsType::kBF16:
      ArgMaxKernel<<<grid, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(logits), v, value,
                                             index);
      break;
    case LogitsType::kF16:
      ArgMaxKernel<<<grid, 256, 0, stream>>>(static_cast<const __half*>(logits), v, value, index);
      break;
  }
  return cudaGetLastError();
}

}  // namespace paratune::kernels::serving::cuda
