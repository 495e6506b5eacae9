// A paged KV cache (vLLM's PagedAttention layout): each layer owns a pool of fixed-size
// blocks [num_blocks, 2 (K, V), block_size, groups, head_dim]; a sequence holds a block
// table (its blocks in position order) and a length. Blocks come from one free list shared
// by the layers (block i of a sequence is block table[i] in every layer). Storage is fp32
// or bf16 (round to nearest even); reads convert to fp32.
// Thread-safety: not thread-safe; one rank owns its cache. Reads of distinct sequences and
// the attention kernel's reads may run concurrently once the writes of a step are done.
#ifndef PARATUNE_KERNELS_SERVING_PAGED_KV_CACHE_H_
#define PARATUNE_KERNELS_SERVING_PAGED_KV_CACHE_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace paratune::kernels::serving {

/// fp32 → bf16 with round to nearest even (NaN stays NaN).
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);

struct KvCacheShape {
  int64_t num_layers = 1;
  int64_t num_blocks = 1;
  int64_t block_size = 16;  ///< Tokens per block.
  int64_t groups = 1;       ///< KV heads on this rank.
  int64_t head_dim = 1;
  DType dtype = DType::kF32;  ///< fp32 | bf16.
};

class PagedKvCache {
 public:
  /// Allocates every layer's pool from `backend` (tag kActivations); ResourceExhausted
  /// when it does not fit. With `shuffle_seed` != 0 the free list hands blocks out in a
  /// seeded random order (tests: a sequence's blocks are then not contiguous).
  static absl::StatusOr<PagedKvCache> Create(Backend& backend, const KvCacheShape& shape,
                                             uint64_t shuffle_seed = 0);

  /// Grows sequence `seq` (created on first use) to hold `length` tokens;
  /// ResourceExhausted when the free blocks do not suffice (nothing is taken then).
  absl::Status Reserve(int64_t seq, int64_t length);
  /// Blocks needed for `length` more tokens of `seq` beyond those it holds.
  int64_t BlocksNeeded(int64_t seq, int64_t length) const;
  /// Returns the blocks of `seq` to the free list.
  void Release(int64_t seq);
  /// Tokens written for `seq` (positions [0, length) are valid).
  int64_t length(int64_t seq) const;
  /// Marks positions [0, length) of `seq` as written (after every layer wrote them).
  absl::Status SetLength(int64_t seq, int64_t length);
  const std::vector<int32_t>& block_table(int64_t seq) const;
  bool contains(int64_t seq) const { return seqs_.count(seq) > 0; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  /// Writes K and V (groups·head_dim fp32 values each) of `seq` at position `pos`.
  void Write(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v);
  /// Reads KV head `group` of `count` tokens of block `block` of `layer` from token
  /// `first` on, as fp32 [count, head_dim] for K and V each.
  void ReadBlock(int64_t layer, int32_t block, int64_t group, int64_t first, int64_t count,
                 float* k, float* v) const;

  const KvCacheShape& shape() const { return shape_; }
  /// Layer `layer`'s pool [num_blocks, 2, block_size, groups, head_dim] (device twins copy it).
  const Tensor& pool(int64_t layer) const { return pools_[layer]; }
  /// Bytes of all pools.
  int64_t bytes() const;
  /// Bytes one token occupies in one layer (K and V).
  int64_t bytes_per_token_per_layer() const;

 private:
  struct SeqState {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  /// Element offset of (block, kv, token) in a layer's pool.
  int64_t Offset(int32_t block, int kv, int64_t token) const;

  KvCacheShape shape_;
  std::vector<Tensor> pools_;  ///< One per layer.
  std::vector<int32_t> free_;  ///< Popped from the back.
  std::map<int64_t, SeqState> seqs_;
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_PAGED_KV_CACHE_H_
