// The bounds of the coordinator's API, enforced at the edge (the gRPC services and the REST
// gateway call these before a handler sees a request), so that one request cannot grow
// what every later request reads: a 3 MB job name was once stored, and every ListJobs
// after it exceeded the 4 MiB message limit.
//
//   field                                    bound
//   JobSpec.name, model.name                 kMaxSpecNameBytes (256) bytes, printable
//   model.preset and every keyword field     kMaxSpecKeywordBytes (64) bytes
//     (kind, serving.engine, serving.batching, search.*_precision[i] included)
//   model.hf_config_json                     kMaxHfConfigJsonBytes (24 KiB)
//   each search.* list                       kMaxSearchListEntries (64) entries
//   job, worker and task ids                 kMaxIdBytes (128) bytes, not empty
//   ListJobs page_size                       0..kMaxListJobsPageSize (0 = 100)
//   ListJobs page_token                      kMaxIdBytes bytes
//   ListJobs state                           a JobState value
//   worker name, device names, backend ...   kMaxSpecNameBytes / kMaxSpecKeywordBytes
//   devices per worker, task ids/heartbeat   kMaxDevicesPerWorker (1024)
//   TaskResult.message                       kMaxTaskMessageBytes (64 KiB)
//   each list in a TaskResult                kMaxTaskResultEntries (1,048,576)
//   one gRPC message                         kMaxGrpcReceiveBytes (4 MiB)
//
// The spec bounds live in search/specs.h (the CLI checks them too); the numeric rules of a
// spec are JobSpec::Validate's. Messages name the field and the bound.
#ifndef PARATUNE_SERVER_LIMITS_H_
#define PARATUNE_SERVER_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "paratune/v1/service.pb.h"
#include "search/specs.h"

namespace paratune::server {

/// A job, worker or task id: bytes.
inline constexpr size_t kMaxIdBytes = 128;
/// Jobs per ListJobs page. A job with every spec field at its bound serializes to about
/// 36 KB, so a full page stays under gRPC's 4 MiB (LimitsTest in grpc_services_test.cc).
inline constexpr int kMaxListJobsPageSize = 100;
/// Devices one worker registers (paratune-worker --devices has the same bound).
inline constexpr size_t kMaxDevicesPerWorker = 1024;
/// A worker's free-text task message (an error, a log tail): bytes.
inline constexpr size_t kMaxTaskMessageBytes = 64 * 1024;
/// Entries of each list in a TaskResult (phases, samples, steps, ranks).
inline constexpr size_t kMaxTaskResultEntries = size_t{1} << 20;
/// The gRPC server's receive limit, set explicitly (gRPC's default): a larger message is
/// refused RESOURCE_EXHAUSTED before a service sees it.
inline constexpr int kMaxGrpcReceiveBytes = 4 * 1024 * 1024;

/// The text and list bounds of a v1 JobSpec (the table above), checked before the spec is
/// parsed: InvalidArgument naming the field and the bound.
absl::Status ValidateJobSpecBounds(const v1::JobSpec& spec);
/// SubmitJob: the spec's bounds.
absl::Status ValidateSubmitJobRequest(const v1::SubmitJobRequest& request);
/// A job id in GetJob, WatchJob, CancelJob, GetResults (`field` names it): not empty, at
/// most kMaxIdBytes.
absl::Status ValidateId(absl::string_view field, absl::string_view id);
/// page_size 0..kMaxListJobsPageSize, page_token at most kMaxIdBytes, state a JobState.
absl::Status ValidateListJobsRequest(const v1::ListJobsRequest& request);

/// Worker calls: ids, names and lists of Register, Heartbeat, LeaseTask, ReportResult and
/// Deregister.
absl::Status ValidateRegisterRequest(const v1::RegisterRequest& request);
absl::Status ValidateHeartbeatRequest(const v1::HeartbeatRequest& request);
absl::Status ValidateReportResultRequest(const v1::ReportResultRequest& request);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_LIMITS_H_
