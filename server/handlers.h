// The coordinator's request handlers: what the gRPC services and the REST gateway both
// call, and what tests call directly. Transport-free: no grpc:: types here; errors are
// absl::Status with gRPC's canonical codes (InvalidArgument, NotFound, FailedPrecondition,
// Unauthenticated, PermissionDenied, ResourceExhausted, Unavailable).
#ifndef PARATUNE_SERVER_HANDLERS_H_
#define PARATUNE_SERVER_HANDLERS_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paratune/v1/service.pb.h"

namespace paratune::server {

/// Client-facing operations (paratune.v1.Autotuner). Implementations are thread-safe.
class AutotunerHandler {
 public:
  virtual ~AutotunerHandler() = default;
  virtual absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request) = 0;
  virtual absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) = 0;
  virtual absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) = 0;
  /// Calls `on_update` with the job now and after every change, until the job reaches a
  /// terminal state, `on_update` returns false (client gone), or the handler shuts down.
  virtual absl::Status WatchJob(const v1::WatchJobRequest& request,
                                const std::function<bool(const v1::Job&)>& on_update) = 0;
  virtual absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request) = 0;
  virtual absl::StatusOr<v1::JobResults> GetResults(const v1::GetResultsRequest& request) = 0;
  virtual absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) = 0;
};

/// Worker-facing operations (paratune.v1.WorkerHub). Implementations are thread-safe.
class WorkerHubHandler {
 public:
  virtual ~WorkerHubHandler() = default;
  virtual absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) = 0;
  /// Long-polls up to request.wait_ms for a task.
  virtual absl::StatusOr<v1::LeaseTaskResponse> LeaseTask(
      const v1::LeaseTaskRequest& request) = 0;
  virtual absl::StatusOr<v1::ReportResultResponse> ReportResult(
      const v1::ReportResultRequest& request) = 0;
  virtual absl::StatusOr<v1::DeregisterResponse> Deregister(
      const v1::DeregisterRequest& request) = 0;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_HANDLERS_H_
