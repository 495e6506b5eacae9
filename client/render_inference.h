// What the `paratune` CLI prints for an inference job: the ranked serving layouts as a
// table, one CSV row per candidate, and one estimated layout in words. --json prints
// inference/spec_io.h ToJson (the contract's field names).
#ifndef PARATUNE_CLIENT_RENDER_INFERENCE_H_
#define PARATUNE_CLIENT_RENDER_INFERENCE_H_

#include <string>

#include "inference/serving_result.h"
#include "inference/serving_spec.h"

namespace paratune::client {

/// A header naming the job and the workload, one row per ranked layout, the
/// recommendation and the rejected layouts counted by rule.
std::string FormatInferencePlanTable(const inference::InferencePlanResult& result,
                                     const inference::InferenceJobSpec& spec);

/// One CSV row per ranked layout, then one per listed rejected layout with its reason.
std::string FormatInferencePlanCsv(const inference::InferencePlanResult& result);

/// One layout in words: throughput, latency distributions, memory, step breakdowns, notes.
std::string FormatInferenceEstimate(const inference::InferenceRankedConfig& r,
                                    const inference::InferenceJobSpec& spec);

}  // namespace paratune::client

#endif  // PARATUNE_CLIENT_RENDER_INFERENCE_H_
