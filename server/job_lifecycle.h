// The jobs and their state machine: PENDING -> PLANNING -> [PROFILING -> COMPOSING ->]
// [VERIFYING ->] SUCCEEDED, or FAILED / CANCELLED. Model mode answers from the analytical
// plan; profile mode hands its tasks to the ProfileStage, and a ranking with
// search.verify_top_k > 0 goes through the VerifyStage. A plan with no layout at all fails
// the job with the spec-level reasons (search/empty_result.h).
//
// Durability: every transition, lease (attempt count) and accepted result is committed to
// the Store before the call that caused it returns. Recover reloads unfinished jobs:
// PENDING/PLANNING are planned again, PROFILING re-queues its unfinished tasks (their
// leases died with the old process), COMPOSING composes again, VERIFYING restarts its
// unfinished gangs.
//
// Reports: a result is accepted once per (task id, attempt) from the worker that holds the
// lease; also, for a profile task still unfinished and not leased, the result of its
// latest recorded lease (a worker that finished while the coordinator was down). Late,
// duplicate or foreign reports get accepted=false with the reason.
//
// Memory: a finished job keeps no ranking in memory; its final ranking lives in the store
// and is read back through the ResultsCache. The newest max_finished_jobs_in_memory
// finished jobs stay whole (Job message, domain spec, task records); an older one keeps
// only a compact entry (its id, state and whether a ranking is stored, for ListJobs'
// order and filter) and its Job message is read from the store when asked for, so memory
// grows by that entry, not by the job's size, per finished job.
//
// Thread-safe (one mutex over the jobs and the store). Lock order: this lock, then the
// LeaseBroker's, then the leaf locks (WorkerRegistry, ResultsCache, JobExecutor).
#ifndef PARATUNE_SERVER_JOB_LIFECYCLE_H_
#define PARATUNE_SERVER_JOB_LIFECYCLE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "paratune/v1/service.pb.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "search/specs.h"
#include "server/clock.h"
#include "server/job_entry.h"
#include "server/job_executor.h"
#include "server/lease_broker.h"
#include "server/profile_stage.h"
#include "server/results_cache.h"
#include "server/store.h"
#include "server/verify_plan.h"
#include "server/verify_stage.h"
#include "server/worker_registry.h"

namespace paratune::server {

struct JobLifecycleOptions {
  /// The analytical planner (paratune::Plan); must be set.
  std::function<absl::StatusOr<PlanResult>(const JobSpec&)> plan;
  /// The inference planner (inference::PlanInference) for `kind: inference` jobs; when
  /// unset, such jobs fail at planning saying so.
  std::function<absl::StatusOr<inference::InferencePlanResult>(const inference::InferenceJobSpec&)>
      plan_inference;
  /// Timed and untimed steps per profile task, and how many candidates to profile.
  ProfilePlanOptions profile;
  /// Steps, seed and rendezvous timeout of verify runs.
  VerifyRunOptions verify;
  /// Finished jobs' decoded rankings kept in memory (LRU). At least 1.
  int64_t results_cache_size = 16;
  /// Finished jobs kept whole in memory (the newest to finish); older ones keep a compact
  /// entry and are read from the store on demand. At least 1.
  int64_t max_finished_jobs_in_memory = 256;
};

/// Counts for the metrics gauges.
struct JobCounts {
  std::map<v1::JobState, int64_t> jobs;
  int64_t tasks_done = 0;
  int64_t tasks_failed = 0;
  /// Jobs of every state by kind ("training", "inference").
  std::map<std::string, int64_t> jobs_by_kind;
  /// Layouts the planner scored (candidates_considered) since start, by kind.
  std::map<std::string, int64_t> candidates_by_kind;
};

class JobLifecycle {
 public:
  /// The collaborators must outlive the lifecycle.
  JobLifecycle(std::unique_ptr<Store> store, const Clock* clock, LeaseBroker* broker,
               WorkerRegistry* workers, JobExecutor* executor, JobLifecycleOptions options);

  /// Loads the stored jobs and resumes the unfinished ones (see the file comment).
  absl::Status Recover();
  /// Ends Watch calls and refuses new jobs.
  void Shutdown();

