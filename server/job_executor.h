// Background threads that run the long steps of jobs outside every lock: planning and
// composing. Work items are (kind, job id) pairs handed to one `run` function.
//
// Thread-safe (one internal mutex, a leaf lock: `run` is called without it held).
#ifndef PARATUNE_SERVER_JOB_EXECUTOR_H_
#define PARATUNE_SERVER_JOB_EXECUTOR_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace paratune::server {

/// The long steps of a job.
enum class JobWork { kPlan, kCompose };

class JobExecutor {
 public:
  using RunFn = std::function<void(JobWork, const std::string& job_id)>;

  JobExecutor() = default;
  ~JobExecutor() { Shutdown(); }
  JobExecutor(const JobExecutor&) = delete;
  JobExecutor& operator=(const JobExecutor&) = delete;

  /// Starts `threads` threads that call `run` for each scheduled item. Work scheduled before
  /// Start waits for it.
  void Start(unsigned threads, RunFn run);
  /// Queues one item.
  void Schedule(JobWork work, const std::string& job_id);
  /// Blocks until no item is queued or running (or Shutdown).
  void WaitIdle();
  /// Drops queued items, waits for running ones and joins the threads. Idempotent.
  void Shutdown();

 private:
  void Loop();

  RunFn run_;
  std::mutex mu_;
  std::condition_variable cv_;  // Work queued, an item finished, or stopping.
  std::deque<std::pair<JobWork, std::string>> work_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_JOB_EXECUTOR_H_
