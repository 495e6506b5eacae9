// The one place where wire messages (paratune.v1) and domain structs (search/) meet.
//
// Specs go proto -> JSON (the proto JSON mapping) -> search/spec_io's strict parser, so that
// gRPC, REST and the CLI's spec files share one validation path and one set of messages.
#ifndef PARATUNE_SERVER_CONVERT_H_
#define PARATUNE_SERVER_CONVERT_H_

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "paratune/v1/job.pb.h"
#include "paratune/v1/task.pb.h"
#include "search/compose.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "search/specs.h"

namespace paratune::server {

/// The validated domain spec (InvalidArgument naming the field for a bad one).
absl::StatusOr<JobSpec> SpecFromProto(const v1::JobSpec& spec);
/// A spec's JSON form (spec file, REST body) to the wire message, validated on the way:
/// InvalidArgument naming the field. The message carries the canonical form (explicit
/// model fields, defaults written out).
absl::StatusOr<v1::JobSpec> SpecProtoFromJson(const nlohmann::json& json);

v1::ParallelConfig ToProto(const ParallelConfig& config);
v1::RankedConfig ToProto(const RankedConfig& ranked);
v1::PlanResult ToProto(const PlanResult& result);
absl::StatusOr<PlanResult> PlanResultFromProto(const v1::PlanResult& result);

/// A profile task as the wire message (id, job_id and attempt left empty).
v1::ProfileTask ToProto(const ProfileTaskSpec& task);
/// What a worker reported for a layer task, in the form composition uses.
LayerMeasurement MeasurementFromResult(const v1::TaskResult& result);
/// What a worker reported for a collective sweep.
CommMeasurement CommMeasurementFromResult(const v1::TaskResult& result);

/// "SUCCEEDED", "PROFILING", ... (the enum name without the JOB_STATE_ prefix).
std::string JobStateName(v1::JobState state);
bool IsTerminal(v1::JobState state);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_CONVERT_H_
