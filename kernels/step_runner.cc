// The step runner: ranks are threads sharing one process; each has its own backend and
// tracking allocator (so per-rank peaks are separate) and a Gloo communicator over TCP on
// 127.0.0.1 (or none for tp = 1). Allocation sequences are identical on every rank, so an
// out-of-memory request fails on all ranks at the same point and none is left waiting in
// a collective.
#include "kernels/step_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/hash_random.h"
#include "kernels/rank_threads.h"
#include "kernels/status_macros.h"
#include "kernels/transformer_layer.h"
#include "kernels/vocab_parallel.h"

namespace paratune::kernels {
namespace {

struct StepTimes {
  double forward = 0, backward = 0, recompute = 0, comm = 0, grad_sync = 0;
  double extras_forward = 0, extras_backward = 0;  ///< Parts of forward and backward.
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}


struct RankOutput {
  std::vector<StepTimes> steps;
  int64_t peak_bytes = 0;
  std::array<int64_t, kNumMemoryTags> peak_by_tag{};
  int64_t activation_bytes = 0;
};

absl::Status FillRandom(Backend& be, const Tensor& t, uint64_t seed) {
  std::vector<double> v(t.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2.0 * HashUniform(seed, i) - 1.0;
  return be.CopyFromHost(t, v);
}

absl::Status RunRank(const StepConfig& config, Communicator& comm, Backend& be,
                     RankOutput& out) {
  const LayerConfig& lc = config.layer;
  CommClock clock;
  ParallelContext ctx{&be, &comm, &clock};
  PT_ASSIGN_OR_RETURN(std::unique_ptr<TransformerLayer> layer, TransformerLayer::Create(lc, ctx));
  std::unique_ptr<VocabParallelEmbedding> embedding;
  std::unique_ptr<VocabParallelOutput> output;
  if (config.extras == StageExtras::kFirst) {
    PT_ASSIGN_OR_RETURN(embedding, VocabParallelEmbedding::Create(lc, ctx));
  } else if (config.extras == StageExtras::kLast) {
    PT_ASSIGN_OR_RETURN(output, VocabParallelOutput::Create(lc, ctx));
  }
  const int64_t rows = layer->local_rows(), h = lc.shape.hidden_size;
  const int64_t tokens = lc.seq_length * lc.parallel.micro_batch_size;
  std::vector<int32_t> ids(tokens);
  for (int64_t i = 0; i < tokens; ++i) {
    ids[i] = static_cast<int32_t>(Mix64(lc.seed + i) % std::max<int64_t>(1, lc.shape.vocab_size));
  }
  PT_ASSIGN_OR_RETURN(Tensor x, be.Empty({rows, h}, lc.dtype, MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(Tensor dy, be.Empty({rows, h}, lc.dtype, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(FillRandom(be, x, lc.seed + 1));
  PT_RETURN_IF_ERROR(FillRandom(be, dy, lc.seed + 2));
  const int64_t total = config.warmup + config.iters;
  for (int64_t step = 0; step < total; ++step) {
    if (step == config.warmup) be.allocator().ResetPeaks();
    PT_RETURN_IF_ERROR(layer->ZeroGradients());
    PT_RETURN_IF_ERROR(comm.Barrier());
    clock.Reset();
    PT_RETURN_IF_ERROR(be.Synchronize());
    // The stage extras are timed on their own as well (their queued work waited for), so
    // that composition takes the embedding and the logits as measured, not as the
    // difference of this task and the plain one.
    StepTimes st;
    auto extra = [&](double& seconds, auto fn) -> absl::Status {
      PT_RETURN_IF_ERROR(be.Synchronize());
      const double start = Now();
      PT_RETURN_IF_ERROR(fn());
      PT_RETURN_IF_ERROR(be.Synchronize());
      seconds += Now() - start;
      return absl::OkStatus();
    };
    const double t0 = Now();
    Tensor input = x;
    if (embedding) {
      PT_RETURN_IF_ERROR(extra(st.extras_forward, [&]() -> absl::Status {
        PT_ASSIGN_OR_RETURN(input, embedding->Forward(ids));
        return absl::OkStatus();
      }));
    }
    PT_ASSIGN_OR_RETURN(Tensor y, layer->Forward(input));
    Tensor grad = dy;
    if (output) {
      PT_RETURN_IF_ERROR(extra(st.extras_forward, [&] { return output->Forward(y, ids).status(); }));
    }
    PT_RETURN_IF_ERROR(be.Synchronize());
    const double t1 = Now();
    if (step == total - 1) out.activation_bytes = layer->saved().TotalBytes();
    if (output) {
      PT_RETURN_IF_ERROR(extra(st.extras_backward, [&]() -> absl::Status {
        PT_ASSIGN_OR_RETURN(grad, output->Backward());
        return absl::OkStatus();
      }));
    }
    y = Tensor();
    PT_ASSIGN_OR_RETURN(Tensor dx, layer->Backward(grad));
    if (embedding) {
      PT_RETURN_IF_ERROR(extra(st.extras_backward, [&] { return embedding->Backward(dx); }));
    }
    PT_RETURN_IF_ERROR(be.Synchronize());
    const double t2 = Now();
    const double comm = clock.seconds();
    // Once per training step, not per micro-batch (kernels/training, Megatron's
    // finalize_model_grads): timed apart so that composition counts it once.
    PT_RETURN_IF_ERROR(layer->FinishGradients());
    PT_RETURN_IF_ERROR(be.Synchronize());
    const double t3 = Now();
    if (step >= config.warmup) {
      st.forward = t1 - t0;
      st.recompute = layer->times().recompute_s;
      st.backward = t2 - t1 - st.recompute;
      st.comm = comm;
      st.grad_sync = t3 - t2;
      out.steps.push_back(st);
    }
  }
  const MemoryStats stats = be.allocator().Stats();
  out.peak_bytes = stats.peak_bytes;
  out.peak_by_tag = stats.peak_by_tag;
  return absl::OkStatus();
}

double LayerFlops(const LayerConfig& c) {
  const double t = static_cast<double>(c.parallel.tp), h = static_cast<double>(c.shape.hidden_size);
  const double a = static_cast<double>(c.shape.num_attention_heads);
  const double g = static_cast<double>(c.num_query_groups());
  const double d = static_cast<double>(c.head_dim());
  const double f = c.mlp ? static_cast<double>(c.ffn_hidden_size()) : 0.0;
  const double n = static_cast<double>(c.seq_length * c.parallel.micro_batch_size);
  const double s = static_cast<double>(c.seq_length);
  const double b = static_cast<double>(c.parallel.micro_batch_size);
  const double fc1 = IsGated(c.shape.activation) ? 2 * f : f;
  const double matmul_params = h * (a + 2 * g) * d + a * d * h + h * fc1 + f * h;
  // Forward: 2·tokens·params + 4·b·s²·a·d for scores and context (Megatron's count, no
  // causal halving; a sliding window w < s counts 2sw − w² pairs, as the model does);
  // backward twice the forward.
  const double w = static_cast<double>(c.attention_window);
  const double pairs = w > 0 && w < s ? 2 * s * w - w * w : s * s;
  const double forward = (2 * n * matmul_params + 4 * b * pairs * a * d) / t;
  return 3 * forward;
}

}  // namespace

absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("backend (", name, ") must be cpu or cuda"));
}

const PhaseTiming* StepResult::Find(absl::string_view phase) const {
  for (const PhaseTiming& p : phases) {
    if (p.phase == phase) return &p;
  }
  return nullptr;
}

absl::Status StepConfig::Validate() const {
  PT_RETURN_IF_ERROR(layer.Validate());
  if (warmup < 0) return absl::InvalidArgumentError(absl::StrCat("warmup (", warmup, ") must be >= 0"));
  if (iters < 1) return absl::InvalidArgumentError(absl::StrCat("iters (", iters, ") must be >= 1"));
  if (extras != StageExtras::kNone && layer.shape.vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size (", layer.shape.vocab_size, ") must be positive for first/last-stage extras"));
  }
  if (backend == BackendKind::kCpu && layer.dtype != DType::kF32 && layer.dtype != DType::kF64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype (", DTypeName(layer.dtype), ") must be fp32 or fp64 on the cpu backend"));
  }
  if (backend == BackendKind::kCuda && layer.dtype != DType::kF32 &&
      layer.dtype != DType::kBF16 && layer.dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype (", DTypeName(layer.dtype), ") must be fp32, bf16 or fp16 on the cuda backend"));
  }
  return absl::OkStatus();
}

PhaseTiming PhaseTiming::Of(std::string phase, std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  PhaseTiming p;
  p.phase = std::move(phase);
  p.min_s = seconds.front();
  p.max_s = seconds.back();
  const size_t n = seconds.size();
  p.median_s = n % 2 == 1 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  return p;
}

absl::StatusOr<StepResult> RunLayerStep(const StepConfig& config) {
  PT_RETURN_IF_ERROR(config.Validate());
  const int t = static_cast<int>(config.layer.parallel.tp);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = config.blas_threads_per_rank > 0
                          ? static_cast<int>(config.blas_threads_per_rank)
                          : std::max(1, cores / t);
  if (config.backend == BackendKind::kCpu) SetBlasThreads(threads);
  if (config.backend == BackendKind::kCuda) PT_RETURN_IF_ERROR(CheckCudaDevicesForRanks(t));
  auto rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> run_id{0};
  const std::string prefix = absl::StrCat("step", run_id.fetch_add(1));
  std::vector<RankOutput> outs(t);
  const bool cuda = config.backend == BackendKind::kCuda;
  PT_RETURN_IF_ERROR(RunRankThreads(t, [&](int r) -> absl::Status {
    std::unique_ptr<Backend> be;
    if (cuda) {
      PT_ASSIGN_OR_RETURN(be, MakeCudaBackend(r, config.capacity_bytes_per_rank));
    } else {
      be = MakeCpuBackend(config.capacity_bytes_per_rank, threads);
    }
    PT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                        MakeGroupCommunicator(*be, cuda, rendezvous, prefix, r, t));
    return RunRank(config, *comm, *be, outs[r]);
  }));
  StepResult result;
  const size_t steps = outs[0].steps.size();
  std::vector<double> fwd(steps), bwd(steps), rec(steps), comm(steps), total(steps), sync(steps),
      ex_fwd(steps), ex_bwd(steps);
  for (size_t i = 0; i < steps; ++i) {
    for (const RankOutput& o : outs) {  // the slowest rank sets the pace
      const StepTimes& s = o.steps[i];
      fwd[i] = std::max(fwd[i], s.forward);
      bwd[i] = std::max(bwd[i], s.backward);
      rec[i] = std::max(rec[i], s.recompute);
      comm[i] = std::max(comm[i], s.comm);
      total[i] = std::max(total[i], s.forward + s.backward + s.recompute);
      sync[i] = std::max(sync[i], s.grad_sync);
      ex_fwd[i] = std::max(ex_fwd[i], s.extras_forward);
      ex_bwd[i] = std::max(ex_bwd[i], s.extras_backward);
    }
  }
  result.phases = {PhaseTiming::Of("forward", fwd),     PhaseTiming::Of("backward", bwd),
                   PhaseTiming::Of("recompute", rec),   PhaseTiming::Of("tp_comm", comm),
                   PhaseTiming::Of("total", total),     PhaseTiming::Of("grad_sync", sync),
                   PhaseTiming::Of("extras_forward", ex_fwd), PhaseTiming::Of("extras_backward", ex_bwd)};
  for (const RankOutput& o : outs) result.peak_bytes_per_rank.push_back(o.peak_bytes);
  result.peak_bytes_by_tag = outs[0].peak_by_tag;
  result.activation_bytes = outs[0].activation_bytes;
  result.flops_per_step = LayerFlops(config.layer);
  return result;
}

}  // namespace paratune::kernels
