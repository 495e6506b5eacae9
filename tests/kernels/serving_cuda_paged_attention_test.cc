// The CUDA paged attention and KV-cache write against their CPU twins on a mixed step
// (decodes at several context lengths, a prefill and a chunked-prefill piece) for every KV
// storage type: the context is copied to the device, the step's new tokens are written by
// kv_cache_write over zeroed slots, then attention runs. The CPU twin reads the values the
// device stores (RoundTripKv), so only the summation order differs: tolerance
// 1e-5 + 1e-4·|ref|.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/hash_random.h"
#include "kernels/serving/paged_attention.h"
#include "kernels/serving/paged_kv_cache.h"
#if PARATUNE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/serving/cuda/paged_attention_launcher.h"
#endif

namespace paratune::kernels::serving {
namespace {

#if PARATUNE_HAVE_CUDA
template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}
#endif

TEST(ServingCudaPagedAttention, CacheWriteAndAttentionMatchTheCpuTwinForEveryKvStorage) {
#if !PARATUNE_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA backend";
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  using cuda::KvStorage;
  constexpr int64_t kHeads = 8, kGroups = 2, kD = 64, kBlock = 16;
  // Decodes at contexts 37, 5 and 300 (one tile of keys and three), a prefill of 9 and a
  // chunk of 6 prompt tokens after 20 cached ones.
  const std::vector<SeqChunk> chunks = {
      {0, 37, 1, true}, {1, 5, 1, true}, {2, 300, 1, true}, {3, 0, 9, true}, {4, 20, 6, false}};
  // Every storage over the whole context, and fp32 over a 24-key sliding window (the
  // 300-token decode reads its last two blocks).
  const std::vector<std::pair<KvStorage, int64_t> > cases = {{KvStorage::kF32, 0},
                                                             {KvStorage::kBF16, 0},
                                                             {KvStorage::kF16, 0},
                                                             {KvStorage::kFp8E4M3, 0},
                                                             {KvStorage::kF32, 24}};
  for (const auto& [storage, window] : cases) {
    SCOPED_TRACE(absl::StrCat(static_cast<int>(storage), " window ", window));
    auto backend = MakeCpuBackend(0, 1);
    KvCacheShape shape;
    shape.num_blocks = 64, shape.block_size = kBlock, shape.groups = kGroups, shape.head_dim = kD;
    auto cache = PagedKvCache::Create(*backend, shape, /*shuffle_seed=*/5);
    ASSERT_TRUE(cache.ok()) << cache.status();
    std::vector<float> k(kGroups * kD), v(kGroups * kD);
    for (const SeqChunk& c : chunks) {
      ASSERT_TRUE(cache->Reserve(c.seq, c.start + c.num_tokens).ok());
      for (int64_t pos = 0; pos < c.start + c.num_tokens; ++pos) {
        for (int64_t i = 0; i < kGroups * kD; ++i) {
          const uint64_t idx = (c.seq * 1000 + pos) * 2 * kGroups * kD + i;
          k[i] = cuda::RoundTripKv(storage, 2.0f * HashUniform(1, idx) - 1.0f);
          v[i] = cuda::RoundTripKv(storage, 2.0f * HashUniform(2, idx) - 1.0f);
        }
        cache->Write(0, c.seq, pos, k.data(), v.data());
      }
    }
    const int64_t tokens = StepTokens(chunks), ld = kHeads * kD;
    std::vector<float> q(tokens * ld), ref(tokens * ld), got(tokens * ld);
    for (int64_t i = 0; i < tokens * ld; ++i) q[i] = 2.0f * HashUniform(3, i) - 1.0f;
    PagedAttentionArgs a;
    a.q = q.data(), a.ld_q = ld, a.o = ref.data(), a.ld_o = ld;
    a.heads = kHeads, a.groups = kGroups, a.head_dim = kD;
    a.scale = 1.0f / std::sqrt(static_cast<float>(kD));
    a.window = window;
    PagedAttentionForward(a, *cache, 0, chunks, 1);

    const Tensor& pool = cache->pool(0);
    const int64_t bytes = cuda::KvStorageBytes(storage), kv_row = kGroups * kD;
    std::vector<uint8_t> encoded(pool.numel() * bytes);
    cuda::EncodeKv(storage, pool.data_as<float>(), encoded.data(), pool.numel());
    // The step's new tokens: zeroed in the copied pool, written on the device.
    std::vector<float> k_new, v_new;
    std::vector<int64_t> slots;
    for (const SeqChunk& c : chunks) {
      const auto& table = cache->block_table(c.seq);
      for (int64_t pos = c.start; pos < c.start + c.num_tokens; ++pos) {
        const int64_t block = table[pos / kBlock], offset = pos % kBlock;
        slots.push_back(block * kBlock + offset);
        for (int kv = 0; kv < 2; ++kv) {
          const int64_t first = ((block * 2 + kv) * kBlock + offset) * kv_row;
          std::vector<float>& dst = kv == 0 ? k_new : v_new;
          dst.insert(dst.end(), pool.data_as<float>() + first,
                     pool.data_as<float>() + first + kv_row);
          std::fill(encoded.begin() + first * bytes, encoded.begin() + (first + kv_row) * bytes, 0);
        }
      }
    }
    int64_t max_blocks = 0, max_tokens = 0;
    for (const SeqChunk& c : chunks) {
      max_blocks = std::max<int64_t>(max_blocks, cache->block_table(c.seq).size());
      max_tokens = std::max(max_tokens, c.num_tokens);
    }
    std::vector<int32_t> tables(chunks.size() * max_blocks, 0);
    std::vector<int64_t> start, row0, count;
    int64_t row = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto& t = cache->block_table(chunks[i].seq);
      std::copy(t.begin(), t.end(), tables.begin() + i * max_blocks);
      start.push_back(chunks[i].start);
      row0.push_back(row);
      count.push_back(chunks[i].num_tokens);
      row += chunks[i].num_tokens;
    }
    cuda::PagedAttentionCudaArgs g;
    g.q = ToDevice(q), g.ld_q = ld;
    g.o = ToDevice(got), g.ld_o = ld;
    g.kv_pool = ToDevice(encoded), g.storage = storage;
    float* k_dev = ToDevice(k_new);
    float* v_dev = ToDevice(v_new);
    int64_t* slots_dev = ToDevice(slots);
    ASSERT_EQ(
        cuda::kv_cache_write(const_cast<void*>(g.kv_pool), storage, k_dev, v_dev, kv_row, slots_dev,
                             static_cast<int64_t>(slots.size()), kv_row, kBlock, nullptr),
        cudaSuccess);
    g.block_tables = ToDevice(tables), g.max_blocks = max_blocks;
    g.chunk_start = ToDevice(start), g.chunk_row0 = ToDevice(row0),
    g.chunk_tokens = ToDevice(count);
    g.num_chunks = static_cast<int64_t>(chunks.size()), g.max_chunk_tokens = max_tokens;
    g.heads = kHeads, g.groups = kGroups, g.head_dim = kD, g.block_size = kBlock;
    g.scale = a.scale;
    g.window = window;
    ASSERT_EQ(cuda::paged_attention_forward(g, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), g.o, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (int64_t i = 0; i < tokens * ld; ++i) {
      ASSERT_NEAR(got[i], ref[i], 1e-5 + 1e-4 * std::abs(ref[i])) << "element " << i;
    }
    cudaFree(k_dev);
    cudaFree(v_dev);
    cudaFree(slots_dev);
    for (const void* p :
         {static_cast<const void*>(g.q), static_cast<const void*>(g.o), g.kv_pool,
          static_cast<const void*>(g.block_tables), static_cast<const void*>(g.chunk_start),
          static_cast<const void*>(g.chunk_row0), static_cast<const void*>(g.chunk_tokens)}) {
      cudaFree(const_cast<void*>(p));
    }
  }
#endif
}

}  // namespace
}  // namespace paratune::kernels::serving
