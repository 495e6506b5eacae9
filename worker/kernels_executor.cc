// Runs ProfileTasks on kernels/ through a table of task kinds, one entry per kind of the
// ProfileTask oneof (nccl-tests' testColl): a new task kind is a new entry.
#include "worker/kernels_executor.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/enums.h"
#include "kernels/backend.h"
#include "kernels/collective_bench.h"
#include "kernels/moe_step.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_step_runner.h"
#include "kernels/step_runner.h"
#include "kernels/training/training.h"
#include "server/convert_layout.h"

namespace paratune::worker {
namespace {

using v1::TaskResult;
namespace kt = kernels::training;

TaskResult Outcome(TaskResult::Outcome outcome, std::string message) {
  TaskResult r;
  r.set_outcome(outcome);
  r.set_message(std::move(message));
  return r;
}

// A status as a result: OOM (ResourceExhausted), UNSUPPORTED (Unimplemented: not built
// here, or not runnable on this worker), FAILED "invalid task: ..." (InvalidArgument),
// CANCELLED (Cancelled) or FAILED with the status.
TaskResult FromStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted: {
      TaskResult r = Outcome(TaskResult::OUTCOME_OOM, std::string(status.message()));
      r.set_oom_bytes_requested(kernels::OomBytesRequested(status).value_or(0));
      return r;
    }
    case absl::StatusCode::kUnimplemented:
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED, std::string(status.message()));
    case absl::StatusCode::kInvalidArgument:
      return Outcome(TaskResult::OUTCOME_FAILED, absl::StrCat("invalid task: ", status.message()));
    case absl::StatusCode::kCancelled:
      return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
    default:
      return Outcome(TaskResult::OUTCOME_FAILED, status.ToString());
  }
}

// What a task kind may ask of the worker it runs on. Read-only.
class Worker {
 public:
  Worker(DeviceInventory inventory, KernelsExecutorOptions options)
      : inventory_(std::move(inventory)), options_(std::move(options)) {}

  const KernelsExecutorOptions& options() const { return options_; }
  const std::string& backend_name() const { return inventory_.backend; }
  kernels::BackendKind backend() const {
    return inventory_.backend == "cuda" ? kernels::BackendKind::kCuda
                                        : kernels::BackendKind::kCpu;
  }
  int64_t ranks() const { return static_cast<int64_t>(inventory_.devices.size()); }

  // `dtype` ("" = fp32) if this worker's backend runs it; Unimplemented otherwise.
  absl::StatusOr<kernels::DType> TaskDType(const std::string& name) const {
    const std::string dtype = name.empty() ? "fp32" : name;
    if (dtype == "fp8")
      return absl::UnimplementedError("dtype fp8 is not implemented by the kernels");
    if ((dtype == "bf16" || dtype == "fp16") && inventory_.backend == "cpu") {
      return absl::UnimplementedError(
          absl::StrCat("dtype ", dtype, " needs the CUDA backend; this worker is CPU-only"));
    }
    return kernels::ParseDType(dtype);
  }

  // Unimplemented when a task needs more ranks than this worker has devices.
  absl::Status NeedRanks(int64_t needed, absl::string_view what) const {
    if (needed <= ranks()) return absl::OkStatus();
    return absl::UnimplementedError(
        absl::StrCat("task needs ", needed, " ranks", what, "; this worker has ", ranks()));
  }

  // OpenBLAS threads of one rank on a CPU worker: its cores shared among the ranks it
  // offers, as a job's ranks share them when it trains there (kernels/training gives each
  // rank this many). A task that runs fewer ranks than the job measures them as they run
  // in the job, not with the idle cores' help.
  int64_t BlasThreadsPerRank() const {
    const int64_t cores = std::max<int64_t>(1, inventory_.cpu_cores);
    return std::max<int64_t>(1, cores / std::max<int64_t>(1, ranks()));
  }

  // Tracking-allocator capacity of one of `ranks_used` ranks.
  int64_t Capacity(int64_t ranks_used) const {
    if (options_.capacity_bytes_per_rank > 0) return options_.capacity_bytes_per_rank;
    if (inventory_.backend == "cuda" && !inventory_.devices.empty()) {
      return inventory_.devices[0].memory_bytes();
    }
    return inventory_.memory_bytes / std::max<int64_t>(1, ranks_used);
  }

 private:
  DeviceInventory inventory_;
  KernelsExecutorOptions options_;
};

