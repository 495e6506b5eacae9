// The seam between the daemon (leases, heartbeats, reports) and the code that measures a
// task. The daemon owns the transport; an executor only turns a ProfileTask into a
// TaskResult, so tests can plug in a fake and the real one drives kernels/.
#ifndef PARATUNE_WORKER_TASK_EXECUTOR_H_
#define PARATUNE_WORKER_TASK_EXECUTOR_H_

#include <atomic>

#include "paratune/v1/task.pb.h"

namespace paratune::worker {

/// Cooperative cancellation flag: set by the daemon (coordinator cancel, shutdown), read
/// by the executor between iterations. Thread-safe.
class CancelFlag {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

/// Measures one task. Implementations are called from one daemon thread at a time.
class TaskExecutor {
 public:
  virtual ~TaskExecutor() = default;

  /// Runs `task` and returns its outcome as data: OK with a LayerProfile or CommProfile,
  /// OOM with the bytes requested, UNSUPPORTED or FAILED with the reason, CANCELLED when
  /// `cancel` was set before the measurement finished. The daemon fills task_id, attempt,
  /// worker_id and elapsed_s, and turns an escaping exception into FAILED.
  virtual v1::TaskResult Execute(const v1::ProfileTask& task, const CancelFlag& cancel) = 0;
};

}  // namespace paratune::worker

#endif  // PARATUNE_WORKER_TASK_EXECUTOR_H_
