#include "kernels/serving/paged_kv_cache.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

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

uint8_t FloatToFp8E4M3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return sign | 0x7f;  // NaN
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate: 448 = 1.75 x 2^8
  if (a < 0.015625f) {                  // below 2^-6: subnormal steps of 2^-9
    const int q = static_cast<int>(std::nearbyint(a * 512.0f));  // ties to even
    return sign | static_cast<uint8_t>(q);  // q = 8 is the smallest normal, 0x08
  }
  int e = 0;
  const float m = std::frexp(a, &e);                                   // a = m x 2^e, m in [0.5, 1)
  int k = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));  // ties to even
  int exponent = e - 1 + 7;
  if (k == 8) k = 0, ++exponent;
  return sign | static_cast<uint8_t>(exponent << 3) | static_cast<uint8_t>(k);
}

namespace {

float DecodeFp8E4M3(uint8_t b) {
  const int exponent = (b >> 3) & 0xf, k = b & 7;
  if (exponent == 15 && k == 7) return std::numeric_limits<float>::quiet_NaN();
  const float v = exponent == 0 ? std::ldexp(static_cast<float>(k), -9)
                                : std::ldexp(1.0f + static_cast<float>(k) / 8.0f, exponent - 7);
  return (b & 0x80) ? -v : v;
}

// Every code's value (the attention reads the cache through it).
const std::array<float, 256>& Fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = DecodeFp8E4M3(static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

}  // namespace

float Fp8E4M3ToFloat(uint8_t b) { return Fp8Table()[b]; }

KvLayerGroups LayerGroupsOf(const KvCacheShape& shape) {
  const int64_t L = shape.num_layers;
  int64_t W = 0;
  if (shape.window > 0) {
    for (size_t l = 0; l < shape.windowed.size(); ++l) W += shape.windowed[l] ? 1 : 0;
  }
  const int64_t F = L - W;
  KvLayerGroups g;
  if (W == 0 || F == 0) {
    g.group_size = std::max<int64_t>(L, 1);
    g.full_groups = W == 0 ? 1 : 0;
    g.windowed_groups = W == 0 ? 0 : 1;
  } else {
    g.group_size = std::gcd(F, W);
    g.full_groups = F / g.group_size;
    g.windowed_groups = W / g.group_size;
  }
  g.blocks = shape.num_blocks * std::max<int64_t>(L, 1) / g.group_size;
  return g;
}

int64_t WholeContextBlocks(int64_t tokens, int64_t block) { return (tokens + block - 1) / block; }

int64_t WindowedBlocks(int64_t tokens, int64_t block, int64_t window, int64_t chunk) {
  const int64_t whole = WholeContextBlocks(tokens, block);
  if (window <= 0) return whole;
  return std::min(whole, (window - 1 + chunk + block - 1) / block + 1);
}

absl::StatusOr<PagedKvCache> PagedKvCache::Create(Backend& backend, const KvCacheShape& shape,
                                                  uint64_t shuffle_seed) {
  if (shape.dtype != DType::kF32 && shape.dtype != DType::kBF16 && shape.dtype != DType::kFp8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv dtype (", DTypeName(shape.dtype), ") must be fp32, bf16 or fp8"));
  }
  if (!shape.windowed.empty() && static_cast<int64_t>(shape.windowed.size()) != shape.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: windowed (", shape.windowed.size(),
                                                   " layers) must list num_layers (",
                                                   shape.num_layers, ")"));
  }
  if (shape.window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache: window (", shape.window, ") must be >= 0"));
  }
  PagedKvCache cache;
  cache.backend_ = &backend;
  cache.shape_ = shape;
  cache.groups_ = LayerGroupsOf(shape);
  const KvLayerGroups& g = cache.groups_;
  int64_t full = 0, windowed = 0;
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    const bool w = shape.window > 0 && !shape.windowed.empty() && shape.windowed[l];
    const int64_t i = w ? windowed++ : full++;
    cache.group_of_.push_back((w ? g.full_groups : 0) + i / g.group_size);
    cache.slot_.push_back(i % g.group_size);
  }
  for (int64_t s = 0; s < g.group_size; ++s) {
    PT_ASSIGN_OR_RETURN(Tensor pool,
                        backend.Empty({g.blocks, 2, shape.block_size, shape.groups, shape.head_dim},
                                      shape.dtype, MemoryTag::kActivations));
    cache.pools_.push_back(std::move(pool));
  }
  // Popped from the back: block 0 first unless shuffled.
  for (int64_t b = g.blocks - 1; b >= 0; --b) cache.free_.push_back(static_cast<int32_t>(b));
  if (shuffle_seed != 0) {
    for (int64_t i = static_cast<int64_t>(cache.free_.size()) - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(Mix64(shuffle_seed + i) % (i + 1));
      std::swap(cache.free_[i], cache.free_[j]);
    }
  }
  return cache;
}

