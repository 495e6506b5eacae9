// The serving layouts of a small model that the serving accuracy benchmark measures with
// the serving loop, and their measurement over repeated rounds: the measured half that an
// inference planner's predictions are compared against.
#ifndef PARATUNE_KERNELS_SERVING_SERVING_LAYOUTS_H_
#define PARATUNE_KERNELS_SERVING_SERVING_LAYOUTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_step_runner.h"

namespace paratune::kernels::serving {

struct ServingLayout {
  std::string name;      ///< e.g. "tp2-mbs4-c8".
  ServeOptions options;  ///< Model, tp, limits and trace.
};

/// The small model (2 layers, h 256, 8 heads in 4 KV groups, SwiGLU f 704, V 2048, fp32,
/// RoPE) over 24 requests of ISL 64 / OSL 16, max_num_tokens 256, chunked prefill: tp 1 and
/// 2 × max_batch_size 4 and 16 × offline and closed-loop concurrency 8 (8 layouts).
std::vector<ServingLayout> AccuracyLayouts();

/// What the rounds of one layout measured; each vector has one entry per round.
struct LayoutMeasurement {
  ServingLayout layout;
  std::vector<double> tpot_p50_ms;  ///< Median over requests of their TPOT.
  std::vector<double> ttft_p50_ms;  ///< Median over requests of their TTFT.
  std::vector<double> output_tokens_per_s;
  std::vector<double> e2e_p50_ms;
  /// Median of an isolated decode step (serving_step_runner) of the batch the layout
  /// reaches (max_batch_size capped by clients and requests) at context isl + osl/2, right
  /// after the round: what step profiles predict TPOT from, measured beside it.
  std::vector<double> decode_step_ms;
  int64_t wrong = 0;  ///< Requests (all rounds) without osl tokens or with TTFT > e2e.
};

/// Runs every layout `rounds` times, round by round (round r of every layout before round
/// r + 1 of any), so drift in the host's load spreads over all layouts alike.
absl::StatusOr<std::vector<LayoutMeasurement>> MeasureLayouts(
    const std::vector<ServingLayout>& layouts, int rounds);

/// The isolated decode step a layout's TPOT is compared with (see decode_step_ms).
ServingStepConfig ReferenceDecodeStep(const ServeOptions& options);

/// (max − min)/median of the rounds, the spread reported next to each median.
double RelativeSpread(const std::vector<double>& rounds);

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVING_LAYOUTS_H_
