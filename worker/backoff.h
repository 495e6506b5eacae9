// Capped exponential backoff for reconnecting to the coordinator.
#ifndef PARATUNE_WORKER_BACKOFF_H_
#define PARATUNE_WORKER_BACKOFF_H_

#include <algorithm>
#include <cstdint>

namespace paratune::worker {

/// Delays initial, 2·initial, 4·initial, … capped at max; Reset() after a success.
/// Not thread-safe.
class Backoff {
 public:
  Backoff(int64_t initial_ms, int64_t max_ms)
      : initial_ms_(std::max<int64_t>(1, initial_ms)),
        max_ms_(std::max(initial_ms_, max_ms)),
        next_ms_(initial_ms_) {}

  /// The delay to wait now; the following call returns twice as much, up to the cap.
  int64_t NextDelayMs() {
    const int64_t delay = next_ms_;
    next_ms_ = std::min(max_ms_, next_ms_ * 2);
    return delay;
  }

  void Reset() { next_ms_ = initial_ms_; }

 private:
  int64_t initial_ms_;
  int64_t max_ms_;
  int64_t next_ms_;
};

}  // namespace paratune::worker

#endif  // PARATUNE_WORKER_BACKOFF_H_
