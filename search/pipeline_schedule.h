// Event simulation of Megatron-LM's pipeline schedules: 1F1B (PipeDream-Flush) and the
// interleaved 1F1B with v model chunks per rank (Narayanan et al. 2021, Section 2.2).
// Each stage runs its operations in the schedule's order; an operation starts when the
// stage is free and its input has arrived (the previous stage's forward, or the next
// stage's backward, plus one point-to-point transfer).
#ifndef PARATUNE_SEARCH_PIPELINE_SCHEDULE_H_
#define PARATUNE_SEARCH_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace paratune {

struct PipelineInput {
  int64_t stages = 1;        ///< p.
  int64_t chunks = 1;        ///< v (model chunks per stage; 1 = plain 1F1B).
  int64_t micro_batches = 1; ///< m.
  /// Seconds per micro-batch, indexed [stage * chunks + chunk]. Backward includes any
  /// recompute forward.
  std::vector<double> forward, backward;
  double p2p_s = 0;  ///< One activation (or gradient) transfer between adjacent stages.
  /// Simulate at most this many micro-batches; beyond it the steady state is extrapolated
  /// (each further micro-batch adds the busiest stage's forward + backward). 0 = no cap.
  int64_t max_simulated_micro_batches = 0;
};

struct PipelineResult {
  double makespan = 0;                ///< Last backward of any stage, seconds.
  std::vector<double> stage_finish;   ///< When each stage finished its last backward.
  std::vector<double> stage_busy;     ///< Seconds each stage computed.
  double bottleneck_busy = 0;         ///< Largest stage_busy.
};

/// The order of one stage's operations in Megatron's schedule: warm-up forwards
/// (v = 1: p - r - 1; interleaved: 2(p - r - 1) + (v - 1)p), then one forward / one
/// backward alternately, then the remaining backwards. Exposed for tests.
struct PipelineOp {
  bool forward = true;
  int64_t chunk = 0;
  int64_t micro_batch = 0;
};
std::vector<PipelineOp> StageSchedule(int64_t stage, int64_t stages, int64_t chunks,
                                      int64_t micro_batches);

/// InvalidArgument for inconsistent sizes (and for v > 1 with m % p != 0, which Megatron's
/// interleaved schedule does not run); Internal if the schedule deadlocks.
absl::StatusOr<PipelineResult> SimulatePipeline(const PipelineInput& input);

/// Closed-form screen used before simulating: m * max_r(F_r + B_r) plus the fill and drain
/// of (p - 1) average stage slots divided by v, plus 2(p - 1) transfers.
double PipelineClosedForm(const PipelineInput& input);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PIPELINE_SCHEDULE_H_
