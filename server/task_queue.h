// Profile tasks waiting for a worker or leased to one. A lease lasts `lease_timeout_ms`
// unless renewed (worker heartbeats); an expired lease, or a lost worker, puts the task
// back in the queue until it has been leased `max_attempts` times.
//
// Thread-compatible: the LeaseBroker calls it under its mutex.
#ifndef PARATUNE_SERVER_TASK_QUEUE_H_
#define PARATUNE_SERVER_TASK_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "paratune/v1/task.pb.h"

namespace paratune::server {

class TaskQueue {
 public:
  TaskQueue(int64_t lease_timeout_ms, int64_t max_attempts)
      : lease_timeout_ms_(lease_timeout_ms), max_attempts_(max_attempts) {}

  /// Queues `task` (task.attempt = leases it already had, e.g. before a restart).
  void Add(const v1::ProfileTask& task);

  /// Leases the oldest queued task for `device_kind` to `worker_id`: its attempt goes up by
  /// one. The returned copy carries the new attempt.
  /// With `can_run`, only a task it accepts (e.g. one the worker has enough devices for).
  std::optional<v1::ProfileTask> Lease(
      const std::string& worker_id, const std::string& device_kind, int64_t now_ms,
      const std::function<bool(const v1::ProfileTask&)>& can_run = nullptr);
  /// When the lease of a leased task expires.
  int64_t LeaseExpiry(const std::string& task_id) const;
  /// Whether `task_id` is leased now.
  bool IsLeased(const std::string& task_id) const { return leases_.count(task_id) > 0; }

  /// Renews the leases `worker_id` holds among `task_ids`; returns the ids it does not hold
  /// (cancelled, expired or unknown): the worker must stop them.
  std::vector<std::string> Renew(const std::string& worker_id,
                                 const std::vector<std::string>& task_ids, int64_t now_ms);

  /// Ends the lease of (task_id, attempt) held by `worker_id`: OK when it matches, else
  /// FailedPrecondition saying why (late, duplicate, unknown). The task leaves the queue.
  absl::Status Complete(const std::string& task_id, int64_t attempt,
                        const std::string& worker_id);

  struct Requeue {
    v1::ProfileTask task;
    bool exhausted = false;  ///< Leased max_attempts times: removed, not queued.
  };
  /// Puts a task whose lease ended without a result (worker failure) back in the queue,
  /// or drops it when exhausted.
  Requeue Retry(const v1::ProfileTask& task);
  /// Leases that expired before `now_ms`.
  std::vector<Requeue> Expire(int64_t now_ms);
  /// Every lease of `worker_id` (lost or gone).
  std::vector<Requeue> ReleaseWorker(const std::string& worker_id);
  /// Drops one task, queued or leased (its worker is told to stop at its next heartbeat);
  /// true when it was leased.
  bool Remove(const std::string& task_id);
  /// Drops every task of `job_id`; returns the ids that were leased.
  std::vector<std::string> RemoveJob(const std::string& job_id);

  int64_t queued() const { return static_cast<int64_t>(queue_.size()); }
  int64_t leased() const { return static_cast<int64_t>(leases_.size()); }
  int64_t max_attempts() const { return max_attempts_; }
  int64_t lease_timeout_ms() const { return lease_timeout_ms_; }

 private:
  struct LeaseEntry {
    v1::ProfileTask task;
    std::string worker_id;
    int64_t expires_ms = 0;
  };
  std::vector<Requeue> EndLeases(const std::vector<std::string>& task_ids);

  const int64_t lease_timeout_ms_;
  const int64_t max_attempts_;
  std::deque<v1::ProfileTask> queue_;
  std::map<std::string, LeaseEntry> leases_;  // by task id
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_TASK_QUEUE_H_
