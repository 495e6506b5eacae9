// Causal attention of a step's new tokens against a paged KV cache, flash-style: for each
// (sequence chunk, KV head) the query rows of the group's heads are stacked into tiles of
// kTileTokens tokens; each tile walks the sequence's blocks in order with an online softmax
// (running max and sum, fp32), so no [tokens, context] score matrix is ever stored. The
// same kernel serves prefill (start 0), chunked prefill (start > 0, many tokens) and
// decode (one token); K and V of the new tokens must already be in the cache.
// CPU twin of kernels/serving/cuda/paged_attention.cu.
#ifndef PARATUNE_KERNELS_SERVING_PAGED_ATTENTION_H_
#define PARATUNE_KERNELS_SERVING_PAGED_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/serving/paged_kv_cache.h"
#include "kernels/serving/step_batch.h"

namespace paratune::kernels::serving {

struct PagedAttentionArgs {
  const float* q = nullptr;  ///< [tokens, ld_q]; head hh of a token at hh·head_dim.
  int64_t ld_q = 0;
  float* o = nullptr;  ///< [tokens, ld_o]; same head layout as q.
  int64_t ld_o = 0;
  int64_t heads = 0;   ///< Query heads on this rank.
  int64_t groups = 0;  ///< KV heads on this rank (heads/groups query heads share one).
  int64_t head_dim = 0;
  float scale = 1.0f;  ///< Softmax scale, 1/sqrt(head_dim).
  /// Sliding-window attention: a query attends to this many keys, itself included (0 =
  /// every earlier key).
  int64_t window = 0;
  /// Optional, read by device backends: the step's new K and V rows (fp32, after RoPE),
  /// inside q's rows (row stride ld_q). A whole prompt (a chunk at start 0) then attends to
  /// its own K and V through the backend's flash attention in `flash_dtype`, as engines run
  /// prefill, instead of reading them back through the cache's block tables.
  const float* k = nullptr;
  const float* v = nullptr;
  DType flash_dtype = DType::kF32;
};

/// o = softmax(scale·q·Kᵀ, causal)·V for every chunk's tokens, keys and values read from
/// `cache` layer `layer` positions [0, start + i] for the chunk's token i (with a window w,
/// [start + i − w + 1, start + i]: the blocks left of a tile's window are not read).
void PagedAttentionForward(const PagedAttentionArgs& args, const PagedKvCache& cache, int64_t layer,
                           const std::vector<SeqChunk>& chunks, int threads);

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_PAGED_ATTENTION_H_