// One task kind. `validate` turns the task into the kernels/ run it asks for, or says why
// this worker cannot run it (Unimplemented) or the task is wrong (InvalidArgument); `run`
// measures; `result` writes the measurement into the TaskResult (outcome OK).
template <typename Run, typename Measurement>
struct TaskKind {
  v1::ProfileTask::KindCase kind;
  absl::StatusOr<Run> (*validate)(const v1::ProfileTask& task, const Worker& worker);
  absl::StatusOr<Measurement> (*run)(const Run& run, const Worker& worker,
                                     const CancelFlag& cancel);
  void (*result)(const Run& run, const Measurement& measurement, TaskResult* out);
};

// The entry with its types erased: the executor's table holds these.
struct TaskEntry {
  v1::ProfileTask::KindCase kind;
  std::function<TaskResult(const v1::ProfileTask&, const Worker&, const CancelFlag&)> execute;
};

template <typename Run, typename Measurement>
TaskEntry Register(TaskKind<Run, Measurement> k) {
  return {k.kind, [k](const v1::ProfileTask& task, const Worker& worker,
                      const CancelFlag& cancel) {
            absl::StatusOr<Run> run = k.validate(task, worker);
            if (!run.ok()) return FromStatus(run.status());
            absl::StatusOr<Measurement> m = k.run(*run, worker, cancel);
            // Runs have no cancellation hook inside a measurement: a cancel that came
            // during it discards the result.
            if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
            if (!m.ok()) return FromStatus(m.status());
            TaskResult r = Outcome(TaskResult::OUTCOME_OK, "");
            k.result(*run, *m, &r);
            return r;
          }};
}

// --- Task fields shared by the kinds ----------------------------------------------------

absl::Status ReadShape(const v1::LayerShape& in, kernels::LayerShape* out) {
  out->hidden_size = in.hidden_size();
  out->num_attention_heads = in.num_attention_heads();
  out->num_query_groups = in.num_query_groups();
  out->ffn_hidden_size = in.ffn_hidden_size();
  out->vocab_size = in.vocab_size();
  out->kv_channels = in.kv_channels();
  if (!in.activation().empty()) {
    absl::StatusOr<Activation> a = ParseActivation(in.activation());
    if (!a.ok()) return a.status();
    out->activation = *a;
  }
  if (!in.normalization().empty()) {
    absl::StatusOr<Normalization> n = ParseNormalization(in.normalization());
    if (!n.ok()) return n.status();
    out->normalization = *n;
  }
  return absl::OkStatus();
}

// A task's recompute; "" is none.
absl::StatusOr<Recompute> ReadRecompute(const std::string& name) {
  return name.empty() ? Recompute::kNone : ParseRecompute(name);
}

// --- layer: one transformer layer, timed (kernels/step_runner.h) -------------------------

