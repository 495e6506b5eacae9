#include "server/worker_registry.h"

#include <algorithm>

#include "server/ids.h"

namespace paratune::server {
namespace {

bool IsLost(const v1::WorkerInfo& w) { return w.state() == "lost"; }

}  // namespace

std::string WorkerRegistry::Register(const v1::WorkerInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = info.id();
  if (id.empty()) {
    id = NewRandomId("w");
    while (workers_.count(id) > 0) id = NewRandomId("w");
  }
  v1::WorkerInfo& w = workers_[id] = info;
  w.set_id(id);
  w.set_state("idle");
  w.clear_current_task_id();
  w.set_last_heartbeat_unix_ms(clock_->NowMs());
  return id;
}

v1::WorkerInfo* WorkerRegistry::TouchLocked(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return nullptr;
  v1::WorkerInfo& w = it->second;
  if (IsLost(w)) w.set_state(w.current_task_id().empty() ? "idle" : "busy");
  w.set_last_heartbeat_unix_ms(clock_->NowMs());
  return &w;
}

bool WorkerRegistry::Touch(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return TouchLocked(worker_id) != nullptr;
}

std::optional<v1::WorkerInfo> WorkerRegistry::TouchAndGet(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const v1::WorkerInfo* w = TouchLocked(worker_id);
  if (w == nullptr) return std::nullopt;
  return *w;
}

void WorkerRegistry::SetRunning(const std::string& worker_id, const std::string& task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  it->second.set_state(task_id.empty() ? "idle" : "busy");
  it->second.set_current_task_id(task_id);
}

void WorkerRegistry::TaskEnded(const std::string& worker_id, const std::string& task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.current_task_id() != task_id) return;
  it->second.set_state("idle");
  it->second.clear_current_task_id();
}

void WorkerRegistry::Remove(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_.erase(worker_id);
}

std::vector<std::string> WorkerRegistry::MarkLost() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMs();
  std::vector<std::string> lost;
  for (auto& [id, w] : workers_) {
    if (IsLost(w) || now - w.last_heartbeat_unix_ms() <= lost_after_ms_) continue;
    w.set_state("lost");
    w.clear_current_task_id();
    lost.push_back(id);
  }
  return lost;
}

int64_t WorkerRegistry::LargestDeviceCount(const std::string& device_kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t largest = 0;
  for (const auto& [id, w] : workers_) {
    if (!IsLost(w) && w.device_kind() == device_kind) {
      largest = std::max<int64_t>(largest, w.devices_size());
    }
  }
  return largest;
}

std::vector<VerifyHost> WorkerRegistry::VerifyHosts(const std::string& device_kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<VerifyHost> hosts;
  for (const auto& [id, w] : workers_) {
    if (IsLost(w) || w.device_kind() != device_kind) continue;
    hosts.push_back({id, w.backend(), static_cast<int64_t>(w.devices_size()), w.memory_bytes(),
                     w.devices_size() > 0 ? w.devices(0).memory_bytes() : 0});
  }
  return hosts;
}

std::vector<v1::WorkerInfo> WorkerRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerInfo> out;
  out.reserve(workers_.size());
  for (const auto& [id, w] : workers_) out.push_back(w);
  return out;
}

std::map<std::string, int64_t> WorkerRegistry::CountByState() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> counts{{"idle", 0}, {"busy", 0}, {"lost", 0}};
  for (const auto& [id, w] : workers_) ++counts[w.state()];
  return counts;
}

}  // namespace paratune::server
