// Bandwidth of ParaTune's memory-bound CUDA kernels against the device's copy bandwidth
// measured in the same run: paged attention at decode (one new token per sequence over a
// context of C cached tokens, KV read once: B·C·2·groups·head_dim·bytes), the KV-cache
// write, and the MoE row permute and unpermute (each row read and written once). Times are
// medians over --reps launches between CUDA events after --warmup launches; inputs are
// random (never zeros). Needs a CUDA device; exits 2 with the reason otherwise.
//
//   cuda_kernels [--reps 50] [--warmup 5] [--json]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#if PARATUNE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "bench/kernels/cuda_bench.h"
#include "kernels/cuda/launchers.h"
#include "kernels/serving/cuda/paged_attention_launcher.h"
#endif

namespace {

#if PARATUNE_HAVE_CUDA
using paratune::kernels::cuda::ElemType;
namespace serving_cuda = paratune::kernels::serving::cuda;

using paratune::bench::DeviceRandom;
using paratune::bench::MedianMs;

void Check(cudaError_t e, const char* what) { paratune::bench::CudaCheck(e, what); }

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* p = nullptr;
  Check(cudaMalloc(&p, host.size() * sizeof(T)), "cudaMalloc");
  Check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  return static_cast<T*>(p);
}

struct Row {
  std::string kernel, shape;
  double ms = 0, gbytes = 0;
};

const char* StorageName(serving_cuda::KvStorage s) {
  switch (s) {
    case serving_cuda::KvStorage::kF32: return "fp32";
    case serving_cuda::KvStorage::kBF16: return "bf16";
    case serving_cuda::KvStorage::kF16: return "fp16";
    case serving_cuda::KvStorage::kFp8E4M3: return "fp8";
  }
  return "?";
}

// Decode: `batch` sequences of `context` cached tokens, one new token each.
Row PagedDecode(int64_t batch, int64_t context, int64_t heads, int64_t groups, int64_t d,
                serving_cuda::KvStorage storage, int warmup, int reps) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t num_blocks = batch * blocks_per_seq;
  const int64_t elem = serving_cuda::KvStorageBytes(storage);
  const int64_t pool_bytes = num_blocks * 2 * kBlock * groups * d * elem;
  void* pool = DeviceRandom(pool_bytes, 11);
  // Each sequence's blocks in a shuffled order, as an allocator hands them out.
  std::vector<int32_t> ids(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) ids[i] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
  std::vector<int64_t> start(batch, context - 1), row0(batch), count(batch, 1);
  for (int64_t b = 0; b < batch; ++b) row0[b] = b;
  std::vector<float> q(batch * heads * d);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(gen);
  serving_cuda::PagedAttentionCudaArgs a;
  a.q = ToDevice(q), a.ld_q = heads * d;
  a.o = ToDevice(std::vector<float>(batch * heads * d, NAN)), a.ld_o = heads * d;
  a.kv_pool = pool, a.storage = storage;
  a.block_tables = ToDevice(ids), a.max_blocks = blocks_per_seq;
  a.chunk_start = ToDevice(start), a.chunk_row0 = ToDevice(row0), a.chunk_tokens = ToDevice(count);
  a.num_chunks = batch, a.max_chunk_tokens = 1;
  a.heads = heads, a.groups = groups, a.head_dim = d, a.block_size = kBlock;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  const double ms =
      MedianMs([&] { Check(serving_cuda::paged_attention_forward(a, nullptr), "paged"); },
               warmup, reps);
  std::vector<float> out(batch * heads * d);
  Check(cudaMemcpy(out.data(), a.o, out.size() * 4, cudaMemcpyDeviceToHost), "copy back");
  for (float x : out) {
    if (!std::isfinite(x)) {
      std::fprintf(stderr, "paged attention wrote a non-finite output\n");
      std::exit(1);
    }
  }
  for (const void* p : {static_cast<const void*>(a.q), static_cast<const void*>(a.o),
                        static_cast<const void*>(pool),
                        static_cast<const void*>(a.block_tables),
                        static_cast<const void*>(a.chunk_start),
                        static_cast<const void*>(a.chunk_row0),
                        static_cast<const void*>(a.chunk_tokens)}) {
    cudaFree(const_cast<void*>(p));
  }
  char shape[160];
  std::snprintf(shape, sizeof(shape), "B %ld, ctx %ld, heads %ld/%ld, d %ld, KV %s",
                static_cast<long>(batch), static_cast<long>(context), static_cast<long>(heads),
                static_cast<long>(groups), static_cast<long>(d), StorageName(storage));
  // KV read once (the query and output are B·heads·d floats: under 0.1 % here).
  const double bytes = static_cast<double>(batch) * context * 2 * groups * d * elem;
  return {"paged_attention decode", shape, ms, bytes / 1e9};
}