int64_t PagedKvCache::FirstKept(int64_t g, int64_t next) const {
  if (!GroupWindowed(g)) return 0;
  return std::max<int64_t>(0, next - shape_.window + 1);
}

int64_t PagedKvCache::Missing(const SeqState* s, int64_t g, int64_t from, int64_t to) const {
  const int64_t bs = shape_.block_size;
  int64_t missing = 0;
  for (int64_t b = FirstKept(g, from) / bs; b * bs < to; ++b) {
    const bool held =
        s != nullptr && b < static_cast<int64_t>(s->tables[g].size()) && s->tables[g][b] >= 0;
    missing += held ? 0 : 1;
  }
  return missing;
}

void PagedKvCache::Take(SeqState& s, int64_t g, int64_t from, int64_t to) {
  const int64_t bs = shape_.block_size;
  std::vector<int32_t>& table = s.tables[g];
  const int64_t need = (to + bs - 1) / bs;
  if (static_cast<int64_t>(table.size()) < need) table.resize(need, -1);
  for (int64_t b = FirstKept(g, from) / bs; b < need; ++b) {
    if (table[b] >= 0) continue;
    table[b] = free_.back();
    free_.pop_back();
  }
}

int64_t PagedKvCache::BlocksNeeded(int64_t seq, int64_t length) const {
  const auto it = seqs_.find(seq);
  const SeqState* s = it == seqs_.end() ? nullptr : &it->second;
  const int64_t from = s == nullptr ? 0 : s->length;
  const int64_t groups = groups_.full_groups + groups_.windowed_groups;
  int64_t need = 0;
  for (int64_t g = 0; g < groups; ++g) need += Missing(s, g, from, length);
  return need;
}

absl::Status PagedKvCache::Reserve(int64_t seq, int64_t length) {
  const int64_t more = BlocksNeeded(seq, length);
  if (more > free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: sequence ", seq, " needs ", more, " more blocks of ", shape_.block_size,
        " tokens for length ", length, ", ", free_blocks(), " free"));
  }
  SeqState& s = seqs_[seq];
  const int64_t groups = groups_.full_groups + groups_.windowed_groups;
  s.tables.resize(groups);
  for (int64_t g = 0; g < groups; ++g) Take(s, g, s.length, length);
  return absl::OkStatus();
}

absl::Status PagedKvCache::ReserveContext(int64_t seq, int64_t length) {
  if (seqs_.count(seq) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv cache: sequence ", seq, " already holds blocks"));
  }
  const int64_t groups = groups_.full_groups + groups_.windowed_groups;
  int64_t more = 0;
  for (int64_t g = 0; g < groups; ++g) more += Missing(nullptr, g, length, length + 1);
  if (more > free_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: sequence ", seq, " needs ", more, " blocks of ", shape_.block_size,
                     " tokens for a context of ", length, ", ", free_blocks(), " free"));
  }
  SeqState& s = seqs_[seq];
  s.tables.resize(groups);
  for (int64_t g = 0; g < groups; ++g) Take(s, g, length, length + 1);
  s.length = length;
  return absl::OkStatus();
}

