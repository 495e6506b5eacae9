#include "server/task_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace paratune::server {

void TaskQueue::Add(const v1::ProfileTask& task) { queue_.push_back(task); }

std::optional<v1::ProfileTask> TaskQueue::Lease(
    const std::string& worker_id, const std::string& device_kind, int64_t now_ms,
    const std::function<bool(const v1::ProfileTask&)>& can_run) {
  auto it = std::find_if(queue_.begin(), queue_.end(), [&](const v1::ProfileTask& t) {
    return t.device_kind() == device_kind && (!can_run || can_run(t));
  });
  if (it == queue_.end()) return std::nullopt;
  v1::ProfileTask task = std::move(*it);
  queue_.erase(it);
  task.set_attempt(task.attempt() + 1);
  leases_[task.id()] = {task, worker_id, now_ms + lease_timeout_ms_};
  return task;
}

int64_t TaskQueue::LeaseExpiry(const std::string& task_id) const {
  auto it = leases_.find(task_id);
  return it == leases_.end() ? 0 : it->second.expires_ms;
}

std::vector<std::string> TaskQueue::Renew(const std::string& worker_id,
                                          const std::vector<std::string>& task_ids,
                                          int64_t now_ms) {
  std::vector<std::string> stop;
  for (const std::string& id : task_ids) {
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.worker_id != worker_id) {
      stop.push_back(id);
      continue;
    }
    it->second.expires_ms = now_ms + lease_timeout_ms_;
  }
  return stop;
}

absl::Status TaskQueue::Complete(const std::string& task_id, int64_t attempt,
                                 const std::string& worker_id) {
  auto it = leases_.find(task_id);
  if (it == leases_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", task_id, " is not leased (finished, cancelled, expired or unknown)"));
  }
  const LeaseEntry& lease = it->second;
  if (lease.task.attempt() != attempt) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", task_id, " attempt ", attempt, " is stale (current attempt ",
                     lease.task.attempt(), ")"));
  }
  if (lease.worker_id != worker_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", task_id, " is leased to worker ", lease.worker_id, ", not ", worker_id));
  }
  leases_.erase(it);
  return absl::OkStatus();
}

TaskQueue::Requeue TaskQueue::Retry(const v1::ProfileTask& task) {
  Requeue r{task, task.attempt() >= max_attempts_};
  if (!r.exhausted) queue_.push_back(task);
  return r;
}

std::vector<TaskQueue::Requeue> TaskQueue::EndLeases(const std::vector<std::string>& ids) {
  std::vector<Requeue> out;
  for (const std::string& id : ids) {
    auto it = leases_.find(id);
    if (it == leases_.end()) continue;
    v1::ProfileTask task = std::move(it->second.task);
    leases_.erase(it);
    out.push_back(Retry(task));
  }
  return out;
}

std::vector<TaskQueue::Requeue> TaskQueue::Expire(int64_t now_ms) {
  std::vector<std::string> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease.expires_ms <= now_ms) ids.push_back(id);
  }
  return EndLeases(ids);
}

std::vector<TaskQueue::Requeue> TaskQueue::ReleaseWorker(const std::string& worker_id) {
  std::vector<std::string> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease.worker_id == worker_id) ids.push_back(id);
  }
  return EndLeases(ids);
}

bool TaskQueue::Remove(const std::string& task_id) {
  std::erase_if(queue_, [&](const v1::ProfileTask& t) { return t.id() == task_id; });
  return leases_.erase(task_id) > 0;
}

std::vector<std::string> TaskQueue::RemoveJob(const std::string& job_id) {
  std::erase_if(queue_, [&](const v1::ProfileTask& t) { return t.job_id() == job_id; });
  std::vector<std::string> leased;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.task.job_id() == job_id) {
      leased.push_back(it->first);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return leased;
}

}  // namespace paratune::server
