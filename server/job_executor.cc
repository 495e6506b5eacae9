#include "server/job_executor.h"

namespace paratune::server {

void JobExecutor::Start(unsigned threads, RunFn run) {
  run_ = std::move(run);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

void JobExecutor::Schedule(JobWork work, const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_.emplace_back(work, job_id);
  }
  cv_.notify_all();
}

void JobExecutor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock,
             [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !work_.empty(); });
    if (stopping_) return;
    auto [work, job_id] = work_.front();
    work_.pop_front();
    ++busy_;
    lock.unlock();
    run_(work, job_id);
    lock.lock();
    --busy_;
    cv_.notify_all();
  }
}

void JobExecutor::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || (work_.empty() && busy_ == 0);
  });
}

void JobExecutor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace paratune::server
