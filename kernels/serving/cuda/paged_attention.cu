// Paged attention on the GPU: one thread block per (chunk token, query head). The block
// keeps the query in shared memory and walks the token's visible keys (positions
// ≤ its own) in tiles of blockDim keys, found through the sequence's block table: each
// thread scores one key, block reductions give the tile's max and sum, and an online
// softmax (running max, sum and fp32 accumulator, each thread owning head_dim/blockDim
// output dims) folds the tile's values in. No score matrix is stored; K and V are read in
// their storage type (fp32, bf16, fp16, fp8 e4m3) and converted to fp32 in registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "kernels/serving/cuda/paged_attention_launcher.h"

namespace paratune::kernels::serving::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;

// ---- kernels ---------------------------------------------------------------------------

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float Load(const __nv_fp8_e4m3* p) { return static_cast<float>(*p); }

__device__ __forceinline__ float WarpReduce(float v, bool max) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? fmaxf(v, other) : v + other;
  }
  return v;
}

// Max or sum over the block; every thread gets the result.
__device__ __forceinline__ float BlockReduce(float v, bool max, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpReduce(v, max);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float identity = max ? -INFINITY : 0.0f;
  v = lane < kThreads / 32 ? scratch[lane] : identity;
  return WarpReduce(v, max);
}

template <typename T>
__global__ void PagedAttentionKernel(PagedAttentionCudaArgs a) {
  __shared__ float q[kMaxHeadDim];
  __shared__ float p[kThreads];
  __shared__ float scratch[32];
  const int64_t chunk = blockIdx.x / a.max_chunk_tokens, ti = blockIdx.x % a.max_chunk_tokens;
  if (ti >= a.chunk_tokens[chunk]) return;  // uniform over the block
  const int64_t head = blockIdx.y, group = head / (a.heads / a.groups), d = a.head_dim;
  const int64_t row = a.chunk_row0[chunk] + ti, kv_len = a.chunk_start[chunk] + ti + 1;
  const int32_t* table = a.block_tables + chunk * a.max_blocks;
  const T* pool = static_cast<const T*>(a.kv_pool);
  const int64_t token_stride = a.groups * d;
  for (int64_t c = threadIdx.x; c < d; c += kThreads)
    q[c] = a.q[row * a.ld_q + head * d + c] * a.scale;
  __syncthreads();
  float m = -INFINITY, l = 0.0f, acc[kDimsPerThread] = {};
  // Keys [first, kv_len): the query's sliding window, or every earlier key.
  const int64_t first = a.window > 0 && kv_len > a.window ? kv_len - a.window : 0;
  for (int64_t j0 = first; j0 < kv_len; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    float s = -INFINITY;
    if (j < kv_len) {
      const int64_t block = table[j / a.block_size], tok = j % a.block_size;
      const T* k = pool + ((block * 2) * a.block_size + tok) * token_stride + group * d;
      s = 0.0f;
      for (int64_t c = 0; c < d; ++c) s += q[c] * Load(k + c);
    }
    const float m_new = fmaxf(m, BlockReduce(s, true, scratch));
    const float pj = j < kv_len ? __expf(s - m_new) : 0.0f;
    p[threadIdx.x] = pj;
    const float alpha = __expf(m - m_new);            // 0 on the first tile (m = −inf)
    l = l * alpha + BlockReduce(pj, false, scratch);  // its barriers also publish p[]
    const int64_t count = min(static_cast<int64_t>(kThreads), kv_len - j0);
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int64_t c = threadIdx.x + i * kThreads;
      if (c >= d) break;
      float sum = acc[i] * alpha;
      for (int64_t jj = 0; jj < count; ++jj) {
        const int64_t key = j0 + jj;
        const int64_t block = table[key / a.block_size], tok = key % a.block_size;
        const T* v = pool + ((block * 2 + 1) * a.block_size + tok) * token_stride + group * d;
        sum += p[jj] * Load(v + c);
      }
      acc[i] = sum;
    }
    m = m_new;
    __syncthreads();  // p[] is rewritten by the next tile
  }
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int64_t c = threadIdx.x + i * kThreads;
    if (c < d) a.o[row * a.ld_o + head * d + c] = acc[i] / l;
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

int KvStorageBytes(KvStorage s) {
  switch (s) {
    case KvStorage::kF32:
      return 4;
    case KvStorage::kBF16:
      return 2;
    case KvStorage::kF16:
      return 2;
    case KvStorage::kFp8E4M3:
      return 1;
  }
  return 0;
}

float RoundTripKv(KvStorage s, float v) {
  switch (s) {
    case KvStorage::kF32:
      return v;
    case KvStorage::kBF16:
      return __bfloat162float(__float2bfloat16(v));
    case KvStorage::kF16:
      return __half2float(__float2half(v));
    case KvStorage::kFp8E4M3:
      return static_cast<float>(__nv_fp8_e4m3(v));
  }
  return v;
}

void EncodeKv(KvStorage s, const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (s) {
      case KvStorage::kF32:
        static_cast<float*>(dst)[i] = src[i];
        break;
      case KvStorage::kBF16:
        static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(src[i]);
        break;
      case KvStorage::kF16:
        static_cast<__half*>(dst)[i] = __float2half(src[i]);
        break;
      case KvStorage::kFp8E4M3:
        static_cast<__nv_fp8_e4m3*>(dst)[i] = __nv_fp8_e4m3(src[i]);
        break;
    }
  }
}

cudaError_t paged_attention_forward(const PagedAttentionCudaArgs& a, cudaStream_t stream) {
  if (a.head_dim > kMaxHeadDim || a.groups <= 0 || a.heads % a.groups != 0) {
    return cudaErrorInvalidValue;
  }
  if (a.num_chunks == 0 || a.max_chunk_tokens == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(a.num_chunks * a.max_chunk_tokens),
                  static_cast<unsigned>(a.heads));
  switch (a.storage) {
    case KvStorage::kF32:
      PagedAttentionKernel<float><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvStorage::kBF16:
      PagedAttentionKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvStorage::kF16:
      PagedAttentionKernel<__half><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvStorage::kFp8E4M3:
      PagedAttentionKernel<__nv_fp8_e4m3><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

}  // namespace paratune::kernels::serving::cuda
