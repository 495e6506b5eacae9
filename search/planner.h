// The analytical planner: enumerate every valid layout, score it, rank.
#ifndef PARATUNE_SEARCH_PLANNER_H_
#define PARATUNE_SEARCH_PLANNER_H_

#include "absl/status/statusor.h"
#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune {

/// Validates `spec`, enumerates the layouts its search options allow, scores each with the
/// analytical model, and returns the top_k (feasible ones first) plus the rejected ones with
/// their reasons. InvalidArgument for a bad spec.
absl::StatusOr<PlanResult> Plan(const JobSpec& spec);

/// Scores one layout (whether or not it fits). InvalidArgument if it breaks a rule.
absl::StatusOr<RankedConfig> Estimate(const JobSpec& spec, const ParallelConfig& config);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PLANNER_H_
