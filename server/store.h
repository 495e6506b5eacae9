// Durable state of the coordinator: jobs, their results, profile tasks and the profile
// cache. Behind an interface so that tests can use an in-memory database; the only
// implementation is SQLite (WAL mode), with ":memory:" for tests.
//
// Every method commits before it returns: the coordinator acknowledges a state change
// only after the store has it.
#ifndef PARATUNE_SERVER_STORE_H_
#define PARATUNE_SERVER_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "paratune/v1/job.pb.h"
#include "paratune/v1/task.pb.h"

namespace paratune::server {

/// Where a profile task stands.
enum class TaskState { kPending = 0, kDone = 1, kFailed = 2 };

/// A stored job: the wire form plus the coordinator's working data.
struct JobRecord {
  v1::Job job;
  /// The analytical ranking the profile tasks were derived from (profile mode), or the
  /// final ranking (model mode). Absent until planning finished.
  std::optional<v1::PlanResult> modelled;
  /// The final ranking, once the job succeeded.
  std::optional<v1::PlanResult> results;
  /// Whether the store holds a final ranking for the job; set by ListJobsForRecovery,
  /// which leaves finished jobs' rankings unread.
  bool has_results = false;
};

/// A stored profile task with its latest result.
struct TaskRecord {
  v1::ProfileTask task;  ///< task.attempt = leases handed out so far.
  TaskState state = TaskState::kPending;
  /// The accepted result (kDone) or the last failure (kFailed).
  std::optional<v1::TaskResult> result;
};

/// After a failed or cancelled attempt (`record.result` set): true while the task may run
/// again; once it has been leased `max_attempts` times it is FAILED and its result's
/// message says so ("...; gave up after N attempts"), and false.
inline bool RetryOrGiveUp(TaskRecord& record, int64_t max_attempts) {
  if (record.task.attempt() < max_attempts) return true;
  record.state = TaskState::kFailed;
  record.result->set_message(absl::StrCat(record.result->message(), "; gave up after ",
                                          record.task.attempt(), " attempts"));
  return false;
}

/// Thread-compatible: callers serialise access (the JobManager holds its mutex).
class Store {
 public:
  virtual ~Store() = default;

  /// Inserts or replaces the job (keyed by job.id).
  virtual absl::Status PutJob(const JobRecord& record) = 0;
  /// Updates only the job message and state of an existing job (progress, transitions
  /// that leave the rankings alone): the ranking blobs, megabytes for big searches, are
  /// not rewritten. NotFound for an unknown id.
  virtual absl::Status UpdateJob(const v1::Job& job) = 0;
  virtual absl::StatusOr<JobRecord> GetJob(const std::string& id) = 0;
  /// The job message of `id` alone, without the ranking blobs. NotFound for an unknown id.
  virtual absl::StatusOr<v1::Job> GetJobMessage(const std::string& id) = 0;
  /// All jobs, oldest first.
  virtual absl::StatusOr<std::vector<JobRecord>> ListJobs() = 0;
  /// All jobs, oldest first, as a restarting coordinator needs them: unfinished jobs
  /// complete, finished ones (SUCCEEDED, FAILED, CANCELLED) without their ranking blobs
  /// (megabytes each for big searches), has_results saying whether one is stored.
  virtual absl::StatusOr<std::vector<JobRecord>> ListJobsForRecovery() = 0;
  /// The stored final ranking of a job, serialized (a v1::PlanResult), so that the caller
  /// can parse it outside its lock; nullopt when the job has none. NotFound for an
  /// unknown id.
  virtual absl::StatusOr<std::optional<std::string>> GetResultsBlob(const std::string& id) = 0;

  /// Inserts or replaces tasks, all in one transaction.
  virtual absl::Status PutTasks(const std::vector<TaskRecord>& tasks) = 0;
  /// Tasks of one job, in insertion order.
  virtual absl::StatusOr<std::vector<TaskRecord>> ListTasks(const std::string& job_id) = 0;

  /// Atomically records a task result and, when `cache` is set, the profile cache entry.
  virtual absl::Status PutTaskAndCache(const TaskRecord& task, bool cache) = 0;
  /// The cached result of work `key` on `device_kind`, if any.
  virtual absl::StatusOr<std::optional<v1::TaskResult>> GetCached(
      const std::string& device_kind, const std::string& key) = 0;
  /// Number of cache entries (metrics, tests).
  virtual absl::StatusOr<int64_t> CacheSize() = 0;
};

/// Opens (creating if needed) a SQLite store at `path` (":memory:" for a private in-memory
/// database), in WAL mode, and migrates its schema to the current version.
absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

/// The schema version this build writes.
inline constexpr int kStoreSchemaVersion = 1;

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_STORE_H_
