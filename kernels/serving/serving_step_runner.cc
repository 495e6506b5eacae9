#include "kernels/serving/serving_step_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/cpu/parallel.h"
#include "kernels/hash_random.h"
#include "kernels/rank_threads.h"
#include "kernels/serving/serving_model.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

using Clock = std::chrono::steady_clock;

PhaseTiming Timing(const std::string& name, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  PhaseTiming p;
  p.phase = name;
  p.median_s = v[v.size() / 2];
  p.min_s = v.front();
  p.max_s = v.back();
  return p;
}

// Sequences of the step on rank `rank`: all of them, or with attention data parallelism
// its share (the first batch % tp ranks one more), at least one: TensorRT-LLM gives an idle
// attention-DP rank a dummy request, as every rank takes part in the experts' all-to-all.
int64_t RankBatch(const ServingStepConfig& c, int64_t rank) {
  if (!c.model.attention_dp) return c.batch;
  const int64_t tp = c.model.parallel.tp;
  return std::max<int64_t>(1, c.batch / tp + (rank < c.batch % tp ? 1 : 0));
}

// The model with the task's cache for `batch` sequences; vocab 0 becomes a minimal 128·tp
// table.
ServingConfig ModelFor(const ServingStepConfig& c, int64_t batch) {
  ServingConfig m = c.model;
  if (m.shape.vocab_size == 0) m.shape.vocab_size = 128 * m.parallel.tp;
  const int64_t tokens = c.phase == ServingPhase::kDecode ? c.context_length + 1 : c.seq_length;
  // The blocks batch sequences hold, windowed layers those of their window (in blocks of
  // every layer, rounded up).
  const int64_t bs = m.kv_block_size, chunk = c.phase == ServingPhase::kDecode ? 1 : tokens;
  int64_t layer_blocks = 0;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const int64_t w = LayerAttentionWindow(m.attention_window, m.window_attn_skip_freq, l);
    layer_blocks += w > 0 ? WindowedBlocks(tokens, bs, w, chunk) : WholeContextBlocks(tokens, bs);
  }
  m.num_kv_blocks = (batch * layer_blocks + m.num_layers - 1) / m.num_layers;
  return m;
}

// Fills `batch` sequences of `model`'s cache with `context` synthetic cached tokens each
// (the step's cost does not depend on the values, so every sequence of a layer gets the
// same ones), through ServingOps as a step writes: per layer, [K | V] rows of fp32 on the
// backend, written into each sequence's blocks.
absl::Status FillContext(ServingModel& model, Backend& backend, int64_t batch, int64_t context,
                         int64_t layers, int threads) {
  PagedKvCache& cache = model.cache();
  const int64_t row = cache.shape().groups * cache.shape().head_dim;
  PT_ASSIGN_OR_RETURN(Tensor rows,
                      backend.Empty({context, 2 * row}, DType::kF32, MemoryTag::kWorkspace));
  std::vector<float> host(context * 2 * row);
  for (int64_t s = 0; s < batch; ++s) PT_RETURN_IF_ERROR(cache.ReserveContext(s, context));
  for (int64_t l = 0; l < layers; ++l) {
    cpu::ParallelFor(context, threads, 64, [&](int64_t p0, int64_t p1) {
      for (int64_t i = p0 * 2 * row; i < p1 * 2 * row; ++i) {
        host[i] = 2.0f * HashUniform(static_cast<uint64_t>(l * 7919), i) - 1.0f;
      }
    });
    PT_RETURN_IF_ERROR(backend.CopyBytes(rows.data(), host.data(), context * 2 * row * 4,
                                         Backend::CopyKind::kHostToBackend));
    const float* k = rows.data_as<float>();
    for (int64_t s = 0; s < batch; ++s) {
      PT_RETURN_IF_ERROR(model.ops().BeginStep(cache, {{s, 0, context, false}}));
      PT_RETURN_IF_ERROR(model.ops().WriteKv(cache, l, k, k + row, 2 * row));
    }
    // The next layer's values overwrite `rows` once these writes are done.
    PT_RETURN_IF_ERROR(backend.Synchronize());
  }
  return absl::OkStatus();
}

