// Hands tasks to workers: the task queue with its leases (server/task_queue.h), the long
// poll of LeaseTask, and the rule that workers on one host do not measure at the same
// time: a profile task (layer, collective, optimizer) is not leased to a worker while
// another worker on its host holds a profile task's lease, since co-located measurements
// slow each other down (a worker runs its own tasks one at a time). Verify parts are exempt: a
// gang's parts on one host must run together.
//
// Thread-safe (one internal mutex). Lock order: callers may hold the JobLifecycle's lock
// when they call in; `can_run` callbacks run under this lock and may only take leaf locks
// (WorkerRegistry). Tests drive it with a FakeClock.
#ifndef PARATUNE_SERVER_LEASE_BROKER_H_
#define PARATUNE_SERVER_LEASE_BROKER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "paratune/v1/task.pb.h"
#include "server/clock.h"
#include "server/task_queue.h"

namespace paratune::server {

/// Who asks for a task.
struct LeaseRequest {
  std::string worker_id;
  std::string device_kind;
  /// The worker's host; "" (unknown) makes the worker a host of its own.
  std::string host;
  /// Whether this worker can run the task (devices, backend); null accepts every task.
  std::function<bool(const v1::ProfileTask&)> can_run;
};

/// A task handed to a worker.
struct GrantedLease {
  v1::ProfileTask task;  ///< task.attempt counts this lease.
  int64_t expires_ms = 0;
};

class LeaseBroker {
 public:
  /// `clock` must outlive the broker.
  LeaseBroker(const Clock* clock, int64_t lease_timeout_ms, int64_t max_attempts)
      : clock_(clock), max_attempts_(max_attempts), queue_(lease_timeout_ms, max_attempts) {}

  /// Queues `task` (task.attempt = leases it already had) and wakes waiting workers.
  void Add(const v1::ProfileTask& task);
  /// Leases the oldest queued task `request` may take, waiting until `deadline` for one;
  /// nullopt at the deadline or after Shutdown.
  std::optional<GrantedLease> Lease(const LeaseRequest& request,
                                    std::chrono::steady_clock::time_point deadline);
  /// Takes back a lease whose attempt could not be recorded: the task is queued again with
  /// the attempt it had before.
  void Undo(const GrantedLease& lease, const std::string& worker_id);

  /// TaskQueue::Renew, TaskQueue::Complete (see server/task_queue.h).
  std::vector<std::string> Renew(const std::string& worker_id,
                                 const std::vector<std::string>& task_ids);
  absl::Status Complete(const std::string& task_id, int64_t attempt, const std::string& worker_id);
  /// Leases that expired by now, and every lease of `worker_id`: queued again or, after
  /// max_attempts leases, dropped (Requeue::exhausted).
  std::vector<TaskQueue::Requeue> Expire();
  std::vector<TaskQueue::Requeue> ReleaseWorker(const std::string& worker_id);
  /// Drops one task, queued or leased; true when it was leased.
  bool Remove(const std::string& task_id);
  /// Drops every task of `job_id`.
  void RemoveJob(const std::string& job_id);
  /// Whether `task_id` is leased now.
  bool IsLeased(const std::string& task_id) const;

  /// Ends every waiting Lease call; later ones return at once.
  void Shutdown();

  int64_t queued() const;
  int64_t leased() const;
  /// Leases granted since construction.
  int64_t leases_granted() const;
  int64_t max_attempts() const { return max_attempts_; }

 private:
  // Whether a worker other than `worker_id` holds a profile task's lease on `host` (leases
  // that ended are forgotten).
  bool HostBusyLocked(const std::string& host, const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const int64_t max_attempts_;
  mutable std::mutex mu_;
  std::condition_variable changed_cv_;  // A task queued or a lease ended.
  TaskQueue queue_ ABSL_GUARDED_BY(mu_);
  struct Holder {
    std::string host;
    std::string worker_id;
  };
  // Leased profile tasks by id: the worker that holds each, and its host.
  std::map<std::string, Holder> profiling_hosts_ ABSL_GUARDED_BY(mu_);
  int64_t leases_granted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_LEASE_BROKER_H_
