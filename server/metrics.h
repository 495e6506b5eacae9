// Prometheus metrics of the coordinator, exposed as text on the REST server's /metrics
// (one port serves the API, the dashboard and the metrics).
//
// Thread-safe: every method may be called from any thread.
#ifndef PARATUNE_SERVER_METRICS_H_
#define PARATUNE_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "paratune/v1/job.pb.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace paratune::server {

/// Which server a request came through (label `transport`).
enum class Transport { kGrpc, kRest };

/// Task queue states (label `state` of paratune_tasks).
enum class TaskGaugeState { kQueued, kLeased, kDone, kFailed };

/// The coordinator's metrics:
///   paratune_jobs{state="pending"|"planning"|...|"cancelled"}      gauge
///   paratune_tasks{state="queued"|"leased"|"done"|"failed"}         gauge
///   paratune_workers{state="idle"|"busy"|"lost"}                    gauge
///   paratune_rpc_latency_seconds{method,transport}                  histogram
///   paratune_requests_total{method,transport,code}                  counter
///   paratune_jobs_by_kind{kind="training"|"inference"}              gauge
///   paratune_candidates_scored_total{kind="training"|"inference"}   counter
/// `method` is the RPC name ("SubmitJob", "GetJob", ...; REST /v1/ requests use the name
/// of the RPC they map to; /healthz, /metrics and dashboard files are not counted); `code`
/// is the canonical status code name ("OK", "INVALID_ARGUMENT", ...).
class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Sets the number of jobs in `state` (JOB_STATE_UNSPECIFIED is ignored).
  void SetJobs(v1::JobState state, int64_t count);
  /// Sets the number of profiling tasks in `state`.
  void SetTasks(TaskGaugeState state, int64_t count);
  /// Sets the number of workers in `state` ("idle", "busy" or "lost"; other values are
  /// recorded as given, so a new state shows up rather than vanishing).
  void SetWorkers(std::string_view state, int64_t count);
  /// Sets the number of jobs (every state) of `kind`, "training" or "inference".
  void SetJobsOfKind(std::string_view kind, int64_t count);
  /// Sets the layouts the planner scored for jobs of `kind` since the coordinator started
  /// (a counter: a total below the current one is ignored).
  void SetCandidatesScored(std::string_view kind, int64_t total);
  /// Records one finished request: its latency and its outcome.
  void ObserveRequest(std::string_view method, Transport transport, absl::StatusCode code,
                      double seconds);

  /// The Prometheus text exposition format (version 0.0.4) of every metric.
  std::string Serialize() const;

  /// The label value used for a job state: "pending", "planning", ..., "cancelled".
  static std::string JobStateLabel(v1::JobState state);

  /// The underlying registry, for callers that add metrics of their own.
  prometheus::Registry& registry();

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_METRICS_H_