absl::StatusOr<kernels::StepConfig> ValidateLayer(const v1::ProfileTask& task,
                                                  const Worker& worker) {
  const v1::LayerProfileTask& t = task.layer();
  kernels::StepConfig config;
  kernels::LayerConfig& layer = config.layer;
  layer.parallel.tp = std::max<int64_t>(1, t.tp());
  layer.parallel.cp = std::max<int64_t>(1, t.cp());
  const int64_t tp = layer.parallel.tp, cp = layer.parallel.cp;
  if (absl::Status s = worker.NeedRanks(tp * cp, absl::StrCat(" (tp ", tp, " x cp ", cp, ")"));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<kernels::DType> dtype = worker.TaskDType(t.dtype());
  if (!dtype.ok()) return dtype.status();
  if (absl::Status s = ReadShape(t.shape(), &layer.shape); !s.ok()) return s;
  // Megatron-LM pads the vocabulary to a multiple of 128·tp.
  const int64_t pad = 128 * tp;
  layer.shape.vocab_size = (t.shape().vocab_size() + pad - 1) / pad * pad;
  absl::StatusOr<Recompute> recompute = ReadRecompute(t.recompute());
  if (!recompute.ok()) return recompute.status();
  layer.parallel.sequence_parallel = t.sequence_parallel();
  layer.parallel.micro_batch_size = t.micro_batch_size();
  layer.parallel.recompute = *recompute;
  layer.seq_length = t.seq_length();
  layer.dtype = *dtype;
  layer.flash_attention = t.flash_attention();
  layer.attention_window = t.attention_window();
  // Megatron-LM's default dropout probabilities.
  layer.hidden_dropout = t.dropout() ? 0.1f : 0.0f;
  layer.attention_dropout = t.dropout() ? 0.1f : 0.0f;
  layer.mlp = !t.attention_only();
  switch (t.extras()) {
    case v1::LayerProfileTask::STAGE_EXTRAS_FIRST:
      config.extras = StageExtras::kFirst;
      break;
    case v1::LayerProfileTask::STAGE_EXTRAS_LAST:
      config.extras = StageExtras::kLast;
      break;
    default:
      config.extras = StageExtras::kNone;
      break;
  }
  config.backend = worker.backend();
  config.blas_threads_per_rank = worker.BlasThreadsPerRank();
  config.warmup = t.warmup();
  config.iters = t.iters() > 0 ? t.iters() : worker.options().default_layer_iters;
  config.capacity_bytes_per_rank = worker.Capacity(tp);
  // LayerConfig's rules, context parallelism (not in kernels/) among them.
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return config;
}

absl::StatusOr<kernels::StepResult> RunLayer(const kernels::StepConfig& config, const Worker&,
                                             const CancelFlag&) {
  return kernels::RunLayerStep(config);
}

// The phases and the per-rank peaks every timed task kind reports.
template <typename Step, typename Profile>
void AddPhasesAndPeaks(const Step& step, Profile* profile) {
  for (const kernels::PhaseTiming& p : step.phases) {
    v1::PhaseTiming* out = profile->add_phases();
    out->set_phase(p.phase);
    out->set_median_s(p.median_s);
    out->set_min_s(p.min_s);
    out->set_max_s(p.max_s);
  }
  for (int64_t bytes : step.peak_bytes_per_rank) profile->add_peak_bytes_per_rank(bytes);
}

void LayerResult(const kernels::StepConfig&, const kernels::StepResult& step, TaskResult* r) {
  v1::LayerProfile* profile = r->mutable_layer();
  AddPhasesAndPeaks(step, profile);
  profile->set_device_peak_bytes(step.device_peak_bytes);
  profile->set_activation_bytes(step.activation_bytes);
}

// --- collective: an nccl-tests-style sweep (kernels/collective_bench.h) ------------------

absl::StatusOr<kernels::CollectiveSweepConfig> ValidateCollective(const v1::ProfileTask& task,
                                                                  const Worker& worker) {
  const v1::CollectiveSweepTask& t = task.collective();
  kernels::CollectiveSweepConfig config;
  switch (t.op()) {
    case v1::CollectiveSweepTask::OP_ALL_REDUCE:
      config.op = CollectiveOp::kAllReduce;
      break;
    case v1::CollectiveSweepTask::OP_ALL_GATHER:
      config.op = CollectiveOp::kAllGather;
      break;
    case v1::CollectiveSweepTask::OP_REDUCE_SCATTER:
      config.op = CollectiveOp::kReduceScatter;
      break;
    case v1::CollectiveSweepTask::OP_SEND_RECV:
      config.op = CollectiveOp::kSendRecv;
      break;
    case v1::CollectiveSweepTask::OP_ALL_TO_ALL:
      config.op = CollectiveOp::kAllToAll;
      break;
    default:
      return absl::InvalidArgumentError("collective op is unspecified");
  }
  if (absl::Status s = worker.NeedRanks(t.group_size(), " (group_size)"); !s.ok()) return s;
  absl::StatusOr<kernels::DType> dtype = worker.TaskDType(t.dtype());
  if (!dtype.ok()) return dtype.status();
  if (t.sizes_bytes().empty()) return absl::InvalidArgumentError("sizes_bytes is empty");
  config.group_size = t.group_size();
  config.sizes_bytes.assign(t.sizes_bytes().begin(), t.sizes_bytes().end());
  config.dtype = *dtype;
  config.warmup = t.warmup();
  config.iters = t.iters() > 0 ? t.iters() : worker.options().default_collective_iters;
  config.backend = worker.backend();
  return config;
}

absl::StatusOr<std::vector<kernels::CollectiveSample>> RunCollective(
    const kernels::CollectiveSweepConfig& config, const Worker&, const CancelFlag& cancel) {
  // One size at a time so that a cancellation lands between sizes.
  std::vector<kernels::CollectiveSample> samples;
  kernels::CollectiveSweepConfig one = config;
  for (int64_t size : config.sizes_bytes) {
    if (cancel.cancelled()) return absl::CancelledError("cancelled");
    one.sizes_bytes = {size};
    absl::StatusOr<std::vector<kernels::CollectiveSample>> s = kernels::RunCollectiveSweep(one);
    if (!s.ok()) return s.status();
    samples.insert(samples.end(), s->begin(), s->end());
  }
  return samples;
}

void CollectiveResult(const kernels::CollectiveSweepConfig&,
                      const std::vector<kernels::CollectiveSample>& samples, TaskResult* r) {
  v1::CommProfile* profile = r->mutable_comm();
  int64_t wrong = 0;
  for (const kernels::CollectiveSample& s : samples) {
    v1::CommSample* out = profile->add_samples();
    out->set_size_bytes(s.size_bytes);
    out->set_time_s(s.time_s);
    out->set_algbw_gbps(s.algbw_gbps);
    out->set_busbw_gbps(s.busbw_gbps);
    out->set_wrong(s.wrong);
    wrong += s.wrong;
  }
  if (wrong > 0) r->set_message(absl::StrCat(wrong, " wrong element(s) in the checks"));
}

// --- verify: ranks of a whole-model training run (kernels/training) ----------------------

struct VerifyRun {
  kt::TrainConfig config;
  int64_t first_rank = 0;
  int64_t rank_count = 0;
  std::shared_ptr<kernels::GlooRendezvous> rendezvous;
};

absl::StatusOr<VerifyRun> ValidateVerify(const v1::ProfileTask& task, const Worker& worker) {
  const v1::VerifyTask& t = task.verify();
  absl::StatusOr<kernels::DType> dtype = worker.TaskDType(t.dtype());
  if (!dtype.ok()) return dtype.status();
  if (absl::Status s = worker.NeedRanks(t.rank_count(), ""); !s.ok()) return s;
  absl::StatusOr<kt::TrainConfig> config = TrainConfigFromVerifyTask(t);
  if (!config.ok()) return config.status();
  VerifyRun run;
  run.config = *std::move(config);
  kt::TrainConfig& c = run.config;
  c.dtype = *dtype;
  c.backend = worker.backend();
  c.threads_per_rank = static_cast<int>(worker.BlasThreadsPerRank());
  // A layout the planner accepts but the trainer cannot run (a field it does not run, such
  // as split_counts_embedding_and_loss, or a rule of its own) is not worth retrying; the
  // message names the field.
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::UnimplementedError(
        absl::StrCat("kernels/training cannot run this layout: ", s.message()));
  }
  if (c.world_size() != t.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size (", t.world_size(), ") must equal tp·pp·cp·dp (", c.world_size(), ")"));
  }
  run.first_rank = t.first_rank();
  run.rank_count = t.rank_count();
  if (t.rank_count() == t.world_size()) {
    run.rendezvous = kernels::MakeInProcessRendezvous();
  } else if (!worker.options().rendezvous) {
    return absl::UnimplementedError(
        "this worker has no coordinator rendezvous for multi-worker verify runs");
  } else if (t.rendezvous_namespace().empty()) {
    return absl::InvalidArgumentError(
        "a part of a multi-worker run needs rendezvous_namespace");
  } else {
    run.rendezvous =
        worker.options().rendezvous(t.rendezvous_namespace(), t.rendezvous_timeout_ms());
  }
  return run;
}

