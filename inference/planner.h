// The inference planner: enumerate serving layouts, size memory, model the engine steps,
// simulate the scheduler over the request stream, rank under the limits.
#ifndef PARATUNE_INFERENCE_PLANNER_H_
#define PARATUNE_INFERENCE_PLANNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"

namespace paratune::inference {

/// Validates `spec`, scores every layout its search options allow and ranks them by the
/// objective (layouts that meet the limits first). InvalidArgument for a bad spec, naming
/// the field; a model that fits no layout says by how much.
absl::StatusOr<InferencePlanResult> PlanInference(const InferenceJobSpec& spec);

/// Scores one pinned layout in the same form, whether or not it meets the limits.
absl::StatusOr<InferenceRankedConfig> EstimateInference(const InferenceJobSpec& spec,
                                                        const ServingConfig& config);

/// True when `a` ranks before `b`: layouts within the limits first, then by `objective`.
/// The one-line recommendation for the best layout: its throughput, limits and
/// `objective`, with `detail` appended inside the parentheses when not empty.
std::string Recommendation(const InferenceRankedConfig& best, ServingObjective objective,
                           const std::string& detail = "");

bool RanksBefore(const InferenceRankedConfig& a, const InferenceRankedConfig& b,
                 ServingObjective objective);

/// The layouts not dominated in (output tokens/s per GPU, tokens/s per user), by decreasing
/// tokens/s per GPU, each marked pareto_optimal.
std::vector<InferenceRankedConfig> ParetoFront(std::vector<InferenceRankedConfig> scored);

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_PLANNER_H_
