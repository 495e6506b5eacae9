#include "server/results_cache.h"

#include "absl/strings/str_cat.h"
#include "server/convert.h"

namespace paratune::server {

std::shared_ptr<const v1::PlanResult> ResultsCache::Get(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first != job_id) continue;
    entries_.splice(entries_.begin(), entries_, it);
    return entries_.front().second;
  }
  return nullptr;
}

void ResultsCache::Put(const std::string& job_id, std::shared_ptr<const v1::PlanResult> results) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.remove_if([&](const auto& e) { return e.first == job_id; });
  entries_.emplace_front(job_id, std::move(results));
  while (static_cast<int64_t>(entries_.size()) > capacity_) entries_.pop_back();
}

absl::StatusOr<std::shared_ptr<const v1::PlanResult>> ResultsCache::PutSerialized(
    const std::string& job_id, const std::string& serialized) {
  auto parsed = std::make_shared<v1::PlanResult>();
  if (!parsed->ParseFromString(serialized)) {
    return absl::DataLossError(absl::StrCat("job '", job_id, "': cannot parse its stored ranking"));
  }
  CapRejected(*parsed);  // Stored before the rejected list was capped.
  Put(job_id, parsed);
  return parsed;
}

int64_t ResultsCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace paratune::server
