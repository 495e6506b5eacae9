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
///
/// Open dimensions: tp over the divisors of N that divide the heads and tile a node; cp
/// while each rank keeps >= 1024 tokens; pp over the divisors of L (or of L + 2 with the
/// embedding/loss-aware split); every vp allowed by the layer split; micro-batches over the
/// divisors of B/d up to 16; SP, recompute (none/selective/full), and data-parallel
/// sharding as search.data_parallel_sharding lists it (open: none and the distributed
/// optimizer). Layouts that break a rule or run out of memory are rejected with
/// the reason. Every survivor is scored with a closed-form pipeline screen, the best
/// max(4*top_k, 32) are re-scored with the simulated schedule, and those are ranked by the
/// objective (throughput: iteration time; min_memory: peak memory).
absl::StatusOr<PlanResult> Plan(const JobSpec& spec);

/// Scores one layout (whether or not it fits). InvalidArgument if it breaks a rule.
absl::StatusOr<RankedConfig> Estimate(const JobSpec& spec, const ParallelConfig& config);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PLANNER_H_
