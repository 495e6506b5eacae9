// Launcher of the CUDA paged attention (kernels/serving/cuda/paged_attention.cu), the
// device twin of kernels/serving/paged_attention.h: the same chunks (decode tokens,
// prefill and chunked-prefill pieces), the same pool layout [num_blocks, 2 (K, V),
// block_size, groups, head_dim], with KV stored as fp32, bf16, fp16 or fp8 (e4m3) and all
// math in fp32. Plain C++ so that g++ code and tests can include it.
#ifndef PARATUNE_KERNELS_SERVING_CUDA_PAGED_ATTENTION_LAUNCHER_H_
#define PARATUNE_KERNELS_SERVING_CUDA_PAGED_ATTENTION_LAUNCHER_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace paratune::kernels::serving::cuda {

/// KV-cache element storage on the device.
enum class KvStorage { kF32, kBF16, kF16, kFp8E4M3 };

/// Bytes per stored element.
int KvStorageBytes(KvStorage s);
/// Host: `v` as stored and read back (round to nearest; fp8 saturates at ±448), so a CPU
/// reference can run on exactly the values the device reads.
float RoundTripKv(KvStorage s, float v);
/// Host: encodes n fp32 values into the storage's bytes (dst holds n·KvStorageBytes).
void EncodeKv(KvStorage s, const float* src, void* dst, int64_t n);

/// Device pointers except the sizes.
struct PagedAttentionCudaArgs {
  const float* q = nullptr;  ///< [tokens, ld_q]; head hh at hh·head_dim.
  int64_t ld_q = 0;
  float* o = nullptr;  ///< [tokens, ld_o].
  int64_t ld_o = 0;
  const void* kv_pool = nullptr;  ///< One layer's pool.
  KvStorage storage = KvStorage::kF32;
  const int32_t* block_tables = nullptr;  ///< [num_chunks, max_blocks] (the chunk's sequence).
  int64_t max_blocks = 0;
  const int64_t* chunk_start = nullptr;   ///< [num_chunks] position of the first new token.
  const int64_t* chunk_row0 = nullptr;    ///< [num_chunks] its row in q and o.
  const int64_t* chunk_tokens = nullptr;  ///< [num_chunks] new tokens.
  int64_t num_chunks = 0;
  int64_t max_chunk_tokens = 0;  ///< max over chunk_tokens (grid size).
  int64_t heads = 0, groups = 0, head_dim = 0, block_size = 0;  ///< head_dim ≤ 256.
  float scale = 1.0f;
  int64_t window = 0;  ///< Keys per query, itself included; 0 = every earlier key.
};

/// Writes K and V of `tokens` new tokens (fp32 rows of `row` = groups·head_dim values at
/// k + t·ld, v + t·ld) into a layer's pool in its storage type, token t at slot
/// slots[t] = block·block_size + offset (vLLM's slot mapping); the twin of
/// PagedKvCache::Write. kv_cache_write.cu.
cudaError_t kv_cache_write(void* kv_pool, KvStorage storage, const float* k, const float* v,
                           int64_t ld, const int64_t* slots, int64_t tokens, int64_t row,
                           int64_t block_size, cudaStream_t stream);

/// Writes are skipped for tokens whose slot is negative (a position a windowed layer does
/// not hold).

/// o = softmax(scale·q·Kᵀ, causal)·V per chunk token, reading the paged cache.
/// cudaErrorInvalidValue for head_dim > 256 or heads not a multiple of groups.
cudaError_t paged_attention_forward(const PagedAttentionCudaArgs& args, cudaStream_t stream);

/// Rotary embedding in place, the twin of rope.h's ApplyRope: `heads` heads of dim d at the
/// start of each of `rows` fp32 rows of x (stride ld), row r at positions[r]; the angles
/// in double as on the host. serving_kernels.cu.
cudaError_t rope_forward(float* x, int64_t ld, int64_t rows, const int64_t* positions,
                         int64_t heads, int64_t d, double theta, cudaStream_t stream);

/// Element type of argmax_rows' logits.
enum class LogitsType { kF32, kBF16, kF16 };
/// Per row of logits [rows, v]: the value (as fp32) and index of its first maximum.
/// serving_kernels.cu.
cudaError_t argmax_rows(const void* logits, LogitsType type, int64_t rows, int64_t v, float* value,
                        int64_t* index, cudaStream_t stream);

}  // namespace paratune::kernels::serving::cuda

#endif  // PARATUNE_KERNELS_SERVING_CUDA_PAGED_ATTENTION_LAUNCHER_H_
