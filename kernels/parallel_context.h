// What a parallel module needs to run on one rank: the backend, the tensor-parallel
// communicator (passed explicitly, no global process groups) and the phase clock.
#ifndef PARATUNE_KERNELS_PARALLEL_CONTEXT_H_
#define PARATUNE_KERNELS_PARALLEL_CONTEXT_H_

#include <chrono>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"

namespace paratune::kernels {

/// Accumulates seconds spent inside communicator calls. On GPU it synchronises the stream
/// around each call so that the time is the collective's own.
class CommClock {
 public:
  template <typename F>
  absl::Status Time(Backend& backend, F&& f) {
    if (absl::Status s = backend.Synchronize(); !s.ok()) return s;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = f();
    if (s.ok()) s = backend.Synchronize();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }
  double seconds() const { return seconds_; }
  void Reset() { seconds_ = 0; }

 private:
  double seconds_ = 0;
};

struct ParallelContext {
  Backend* backend = nullptr;
  Communicator* tp = nullptr;   ///< Tensor-parallel group (size 1 without TP).
  CommClock* comm_clock = nullptr;
  /// A mixture-of-experts layer's expert-parallel and expert-tensor-parallel groups (the
  /// same ranks regrouped: Megatron-Core's parallel folding); unused by dense layers.
  Communicator* ep = nullptr;
  Communicator* etp = nullptr;
  int threads = 1;  ///< Elementwise threads of CPU modules outside the backend (MoE).

  int64_t tp_size() const { return tp->size(); }
  int64_t tp_rank() const { return tp->rank(); }
  /// Runs a communicator call under the clock.
  template <typename F>
  absl::Status Comm(F&& f) const {
    if (comm_clock == nullptr) return f();
    return comm_clock->Time(*backend, std::forward<F>(f));
  }
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_PARALLEL_CONTEXT_H_
