// The one place where wire messages (paratune.v1) and domain structs (search/) meet: specs,
// layouts, results and profile tasks, and the one JSON dialect of the wire (WireJson).
//
// Specs go proto -> JSON (the proto JSON mapping) -> search/spec_io's strict parser, so that
// gRPC, REST and the CLI's spec files share one validation path and one set of messages;
// the way back is spec_io's canonical writer, so the spec's fields are listed once.
//
// The layout's pair (ToProto(ParallelConfig), ParallelConfigFromProto) is in
// server/convert_layout.h, which the worker links as well.
#ifndef PARATUNE_SERVER_CONVERT_H_
#define PARATUNE_SERVER_CONVERT_H_

#include <string>

#include <google/protobuf/message.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "paratune/v1/job.pb.h"
#include "paratune/v1/task.pb.h"
#include "search/compose.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "search/specs.h"
#include "server/convert_layout.h"

namespace paratune::server {

/// The validated domain spec (InvalidArgument naming the field for a bad one).
absl::StatusOr<JobSpec> SpecFromProto(const v1::JobSpec& spec);
/// A spec's JSON form (spec file, REST body) to the wire message, validated on the way
/// (`kind: inference` specs by server/convert_inference.h):
/// InvalidArgument naming the field. The message carries the canonical form (explicit
/// model fields, defaults written out).
absl::StatusOr<v1::JobSpec> SpecProtoFromJson(const nlohmann::json& json);
/// The canonical wire form of a validated spec (search/spec_io.h JobSpecToJson: explicit
/// model fields, every default written out), what Job.resolved_spec holds; SpecFromProto
/// reads it back to the same spec. Internal when the canonical form does not fit the wire
/// message (a field added to one and not the other).
absl::StatusOr<v1::JobSpec> SpecToProto(const JobSpec& spec);

v1::RankedConfig ToProto(const RankedConfig& ranked);
/// A ranked layout back (memory from GiB to bytes; the verification has no domain form).
absl::StatusOr<RankedConfig> RankedConfigFromProto(const v1::RankedConfig& ranked);
/// Rejected layouts listed in a PlanResult that the coordinator stores and serves; the
/// others are only counted (rejected_total, rejected_reasons). A GPT-3 175B search on 1024
/// GPUs rejects ~15,800 layouts, megabytes per job.
inline constexpr int64_t kMaxRejectedListed = 200;

/// The rule a rejection reason states, the key of PlanResult.rejected_reasons: the reason
/// without its parenthesised groups, numbers replaced by "N", spaces collapsed
/// ("tp (3) must divide model.num_attention_heads (96)" -> "tp must divide
/// model.num_attention_heads"; "out of memory by 3.2 GiB (peak 83.2 of 80.0 GiB)" -> "out
/// of memory by N GiB").
std::string RejectionRule(const std::string& reason);

/// The wire form with the first `max_rejected` rejected layouts listed and all of them
/// counted (rejected_total, rejected_reasons, most frequent rule first).
v1::PlanResult ToProto(const PlanResult& result, int64_t max_rejected = kMaxRejectedListed);
/// Caps an already built result the same way. A result whose counts are set
/// (rejected_total > 0) keeps them; one without (stored before the counts existed) gets
/// them from its full list first. Idempotent.
void CapRejected(v1::PlanResult& result, int64_t max_rejected = kMaxRejectedListed);
absl::StatusOr<PlanResult> PlanResultFromProto(const v1::PlanResult& result);
/// A memory breakdown from its wire form (GiB) back to bytes (peak_gib is derived).
MemoryBreakdown MemoryFromProto(const v1::MemoryBreakdown& memory);

/// A profile task as the wire message (id, job_id and attempt left empty).
v1::ProfileTask ToProto(const ProfileTaskSpec& task);
/// A MoE layer task's fields (the profile task's, and a VerifyTask's expert block).
v1::MoeLayerTask ToProto(const MoeProfileSpec& moe);
/// What a worker reported for a layer task, in the form composition uses.
LayerMeasurement MeasurementFromResult(const v1::TaskResult& result);
/// What a worker reported for a collective sweep.
CommMeasurement CommMeasurementFromResult(const v1::TaskResult& result);
/// What a worker reported for an MoE layer task (not ok, with the reason, unless OK with
/// forward and backward timings).
MoeMeasurement MoeMeasurementFromResult(const v1::TaskResult& result);

/// The JSON of a wire message in the proto JSON mapping, the one dialect of the CLI's
/// --json and of REST: proto field names, every field printed (zeros and empty lists too;
/// unset sub-messages left out), int64 as strings, doubles to 17 significant digits (they
/// read back exactly). `pretty` adds protobuf's whitespace (one space of indent per level).
/// No trailing newline.
std::string WireJson(const google::protobuf::Message& message, bool pretty = true);

/// "SUCCEEDED", "PROFILING", ... (the enum name without the JOB_STATE_ prefix).
std::string JobStateName(v1::JobState state);

/// The spec a job is planned and rendered from: its resolved spec (presets expanded) when
/// stored, else the submitted one.
const v1::JobSpec& RenderedSpec(const v1::Job& job);
bool IsTerminal(v1::JobState state);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_CONVERT_H_