void PagedKvCache::Release(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (const std::vector<int32_t>& table : it->second.tables) {
    for (auto b = table.rbegin(); b != table.rend(); ++b) {
      if (*b >= 0) free_.push_back(*b);
    }
  }
  seqs_.erase(it);
}

void PagedKvCache::FreeOutsideWindow(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& s = it->second;
  const int64_t bs = shape_.block_size;
  for (int64_t g = groups_.full_groups; g < static_cast<int64_t>(s.tables.size()); ++g) {
    // A windowed group holds a run of blocks up to its last; those before it are freed
    // already, so walking back from the window's first block stops at the first freed one.
    std::vector<int32_t>& table = s.tables[g];
    const int64_t last_left =
        std::min<int64_t>(FirstKept(g, s.length) / bs, static_cast<int64_t>(table.size())) - 1;
    for (int64_t b = last_left; b >= 0 && table[b] >= 0; --b) {
      free_.push_back(table[b]);
      table[b] = -1;
    }
  }
}

bool PagedKvCache::Holds(int64_t layer, int64_t seq, int64_t pos) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return false;
  const std::vector<int32_t>& table = it->second.tables[group_of_[layer]];
  const int64_t b = pos / shape_.block_size;
  return pos >= 0 && b < static_cast<int64_t>(table.size()) && table[b] >= 0;
}

int64_t PagedKvCache::length(int64_t seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

absl::Status PagedKvCache::SetLength(int64_t seq, int64_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() && length == 0) return absl::OkStatus();
  int64_t cap = it == seqs_.end() ? 0 : std::numeric_limits<int64_t>::max();
  if (it != seqs_.end()) {
    for (const std::vector<int32_t>& table : it->second.tables) {
      cap = std::min(cap, static_cast<int64_t>(table.size()) * shape_.block_size);
    }
  }
  if (length > cap) {
    return absl::FailedPreconditionError(absl::StrCat("kv cache: length (", length,
                                                      ") of sequence ", seq,
                                                      " exceeds its blocks (", cap, " tokens)"));
  }
  it->second.length = length;
  return absl::OkStatus();
}

const std::vector<int32_t>& PagedKvCache::block_table(int64_t seq, int64_t layer) const {
  static const std::vector<int32_t> kEmpty;
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.tables[group_of_[layer]];
}

int64_t PagedKvCache::block_bytes() const {
  return 2 * shape_.block_size * shape_.groups * shape_.head_dim * SizeOf(shape_.dtype);
}

absl::StatusOr<PagedKvCache::SequenceKv> PagedKvCache::Export(int64_t seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("kv cache: sequence ", seq, " holds no blocks"));
  }
  const SeqState& s = it->second;
  SequenceKv kv;
  kv.length = s.length;
  kv.entries.resize(s.tables.size());
  const int64_t bb = block_bytes();
  for (size_t g = 0; g < s.tables.size(); ++g) {
    for (size_t i = 0; i < s.tables[g].size(); ++i) {
      const int32_t block = s.tables[g][i];
      if (block < 0) continue;
      kv.entries[g].push_back(static_cast<int64_t>(i));
      for (int64_t l = 0; l < shape_.num_layers; ++l) {
        if (group_of_[l] != static_cast<int64_t>(g)) continue;
        const char* src = static_cast<const char*>(pools_[slot_[l]].data()) +
                          Offset(block, 0, 0) * SizeOf(shape_.dtype);
        const size_t at = kv.bytes.size();
        kv.bytes.resize(at + bb);
        PT_RETURN_IF_ERROR(
            backend_->CopyBytes(kv.bytes.data() + at, src, bb, Backend::CopyKind::kBackendToHost));
      }
    }
  }
  return kv;
}

