// Time source for leases, heartbeats and timestamps, behind an interface so that tests can
// move time by hand (LevelDB's Env, ninja's VirtualFileSystem).
#ifndef PARATUNE_SERVER_CLOCK_H_
#define PARATUNE_SERVER_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace paratune::server {

/// Milliseconds since the Unix epoch. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;
};

/// The system clock.
class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

/// A clock that only moves when told to (tests). Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_ms_(start_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_CLOCK_H_
