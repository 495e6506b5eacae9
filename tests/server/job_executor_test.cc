#include "server/job_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace paratune::server {
namespace {

TEST(JobExecutorTest, RunsEveryScheduledItemAndWaitIdleSeesThemAllDone) {
  JobExecutor executor;
  std::mutex mu;
  std::vector<std::string> ran;
  executor.Schedule(JobWork::kPlan, "job-1");  // before Start: waits for it
  executor.Start(2, [&](JobWork work, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    ran.push_back(std::string(work == JobWork::kPlan ? "plan " : "compose ") + id);
  });
  executor.Schedule(JobWork::kCompose, "job-2");
  executor.WaitIdle();
  std::lock_guard<std::mutex> lock(mu);
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, (std::vector<std::string>{"compose job-2", "plan job-1"}));
}

TEST(JobExecutorTest, ShutdownDropsQueuedItemsAndReleasesWaitIdle) {
  JobExecutor executor;
  std::atomic<int> runs{0};
  executor.Schedule(JobWork::kPlan, "job-1");  // not started yet: queued
  executor.Shutdown();
  executor.WaitIdle();  // returns although an item is queued: the executor is stopping
  executor.Start(2, [&](JobWork, const std::string&) { ++runs; });
  executor.Shutdown();  // idempotent; joins the threads, which ran nothing
  EXPECT_EQ(runs.load(), 0);
}

}  // namespace
}  // namespace paratune::server