Row KvWrite(int64_t tokens, int64_t groups, int64_t d, serving_cuda::KvStorage storage,
            int warmup, int reps) {
  constexpr int64_t kBlock = 16;
  const int64_t row = groups * d, elem = serving_cuda::KvStorageBytes(storage);
  const int64_t num_blocks = (tokens + kBlock - 1) / kBlock;
  void* pool = DeviceRandom(num_blocks * 2 * kBlock * row * elem, 5);
  auto* k = static_cast<float*>(DeviceRandom(tokens * row * 4, 6));
  auto* v = static_cast<float*>(DeviceRandom(tokens * row * 4, 8));
  std::vector<int64_t> slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) slots[t] = t;
  std::shuffle(slots.begin(), slots.end(), std::mt19937(9));
  int64_t* slots_dev = ToDevice(slots);
  const double ms = MedianMs(
      [&] {
        Check(serving_cuda::kv_cache_write(pool, storage, k, v, row, slots_dev, tokens, row,
                                           kBlock, nullptr),
              "kv write");
      },
      warmup, reps);
  cudaFree(pool), cudaFree(k), cudaFree(v), cudaFree(slots_dev);
  char shape[128];
  std::snprintf(shape, sizeof(shape), "%ld tokens, row %ld, KV %s", static_cast<long>(tokens),
                static_cast<long>(row), StorageName(storage));
  const double bytes = static_cast<double>(tokens) * 2 * row * (4 + elem);
  return {"kv_cache_write", shape, ms, bytes / 1e9};
}