absl::StatusOr<kt::TrainResult> RunVerify(const VerifyRun& run, const Worker&,
                                          const CancelFlag&) {
  try {
    return kt::RunTraining(run.config, run.first_rank, run.rank_count, run.rendezvous);
  } catch (const std::exception& e) {
    // The rendezvous throws when peers do not join in time (Gloo may rethrow it).
    return absl::DeadlineExceededError(absl::StrCat(
        "ranks [", run.first_rank, ", ", run.first_rank + run.rank_count,
        ") could not meet their peers: ", e.what()));
  }
}

void VerifyResult(const VerifyRun& run, const kt::TrainResult& train, TaskResult* r) {
  v1::VerifyResult* out = r->mutable_verify();
  for (double s : train.step_seconds) out->add_step_seconds(s);
  out->set_median_iteration_s(train.median_step_seconds());
  for (const kt::RankResult& rank : train.ranks) out->add_peak_bytes_per_rank(rank.peak_bytes);
  for (double l : train.losses) out->add_losses(l);
  out->set_first_rank(run.first_rank);
}

// --- optimizer: one rank's optimizer step per parameter (kernels/training) ---------------

struct OptimizerRun {
  int64_t params = 0;
  int64_t warmup = 0;
  int64_t iters = 0;
  int64_t copies = 1;    // One per rank at once: a job's ranks share memory bandwidth.
  int64_t capacity = 0;  // Bytes per copy.
};

absl::StatusOr<OptimizerRun> ValidateOptimizer(const v1::ProfileTask& task,
                                               const Worker& worker) {
  const v1::OptimizerTask& t = task.optimizer();
  if (worker.backend_name() != "cpu") {
    return absl::UnimplementedError(absl::StrCat(
        "the optimizer task runs on the CPU backend only; this worker is ",
        worker.backend_name()));
  }
  if (t.params() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("params (", t.params(), ") must be >= 1"));
  }
  if (t.warmup() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("warmup (", t.warmup(), ") must be >= 0"));
  }
  OptimizerRun run;
  run.params = t.params();
  run.warmup = t.warmup();
  run.iters = t.iters() > 0 ? t.iters() : worker.options().default_layer_iters;
  run.copies = std::max<int64_t>(1, worker.ranks());
  run.capacity = worker.Capacity(run.copies);
  return run;
}