absl::Status PagedKvCache::Import(int64_t seq, const SequenceKv& kv) {
  const int64_t groups = groups_.full_groups + groups_.windowed_groups;
  if (static_cast<int64_t>(kv.entries.size()) != groups) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache: imported sequence ", seq, " has ",
                                                   kv.entries.size(), " block groups, this cache ",
                                                   groups));
  }
  PT_RETURN_IF_ERROR(ReserveContext(seq, kv.length));
  const SeqState& s = seqs_.at(seq);
  const int64_t bb = block_bytes();
  const char* src = kv.bytes.data();
  const char* end = src + kv.bytes.size();
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i : kv.entries[g]) {
      const int32_t block =
          i < static_cast<int64_t>(s.tables[g].size()) ? s.tables[g][i] : int32_t{-1};
      for (int64_t l = 0; l < shape_.num_layers; ++l) {
        if (group_of_[l] != g) continue;
        if (end - src < bb) {
          Release(seq);
          return absl::InvalidArgumentError(
              absl::StrCat("kv cache: imported sequence ", seq, " is short of its blocks"));
        }
        if (block >= 0) {  // a windowed group keeps only the blocks its next token reads
          char* dst = static_cast<char*>(pools_[slot_[l]].data()) +
                      Offset(block, 0, 0) * SizeOf(shape_.dtype);
          if (absl::Status st =
                  backend_->CopyBytes(dst, src, bb, Backend::CopyKind::kHostToBackend);
              !st.ok()) {
            Release(seq);
            return st;
          }
        }
        src += bb;
      }
    }
  }
  return absl::OkStatus();
}

int64_t PagedKvCache::Offset(int32_t block, int kv, int64_t token) const {
  const int64_t row = shape_.groups * shape_.head_dim;
  return ((static_cast<int64_t>(block) * 2 + kv) * shape_.block_size + token) * row;
}

void PagedKvCache::Write(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v) {
  const SeqState& s = seqs_.at(seq);
  const int32_t block = s.tables[group_of_[layer]][pos / shape_.block_size];
  const int64_t token = pos % shape_.block_size, row = shape_.groups * shape_.head_dim;
  const Tensor& pool = pools_[slot_[layer]];
  for (int kv = 0; kv < 2; ++kv) {
    const float* src = kv == 0 ? k : v;
    const int64_t off = Offset(block, kv, token);
    if (shape_.dtype == DType::kF32) {
      std::copy(src, src + row, pool.data_as<float>() + off);
    } else if (shape_.dtype == DType::kBF16) {
      uint16_t* dst = pool.data_as<uint16_t>() + off;
      for (int64_t i = 0; i < row; ++i) dst[i] = FloatToBf16(src[i]);
    } else {
      uint8_t* dst = pool.data_as<uint8_t>() + off;
      for (int64_t i = 0; i < row; ++i) dst[i] = FloatToFp8E4M3(src[i]);
    }
  }
}

void PagedKvCache::ReadBlock(int64_t layer, int32_t block, int64_t group, int64_t first,
                             int64_t count, float* k, float* v) const {
  const int64_t row = shape_.groups * shape_.head_dim, d = shape_.head_dim;
  const Tensor& pool = pools_[slot_[layer]];
  for (int kv = 0; kv < 2; ++kv) {
    float* dst = kv == 0 ? k : v;
    const int64_t off = Offset(block, kv, first) + group * d;
    for (int64_t t = 0; t < count; ++t) {
      if (shape_.dtype == DType::kF32) {
        const float* src = pool.data_as<float>() + off + t * row;
        std::copy(src, src + d, dst + t * d);
      } else if (shape_.dtype == DType::kBF16) {
        const uint16_t* src = pool.data_as<uint16_t>() + off + t * row;
        for (int64_t i = 0; i < d; ++i) dst[t * d + i] = Bf16ToFloat(src[i]);
      } else {
        const std::array<float, 256>& table = Fp8Table();
        const uint8_t* src = pool.data_as<uint8_t>() + off + t * row;
        for (int64_t i = 0; i < d; ++i) dst[t * d + i] = table[src[i]];
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