absl::Status RunRank(const ServingStepConfig& c, Backend& backend, const ServingGroups& groups,
                     ServingStepResult* result) {
  Communicator& comm = *groups.tp;
  const int64_t batch = RankBatch(c, comm.rank());
  const ServingConfig mc = ModelFor(c, batch);
  const ParallelContext ctx = groups.context(&backend);
  PT_ASSIGN_OR_RETURN(std::unique_ptr<ServingModel> model, ServingModel::Create(mc, ctx));
  // A device backend staged the weights through a buffer that the steps do not hold.
  if (backend.kind() != BackendKind::kCpu) backend.allocator().ResetPeaks();
  PagedKvCache& cache = model->cache();
  if (c.phase == ServingPhase::kDecode) {
    const int threads = backend.kind() == BackendKind::kCpu
                            ? mc.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    PT_RETURN_IF_ERROR(
        FillContext(*model, backend, batch, c.context_length, mc.num_layers, threads));
    backend.allocator().ResetPeaks();  // the fill's staging is not the step's
  }
  std::vector<SeqChunk> chunks;
  std::vector<int32_t> tokens;
  const int64_t V = mc.shape.vocab_size;
  for (int64_t s = 0; s < batch; ++s) {
    const bool decode = c.phase == ServingPhase::kDecode;
    const int64_t n = decode ? 1 : c.seq_length;
    chunks.push_back({s, decode ? c.context_length : 0, n, c.logits});
    for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>((s * 31 + i * 7) % V));
  }
  // One step from the task's state and back to it: decode contexts shrink by the token
  // just added, prefill prompts are dropped. Returns its wall time.
  const auto step = [&]() -> absl::StatusOr<double> {
    PT_RETURN_IF_ERROR(comm.Barrier());
    const auto t0 = Clock::now();
    PT_RETURN_IF_ERROR(model->Step(tokens, chunks, false).status());
    PT_RETURN_IF_ERROR(backend.Synchronize());
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const SeqChunk& ch : chunks) {
      if (c.phase == ServingPhase::kDecode) {
        PT_RETURN_IF_ERROR(cache.SetLength(ch.seq, c.context_length));
      } else {
        cache.Release(ch.seq);
      }
    }
    return wall;
  };
  std::vector<double> total, gemm, attention, other, tp_comm, logits;
  // On a device backend the total comes from steps that never wait inside (the phases
  // would add their waits to it); the parts from as many more that do.
  const bool device = backend.kind() != BackendKind::kCpu;
  if (device) {
    model->SetPhaseTiming(false);
    for (int64_t it = 0; it < c.warmup + c.iters; ++it) {
      PT_ASSIGN_OR_RETURN(const double wall, step());
      if (it >= c.warmup) total.push_back(wall);
    }
    model->SetPhaseTiming(true);
  }
  for (int64_t it = 0; it < (device ? c.iters : c.warmup + c.iters); ++it) {
    const ModelPhaseTimes before = model->times();
    PT_ASSIGN_OR_RETURN(const double wall, step());
    const ModelPhaseTimes& after = model->times();
    if (!device && it < c.warmup) continue;
    if (!device) total.push_back(wall);
    gemm.push_back(after.layers.gemm_s - before.layers.gemm_s);
    attention.push_back(after.layers.attention_s - before.layers.attention_s);
    other.push_back(after.layers.other_s - before.layers.other_s + after.embedding_s -
                    before.embedding_s);
    tp_comm.push_back(after.tp_comm_s - before.tp_comm_s);
    logits.push_back(after.logits_s - before.logits_s);
  }
  const MemoryStats stats = backend.allocator().Stats();
  result->peak_bytes_per_rank[comm.rank()] = stats.peak_bytes;
  if (comm.rank() == 0) {
    result->phases = {Timing("total", total),         Timing("gemm", gemm),
                      Timing("attention", attention), Timing("other", other),
                      Timing("tp_comm", tp_comm),     Timing("logits", logits)};
    result->weight_bytes = model->weight_bytes();
    result->kv_cache_bytes = cache.bytes();
    // Attention data parallelism has no TP all-reduces (the experts' all-to-alls count
    // with their GEMMs).
    const bool tp_reduces = !mc.attention_dp;
    result->tp_allreduce_bytes =
        tp_reduces ? StepTokens(chunks) * mc.shape.hidden_size * SizeOf(mc.dtype) : 0;
    result->tp_allreduces_per_step = tp_reduces ? 1 + 2 * mc.num_layers : 0;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServingStepConfig::Validate() const {
  ServingConfig m = model;
  if (m.shape.vocab_size == 0) m.shape.vocab_size = 128 * m.parallel.tp;
  PT_RETURN_IF_ERROR(m.Validate());
  if (batch <= 0)
    return absl::InvalidArgumentError(absl::StrCat("batch (", batch, ") must be positive"));
  if (phase == ServingPhase::kPrefill && seq_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length (", seq_length, ") must be positive for a prefill step"));
  }
  if (phase == ServingPhase::kDecode && context_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("context_length (", context_length, ") must be positive for a decode step"));
  }
  if (warmup < 0 || iters <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup (", warmup, ") must be >= 0 and iters (", iters, ") positive"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServingStepResult> RunServingStep(const ServingStepConfig& config) {
  PT_RETURN_IF_ERROR(config.Validate());
  const int t = static_cast<int>(config.model.parallel.tp);
  auto rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> group{0};
  const std::string prefix = absl::StrCat("serving-step", group.fetch_add(1));
  ServingStepResult result;
  result.peak_bytes_per_rank.assign(t, 0);
  if (config.backend == BackendKind::kCuda) PT_RETURN_IF_ERROR(CheckCudaDevicesForRanks(t));
  PT_RETURN_IF_ERROR(RunRankThreads(t, [&](int r) -> absl::Status {
    std::unique_ptr<Backend> backend;
    if (config.backend == BackendKind::kCuda) {
      PT_ASSIGN_OR_RETURN(backend, MakeCudaBackend(r, config.capacity_bytes_per_rank));
    } else {
      backend = MakeCpuBackend(config.capacity_bytes_per_rank, config.model.threads);
    }
    PT_ASSIGN_OR_RETURN(const ServingGroups groups,
                        MakeServingGroups(*backend, rendezvous, prefix, r, t,
                                          static_cast<int>(config.model.parallel.ep)));
    return RunRank(config, *backend, groups, &result);
  }));
  return result;
}

}  // namespace paratune::kernels::serving