// The slowest copy's fastest step, in seconds.
absl::StatusOr<double> RunOptimizer(const OptimizerRun& run, const Worker&, const CancelFlag&) {
  std::vector<absl::StatusOr<double>> results(run.copies, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < run.copies; ++i) {
    threads.emplace_back([&, i] {
      results[i] = kt::TimeOptimizerStep(run.params, run.warmup, run.iters, run.capacity);
    });
  }
  for (std::thread& th : threads) th.join();
  double slowest = 0;
  for (const absl::StatusOr<double>& r : results) {
    if (!r.ok()) return r.status();
    slowest = std::max(slowest, *r);
  }
  return slowest;
}

void OptimizerResult(const OptimizerRun& run, const double& step_s, TaskResult* r) {
  v1::OptimizerProfile* out = r->mutable_optimizer();
  out->set_step_s(step_s);
  out->set_seconds_per_param(step_s / static_cast<double>(run.params));
  out->set_copies(run.copies);
}

// --- moe_layer: one mixture-of-experts layer, timed (kernels/moe_step.h) -----------------

// The routed block a MoeLayerTask describes (its shape, router and routing; not its layout
// or its run), as the MoE layer task and the trainer's expert layers read it.
absl::StatusOr<kernels::MoeLayerConfig> MoeBlockFromTask(const v1::MoeLayerTask& t) {
  kernels::MoeLayerConfig layer;
  layer.num_experts = t.num_experts();
  layer.topk = t.moe_router_topk();
  layer.ffn_hidden = t.moe_ffn_hidden_size();
  layer.num_shared_experts = t.num_shared_experts();
  layer.shared_ffn_hidden = t.shared_expert_ffn_hidden_size();
  if (t.score_function() == "sigmoid") {
    layer.score = kernels::MoeScoreFunction::kSigmoid;
  } else if (!t.score_function().empty() && t.score_function() != "softmax") {
    return absl::InvalidArgumentError(absl::StrCat(
        "score_function (", t.score_function(), ") must be softmax or sigmoid"));
  }
  layer.normalize_topk = t.normalize_topk();
  layer.topk_scaling = t.topk_scaling() > 0 ? t.topk_scaling() : 1.0;
  if (t.routing() == "dropless") {
    layer.routing = kernels::ExpertRouting::kDropless;
  } else if (t.routing().empty() || t.routing() == "balanced") {
    layer.routing = kernels::ExpertRouting::kBalanced;
  } else if (t.routing() == "capacity") {
    layer.routing = kernels::ExpertRouting::kCapacity;
    layer.capacity_factor = t.capacity_factor();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("routing (", t.routing(), ") must be balanced, dropless or capacity"));
  }
  layer.aux_loss_coeff = t.aux_loss_coeff();
  return layer;
}

// The expert layers a verify or serving task names (its moe block, first_k_dense_layers and
// moe_layer_freq) into a trainer or serving config; a dense model's task leaves it as is.
template <typename Task, typename Config>
absl::Status ReadExpertLayers(const Task& t, Config* c) {
  if (!t.has_moe() || t.moe().num_experts() <= 0) return absl::OkStatus();
  absl::StatusOr<kernels::MoeLayerConfig> block = MoeBlockFromTask(t.moe());
  if (!block.ok()) return block.status();
  c->moe = *std::move(block);
  c->first_k_dense_layers = t.first_k_dense_layers();
  c->moe_layer_freq = std::max<int64_t>(1, t.moe_layer_freq());
  return absl::OkStatus();
}

