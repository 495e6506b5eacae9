// A paged KV cache (vLLM's PagedAttention layout): pools of fixed-size blocks
// [num_blocks, 2 (K, V), block_size, groups, head_dim]; a sequence holds a block table
// (its blocks in position order) and a length. Storage is fp32 or bf16 (round to nearest
// even); reads convert to fp32.
//
// Without a sliding window every layer owns a pool and block i of a sequence is entry i of
// its one table in every layer. With one (vLLM's hybrid KV-cache manager), the layers form
// groups of S = gcd(F, W) layers of one kind (F whole-context and W windowed layers), each
// group with its own block tables, and the S pools are shared: pool s holds the s-th layer
// of every group, and a block id belongs to one group at a time. A windowed group frees a
// sequence's blocks left of the window its next token reads (entries become -1), so a
// sequence holds its whole context in the whole-context groups and about a window in the
// others. The pools hold num_blocks x L / S blocks: the bytes of num_blocks per layer.
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
/// fp32 → FP8 E4M3 with round to nearest even, saturating at ±448 (infinities too) as
/// CUDA's __nv_fp8_e4m3 conversion does; NaN becomes NaN (0x7f).
uint8_t FloatToFp8E4M3(float f);
float Fp8E4M3ToFloat(uint8_t b);

struct KvCacheShape {
  int64_t num_layers = 1;
  int64_t num_blocks = 1;
  int64_t block_size = 16;  ///< Tokens per block.
  int64_t groups = 1;       ///< KV heads on this rank.
  int64_t head_dim = 1;
  DType dtype = DType::kF32;  ///< fp32 | bf16 | fp8 (E4M3).
  /// Keys a windowed layer's query attends to, itself included (0: no window).
  int64_t window = 0;
  /// Per layer: attends to the window (empty: no layer does).
  std::vector<bool> windowed;
};

/// How a cache of `shape` groups its layers (see the file comment).
struct KvLayerGroups {
  int64_t group_size = 1;       ///< S: layers per group, and pools.
  int64_t full_groups = 1;      ///< Groups of whole-context layers.
  int64_t windowed_groups = 0;  ///< Groups of windowed layers.
  int64_t blocks = 0;           ///< Blocks in the shared pools (num_blocks x L / S).
};
KvLayerGroups LayerGroupsOf(const KvCacheShape& shape);

/// Blocks of one group kind a sequence of `tokens` holds at most while chunks of at most
/// `chunk` tokens are written: a whole-context group all of them; a windowed one those the
/// chunk's queries read, [first − window + 1, first + chunk), at most
/// ceil((window − 1 + chunk) / block) + 1.
int64_t WholeContextBlocks(int64_t tokens, int64_t block);
int64_t WindowedBlocks(int64_t tokens, int64_t block, int64_t window, int64_t chunk);

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
  /// Blocks (over all groups) `seq` needs beyond those it holds to write positions
  /// [length(seq), length): from the window of its first new token on in a windowed group.
  int64_t BlocksNeeded(int64_t seq, int64_t length) const;
  /// Returns the blocks of `seq` to the free list.
  void Release(int64_t seq);
  /// Tokens written for `seq` (positions [0, length) are valid).
  int64_t length(int64_t seq) const;
  /// Marks positions [0, length) of `seq` as written (after every layer wrote them).
  absl::Status SetLength(int64_t seq, int64_t length);
  /// Returns the blocks of `seq`'s windowed groups left of the window its next position
  /// (its length) reads to the free list (the engine's scheduler does this after a step).
  void FreeOutsideWindow(int64_t seq);
  /// Takes `seq` (new) as holding `length` written tokens: the blocks position `length`
  /// reads, and the one it is written to (a windowed group does not take the blocks left
  /// of its window). Its positions are written with Write where Holds says so.
  absl::Status ReserveContext(int64_t seq, int64_t length);
  /// Whether layer `layer` of `seq` holds a block for position `pos`.
  bool Holds(int64_t layer, int64_t seq, int64_t pos) const;
  /// The block table layer `layer` reads for `seq` (-1: freed, left of a window).
  const std::vector<int32_t>& block_table(int64_t seq, int64_t layer = 0) const;
  bool contains(int64_t seq) const { return seqs_.count(seq) > 0; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  /// The KV of `seq`, as a disaggregated prefill instance hands it to a decode instance:
  /// every block it holds, per group in table order, of every layer of the group.
  struct SequenceKv {
    int64_t length = 0;
    std::vector<std::vector<int64_t>> entries;  ///< Per group: the table entries held.
    std::vector<char> bytes;                    ///< Their blocks, layer by layer.
  };
  absl::StatusOr<SequenceKv> Export(int64_t seq) const;
  /// Takes `seq` (new) as holding `kv.length` written tokens (ReserveContext) and copies in
  /// the blocks of `kv` (from a cache of the same shape) it holds; ResourceExhausted when
  /// its blocks are not free (nothing is taken then).
  absl::Status Import(int64_t seq, const SequenceKv& kv);

  /// Writes K and V (groups·head_dim fp32 values each) of `seq` at position `pos` (host
  /// backend).
  void Write(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v);
  /// Reads KV head `group` of `count` tokens of block `block` of `layer` from token
  /// `first` on, as fp32 [count, head_dim] for K and V each.
  void ReadBlock(int64_t layer, int32_t block, int64_t group, int64_t first, int64_t count,
                 float* k, float* v) const;

  const KvCacheShape& shape() const { return shape_; }
  const KvLayerGroups& groups() const { return groups_; }
  /// Layer `layer`'s pool [blocks, 2, block_size, groups, head_dim], in the backend's
  /// memory (Write and ReadBlock need a host backend; a device backend writes through
  /// ServingOps::WriteKv).
  const Tensor& pool(int64_t layer) const { return pools_[slot_[layer]]; }
  /// The block-table group layer `layer` reads (block_table(seq, layer) is that group's).
  int64_t group_of(int64_t layer) const { return group_of_[layer]; }
  /// Groups of block tables: whole-context then windowed.
  int64_t num_groups() const { return groups_.full_groups + groups_.windowed_groups; }
  /// Bytes of all pools.
  int64_t bytes() const;
  /// Bytes one token occupies in one layer (K and V).
  int64_t bytes_per_token_per_layer() const;

 private:
  struct SeqState {
    std::vector<std::vector<int32_t>> tables;  ///< Per group.
    int64_t length = 0;
  };
  /// Bytes of one block of one layer (K and V).
  int64_t block_bytes() const;
  /// Element offset of (block, kv, token) in a layer's pool.
  int64_t Offset(int32_t block, int kv, int64_t token) const;
  bool GroupWindowed(int64_t g) const { return g >= groups_.full_groups; }
  /// The first position group `g` keeps when the next token written is at `next`.
  int64_t FirstKept(int64_t g, int64_t next) const;
  /// Blocks group `g` of `s` lacks to hold [FirstKept(g, from), to).
  int64_t Missing(const SeqState* s, int64_t g, int64_t from, int64_t to) const;
  void Take(SeqState& s, int64_t g, int64_t from, int64_t to);

  Backend* backend_ = nullptr;  ///< Where the pools live (Export and Import copy through it).
  KvCacheShape shape_;
  KvLayerGroups groups_;
  std::vector<int64_t> group_of_, slot_;  ///< Per layer.
  std::vector<Tensor> pools_;             ///< One per slot (group_size).
  std::vector<int32_t> free_;  ///< Popped from the back.
  std::map<int64_t, SeqState> seqs_;
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_PAGED_KV_CACHE_H_
