// The step runner: profiles one parallel transformer layer the way a worker task asks
// (LayerProfileTask in proto/paratune/v1/task.proto). It starts `tp` ranks (threads, one
// communicator group), builds the layer's shard on each, runs `warmup` untimed and `iters`
// timed forward+backward steps, and returns per-phase timings and each rank's peak memory.
//
// Timing: steady_clock; on GPU the stream is synchronised at each phase boundary (and
// around each collective for tp_comm) before the clock is read. Phases:
//   forward    the layer forward (including its TP/SP communication),
//   backward   the layer backward (including communication, excluding recompute),
//   recompute  forward work redone in backward (selective: attention core; full: layer),
//   tp_comm    time inside communicator calls (a part of the three above),
//   total      forward + backward + recompute.
// Each phase reports median, min and max over the timed steps of the slowest rank.
//
// Out of memory against `capacity_bytes_per_rank` is a result: RunLayerStep returns
// ResourceExhausted and OomBytesRequested(status) (kernels/tensor.h) gives the bytes of the
// request that failed. Nothing crashes.
#ifndef PARATUNE_KERNELS_STEP_RUNNER_H_
#define PARATUNE_KERNELS_STEP_RUNNER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/layer_config.h"
#include "kernels/tensor.h"

namespace paratune::kernels {

enum class BackendKind { kCpu, kCuda };
/// "cpu" | "cuda".
absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name);

struct StepConfig {
  LayerConfig layer;                     ///< Shape, tp, sp, b, s, recompute, dtype, flash.
  /// Extra work of a first or last pipeline stage, besides the layer (core/enums.h).
  StageExtras extras = StageExtras::kNone;
  BackendKind backend = BackendKind::kCpu;
  int64_t warmup = 1;                    ///< Untimed steps first.
  int64_t iters = 3;                     ///< Timed steps.
  int64_t capacity_bytes_per_rank = 0;   ///< Tracking-allocator capacity; <= 0 unlimited.
  /// CPU: OpenBLAS threads per rank; 0 picks max(1, cores / tp) (one per rank when
  /// tp >= cores).
  int64_t blas_threads_per_rank = 0;

  /// First violated rule (LayerConfig::Validate, warmup >= 0, iters >= 1, backend built).
  absl::Status Validate() const;
};

/// Median, min and max seconds of one phase over the timed steps.
struct PhaseTiming {
  /// "forward" | "backward" | "recompute" | "tp_comm" | "total" (per micro-batch) |
  /// "grad_sync" (per step: the TP all-reduce of the gradients of the parameters that
  /// sequence parallelism replicates, the norms; 0 without SP) | "extras_forward",
  /// "extras_backward" (per micro-batch: the stage extras' own part of forward and
  /// backward, the embedding or the final norm, logits and loss; 0 without extras).
  std::string phase;
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  /// The timing of `phase` over `seconds` (one sample per timed step; not empty).
  static PhaseTiming Of(std::string phase, std::vector<double> seconds);
};

struct StepResult {
  std::vector<PhaseTiming> phases;          ///< In the order listed above.
  std::vector<int64_t> peak_bytes_per_rank; ///< Tracking-allocator peak, index = rank.
  /// Per-tag peaks of rank 0 (index = MemoryTag).
  std::array<int64_t, kNumMemoryTags> peak_bytes_by_tag{};
  /// Not measured yet (always 0): on GPU every byte still goes through the tracking
  /// allocator, so peak_bytes_per_rank is the device memory ParaTune asked for.
  int64_t device_peak_bytes = 0;
  int64_t activation_bytes = 0;   ///< Bytes rank 0's layer stored for backward (one layer).
  double flops_per_step = 0;      ///< Model FLOPs of fwd+bwd on one rank (no recompute).

  /// Phase by name, nullptr if absent.
  const PhaseTiming* Find(absl::string_view phase) const;
};

/// Runs the profile. InvalidArgument for a bad config, ResourceExhausted for OOM,
/// Unimplemented for a backend not built into this binary.
absl::StatusOr<StepResult> RunLayerStep(const StepConfig& config);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_STEP_RUNNER_H_