absl::StatusOr<kernels::MoeStepConfig> ValidateMoeLayer(const v1::ProfileTask& task,
                                                        const Worker& worker) {
  const v1::MoeLayerTask& t = task.moe_layer();
  kernels::MoeStepConfig config;
  config.backend = worker.backend();
  absl::StatusOr<kernels::MoeLayerConfig> block = MoeBlockFromTask(t);
  if (!block.ok()) return block.status();
  config.layer = *std::move(block);
  kernels::MoeLayerConfig& layer = config.layer;
  layer.hidden = t.hidden_size();
  layer.ep = std::max<int64_t>(1, t.ep());
  layer.etp = std::max<int64_t>(1, t.etp());
  const int64_t ranks = layer.ep * layer.etp;
  if (absl::Status s = worker.NeedRanks(
          ranks, absl::StrCat(" (ep ", layer.ep, " x etp ", layer.etp, ")"));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<kernels::DType> dtype = worker.TaskDType(t.dtype());
  if (!dtype.ok()) return dtype.status();
  config.dtype = *dtype;
  config.tokens = t.tokens();
  config.warmup = t.warmup();
  config.iters = t.iters() > 0 ? t.iters() : worker.options().default_layer_iters;
  config.seed = t.seed();
  config.blas_threads_per_rank = worker.BlasThreadsPerRank();
  config.capacity_bytes_per_rank = worker.Capacity(ranks);
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return config;
}

absl::StatusOr<kernels::MoeStepResult> RunMoeLayer(const kernels::MoeStepConfig& config,
                                                   const Worker&, const CancelFlag&) {
  return kernels::RunMoeLayerStep(config);
}

void MoeLayerResult(const kernels::MoeStepConfig&, const kernels::MoeStepResult& step,
                    TaskResult* r) {
  v1::MoeLayerProfile* profile = r->mutable_moe_layer();
  AddPhasesAndPeaks(step, profile);
  profile->set_activation_bytes(step.activation_bytes);
  for (int64_t rows : step.tokens_per_expert) profile->add_tokens_per_expert(rows);
  profile->set_aux_loss(step.aux_loss);
}

// --- serving_step: a prefill or decode step on the serving kernels (kernels/serving) ------

// The serving kernels' weight and KV-cache storage named by a task ("" = fp32) on this
// worker's backend: the CPU runs fp32 and weight-only int8/int4 weights, CUDA fp32, bf16
// and fp16 weights (the layer's dtype); both fp32, bf16 or fp8 (E4M3) KV. Formats the backend does
// not run are UNSUPPORTED, unknown ones INVALID_ARGUMENT.
absl::Status ReadServingStorage(const std::string& weight_precision,
                                const std::string& kv_precision, kernels::BackendKind backend,
                                kernels::serving::ServingConfig* model) {
  namespace ks = kernels::serving;
  ks::ServingConfig& m = *model;
  const bool cuda = backend == kernels::BackendKind::kCuda;
  const char* kernels_name = cuda ? "CUDA" : "CPU";
  const std::string weights = weight_precision.empty() ? "fp32" : weight_precision;
  m.weight_quant = ks::WeightQuant::kNone;
  m.dtype = kernels::DType::kF32;
  if (weights != "fp32" && weights != "int8" && weights != "int4" && weights != "bf16" &&
      weights != "fp16" && weights != "fp8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_precision '", weights, "' must be fp32, int8, int4, bf16, fp16 or fp8"));
  }
  const bool runs = weights == "fp32" || (!cuda && (weights == "int8" || weights == "int4")) ||
                    (cuda && (weights == "bf16" || weights == "fp16"));
  if (!runs) {
    return absl::UnimplementedError(absl::StrCat(
        "weight_precision ", weights, " is not run by the ", kernels_name, " serving kernels"));
  }
  if (weights == "int8" || weights == "int4") m.weight_quant = *ks::ParseWeightQuant(weights);
  if (weights == "bf16" || weights == "fp16") m.dtype = *kernels::ParseDType(weights);
  const std::string kv = kv_precision.empty() ? "fp32" : kv_precision;
  if (kv == "fp32" || kv == "bf16" || kv == "fp8") {
    m.kv_dtype = kv == "fp32"   ? kernels::DType::kF32
                 : kv == "bf16" ? kernels::DType::kBF16
                                : kernels::DType::kFp8E4M3;
  } else if (kv == "fp16") {
    return absl::UnimplementedError(
        absl::StrCat("kv_precision ", kv, " is not run by the ", kernels_name, " serving kernels"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_precision '", kv, "' must be fp32, bf16, fp16 or fp8"));
  }
  return absl::OkStatus();
}

// The serving model a serving_step or serving_verify task names (the two messages share
// these fields): tp ranks this worker must have, the layer shape with Megatron's vocabulary
// padding, weight and KV storage, KV block size, layer count and position embedding.
template <typename ServingTask>
absl::Status ReadServingModel(const ServingTask& t, const Worker& worker,
                              kernels::serving::ServingConfig* model) {
  kernels::serving::ServingConfig& m = *model;
  m.parallel.tp = std::max<int64_t>(1, t.tp());
  if (absl::Status s = worker.NeedRanks(m.parallel.tp, absl::StrCat(" (tp ", m.parallel.tp, ")"));
      !s.ok()) {
    return s;
  }
  m.shape.normalization = Normalization::kRmsNorm;
  if (absl::Status s = ReadShape(t.shape(), &m.shape); !s.ok()) return s;
  if (t.shape().vocab_size() > 0) {
    const int64_t pad = 128 * m.parallel.tp;  // Megatron-LM's padding, as layer tasks
    m.shape.vocab_size = (t.shape().vocab_size() + pad - 1) / pad * pad;
  }
  if (absl::Status s =
          ReadServingStorage(t.weight_precision(), t.kv_precision(), worker.backend(), &m);
      !s.ok()) {
    return s;
  }
  m.kv_block_size = t.kv_block_size() > 0 ? t.kv_block_size() : 16;
  m.num_layers = t.num_layers() > 0 ? t.num_layers() : 1;
  m.position_embedding = t.rope() ? PositionEmbedding::kRope : PositionEmbedding::kLearned;
  m.attention_window = t.attention_window();
  m.window_attn_skip_freq = t.window_attn_skip_freq();
  if (absl::Status s = ReadExpertLayers(t, &m); !s.ok()) return s;
  // The experts split over moe.ep of the tp ranks, each over tp / ep (0 means 1).
  if (t.has_moe()) m.parallel.ep = std::max<int64_t>(1, t.moe().ep());
  m.attention_dp = t.attention_dp();
  return absl::OkStatus();
}

absl::StatusOr<kernels::serving::ServingStepConfig> ValidateServingStep(
    const v1::ProfileTask& task, const Worker& worker) {
  namespace ks = kernels::serving;
  const v1::ServingStepTask& t = task.serving_step();
  ks::ServingStepConfig c;
  c.backend = worker.backend();
  if (absl::Status s = ReadServingModel(t, worker, &c.model); !s.ok()) return s;
  switch (t.phase()) {
    case v1::ServingStepTask::PHASE_PREFILL:
      c.phase = ks::ServingPhase::kPrefill;
      break;
    case v1::ServingStepTask::PHASE_DECODE:
      c.phase = ks::ServingPhase::kDecode;
      break;
    default:
      return absl::InvalidArgumentError("serving step phase is unspecified");
  }
  c.batch = t.batch();
  c.seq_length = t.seq_length();
  c.context_length = t.context_length();
  c.logits = t.logits();
  c.warmup = t.warmup();
  c.iters = t.iters() > 0 ? t.iters() : worker.options().default_layer_iters;
  c.capacity_bytes_per_rank = worker.Capacity(c.model.parallel.tp);
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  return c;
}

absl::StatusOr<kernels::serving::ServingStepResult> RunServingStepTask(
    const kernels::serving::ServingStepConfig& config, const Worker&, const CancelFlag&) {
  return kernels::serving::RunServingStep(config);
}

void ServingStepResult(const kernels::serving::ServingStepConfig&,
                       const kernels::serving::ServingStepResult& step, TaskResult* r) {
  v1::ServingStepProfile* profile = r->mutable_serving_step();
  AddPhasesAndPeaks(step, profile);
  profile->set_weight_bytes(step.weight_bytes);
  profile->set_kv_cache_bytes(step.kv_cache_bytes);
  profile->set_tp_allreduce_bytes(step.tp_allreduce_bytes);
  profile->set_tp_allreduces_per_step(step.tp_allreduces_per_step);
}

// --- serving_verify: a serving layout run end to end with the serving loop --------------

absl::StatusOr<kernels::serving::ServeOptions> ValidateServingVerify(const v1::ProfileTask& task,
                                                                     const Worker& worker) {
  namespace ks = kernels::serving;
  const v1::ServingVerifyTask& t = task.serving_verify();
  ks::ServeOptions o;
  o.backend = worker.backend();
  if (absl::Status s = ReadServingModel(t, worker, &o.model); !s.ok()) return s;
  o.model.num_kv_blocks = t.num_kv_blocks();
  o.trace.num_requests = t.num_requests();
  o.trace.isl = t.isl();
  o.trace.osl = t.osl();
  o.trace.concurrency = t.concurrency();
  o.trace.request_rate = t.request_rate();
  o.trace.seed = t.seed();
  o.max_batch_size = t.max_batch_size();
  o.max_num_tokens = t.max_num_tokens();
  o.prefill_instances = t.prefill_instances();
  o.decode_instances = t.decode_instances();
  o.model.parallel.pp = std::max<int64_t>(1, t.pp());
  const int64_t ranks = o.model.parallel.tp * o.model.parallel.pp *
                        (o.disaggregated() ? o.prefill_instances + o.decode_instances : 1);
  if (ranks > o.model.parallel.tp) {  // ReadServingModel checked the tp ranks
    const std::string what =
        o.disaggregated()
            ? absl::StrCat(" ((prefill_instances ", o.prefill_instances, " + decode_instances ",
                           o.decode_instances, ") x tp ", o.model.parallel.tp, ")")
            : absl::StrCat(" (pp ", o.model.parallel.pp, " x tp ", o.model.parallel.tp, ")");
    if (absl::Status s = worker.NeedRanks(ranks, what); !s.ok()) return s;
  }
  o.capacity_bytes = worker.Capacity(ranks);
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  return o;
}

absl::StatusOr<kernels::serving::ServeResult> RunServingVerify(
    const kernels::serving::ServeOptions& options, const Worker&, const CancelFlag&) {
  return kernels::serving::RunServeLoop(options);
}

v1::LatencyStats MillisecondStats(const kernels::serving::Distribution& d) {
  v1::LatencyStats out;
  out.set_mean(d.mean * 1e3);
  out.set_p50(d.p50 * 1e3);
  out.set_p90(d.p90 * 1e3);
  out.set_p99(d.p99 * 1e3);
  return out;
}

void ServingVerifyResult(const kernels::serving::ServeOptions&,
                         const kernels::serving::ServeResult& run, TaskResult* r) {
  v1::ServingVerifyResult* out = r->mutable_serving_verify();
  *out->mutable_ttft_ms() = MillisecondStats(run.ttft_s());
  *out->mutable_tpot_ms() = MillisecondStats(run.tpot_s());
  *out->mutable_e2e_latency_ms() = MillisecondStats(run.e2e_s());
  out->set_output_tokens_per_sec(run.output_tokens_per_s());
  out->set_requests(static_cast<int64_t>(run.requests.size()));
  int64_t wrong = 0;
  for (const kernels::serving::RequestRecord& q : run.requests) {
    if (q.output_tokens != q.osl || q.ttft_s() > q.e2e_s()) ++wrong;
  }
  out->set_wrong(wrong);
}

// --- The table ---------------------------------------------------------------------------

const std::vector<TaskEntry>& TaskKinds() {
  static const std::vector<TaskEntry> kKinds = {
      Register<kernels::StepConfig, kernels::StepResult>(
          {v1::ProfileTask::kLayer, ValidateLayer, RunLayer, LayerResult}),
      Register<kernels::CollectiveSweepConfig, std::vector<kernels::CollectiveSample>>(
          {v1::ProfileTask::kCollective, ValidateCollective, RunCollective, CollectiveResult}),
      Register<VerifyRun, kt::TrainResult>(
          {v1::ProfileTask::kVerify, ValidateVerify, RunVerify, VerifyResult}),
      Register<OptimizerRun, double>(
          {v1::ProfileTask::kOptimizer, ValidateOptimizer, RunOptimizer, OptimizerResult}),
      Register<kernels::MoeStepConfig, kernels::MoeStepResult>(
          {v1::ProfileTask::kMoeLayer, ValidateMoeLayer, RunMoeLayer, MoeLayerResult}),
      Register<kernels::serving::ServingStepConfig, kernels::serving::ServingStepResult>(
          {v1::ProfileTask::kServingStep, ValidateServingStep, RunServingStepTask,
           ServingStepResult}),
      Register<kernels::serving::ServeOptions, kernels::serving::ServeResult>(
          {v1::ProfileTask::kServingVerify, ValidateServingVerify, RunServingVerify,
           ServingVerifyResult}),
  };
  return kKinds;
}

class KernelsExecutor final : public TaskExecutor {
 public:
  KernelsExecutor(DeviceInventory inventory, KernelsExecutorOptions options)
      : worker_(std::move(inventory), std::move(options)) {}

  TaskResult Execute(const v1::ProfileTask& task, const CancelFlag& cancel) override {
    if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
    for (const TaskEntry& entry : TaskKinds()) {
      if (entry.kind == task.kind_case()) return entry.execute(task, worker_, cancel);
    }
    return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                   "task names no workload (neither layer, collective, verify, optimizer nor "
                   "moe_layer)");
  }

 private:
  const Worker worker_;
};

}  // namespace

