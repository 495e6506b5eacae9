// The coordinator's core: the job state machine, the profile task queue with leases, the
// worker registry and the profile cache, behind the two handler interfaces that the gRPC
// services and the REST gateway call (server/handlers.h).
//
// Job lifecycle: PENDING -> PLANNING -> [PROFILING -> COMPOSING ->] [VERIFYING ->]
// SUCCEEDED, or FAILED / CANCELLED. Model mode answers from the analytical plan; profile
// mode turns the plan's top candidates into de-duplicated layer tasks
// (search/profile_plan.h), takes what the profile cache already holds for the device kind,
// leases the rest to workers of that device kind, and composes the measurements
// (search/compose.h). With search.verify_top_k > 0 the top k fitting layouts of the
// ranking are then trained end to end (VerifyTasks, kernels/training) on the workers
// registered at that moment, one task per worker-sized group of ranks (server/
// verify_plan.h); the parts of one layout form a gang that meets through the
// coordinator's rendezvous store. A part that fails (its peers did not come, a lost
// worker, an expired lease) restarts the whole gang under a fresh rendezvous namespace,
// until a part has had max_attempts leases. Each verified entry gets its Verification
// (measured next to predicted); the others a status saying why not. The ranking is
// readable (GetResults) while VERIFYING.
//
// Durability: every transition, lease (attempt count) and accepted result is committed to
// the Store before the call that caused it returns. On construction the manager reloads
// unfinished jobs: PENDING/PLANNING are planned again, PROFILING re-queues its unfinished
// tasks (their leases died with the old process), COMPOSING composes again.
//
// Worker protocol: Register returns an id and the intervals; Heartbeat renews the leases
// of the tasks the worker names and answers which ones to stop, or `reregister` for an
// unknown id; LeaseTask long-polls; ReportResult is accepted once per (task id, attempt)
// from the worker that holds the lease; late, duplicate or foreign reports get
// accepted=false with the reason. LeaseTask/ReportResult from an unknown worker id fail
// with NOT_FOUND ("register again"). A worker silent for lease_timeout_ms is "lost" and its
// leases are re-queued; a task leased max_attempts times without a result fails.
//
// Memory: a finished job keeps only its Job message (and its task records) in memory; its
// final ranking lives in the store and is read back on demand, through a small LRU cache
// of decoded rankings (results_cache_size). Rankings carry at most kMaxRejectedListed
// rejected layouts plus per-rule counts of all of them (server/convert.h). GetResults
// copies a ranking outside the lock (a shared snapshot), and transitions rewrite the
// ranking blobs only when the ranking changed.
//
// Thread-safe. Background threads: executors (planning and composing, outside the lock,
// max(2, cores) of them) and a reaper (lease expiry, lost workers, metrics gauges).
#ifndef PARATUNE_SERVER_JOB_MANAGER_H_
#define PARATUNE_SERVER_JOB_MANAGER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "search/specs.h"
#include "server/clock.h"
#include "server/handlers.h"
#include "server/store.h"
#include "server/task_queue.h"
#include "server/verify_plan.h"

namespace paratune::server {

class Metrics;

struct JobManagerOptions {
  /// A lease not renewed for this long expires (the task is re-queued).
  int64_t lease_timeout_ms = 30'000;
  /// Heartbeat period asked of workers.
  int64_t heartbeat_interval_ms = 5'000;
  /// Leases per task before it fails.
  int64_t max_attempts = 3;
  /// Timed and untimed steps per profile task, and how many candidates to profile.
  ProfilePlanOptions profile;
  /// Steps, seed and rendezvous timeout of verify runs.
  VerifyRunOptions verify;
  /// The analytical planner: paratune::Plan (search/planner.h); tests substitute a fake.
  std::function<absl::StatusOr<PlanResult>(const JobSpec&)> plan;
  /// Finished jobs' decoded rankings kept in memory (LRU); the rest are read from the store
  /// when asked for. At least 1.
  int64_t results_cache_size = 16;
  /// Optional metrics sink (gauges of jobs, tasks, workers; refreshed by the reaper, at
  /// most a second old).
  Metrics* metrics = nullptr;
};

/// Implements both handler interfaces over one state. See the file comment.
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
  absl::StatusOr<v1::DeregisterResponse> Deregister(
      const v1::DeregisterRequest& request) override;

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

 private:
  struct JobEntry {
    JobRecord record;
    JobSpec spec;                     // Domain form, parsed at submit/reload.
    std::vector<TaskRecord> tasks;    // Profile mode.
    int64_t profiling_start_ms = 0;
    // record.results / record.modelled changed since they were last stored.
    bool rankings_dirty = false;
    // A finished job whose final ranking is in the store (record.results then stays empty
    // unless storing it failed).
    bool has_results = false;
  };
  struct WorkerEntry {
    v1::WorkerInfo info;
    bool lost = false;
  };
  enum class Work { kPlan, kCompose };

  JobManager(std::unique_ptr<Store> store, const Clock* clock, JobManagerOptions options);
  absl::Status Recover();
  void ExecutorLoop();
  void ReaperLoop();
  void RunPlan(const std::string& job_id);
  void RunCompose(const std::string& job_id);

  // Helpers that need mu_ held.
  absl::Status SetStateLocked(JobEntry& job, v1::JobState state, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the job; `rankings` also rewrites the modelled/final ranking blobs.
  absl::Status PersistJobLocked(JobEntry& job, bool rankings = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateProgressLocked(JobEntry& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RequeueLocked(const TaskQueue::Requeue& r, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaybeFinishProfilingLocked(JobEntry& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a job whose ranking (record.results) is set: VERIFYING with verify tasks queued
  // when search.verify_top_k > 0 and some layout can run, else SUCCEEDED.
  absl::Status StartVerifyLocked(JobEntry& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // VERIFYING with no verify task pending: fills the Verifications, SUCCEEDED.
  absl::Status MaybeFinishVerifyingLocked(JobEntry& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every part of the verify run of layout `layout_rank` leaves the queue (leased parts:
  // their workers are told to stop). `give_up`, or a part that already had max_attempts
  // leases: the parts fail with `why`; else they are queued again under a fresh
  // rendezvous namespace.
  absl::Status ResetGangLocked(JobEntry& job, int64_t layout_rank, const std::string& why,
                               bool give_up) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskRecord* FindTaskLocked(JobEntry& job, const std::string& task_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked(Work work, const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // O(jobs + workers): called by the reaper, not on every change.
  void UpdateMetricsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewIdLocked(const char* prefix) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cached ranking of a finished job (made most recently used), or null.
  std::shared_ptr<const v1::PlanResult> CachedResultsLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CacheResultsLocked(const std::string& job_id,
                          std::shared_ptr<const v1::PlanResult> results)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const JobManagerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable changed_cv_;  // Any job changed (watchers).
  std::condition_variable tasks_cv_;    // Tasks queued (long-polling workers).
  std::condition_variable work_cv_;     // Executor work queued, or idle.
  std::unique_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  TaskQueue queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);  // Oldest first.
  std::map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);
  // Decoded final rankings of finished jobs, most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const v1::PlanResult>>> results_cache_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<Work, std::string>> work_ ABSL_GUARDED_BY(mu_);
  int executors_busy_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t id_counter_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leases_granted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> executors_;
  std::thread reaper_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_JOB_MANAGER_H_
