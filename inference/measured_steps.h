// Step times of one serving instance shape (tp, weight and KV-cache precision) from measured
// serving_step tasks (worker/README.md): prefill steps of batch x prompt length and decode
// steps of batch x context length, each reported by part (GEMMs, attention, TP
// communication, logits and the rest).
//
// A simulated engine step with P prompt tokens and D decoding sequences is composed from
// the parts, each interpolated piecewise-linearly over the grid along the quantity it
// grows with: GEMMs, TP all-reduces and the rest (norms, embedding, sampling) along the
// step's rows P + D; prompt attention along its causal pairs; decode attention along the
// decoding sequences' cached tokens; logits along the sequences that sample. At a grid
// point the composition returns the measured total exactly (the parts add up to it).
// Beyond the grid the last segment's slope extends it.
//
// Thread-compatible (immutable after Create).
#ifndef PARATUNE_INFERENCE_MEASURED_STEPS_H_
#define PARATUNE_INFERENCE_MEASURED_STEPS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/serving_result.h"
#include "inference/step_model.h"

namespace paratune::inference {

enum class ServingStepPhase { kPrefill, kDecode };

/// One measured serving step (medians over the task's timed iterations), seconds.
struct StepSample {
  ServingStepPhase phase = ServingStepPhase::kDecode;
  int64_t batch = 1;
  int64_t length = 0;  ///< Prefill: prompt tokens per sequence; decode: cached tokens.
  double total_s = 0;
  double gemm_s = 0;
  double attention_s = 0;
  double tp_comm_s = 0;
  double logits_s = 0;
};

/// y(x) through measured points: linear between them, the first point's value below the
/// first (or proportional to x when `through_origin`), the last segment's slope beyond the
/// last (proportional to x with one point and `through_origin`). Points with equal x are
/// averaged.
class PiecewiseLinear {
 public:
  PiecewiseLinear() = default;
  PiecewiseLinear(std::vector<std::pair<double, double>> points, bool through_origin);
  double operator()(double x) const;
  bool empty() const { return points_.empty(); }

 private:
  std::vector<std::pair<double, double>> points_;  // Sorted by x, distinct x.
  bool through_origin_ = false;
};

class MeasuredStepTable {
 public:
  /// InvalidArgument unless `samples` hold at least one prefill and one decode step. The
  /// attention times are tabled by the work `span` counts (StepWork's units): a prefill of
  /// b prompts of s tokens by b·ChunkAttentionPairs(0, s), a decode of b sequences at
  /// context c by b·AttendedContext(c) (s²/2 and c without a sliding window).
  static absl::StatusOr<MeasuredStepTable> Create(const std::vector<StepSample>& samples,
                                                  const AttentionSpan& span = AttentionSpan());

  /// The step's measured parts, milliseconds: compute = GEMMs + attention + rest +
  /// logits (at least 0), tp_comm, memory 0 (the measurement includes the waits),
  /// overhead 0 (the caller adds the engine's), total their sum, source "measured".
  StepBreakdown Breakdown(const StepWork& w) const;
  int64_t samples() const { return samples_; }

 private:
  PiecewiseLinear gemm_, rest_, tp_comm_;  // Along rows.
  PiecewiseLinear prefill_attention_;      // Along causal pairs.
  PiecewiseLinear decode_attention_;       // Along cached tokens read.
  PiecewiseLinear logits_;                 // Along sampled sequences.
  int64_t samples_ = 0;
};

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_MEASURED_STEPS_H_