absl::StatusOr<kt::TrainConfig> TrainConfigFromVerifyTask(const v1::VerifyTask& t) {
  kt::TrainConfig c;
  absl::StatusOr<ParallelConfig> layout = server::ParallelConfigFromProto(t.parallel());
  if (!layout.ok()) return layout.status();
  c.parallel = *std::move(layout);
  if (absl::Status s = ReadShape(t.shape(), &c.shape); !s.ok()) return s;
  c.num_layers = t.num_layers();
  c.seq_length = t.seq_length();
  c.num_micro_batches = t.num_micro_batches();
  c.flash_attention = t.flash_attention();
  c.attention_window = t.attention_window();
  c.window_attn_skip_freq = t.window_attn_skip_freq();
  c.dropout = t.dropout();
  c.tie_embeddings = t.tie_embeddings();
  c.position_rows = t.position_rows();
  if (absl::Status s = ReadExpertLayers(t, &c); !s.ok()) return s;
  c.steps = t.steps();
  c.seed = t.seed();
  return c;
}

std::shared_ptr<TaskExecutor> CreateKernelsExecutor(const DeviceInventory& inventory,
                                                    KernelsExecutorOptions options) {
  return std::make_shared<KernelsExecutor>(inventory, std::move(options));
}

}  // namespace paratune::worker
