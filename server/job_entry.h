// A job as the coordinator works on it, shared by the job lifecycle and its stages
// (server/job_lifecycle.h, profile_stage.h, verify_stage.h).
//
// Thread-compatible: the JobLifecycle holds its lock while it or a stage touches one.
#ifndef PARATUNE_SERVER_JOB_ENTRY_H_
#define PARATUNE_SERVER_JOB_ENTRY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/serving_spec.h"
#include "paratune/v1/job.pb.h"
#include "paratune/v1/service.pb.h"
#include "search/specs.h"
#include "server/store.h"

namespace paratune::server {

struct JobEntry {
  JobRecord record;
  JobSpec spec;  ///< Domain form, parsed at submit/reload.
  /// An inference job's domain spec (`kind: inference`), parsed at submit/reload; `spec`
  /// then keeps its defaults (model mode, nothing to verify).
  std::optional<inference::InferenceJobSpec> inference;
  std::vector<TaskRecord> tasks;  ///< Profile tasks, then verify parts.
  /// When the first task was queued (the ETA's origin); 0 before.
  int64_t profiling_start_ms = 0;
  /// record.results / record.modelled changed since they were last stored.
  bool rankings_dirty = false;
  /// A finished job whose final ranking is in the store (record.results then stays empty
  /// unless storing it failed).
  bool has_results = false;

  /// The task `task_id` of this job, or null.
  TaskRecord* FindTask(const std::string& task_id);
  /// Sets record.job.progress from the tasks: counts, and the ETA at `now_ms` (the time
  /// per measured task so far times the tasks left; 0 once the job ended).
  void UpdateProgress(int64_t now_ms);
};

/// The state a stage asks its job to move to, with the error for FAILED.
struct Transition {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::string error;
};

/// A new PENDING job for `request` (its spec validated), created at `now_ms`; the caller
/// sets its id.
absl::StatusOr<JobEntry> NewJobEntry(const v1::SubmitJobRequest& request, int64_t now_ms);

/// The same for a `kind: inference` spec (NewJobEntry calls it for one).
absl::StatusOr<JobEntry> NewInferenceJobEntry(const v1::SubmitJobRequest& request, int64_t now_ms);

/// Sets `ts` to `ms` milliseconds since the Unix epoch.
void SetTime(google::protobuf::Timestamp* ts, int64_t ms);

/// A failed task's result: `message`, at `task`'s attempt.
v1::TaskResult FailureResult(const v1::ProfileTask& task, const std::string& message);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_JOB_ENTRY_H_
