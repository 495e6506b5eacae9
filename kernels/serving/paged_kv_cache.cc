#include "kernels/serving/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/hash_random.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

absl::StatusOr<PagedKvCache> PagedKvCache::Create(Backend& backend, const KvCacheShape& shape,
                                                  uint64_t shuffle_seed) {
  if (shape.dtype != DType::kF32 && shape.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv dtype (", DTypeName(shape.dtype), ") must be fp32 or bf16"));
  }
  PagedKvCache cache;
  cache.shape_ = shape;
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    PT_ASSIGN_OR_RETURN(Tensor pool, backend.Empty({shape.num_blocks, 2, shape.block_size,
                                                    shape.groups, shape.head_dim},
                                                   shape.dtype, MemoryTag::kActivations));
    cache.pools_.push_back(std::move(pool));
  }
  // Popped from the back: block 0 first unless shuffled.
  for (int64_t b = shape.num_blocks - 1; b >= 0; --b)
    cache.free_.push_back(static_cast<int32_t>(b));
  if (shuffle_seed != 0) {
    for (int64_t i = static_cast<int64_t>(cache.free_.size()) - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(Mix64(shuffle_seed + i) % (i + 1));
      std::swap(cache.free_[i], cache.free_[j]);
    }
  }
  return cache;
}

int64_t PagedKvCache::BlocksNeeded(int64_t seq, int64_t length) const {
  const auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  const int64_t need = (length + shape_.block_size - 1) / shape_.block_size;
  return std::max<int64_t>(0, need - have);
}

absl::Status PagedKvCache::Reserve(int64_t seq, int64_t length) {
  const int64_t more = BlocksNeeded(seq, length);
  if (more > free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: sequence ", seq, " needs ", more, " more blocks of ", shape_.block_size,
        " tokens for length ", length, ", ", free_blocks(), " free"));
  }
  SeqState& s = seqs_[seq];
  for (int64_t i = 0; i < more; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void PagedKvCache::Release(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) free_.push_back(*b);
  seqs_.erase(it);
}

int64_t PagedKvCache::length(int64_t seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

absl::Status PagedKvCache::SetLength(int64_t seq, int64_t length) {
  auto it = seqs_.find(seq);
  const int64_t cap =
      it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size()) * shape_.block_size;
  if (length > cap) {
    return absl::FailedPreconditionError(absl::StrCat("kv cache: length (", length,
                                                      ") of sequence ", seq,
                                                      " exceeds its blocks (", cap, " tokens)"));
  }
  it->second.length = length;
  return absl::OkStatus();
}

const std::vector<int32_t>& PagedKvCache::block_table(int64_t seq) const {
  static const std::vector<int32_t> kEmpty;
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

int64_t PagedKvCache::Offset(int32_t block, int kv, int64_t token) const {
  const int64_t row = shape_.groups * shape_.head_dim;
  return ((static_cast<int64_t>(block) * 2 + kv) * shape_.block_size + token) * row;
}

void PagedKvCache::Write(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v) {
  const SeqState& s = seqs_.at(seq);
  const int32_t block = s.blocks[pos / shape_.block_size];
  const int64_t token = pos % shape_.block_size, row = shape_.groups * shape_.head_dim;
  const Tensor& pool = pools_[layer];
  for (int kv = 0; kv < 2; ++kv) {
    const float* src = kv == 0 ? k : v;
    const int64_t off = Offset(block, kv, token);
    if (shape_.dtype == DType::kF32) {
      std::copy(src, src + row, pool.data_as<float>() + off);
    } else {
      uint16_t* dst = pool.data_as<uint16_t>() + off;
      for (int64_t i = 0; i < row; ++i) dst[i] = FloatToBf16(src[i]);
    }
  }
}

void PagedKvCache::ReadBlock(int64_t layer, int32_t block, int64_t group, int64_t first,
                             int64_t count, float* k, float* v) const {
  const int64_t row = shape_.groups * shape_.head_dim, d = shape_.head_dim;
  const Tensor& pool = pools_[layer];
  for (int kv = 0; kv < 2; ++kv) {
    float* dst = kv == 0 ? k : v;
    const int64_t off = Offset(block, kv, first) + group * d;
    for (int64_t t = 0; t < count; ++t) {
      if (shape_.dtype == DType::kF32) {
        const float* src = pool.data_as<float>() + off + t * row;
        std::copy(src, src + d, dst + t * d);
      } else {
        const uint16_t* src = pool.data_as<uint16_t>() + off + t * row;
        for (int64_t i = 0; i < d; ++i) dst[t * d + i] = Bf16ToFloat(src[i]);
      }
    }
  }
}

int64_t PagedKvCache::bytes() const {
  int64_t total = 0;
  for (const Tensor& p : pools_) total += p.bytes();
  return total;
}

int64_t PagedKvCache::bytes_per_token_per_layer() const {
  return 2 * shape_.groups * shape_.head_dim * SizeOf(shape_.dtype);
}

}  // namespace paratune::kernels::serving
