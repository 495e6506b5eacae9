#include "server/lease_broker.h"

#include <utility>

namespace paratune::server {

void LeaseBroker::Add(const v1::ProfileTask& task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.Add(task);
  }
  changed_cv_.notify_all();
}

bool LeaseBroker::HostBusyLocked(const std::string& host, const std::string& worker_id) {
  bool busy = false;
  for (auto it = profiling_hosts_.begin(); it != profiling_hosts_.end();) {
    if (!queue_.IsLeased(it->first)) {
      it = profiling_hosts_.erase(it);
      continue;
    }
    busy = busy || (it->second.host == host && it->second.worker_id != worker_id);
    ++it;
  }
  return busy;
}

std::optional<GrantedLease> LeaseBroker::Lease(const LeaseRequest& request,
                                               std::chrono::steady_clock::time_point deadline) {
  // A worker that names no host is a host of its own.
  const std::string host =
      request.host.empty() ? "worker:" + request.worker_id : "host:" + request.host;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const bool host_busy = HostBusyLocked(host, request.worker_id);
    std::optional<v1::ProfileTask> task = queue_.Lease(
        request.worker_id, request.device_kind, clock_->NowMs(), [&](const v1::ProfileTask& t) {
          if (!t.has_verify() && host_busy) return false;
          return !request.can_run || request.can_run(t);
        });
    if (task) {
      ++leases_granted_;
      if (!task->has_verify()) profiling_hosts_[task->id()] = {host, request.worker_id};
      GrantedLease out{*std::move(task), 0};
      out.expires_ms = queue_.LeaseExpiry(out.task.id());
      return out;
    }
    if (changed_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  return std::nullopt;
}

void LeaseBroker::Undo(const GrantedLease& lease, const std::string& worker_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.Complete(lease.task.id(), lease.task.attempt(), worker_id).IgnoreError();
    v1::ProfileTask task = lease.task;
    task.set_attempt(task.attempt() - 1);
    queue_.Add(task);
  }
  changed_cv_.notify_all();
}

std::vector<std::string> LeaseBroker::Renew(const std::string& worker_id,
                                            const std::vector<std::string>& task_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.Renew(worker_id, task_ids, clock_->NowMs());
}

absl::Status LeaseBroker::Complete(const std::string& task_id, int64_t attempt,
                                   const std::string& worker_id) {
  absl::Status s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = queue_.Complete(task_id, attempt, worker_id);
  }
  if (s.ok()) changed_cv_.notify_all();  // The host may be free for the next measurement.
  return s;
}

std::vector<TaskQueue::Requeue> LeaseBroker::Expire() {
  std::vector<TaskQueue::Requeue> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = queue_.Expire(clock_->NowMs());
  }
  if (!out.empty()) changed_cv_.notify_all();
  return out;
}

std::vector<TaskQueue::Requeue> LeaseBroker::ReleaseWorker(const std::string& worker_id) {
  std::vector<TaskQueue::Requeue> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = queue_.ReleaseWorker(worker_id);
  }
  if (!out.empty()) changed_cv_.notify_all();
  return out;
}

bool LeaseBroker::Remove(const std::string& task_id) {
  bool leased;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leased = queue_.Remove(task_id);
  }
  if (leased) changed_cv_.notify_all();
  return leased;
}

void LeaseBroker::RemoveJob(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.RemoveJob(job_id);
  }
  changed_cv_.notify_all();
}

bool LeaseBroker::IsLeased(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.IsLeased(task_id);
}

void LeaseBroker::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_cv_.notify_all();
}

int64_t LeaseBroker::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.queued();
}

int64_t LeaseBroker::leased() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.leased();
}

int64_t LeaseBroker::leases_granted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_granted_;
}

}  // namespace paratune::server
