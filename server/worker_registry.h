// The workers the coordinator knows: what each registered (device kind, devices, backend,
// host), when it was last heard from, and what it runs. A worker silent for longer than
// `lost_after_ms` is "lost" (MarkLost); any contact brings it back.
//
// Thread-safe (one internal mutex; a leaf lock: it calls nothing while holding it). Tests
// drive it with a FakeClock.
#ifndef PARATUNE_SERVER_WORKER_REGISTRY_H_
#define PARATUNE_SERVER_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "paratune/v1/service.pb.h"
#include "server/clock.h"
#include "server/verify_plan.h"

namespace paratune::server {

class WorkerRegistry {
 public:
  /// `clock` must outlive the registry.
  WorkerRegistry(const Clock* clock, int64_t lost_after_ms)
      : clock_(clock), lost_after_ms_(lost_after_ms) {}

  /// Registers `info` (idle, heard from now) and returns its id: info.id when set (a worker
  /// that comes back keeps its identity), else a new one.
  std::string Register(const v1::WorkerInfo& info);
  /// Records contact from `worker_id` now; false for an unknown id.
  bool Touch(const std::string& worker_id);
  /// Touch, and a copy of the worker's info (nullopt for an unknown id).
  std::optional<v1::WorkerInfo> TouchAndGet(const std::string& worker_id);
  /// Marks the worker busy with `task_id` ("" = idle). No-op for an unknown id.
  void SetRunning(const std::string& worker_id, const std::string& task_id);
  /// Marks the worker idle if it runs `task_id`.
  void TaskEnded(const std::string& worker_id, const std::string& task_id);
  /// Forgets the worker.
  void Remove(const std::string& worker_id);
  /// Marks lost every worker not heard from for more than lost_after_ms; returns the ids
  /// that became lost now.
  std::vector<std::string> MarkLost();

  /// The most devices a live worker of `device_kind` has (0 when none).
  int64_t LargestDeviceCount(const std::string& device_kind) const;
  /// The live workers of `device_kind`, as the verify placement sees them.
  std::vector<VerifyHost> VerifyHosts(const std::string& device_kind) const;
  /// Every worker, by id.
  std::vector<v1::WorkerInfo> List() const;
  /// Workers by state ("idle", "busy", "lost"; each present, 0 when none).
  std::map<std::string, int64_t> CountByState() const;

 private:
  /// Touch's work, under mu_: the worker's entry, or null for an unknown id.
  v1::WorkerInfo* TouchLocked(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const int64_t lost_after_ms_;
  mutable std::mutex mu_;
  // WorkerInfo.state is "lost" for a lost worker.
  std::map<std::string, v1::WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_WORKER_REGISTRY_H_
