// Composition (DESIGN.md step 5): measured per-layer times turn each profiled candidate's
// modelled iteration into a measured one, and the candidates are ranked again.
//
// The composed iteration is the time model's own (search/time_model.h EstimateIteration:
// the pipeline schedule simulated stage by stage, then the DP gradient reduce and the
// optimizer step of the critical stage) evaluated on measured parts instead of modelled
// ones, so the two differ only where a measurement exists:
//   - transformer layers: forward, backward, recompute and TP communication per
//     micro-batch from the layer tasks (two tasks when only some layers are recomputed);
//   - embedding (first stage) and logits + cross entropy (last stage): a layer task re-run
//     with that stage's extra work (Measurements::first_stage / last_stage), less the plain
//     layer; without one, the modelled edge times scaled by measured / modelled layer time;
//   - DP gradient reduce: the collective sweep's time at the actual gradient bytes
//     (interpolated between measured sizes), all-reduce, or reduce-scatter + all-gather
//     with the distributed optimizer;
//   - optimizer step: measured seconds per parameter (gradient zeroing, scaling, AdamW);
//   - expert layers (mixture of experts): the attention part of the layer is its own layer
//     task, run with the MLP block the identity (AttentionTasksFor; Measurements::
//     attention_parts); without that measurement, the measured dense layer scaled, term by
//     term, by the model's attention-only share of it (EstimateLayerTime at
//     ffn_hidden_size 0 over the dense layer); the expert block (router, permutation,
//     dispatch and combine all-to-alls, routed and shared experts) is the MoE layer task's
//     forward and backward, its dispatch_combine phases as the EP communication, and again
//     in backward under full recompute. Without an MoE measurement (no CPU device kind, a
//     dispatcher other than alltoall, an expert group larger than the worker, a failed
//     task) the expert block stays modelled (EstimateExpertLayerTime less the attention
//     part) and a note says why.
// What stays modelled: CP communication, pipeline p2p transfers, the tied-embedding sync,
// and the memory breakdown.
#ifndef PARATUNE_SEARCH_COMPOSE_H_
#define PARATUNE_SEARCH_COMPOSE_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "search/specs.h"

namespace paratune {

/// What a worker measured for one layer task (medians, seconds per micro-batch).
struct LayerMeasurement {
  enum class Outcome { kOk, kOom, kFailed };
  Outcome outcome = Outcome::kOk;
  double forward_s = 0;
  double backward_s = 0;   ///< Without the recompute forward.
  double recompute_s = 0;  ///< Re-running the forward before backward (0 without recompute).
  double tp_comm_s = 0;    ///< Part of forward + backward spent in TP communication.
  double grad_sync_s = 0;  ///< Once per step: the SP-replicated gradients' TP all-reduce.
  /// A stage-extras task's own embedding (logits and loss) part of forward_s / backward_s.
  double extras_forward_s = 0, extras_backward_s = 0;
  double peak_bytes = 0;   ///< Largest per-rank peak of the tracking allocator.
  std::string message;     ///< Why it failed, or the OOM size.

  /// forward + backward + recompute.
  double LayerSeconds() const { return forward_s + backward_s + recompute_s; }
  /// Sets the field of a step-runner phase ("forward", "backward", "recompute", "tp_comm",
  /// "grad_sync", "extras_forward", "extras_backward"); false for any other name.
  bool SetPhase(std::string_view phase, double seconds);
};

/// What a worker measured for one collective sweep.
struct CommMeasurement {
  struct Sample {
    int64_t size_bytes = 0;
    double time_s = 0;
    double bus_bandwidth = 0;  ///< Bytes/s (nccl-tests' busbw).
  };
  bool ok = true;
  std::vector<Sample> samples;  ///< Ascending size.
  std::string message;          ///< Why it failed.

  /// Bus bandwidth of the largest size (the closest to gradient-bucket sizes); 0 if none.
  double LargestBusBandwidth() const;
};

/// What a worker measured for one MoE layer task (medians, seconds per micro-batch).
struct MoeMeasurement {
  bool ok = true;        ///< False: the task failed or ran out of memory.
  double forward_s = 0;  ///< The whole expert block's forward.
  double backward_s = 0;
  double dispatch_combine_forward_s = 0;   ///< Part of forward_s: the all-to-alls.
  double dispatch_combine_backward_s = 0;  ///< Part of backward_s.
  std::string message;                     ///< Why it failed.

  /// Sets the field of a MoE step phase ("forward", "backward", "dispatch_combine_forward",
  /// "dispatch_combine_backward"); false for any other name ("total", "experts_*").
  bool SetPhase(std::string_view phase, double seconds);
};

/// Measurements by task key (LayerProfileSpec::Key(), CollectiveSweepSpec::Key()).
struct Measurements {
  std::map<std::string, LayerMeasurement> layers;
  /// Collective sweeps by key: the DP all-reduce of DpSweepFor, and optionally the same
  /// sweep as reduce-scatter and all-gather (the distributed optimizer's collectives).
  std::map<std::string, CommMeasurement> collectives;
  /// Optional, by the key of the layout's plain layer task (the last of LayerTasksFor): the
  /// same task run with the first stage's embedding (first_stage) or the last stage's final
  /// norm, logits and cross entropy (last_stage) around the layer.
  std::map<std::string, LayerMeasurement> first_stage, last_stage;
  /// Optional, by the key of a MoE layout's layer task: the same task run with the MLP
  /// block the identity (AttentionTasksFor), the attention part of its expert layers.
  std::map<std::string, LayerMeasurement> attention_parts;
  /// Optional: seconds of the optimizer step per parameter a rank updates (zeroing the
  /// gradient buffer, scaling the gradients, AdamW), measured with the job's ranks all
  /// busy; 0 = modelled.
  double optimizer_seconds_per_param = 0;
  /// MoE layer tasks by MoeProfileSpec::Key().
  std::map<std::string, MoeMeasurement> moe_layers;
};

/// Composes one candidate from measurements; the modelled entry with source = measured
/// and its figures replaced. NotFound when a task key it needs has no measurement.
absl::StatusOr<RankedConfig> ComposeCandidate(const JobSpec& spec, const RankedConfig& modelled,
                                              const ProfilePlanOptions& options,
                                              const Measurements& measurements);

/// Composes every candidate of `profile` that has all its measurements (the rest keep their
/// modelled figures, with a note saying why), then ranks again by the spec's objective
/// (fitting layouts first) and renumbers `rank`.
PlanResult ComposePlan(const JobSpec& spec, const PlanResult& modelled,
                       const ProfilePlan& profile, const ProfilePlanOptions& options,
                       const Measurements& measurements);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_COMPOSE_H_
