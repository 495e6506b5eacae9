// KV-cache write on the GPU: one thread per (token, K or V, element) converts the fp32
// value to the pool's storage type and stores it at the token's slot (block·block_size +
// offset, vLLM's slot mapping) in the pool layout [num_blocks, 2, block_size, row]; a
// negative slot (a position the layer does not hold) is skipped.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/serving/cuda/paged_attention_launcher.h"

namespace paratune::kernels::serving::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half(v); }
__device__ __forceinline__ void Store(__nv_fp8_e4m3* p, float v) { *p = __nv_fp8_e4m3(v); }

template <typename T>
__global__ void KvCacheWriteKernel(T* pool, const float* k, const float* v, int64_t ld,
                                   const int64_t* slots, int64_t tokens, int64_t row,
                                   int64_t block_size) {
  const int64_t n = tokens * 2 * row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / (2 * row), kv = (i / row) % 2, c = i % row;
    if (slots[t] < 0) continue;  // not held: left of a windowed layer's window
    const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
    const float value = (kv == 0 ? k : v)[t * ld + c];
    Store(pool + ((block * 2 + kv) * block_size + offset) * row + c, value);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t kv_cache_write(void* kv_pool, KvStorage storage, const float* k, const float* v,
                           int64_t ld, const int64_t* slots, int64_t tokens, int64_t row,
                           int64_t block_size, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t n = tokens * 2 * row;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  switch (storage) {
    case KvStorage::kF32:
      KvCacheWriteKernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(kv_pool), k, v, ld,
                                                          slots, tokens, row, block_size);
      break;
    case KvStorage::kBF16:
      KvCacheWriteKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(kv_pool), k,
                                                          v, ld, slots, tokens, row, block_size);
      break;
    case KvStorage::kF16:
      KvCacheWriteKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(kv_pool), k, v, ld,
                                                          slots, tokens, row, block_size);
      break;
    case KvStorage::kFp8E4M3:
      KvCacheWriteKernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(kv_pool), k,
                                                          v, ld, slots, tokens, row, block_size);
      break;
  }
  return cudaGetLastError();
}

}  // namespace paratune::kernels::serving::cuda
