// Maps LayerProfileTask / CollectiveSweepTask onto kernels/ and the results back.
#include "worker/kernels_executor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/collective_bench.h"
#include "kernels/step_runner.h"
#include "kernels/training/training.h"

namespace paratune::worker {
namespace {

using v1::TaskResult;

TaskResult Outcome(TaskResult::Outcome outcome, std::string message) {
  TaskResult r;
  r.set_outcome(outcome);
  r.set_message(std::move(message));
  return r;
}

// A kernels/ error as a result: OOM, UNSUPPORTED (not built) or FAILED.
TaskResult FromKernelsError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    TaskResult r = Outcome(TaskResult::OUTCOME_OOM, std::string(status.message()));
    r.set_oom_bytes_requested(kernels::OomBytesRequested(status).value_or(0));
    return r;
  }
  if (status.code() == absl::StatusCode::kUnimplemented) {
    return Outcome(TaskResult::OUTCOME_UNSUPPORTED, std::string(status.message()));
  }
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    return Outcome(TaskResult::OUTCOME_FAILED, absl::StrCat("invalid task: ", status.message()));
  }
  return Outcome(TaskResult::OUTCOME_FAILED, status.ToString());
}

class KernelsExecutor final : public TaskExecutor {
 public:
  KernelsExecutor(DeviceInventory inventory, KernelsExecutorOptions options)
      : inventory_(std::move(inventory)), options_(options) {}