  // The client operations of AutotunerHandler (server/handlers.h); WatchJob is built on
  // Snapshot.
  absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> Get(const v1::GetJobRequest& request);
  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& request);
  /// The job `id` with its progress now, after waiting up to `wait` for any job to change
  /// (0: at once). Unavailable after Shutdown.
  absl::StatusOr<v1::Job> Snapshot(const std::string& id, std::chrono::milliseconds wait);
  absl::StatusOr<v1::Job> Cancel(const v1::CancelJobRequest& request);
  absl::StatusOr<v1::JobResults> GetResults(const v1::GetResultsRequest& request);

  /// The executor's steps.
  void RunPlan(const std::string& job_id);
  /// RunPlan of a `kind: inference` job: the serving search, then PROFILING (profile
  /// mode: the serving_step tasks of ProfileStage::CreateInferenceTasks), VERIFYING
  /// (search.verify_top_k) or SUCCEEDED with the ranking, or FAILED with the reasons when
  /// no layout is feasible.
  void RunInferencePlan(const std::string& job_id, const inference::InferenceJobSpec& spec);
  void RunCompose(const std::string& job_id);

  /// Makes the attempt count of a lease durable before the worker sees the task; on
  /// failure the lease is undone.
  absl::Status RecordLease(const GrantedLease& lease, const std::string& worker_id);
  /// A worker's result (see the file comment).
  absl::StatusOr<v1::ReportResultResponse> ApplyReport(const std::string& worker_id,
                                                       const v1::TaskResult& result);
  /// Ends expired leases and those of workers lost by now.
  void Reap();
  /// Ends the leases of `worker_id`, which left (`why`).
  void ReleaseWorker(const std::string& worker_id, const std::string& why);

  JobCounts Counts() const;
  /// Decoded rankings in memory: running jobs' plus the cached ones.
  int64_t resident_results() const;
  /// Finished jobs held whole in memory (at most max_finished_jobs_in_memory).
  int64_t whole_finished_jobs() const;

 private:
  // A finished job no longer held whole: what List, Cancel and GetResults need without
  // reading the store.
  struct CompactJob {
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    bool has_results = false;  // The store holds a final ranking.
    bool inference = false;    // kind: inference.
  };

  absl::Status RecoverJob(JobEntry& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `transition`; COMPOSING schedules the compose step.
  absl::Status ApplyLocked(JobEntry& job, const Transition& transition)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetStateLocked(JobEntry& job, v1::JobState state, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the job; `rankings` also rewrites the modelled/final ranking blobs.
  absl::Status PersistLocked(JobEntry& job, bool rankings = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job whose ranking is set on to verifying or success.
  void FinishRankingLocked(JobEntry& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job a planner ran for, when it is still PLANNING (not cancelled or deleted
  // meanwhile) and its plan succeeded; a failed plan fails the job. nullptr otherwise.
  JobEntry* PlannedJobLocked(const std::string& job_id, const absl::Status& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A planned job: model mode finishes; profile mode creates and queues its tasks.
  void AcceptPlanLocked(JobEntry& job, const PlanResult& plan, v1::PlanResult plan_proto)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RequeueLocked(const std::vector<TaskQueue::Requeue>& requeues, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a report the lease broker refused still finishes the task (see the file
  // comment).
  bool AcceptsUnleasedLocked(const TaskRecord* record, const v1::TaskResult& result) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that job `id` finished (and is stored so); compacts the oldest whole finished
  // jobs beyond the bound.
  void RetireLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Job message of `id`, whole or compact (read from the store); NotFound otherwise.
  absl::StatusOr<v1::Job> JobMessageLocked(const std::string& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  LeaseBroker* const broker_;
  WorkerRegistry* const workers_;
  JobExecutor* const executor_;
  const JobLifecycleOptions options_;
  ResultsCache results_cache_;

  mutable std::mutex mu_;
  std::condition_variable changed_cv_;  // Any job changed (Snapshot waiters).
  std::unique_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  ProfileStage profile_ ABSL_GUARDED_BY(mu_);
  VerifyStage verify_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);  // Running and whole finished.
  std::map<std::string, CompactJob> compact_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);      // Oldest first, all jobs.
  std::deque<std::string> whole_finished_ ABSL_GUARDED_BY(mu_);  // Oldest to finish first.
  JobCounts compact_counts_ ABSL_GUARDED_BY(mu_);                // Of the compact jobs.
  // Layouts scored by planning since start, by kind.
  std::map<std::string, int64_t> candidates_scored_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_JOB_LIFECYCLE_H_
