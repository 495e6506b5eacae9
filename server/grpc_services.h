// The gRPC side of the coordinator: thin `final` services that translate between gRPC and
// the handler interfaces (server/handlers.h), check bearer tokens (server/auth.h), record
// request metrics, and a GrpcServer that hosts them with health checking and reflection.
//
// The services use gRPC's synchronous API: LeaseTask long-polls and WatchJob streams
// block a thread each, which the sync server's thread pool is made for.
#ifndef PARATUNE_SERVER_GRPC_SERVICES_H_
#define PARATUNE_SERVER_GRPC_SERVICES_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paratune/v1/service.grpc.pb.h"
#include "server/auth.h"
#include "server/clock.h"
#include "server/handlers.h"
#include "server/metrics.h"

namespace paratune::server {

/// absl::Status -> grpc::Status (the codes are the same numbers).
grpc::Status ToGrpcStatus(const absl::Status& status);
/// grpc::Status -> absl::Status.
absl::Status FromGrpcStatus(const grpc::Status& status);

struct GrpcServerOptions {
  /// Listening address, e.g. "0.0.0.0:50051"; port 0 picks a free one (see port()). Empty:
  /// no port at all, the services are reached only through InProcessChannel().
  std::string address = "0.0.0.0:50051";
  /// PEM files; both empty = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  /// Token checks; null = open.
  const Authenticator* auth = nullptr;
  /// Request counters and latencies; null = none.
  Metrics* metrics = nullptr;
  /// More services on the same port (e.g. RendezvousService); not owned, must outlive it.
  std::vector<grpc::Service*> extra_services;
};

/// Hosts paratune.v1.Autotuner and paratune.v1.WorkerHub plus grpc.health.v1 and server
/// reflection. Thread-safe.
class GrpcServer {
 public:
  /// Builds and starts the server; the handlers must outlive it. Unavailable when the
  /// address cannot be bound, NotFound/InvalidArgument for unreadable TLS files.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(AutotunerHandler* autotuner,
                                                           WorkerHubHandler* hub,
                                                           const GrpcServerOptions& options);
  ~GrpcServer();

  /// The bound port (0 without an address).
  int port() const { return port_; }
  /// A channel to the services inside this process, with no network in between (an
  /// embedded worker's WorkerOptions::channel).
  std::shared_ptr<grpc::Channel> InProcessChannel();
  /// Stops accepting calls and waits up to `grace_ms` for running ones. Idempotent.
  void Shutdown(int64_t grace_ms);

 private:
  GrpcServer() = default;
  class Autotuner;
  class Hub;
  std::unique_ptr<Autotuner> autotuner_;
  std::unique_ptr<Hub> hub_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

/// Admission control in front of an AutotunerHandler (both transports call through it):
/// SubmitJob answers RESOURCE_EXHAUSTED (HTTP 429) while `max_pending` jobs wait to be
/// planned (PENDING or PLANNING), instead of queueing without bound (a submit-only load
/// left 14,660 of 14,888 jobs PENDING after 15 s). Every other call is forwarded.
///
/// It counts the jobs submitted through it, plus those Seed() finds waiting (a restart), in
/// submission order. When the count reaches the limit it asks the inner handler (GetJob),
/// oldest first, which have left PENDING/PLANNING, and stops at the first that has not:
/// the planner takes jobs in submission order, so one refresh costs one GetJob per job
/// planned since the last. At most one refresh per `refresh_ms`. The limit is soft: a
/// rejection can outlive the backlog by up to `refresh_ms`, a job cancelled behind an older
/// waiting one is counted until the jobs before it are planned, and concurrent submissions
/// can overshoot by the number of callers in flight. Thread-safe.
class AdmissionControl final : public AutotunerHandler {
 public:
  /// `inner` and `clock` must outlive it; `max_pending` >= 1.
  AdmissionControl(AutotunerHandler* inner, int64_t max_pending, const Clock* clock,
                   int64_t refresh_ms = 100);

  /// Counts the jobs the inner handler holds PENDING or PLANNING (call once at start).
  absl::Status Seed();
  /// Jobs counted as waiting to be planned (as of the last refresh).
  int64_t waiting() const;

  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request) override;
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) override;
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) override;
  absl::Status WatchJob(const v1::WatchJobRequest& request,
                        const std::function<bool(const v1::Job&)>& on_update) override;
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request) override;
  absl::StatusOr<v1::JobResults> GetResults(const v1::GetResultsRequest& request) override;
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override;

 private:
  void RefreshLocked();

  AutotunerHandler* const inner_;
  const int64_t max_pending_;
  const Clock* const clock_;
  const int64_t refresh_ms_;
  mutable std::mutex mu_;
  std::deque<std::string> waiting_;  // Ids counted as waiting, oldest first.
  int64_t in_flight_ = 0;            // Admitted submissions the inner handler has not answered.
  int64_t last_refresh_ms_ = 0;
  bool refreshed_ = false;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_GRPC_SERVICES_H_