  TaskResult Execute(const v1::ProfileTask& task, const CancelFlag& cancel) override {
    if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
    switch (task.kind_case()) {
      case v1::ProfileTask::kLayer:
        return RunLayer(task.layer(), cancel);
      case v1::ProfileTask::kCollective:
        return RunCollective(task.collective(), cancel);
      case v1::ProfileTask::kVerify:
        return RunVerify(task.verify(), cancel);
      case v1::ProfileTask::kOptimizer:
        return RunOptimizer(task.optimizer(), cancel);
      case v1::ProfileTask::KIND_NOT_SET:
        break;
    }
    return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                   "task names no workload (neither layer, collective, verify nor optimizer)");
  }

 private:
  kernels::BackendKind backend() const {
    return inventory_.backend == "cuda" ? kernels::BackendKind::kCuda
                                        : kernels::BackendKind::kCpu;
  }
  int64_t ranks() const { return static_cast<int64_t>(inventory_.devices.size()); }

  // UNSUPPORTED reason for `dtype` on this backend, or "" when it can run.
  std::string DTypeProblem(const std::string& dtype) const {
    if (dtype == "fp8") return "dtype fp8 is not implemented by the kernels";
    if ((dtype == "bf16" || dtype == "fp16") && inventory_.backend == "cpu") {
      return absl::StrCat("dtype ", dtype, " needs the CUDA backend; this worker is CPU-only");
    }
    return "";
  }

  int64_t Capacity(int64_t ranks_used) const {
    if (options_.capacity_bytes_per_rank > 0) return options_.capacity_bytes_per_rank;
    if (inventory_.backend == "cuda" && !inventory_.devices.empty()) {
      return inventory_.devices[0].memory_bytes();
    }
    return inventory_.memory_bytes / std::max<int64_t>(1, ranks_used);
  }

  TaskResult RunLayer(const v1::LayerProfileTask& t, const CancelFlag& cancel) {
    const int64_t cp = std::max<int64_t>(1, t.cp());
    const int64_t tp = std::max<int64_t>(1, t.tp());
    if (tp * cp > ranks()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     absl::StrCat("task needs ", tp * cp, " ranks (tp ", tp, " x cp ", cp,
                                  "); this worker has ", ranks()));
    }
    if (cp > 1) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     absl::StrCat("context parallelism (cp ", cp,
                                  ") is not implemented by the kernels"));
    }
    const std::string dtype = t.dtype().empty() ? "fp32" : t.dtype();
    if (std::string problem = DTypeProblem(dtype); !problem.empty()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED, problem);
    }
    kernels::StepConfig config;
    kernels::LayerConfig& layer = config.layer;
    layer.shape.hidden_size = t.shape().hidden_size();
    layer.shape.num_attention_heads = t.shape().num_attention_heads();
    layer.shape.num_query_groups = t.shape().num_query_groups();
    layer.shape.ffn_hidden_size = t.shape().ffn_hidden_size();
    // Megatron-LM pads the vocabulary to a multiple of 128·tp.
    const int64_t pad = 128 * tp;
    layer.shape.vocab_size = (t.shape().vocab_size() + pad - 1) / pad * pad;
    if (!t.shape().activation().empty()) {
      absl::StatusOr<kernels::Activation> a = kernels::ParseActivation(t.shape().activation());
      if (!a.ok()) return FromKernelsError(a.status());
      layer.shape.activation = *a;
    }
    if (!t.shape().normalization().empty()) {
      absl::StatusOr<kernels::Normalization> n =
          kernels::ParseNormalization(t.shape().normalization());
      if (!n.ok()) return FromKernelsError(n.status());
      layer.shape.normalization = *n;
    }
    absl::StatusOr<kernels::RecomputeMode> recompute = kernels::ParseRecompute(t.recompute());
    if (!recompute.ok()) return FromKernelsError(recompute.status());
    absl::StatusOr<kernels::DType> dt = kernels::ParseDType(dtype);
    if (!dt.ok()) return FromKernelsError(dt.status());
    layer.tp = tp;
    layer.sequence_parallel = t.sequence_parallel();
    layer.micro_batch_size = t.micro_batch_size();
    layer.seq_length = t.seq_length();
    layer.recompute = *recompute;
    layer.dtype = *dt;
    layer.flash_attention = t.flash_attention();
    // Megatron-LM's default dropout probabilities.
    layer.hidden_dropout = t.dropout() ? 0.1f : 0.0f;
    layer.attention_dropout = t.dropout() ? 0.1f : 0.0f;
    switch (t.extras()) {
      case v1::LayerProfileTask::STAGE_EXTRAS_FIRST:
        config.extras = kernels::StageExtras::kFirst;
        break;
      case v1::LayerProfileTask::STAGE_EXTRAS_LAST:
        config.extras = kernels::StageExtras::kLast;
        break;
      default:
        config.extras = kernels::StageExtras::kNone;
        break;
    }
    config.backend = backend();
    config.warmup = t.warmup();
    config.iters = t.iters() > 0 ? t.iters() : options_.default_layer_iters;
    config.capacity_bytes_per_rank = Capacity(tp);

    absl::StatusOr<kernels::StepResult> step = kernels::RunLayerStep(config);
    if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
    if (!step.ok()) return FromKernelsError(step.status());

    TaskResult r = Outcome(TaskResult::OUTCOME_OK, "");
    v1::LayerProfile* profile = r.mutable_layer();
    for (const kernels::PhaseTiming& p : step->phases) {
      v1::PhaseTiming* out = profile->add_phases();
      out->set_phase(p.phase);
      out->set_median_s(p.median_s);
      out->set_min_s(p.min_s);
      out->set_max_s(p.max_s);
    }
    for (int64_t bytes : step->peak_bytes_per_rank) profile->add_peak_bytes_per_rank(bytes);
    profile->set_device_peak_bytes(step->device_peak_bytes);
    profile->set_activation_bytes(step->activation_bytes);
    return r;
  }

  TaskResult RunCollective(const v1::CollectiveSweepTask& t, const CancelFlag& cancel) {
    kernels::CollectiveSweepConfig config;
    switch (t.op()) {
      case v1::CollectiveSweepTask::OP_ALL_REDUCE:
        config.op = kernels::CollectiveOp::kAllReduce;
        break;
      case v1::CollectiveSweepTask::OP_ALL_GATHER:
        config.op = kernels::CollectiveOp::kAllGather;
        break;
      case v1::CollectiveSweepTask::OP_REDUCE_SCATTER:
        config.op = kernels::CollectiveOp::kReduceScatter;
        break;
      case v1::CollectiveSweepTask::OP_SEND_RECV:
        config.op = kernels::CollectiveOp::kSendRecv;
        break;
      default:
        return Outcome(TaskResult::OUTCOME_FAILED, "invalid task: collective op is unspecified");
    }
    if (t.group_size() > ranks()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     absl::StrCat("task needs ", t.group_size(), " ranks (group_size); this "
                                  "worker has ", ranks()));
    }
    const std::string dtype = t.dtype().empty() ? "fp32" : t.dtype();
    if (std::string problem = DTypeProblem(dtype); !problem.empty()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED, problem);
    }
    absl::StatusOr<kernels::DType> dt = kernels::ParseDType(dtype);
    if (!dt.ok()) return FromKernelsError(dt.status());
    if (t.sizes_bytes().empty()) {
      return Outcome(TaskResult::OUTCOME_FAILED, "invalid task: sizes_bytes is empty");
    }
    config.group_size = t.group_size();
    config.dtype = *dt;
    config.warmup = t.warmup();
    config.iters = t.iters() > 0 ? t.iters() : options_.default_collective_iters;
    config.backend = backend();

    TaskResult r = Outcome(TaskResult::OUTCOME_OK, "");
    v1::CommProfile* profile = r.mutable_comm();
    int64_t wrong = 0;
    // One size at a time so that a cancellation lands between sizes.
    for (int64_t size : t.sizes_bytes()) {
      if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
      config.sizes_bytes = {size};
      absl::StatusOr<std::vector<kernels::CollectiveSample>> samples =
          kernels::RunCollectiveSweep(config);
      if (!samples.ok()) return FromKernelsError(samples.status());
      for (const kernels::CollectiveSample& s : *samples) {
        v1::CommSample* out = profile->add_samples();
        out->set_size_bytes(s.size_bytes);
        out->set_time_s(s.time_s);
        out->set_algbw_gbps(s.algbw_gbps);
        out->set_busbw_gbps(s.busbw_gbps);
        out->set_wrong(s.wrong);
        wrong += s.wrong;
      }
    }
    if (wrong > 0) r.set_message(absl::StrCat(wrong, " wrong element(s) in the checks"));
    return r;
  }

  TaskResult RunVerify(const v1::VerifyTask& t, const CancelFlag& cancel) {
    const std::string dtype = t.dtype().empty() ? "fp32" : t.dtype();
    if (std::string problem = DTypeProblem(dtype); !problem.empty()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED, problem);
    }
    if (t.rank_count() > ranks()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     absl::StrCat("task needs ", t.rank_count(), " ranks; this worker has ",
                                  ranks()));
    }
    namespace kt = kernels::training;
    kt::TrainConfig c;
    absl::StatusOr<kernels::DType> dt = kernels::ParseDType(dtype);
    if (!dt.ok()) return FromKernelsError(dt.status());
    c.dtype = *dt;
    c.backend = backend();
    c.shape.hidden_size = t.shape().hidden_size();
    c.shape.num_attention_heads = t.shape().num_attention_heads();
    c.shape.num_query_groups = t.shape().num_query_groups();
    c.shape.ffn_hidden_size = t.shape().ffn_hidden_size();
    c.shape.vocab_size = t.shape().vocab_size();
    if (!t.shape().activation().empty()) {
      absl::StatusOr<kernels::Activation> a = kernels::ParseActivation(t.shape().activation());
      if (!a.ok()) return FromKernelsError(a.status());
      c.shape.activation = *a;
    }
    if (!t.shape().normalization().empty()) {
      absl::StatusOr<kernels::Normalization> n =
          kernels::ParseNormalization(t.shape().normalization());
      if (!n.ok()) return FromKernelsError(n.status());
      c.shape.normalization = *n;
    }
    absl::StatusOr<kernels::RecomputeMode> recompute =
        kernels::ParseRecompute(t.recompute().empty() ? "none" : t.recompute());
    if (!recompute.ok()) return FromKernelsError(recompute.status());
    c.recompute = *recompute;
    c.num_layers = t.num_layers();
    c.seq_length = t.seq_length();
    c.micro_batch_size = t.micro_batch_size();
    c.num_micro_batches = t.num_micro_batches();
    c.tp = t.tp();
    c.pp = t.pp();
    c.dp = t.dp();
    c.vp = std::max<int64_t>(1, t.vp());
    c.sequence_parallel = t.sequence_parallel();
    c.distributed_optimizer = t.distributed_optimizer();
    c.flash_attention = t.flash_attention();
    c.dropout = t.dropout();
    c.tie_embeddings = t.tie_embeddings();
    c.position_rows = t.position_rows();
    c.steps = t.steps();
    c.seed = t.seed();
    if (c.world_size() != t.world_size()) {
      return Outcome(TaskResult::OUTCOME_FAILED,
                     absl::StrCat("invalid task: world_size (", t.world_size(),
                                  ") must equal tp·pp·dp (", c.world_size(), ")"));
    }
    // A layout the planner accepts but the trainer cannot run is not worth retrying.
    if (absl::Status s = c.Validate(); !s.ok()) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     absl::StrCat("kernels/training cannot run this layout: ", s.message()));
    }
    std::shared_ptr<kernels::GlooRendezvous> rendezvous;
    if (t.rank_count() == t.world_size()) {
      rendezvous = kernels::MakeInProcessRendezvous();
    } else if (!options_.rendezvous) {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     "this worker has no coordinator rendezvous for multi-worker verify runs");
    } else if (t.rendezvous_namespace().empty()) {
      return Outcome(TaskResult::OUTCOME_FAILED,
                     "invalid task: a part of a multi-worker run needs rendezvous_namespace");
    } else {
      rendezvous = options_.rendezvous(t.rendezvous_namespace(), t.rendezvous_timeout_ms());
    }
    absl::StatusOr<kt::TrainResult> run = absl::UnknownError("not run");
    try {
      run = kt::RunTraining(c, t.first_rank(), t.rank_count(), rendezvous);
    } catch (const std::exception& e) {
      // The rendezvous throws when peers do not join in time (Gloo may rethrow it).
      run = absl::DeadlineExceededError(absl::StrCat(
          "ranks [", t.first_rank(), ", ", t.first_rank() + t.rank_count(),
          ") could not meet their peers: ", e.what()));
    }
    if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
    if (!run.ok()) return FromKernelsError(run.status());
    TaskResult r = Outcome(TaskResult::OUTCOME_OK, "");
    v1::VerifyResult* out = r.mutable_verify();
    for (double s : run->step_seconds) out->add_step_seconds(s);
    out->set_median_iteration_s(run->median_step_seconds());
    for (const kt::RankResult& rank : run->ranks) out->add_peak_bytes_per_rank(rank.peak_bytes);
    for (double l : run->losses) out->add_losses(l);
    out->set_first_rank(t.first_rank());
    return r;
  }

  TaskResult RunOptimizer(const v1::OptimizerTask& t, const CancelFlag& cancel) {
    if (inventory_.backend != "cpu") {
      return Outcome(TaskResult::OUTCOME_UNSUPPORTED,
                     "the optimizer task runs on the CPU backend only; this worker is " +
                         inventory_.backend);
    }
    if (t.params() < 1) {
      return Outcome(TaskResult::OUTCOME_FAILED,
                     absl::StrCat("invalid task: params (", t.params(), ") must be >= 1"));
    }
    if (t.warmup() < 0) {
      return Outcome(TaskResult::OUTCOME_FAILED,
                     absl::StrCat("invalid task: warmup (", t.warmup(), ") must be >= 0"));
    }
    const int64_t iters = t.iters() > 0 ? t.iters() : options_.default_layer_iters;
    // One copy per rank at once: a job's ranks share the host's memory bandwidth.
    const int64_t copies = std::max<int64_t>(1, ranks());
    const int64_t capacity = Capacity(copies);
    std::vector<absl::StatusOr<double>> results(copies, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int64_t i = 0; i < copies; ++i) {
      threads.emplace_back([&, i] {
        results[i] = kernels::training::TimeOptimizerStep(t.params(), t.warmup(), iters, capacity);
      });
    }
    for (std::thread& th : threads) th.join();
    if (cancel.cancelled()) return Outcome(TaskResult::OUTCOME_CANCELLED, "cancelled");
    double slowest = 0;
    for (const absl::StatusOr<double>& r : results) {
      if (!r.ok()) return FromKernelsError(r.status());
      slowest = std::max(slowest, *r);
    }
    TaskResult r = Outcome(TaskResult::OUTCOME_OK, "");
    v1::OptimizerProfile* out = r.mutable_optimizer();
    out->set_step_s(slowest);
    out->set_seconds_per_param(slowest / static_cast<double>(t.params()));
    out->set_copies(copies);
    return r;
  }

  DeviceInventory inventory_;
  KernelsExecutorOptions options_;
};

}  // namespace

std::shared_ptr<TaskExecutor> CreateKernelsExecutor(const DeviceInventory& inventory,
                                                    KernelsExecutorOptions options) {
  return std::make_shared<KernelsExecutor>(inventory, options);
}

}  // namespace paratune::worker
