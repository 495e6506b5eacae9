// The profile stage of a job: turns the analytical ranking into de-duplicated profile
// tasks (training: search/profile_plan.h; inference: inference/serving_profile.h), takes
// what the profile cache holds for (device kind, task key), queues the rest with the
// LeaseBroker, records the workers' results, and composes the measurements into the final
// ranking (search/compose.h; inference::ComposeInference).
//
// Thread-compatible: the JobLifecycle calls it under its lock (it then takes the
// LeaseBroker's). Compose is a pure function, run by an executor outside any lock.
#ifndef PARATUNE_SERVER_PROFILE_STAGE_H_
#define PARATUNE_SERVER_PROFILE_STAGE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "search/plan_result.h"
#include "search/profile_plan.h"
#include "server/clock.h"
#include "server/job_entry.h"
#include "server/lease_broker.h"
#include "server/store.h"

namespace paratune::server {

class ProfileStage {
 public:
  /// The collaborators must outlive the stage.
  ProfileStage(Store* store, LeaseBroker* broker, const Clock* clock, ProfilePlanOptions options)
      : store_(store), broker_(broker), clock_(clock), options_(options) {}

  /// Derives the tasks of `job` from its modelled ranking `plan`, marks those the profile
  /// cache holds done, and stores them (job.tasks). The error names what failed ("profile
  /// planning failed: ...", "profile cache: ...", "store: ...").
  absl::Status CreateTasks(JobEntry& job, const PlanResult& plan);
  /// The same for an inference job (job.inference) from its modelled serving plan: the
  /// serving_step grid and the small all-reduce sweeps (inference/serving_profile.h).
  absl::Status CreateInferenceTasks(JobEntry& job, const inference::InferencePlanResult& plan);
  /// Queues the job's pending profile tasks.
  void QueuePending(const JobEntry& job);
  /// Records a worker's result for `task` (leased to `worker_id`): done (OK, out of
  /// memory; cached), failed (unsupported, or broken after max_attempts leases) or queued
  /// again.
  absl::Status ApplyReport(TaskRecord& task, const std::string& worker_id,
                           const v1::TaskResult& result);
  /// A lease ended without a result (`why`): the task was queued again, or, exhausted, fails.
  absl::Status ApplyRequeue(TaskRecord& task, const TaskQueue::Requeue& requeue,
                            const std::string& why);
  /// With every profile task finished: COMPOSING, or FAILED when all broke. Nullopt while
  /// tasks are pending or the job is not PROFILING.
  std::optional<Transition> Check(const JobEntry& job) const;

  /// The final ranking: the measurements of `tasks` composed over the `modelled` ranking.
  static absl::StatusOr<PlanResult> Compose(const JobSpec& spec, const v1::PlanResult& modelled,
                                            const std::vector<TaskRecord>& tasks,
                                            const ProfilePlanOptions& options);
  /// An inference job's final ranking: its serving tasks' measurements composed over the
  /// modelled serving plan (`modelled.inference()`).
  static absl::StatusOr<inference::InferencePlanResult> ComposeInference(
      const inference::InferenceJobSpec& spec, const v1::PlanResult& modelled,
      const std::vector<TaskRecord>& tasks);

 private:
  // Stores `protos` as the job's tasks (ids "<job>-t<i>"), those the profile cache holds
  // for (device kind, key) already done.
  absl::Status StoreTasks(JobEntry& job, std::vector<v1::ProfileTask> protos);

  Store* const store_;
  LeaseBroker* const broker_;
  const Clock* const clock_;
  const ProfilePlanOptions options_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_PROFILE_STAGE_H_
