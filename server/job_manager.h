// The coordinator: a thin facade that implements the two handler interfaces that the
// gRPC services and the REST gateway call (server/handlers.h) over parts with one concern
// each, as Ray's raylet keeps leasing, the worker pool and scheduling apart:
//   JobLifecycle    the jobs, their state machine and durability (server/job_lifecycle.h),
//                   with its ProfileStage and VerifyStage and a ResultsCache;
//   LeaseBroker     the task queue, leases, the long poll and one measurement per host
//                   (server/lease_broker.h);
//   WorkerRegistry  registered workers and their liveness (server/worker_registry.h);
//   JobExecutor     the threads that plan and compose outside every lock.
//
// Worker protocol: Register returns an id and the intervals; Heartbeat renews the leases
// of the tasks the worker names and answers which ones to stop, or `reregister` for an
// unknown id; LeaseTask long-polls; ReportResult is accepted once per (task id, attempt)
// (server/job_lifecycle.h says which reports count). LeaseTask/ReportResult from an
// unknown worker id fail with NOT_FOUND ("register again"). A worker silent for
// lease_timeout_ms is "lost" and its leases are re-queued; a task leased max_attempts
// times without a result fails.
//
// Thread-safe. Background threads: executors (planning and composing, max(2, cores) of
// them) and a reaper (lease expiry, lost workers, metrics gauges).
#ifndef PARATUNE_SERVER_JOB_MANAGER_H_
#define PARATUNE_SERVER_JOB_MANAGER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "search/specs.h"
#include "server/clock.h"
#include "server/handlers.h"
#include "server/job_executor.h"
#include "server/job_lifecycle.h"
#include "server/lease_broker.h"
#include "server/store.h"
#include "server/verify_plan.h"
#include "server/worker_registry.h"

namespace paratune::server {

class Metrics;

/// The job lifecycle's options (planner, profile and verify options, results cache and
/// finished jobs in memory: server/job_lifecycle.h) and the leasing and metrics ones.
struct JobManagerOptions : JobLifecycleOptions {
  /// A lease not renewed for this long expires (the task is re-queued).
  int64_t lease_timeout_ms = 30'000;
  /// Heartbeat period asked of workers.
  int64_t heartbeat_interval_ms = 5'000;
  /// Leases per task before it fails.
  int64_t max_attempts = 3;
  /// Optional metrics sink (gauges of jobs, tasks, workers; refreshed by the reaper, at
  /// most a second old).
  Metrics* metrics = nullptr;
};

/// Implements both handler interfaces over the parts. See the file comment.
class JobManager final : public AutotunerHandler, public WorkerHubHandler {
 public:
  /// Loads unfinished jobs from `store` and starts the background threads. `clock` must
  /// outlive the manager.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(std::unique_ptr<Store> store,
                                                            const Clock* clock,
                                                            JobManagerOptions options);
  ~JobManager() override;
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  /// Stops the background threads and ends WatchJob/LeaseTask waits. Idempotent.
  void Shutdown();

  // AutotunerHandler. WatchJob sends the job on every change and, unchanged, every 10 s.
  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request) override;
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) override;
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) override;
  absl::Status WatchJob(const v1::WatchJobRequest& request,
                        const std::function<bool(const v1::Job&)>& on_update) override;
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request) override;
  absl::StatusOr<v1::JobResults> GetResults(const v1::GetResultsRequest& request) override;
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest& request) override;

  // WorkerHubHandler.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override;
  absl::StatusOr<v1::LeaseTaskResponse> LeaseTask(const v1::LeaseTaskRequest& request) override;
  absl::StatusOr<v1::ReportResultResponse> ReportResult(
      const v1::ReportResultRequest& request) override;
  absl::StatusOr<v1::DeregisterResponse> Deregister(const v1::DeregisterRequest& request) override;

  /// Runs lease expiry and lost-worker detection now (the reaper does it periodically;
  /// tests with a FakeClock call it after advancing time).
  void ReapNow();
  /// Blocks until the executor has no planning or composing work queued or running.
  void WaitIdle();
  /// Tasks handed to workers since start (leases), for tests.
  int64_t leases_granted() const;
  /// Decoded rankings held in memory now: those of running jobs plus the cached ones of
  /// finished jobs (tests: bounded by results_cache_size once jobs finish).
  int64_t resident_results() const;
  /// Finished jobs held whole in memory (tests: at most max_finished_jobs_in_memory).
  int64_t whole_finished_jobs() const;

 private:
  JobManager(std::unique_ptr<Store> store, const Clock* clock, JobManagerOptions options);
  void ReaperLoop();
  void UpdateMetrics();

  const Clock* const clock_;
  const JobManagerOptions options_;
  WorkerRegistry workers_;
  LeaseBroker broker_;
  JobExecutor executor_;
  JobLifecycle jobs_;

  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool stopping_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_JOB_MANAGER_H_