// Permute: tokens·k rows of `hidden` bf16 values gathered from the token rows; unpermute:
// the k rows of each token weighted and summed back.
std::vector<Row> MoePermute(int64_t tokens, int64_t k, int64_t hidden, int64_t experts,
                            int warmup, int reps) {
  const int64_t rows = tokens * k, elem = 2;
  void* x = DeviceRandom(tokens * hidden * elem, 1);
  void* permuted = DeviceRandom(rows * hidden * elem, 2);
  void* y = DeviceRandom(tokens * hidden * elem, 3);
  // Balanced assignment: token t's j-th expert is (t·k + j) mod E; rows grouped by expert.
  std::vector<int32_t> perm(rows);
  std::vector<int64_t> per_expert(experts, 0);
  for (int64_t r = 0; r < rows; ++r) ++per_expert[r % experts];
  std::vector<int64_t> next(experts, 0);
  for (int64_t e = 1; e < experts; ++e) next[e] = next[e - 1] + per_expert[e - 1];
  for (int64_t r = 0; r < rows; ++r) perm[next[r % experts]++] = static_cast<int32_t>(r);
  int32_t* perm_dev = ToDevice(perm);
  std::vector<float> probs(rows, 1.0f / static_cast<float>(k));
  float* probs_dev = ToDevice(probs);
  auto* scratch = static_cast<int32_t*>(DeviceRandom(rows * sizeof(int32_t), 4));
  const double permute_ms = MedianMs(
      [&] {
        Check(paratune::kernels::cuda::moe_permute(ElemType::kBF16, permuted, x, perm_dev, rows,
                                                   k, hidden, nullptr),
              "permute");
      },
      warmup, reps);
  const double unpermute_ms = MedianMs(
      [&] {
        Check(paratune::kernels::cuda::moe_unpermute(ElemType::kBF16, y, permuted, probs_dev,
                                                     perm_dev, scratch, tokens, k, hidden,
                                                     nullptr),
              "unpermute");
      },
      warmup, reps);
  cudaFree(x), cudaFree(permuted), cudaFree(y), cudaFree(perm_dev), cudaFree(probs_dev),
      cudaFree(scratch);
  char shape[128];
  std::snprintf(shape, sizeof(shape), "%ld tokens, top-%ld of %ld, hidden %ld, bf16",
                static_cast<long>(tokens), static_cast<long>(k), static_cast<long>(experts),
                static_cast<long>(hidden));
  const double bytes = 2.0 * rows * hidden * elem;  // each routed row read and written once
  return {{"moe_permute", shape, permute_ms, bytes / 1e9},
          {"moe_unpermute", shape, unpermute_ms, bytes / 1e9}};
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Bandwidth of the memory-bound CUDA kernels against the device copy bandwidth"};
  int reps = 50, warmup = 5;
  bool json = false;
  app.add_option("--reps", reps, "timed launches per kernel (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed launches first")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print JSON instead of the table");
  CLI11_PARSE(app, argc, argv);
#if !PARATUNE_HAVE_CUDA
  std::fprintf(stderr, "cuda_kernels: built without the CUDA backend\n");
  return 2;
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cuda_kernels: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  // The ceiling: a 2 GiB device-to-device copy, bytes read plus bytes written.
  const int64_t copy_bytes = int64_t{2} << 30;
  void* src = DeviceRandom(copy_bytes, 13);
  void* dst = nullptr;
  Check(cudaMalloc(&dst, copy_bytes), "cudaMalloc");
  const double copy_ms = MedianMs(
      [&] { Check(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice), "copy"); },
      warmup, std::max(5, reps / 5));
  cudaFree(src), cudaFree(dst);
  const double copy_gbs = 2.0 * copy_bytes / 1e9 / (copy_ms / 1e3);

  using serving_cuda::KvStorage;
  std::vector<Row> rows;
  // Llama 3.1 8B on one GPU (32 query heads over 8 KV groups) and Llama 3.1 70B at TP 8
  // (8 query heads, one group per rank), head dim 128.
  for (KvStorage s : {KvStorage::kBF16, KvStorage::kFp8E4M3}) {
    rows.push_back(PagedDecode(64, 2048, 32, 8, 128, s, warmup, reps));
    rows.push_back(PagedDecode(256, 1024, 32, 8, 128, s, warmup, reps));
    rows.push_back(PagedDecode(64, 2048, 8, 1, 128, s, warmup, reps));
  }
  rows.push_back(KvWrite(8192, 8, 128, KvStorage::kBF16, warmup, reps));
  for (const Row& r : MoePermute(8192, 8, 4096, 128, warmup, reps)) rows.push_back(r);
  for (const Row& r : MoePermute(16384, 2, 4096, 8, warmup, reps)) rows.push_back(r);

  if (json) {
    nlohmann::json out;
    out["device"] = prop.name;
    out["copy_gb_per_s"] = copy_gbs;
    for (const Row& r : rows) {
      out["kernels"].push_back({{"kernel", r.kernel},
                                {"shape", r.shape},
                                {"ms", r.ms},
                                {"gb_per_s", r.gbytes / (r.ms / 1e3)},
                                {"of_copy", r.gbytes / (r.ms / 1e3) / copy_gbs}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("# %s: device-to-device copy %.0f GB/s (read + written), %d reps, median\n",
              prop.name, copy_gbs, reps);
  std::printf("%-24s %-46s %9s %9s %8s\n", "kernel", "shape", "ms", "GB/s", "of copy");
  for (const Row& r : rows) {
    const double gbs = r.gbytes / (r.ms / 1e3);
    std::printf("%-24s %-46s %9.3f %9.0f %7.1f%%\n", r.kernel.c_str(), r.shape.c_str(), r.ms,
                gbs, 100.0 * gbs / copy_gbs);
  }
  return 0;
#endif
}
