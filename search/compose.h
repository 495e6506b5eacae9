// Composition (DESIGN.md step 5): measured per-layer times turn each profiled candidate's
// modelled iteration into a measured one, and the candidates are ranked again.
//
// What is replaced: the transformer layers' compute and TP communication on the critical
// path (m micro-batches x layers per stage x measured forward + backward + recompute) and
// the pipeline bubble ((p - 1) / v stage slots of the same measured stage time); the
// data-parallel gradient reduce is rescaled by modelled / measured all-reduce bus bandwidth
// (the DP group's link: NVLink inside a node, the NIC across nodes). What stays modelled:
// embedding and logits compute (their FLOP share of the modelled compute), CP, pipeline
// p2p and optimizer time, and the memory breakdown.
#ifndef PARATUNE_SEARCH_COMPOSE_H_
#define PARATUNE_SEARCH_COMPOSE_H_

#include <map>
#include <string>
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
  double peak_bytes = 0;   ///< Largest per-rank peak of the tracking allocator.
  std::string message;     ///< Why it failed, or the OOM size.

  /// forward + backward + recompute.
  double LayerSeconds() const { return forward_s + backward_s + recompute_s; }
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

/// Measurements by task key (LayerProfileSpec::Key(), CollectiveSweepSpec::Key()).
struct Measurements {
  std::map<std::string, LayerMeasurement> layers;
  std::map<std::string, CommMeasurement> collectives;
};

/// The share of a stage's per-micro-batch compute FLOPs that is not transformer layers
/// (logits, taken on the last stage), for a stage of `layers_per_stage` layers.
double NonLayerComputeShare(const JobSpec& spec, const ParallelConfig& config,
                            int64_t layers_per_stage);

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
