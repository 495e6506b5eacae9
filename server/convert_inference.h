// Wire messages (paratune.v1) and domain structs (inference/) of inference jobs
// (`kind: inference`): the spec, the serving layout and the scored result.
//
// Specs take the path training specs take (server/convert.h): proto -> JSON (the proto JSON
// mapping) -> inference/spec_io's strict reader, so gRPC, REST and the CLI's spec files share
// one validation path; the way back is spec_io's canonical writer. Results map field by field,
// and the proto JSON mapping of a result (WireJson) is inference::ToJson of it.
#ifndef PARATUNE_SERVER_CONVERT_INFERENCE_H_
#define PARATUNE_SERVER_CONVERT_INFERENCE_H_

#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "inference/serving_profile.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "paratune/v1/job.pb.h"
#include "paratune/v1/task.pb.h"
#include "server/convert.h"

namespace paratune::server {

/// Whether a wire spec is an inference job's (`kind: "inference"`).
bool IsInferenceSpec(const v1::JobSpec& spec);

/// The validated domain spec of an inference job (InvalidArgument naming the field).
absl::StatusOr<inference::InferenceJobSpec> InferenceSpecFromProto(const v1::JobSpec& spec);
/// The canonical wire form (inference/spec_io.h InferenceJobSpecToJson: explicit model
/// fields, every default written out), what Job.resolved_spec holds; InferenceSpecFromProto
/// reads it back to the same spec. Keys the wire message has no field for are dropped when
/// they hold nothing (null, [], {}); Internal when one holds a value.
absl::StatusOr<v1::JobSpec> InferenceSpecToProto(const inference::InferenceJobSpec& spec);
/// An inference spec's JSON form (`kind: inference`) to the wire message, validated. Keys of
/// the wire messages outside the inference contract (what the proto JSON of a job's spec
/// prints for training fields: `search.dp: []`) are accepted at their default value only.
absl::StatusOr<v1::JobSpec> InferenceSpecProtoFromJson(const nlohmann::json& json);

v1::ServingConfig ToProto(const inference::ServingConfig& config);
/// InvalidArgument naming `weight_precision` / `kv_cache_precision` for an unknown format.
absl::StatusOr<inference::ServingConfig> ServingConfigFromProto(const v1::ServingConfig& config);

v1::InferenceRankedConfig ToProto(const inference::InferenceRankedConfig& ranked);
absl::StatusOr<inference::InferenceRankedConfig> InferenceRankedConfigFromProto(
    const v1::InferenceRankedConfig& ranked);

/// The wire form with the first `max_rejected` rejected layouts listed; rejected_total
/// counts all of them.
v1::InferencePlanResult ToProto(const inference::InferencePlanResult& result,
                                int64_t max_rejected = kMaxRejectedListed);
absl::StatusOr<inference::InferencePlanResult> InferencePlanResultFromProto(
    const v1::InferencePlanResult& result);

/// A serving_step task of a profiled inference job (task.proto ServingStepTask): the
/// whole instance's layers with the logits, RoPE as the model has it.
v1::ProfileTask ToProto(const inference::ServingStepTaskSpec& task);
/// The routed block of a mixture-of-experts model as the serving kernels run it (the real
/// top-k; the shape from the model), for ServingStepTask and ServingVerifyTask; a dense
/// model leaves the task as it is.
void SetServingExperts(const ModelSpec& model, v1::ServingStepTask* task);
void SetServingExperts(const ModelSpec& model, v1::ServingVerifyTask* task);
/// The instance shape a serving_step task measures; InvalidArgument for an unknown
/// precision.
/// `model_layers`: the job's model's layers (a task of fewer times a pipeline stage).
absl::StatusOr<inference::StepShape> StepShapeFromTask(const v1::ServingStepTask& task,
                                                       int64_t model_layers);
/// The medians of a serving_step task's result; InvalidArgument when it has no such
/// profile or lacks the "total" phase.
absl::StatusOr<inference::StepSample> StepSampleFromResult(const v1::ServingStepTask& task,
                                                           const v1::TaskResult& result);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_CONVERT_INFERENCE_H_
