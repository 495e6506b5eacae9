// The decoded final rankings of finished jobs, most recently used first, at most
// `capacity` of them; the rest are read from the store when asked for.
//
// Thread-safe (one internal mutex; a leaf lock: it calls nothing while holding it).
#ifndef PARATUNE_SERVER_RESULTS_CACHE_H_
#define PARATUNE_SERVER_RESULTS_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "paratune/v1/results.pb.h"

namespace paratune::server {

class ResultsCache {
 public:
  /// `capacity` >= 1.
  explicit ResultsCache(int64_t capacity) : capacity_(capacity) {}

  /// The ranking of `job_id` (made most recently used), or null.
  std::shared_ptr<const v1::PlanResult> Get(const std::string& job_id);
  /// Inserts or replaces the ranking of `job_id` as the most recently used; drops the least
  /// recently used beyond the capacity.
  void Put(const std::string& job_id, std::shared_ptr<const v1::PlanResult> results);
  /// Parses the stored ranking `serialized` (a v1::PlanResult; its rejected list capped as
  /// server/convert.h CapRejected does) and puts it. DataLoss when it does not parse.
  absl::StatusOr<std::shared_ptr<const v1::PlanResult>> PutSerialized(
      const std::string& job_id, const std::string& serialized);
  /// Rankings held now.
  int64_t size() const;

 private:
  const int64_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const v1::PlanResult>>> entries_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_RESULTS_CACHE_H_
