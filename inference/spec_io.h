// Inference specs in JSON (the YAML reader converts to JSON first, as for training specs):
// `kind: inference`, `model`, `cluster`, `serving`, `search`. Unknown fields are errors
// naming the path; presets and hf_config resolve as in training specs.
#ifndef PARATUNE_INFERENCE_SPEC_IO_H_
#define PARATUNE_INFERENCE_SPEC_IO_H_

#include <string>

#include "absl/status/statusor.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "nlohmann/json.hpp"

namespace paratune::inference {

enum class JobKind { kTraining, kInference };
/// The spec's `kind` (absent = training); InvalidArgument naming `kind` for another value.
absl::StatusOr<JobKind> JobKindOf(const nlohmann::json& spec);

absl::StatusOr<InferenceJobSpec> InferenceJobSpecFromJson(const nlohmann::json& j);
/// Every field, presets expanded (reads back to an equal spec).
nlohmann::json InferenceJobSpecToJson(const InferenceJobSpec& spec);

/// The result in the JSON contract of the inference RankedConfig (`config`,
/// `output_tokens_per_sec_per_gpu`, `ttft_ms: {mean,p50,p90,p99}`, `memory`, ...).
nlohmann::json ToJson(const InferenceRankedConfig& r);
nlohmann::json ToJson(const InferencePlanResult& r);
nlohmann::json ToJson(const ServingConfig& c);
absl::StatusOr<ServingConfig> ServingConfigFromJson(const nlohmann::json& j);

/// The one layout a spec pins for `estimate` and `export`: tp, pp, weight_precision and
/// kv_cache_precision need exactly one value each; max_batch_size and max_num_tokens default
/// to the engine's, replicas to as many as fit, disaggregated to false (true needs one
/// prefill_replicas and one decode_replicas). InvalidArgument naming the first unpinned
/// dimension.
absl::StatusOr<ServingConfig> PinnedServingConfig(const InferenceJobSpec& spec);

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_SPEC_IO_H_
