// Why a search found no layout: spec-level reasons for a PlanResult that ranks nothing, so
// that an empty answer says which part of the spec no layout can satisfy, not only why
// each enumerated layout was rejected.
#ifndef PARATUNE_SEARCH_EMPTY_RESULT_H_
#define PARATUNE_SEARCH_EMPTY_RESULT_H_

#include <string>
#include <vector>

#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune {

/// The reasons `result` (Plan's answer for `spec`) ranks no layout, each naming the spec
/// fields and the rule: pinned search values that cannot divide cluster.num_gpus, pinned
/// values that cannot combine to it, the enumeration rules that excluded every layout, or,
/// when layouts were enumerated, that all were rejected and the most frequent reasons.
/// Empty when `result` ranks a layout.
std::vector<std::string> EmptyPlanReasons(const JobSpec& spec, const PlanResult& result);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_EMPTY_RESULT_H_
