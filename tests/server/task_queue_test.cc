#include "server/task_queue.h"

#include <gtest/gtest.h>

namespace paratune::server {
namespace {

v1::ProfileTask Task(const std::string& id, const std::string& job = "job-a",
                     const std::string& kind = "cpu") {
  v1::ProfileTask t;
  t.set_id(id);
  t.set_job_id(job);
  t.set_device_kind(kind);
  return t;
}

TEST(TaskQueueTest, LeasesOldestTaskOfTheWorkersDeviceKindAndCountsAttempts) {
  TaskQueue q(/*lease_timeout_ms=*/1000, /*max_attempts=*/3);
  q.Add(Task("gpu-1", "job-a", "h100-sxm-80gb"));
  q.Add(Task("cpu-1"));
  q.Add(Task("cpu-2"));
  std::optional<v1::ProfileTask> t = q.Lease("w1", "cpu", 100);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->id(), "cpu-1");
  EXPECT_EQ(t->attempt(), 1);
  EXPECT_EQ(q.LeaseExpiry("cpu-1"), 1100);
  EXPECT_EQ(q.Lease("w1", "cpu", 100)->id(), "cpu-2");
  // The GPU task never goes to a CPU worker.
  EXPECT_FALSE(q.Lease("w1", "cpu", 100).has_value());
  EXPECT_EQ(q.Lease("w2", "h100-sxm-80gb", 100)->id(), "gpu-1");
  EXPECT_EQ(q.queued(), 0);
  EXPECT_EQ(q.leased(), 3);
}

TEST(TaskQueueTest, RenewedLeaseOutlivesTheTimeoutAndExpiredOneIsRequeued) {
  TaskQueue q(1000, 3);
  q.Add(Task("a"));
  q.Add(Task("b"));
  q.Lease("w1", "cpu", 0);
  q.Lease("w1", "cpu", 0);
  // At 900 ms the worker renews only "a"; "x" is not leased to it: stop it.
  std::vector<std::string> stop = q.Renew("w1", {"a", "x"}, 900);
  EXPECT_EQ(stop, std::vector<std::string>{"x"});
  EXPECT_EQ(q.LeaseExpiry("a"), 1900);
  std::vector<TaskQueue::Requeue> expired = q.Expire(1000);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].task.id(), "b");
  EXPECT_FALSE(expired[0].exhausted);
  EXPECT_EQ(q.queued(), 1);
  // The re-queued task's next lease is attempt 2.
  EXPECT_EQ(q.Lease("w2", "cpu", 1000)->attempt(), 2);
}

TEST(TaskQueueTest, TaskIsDroppedAfterMaxAttempts) {
  TaskQueue q(10, 2);
  q.Add(Task("a"));
  q.Lease("w1", "cpu", 0);
  ASSERT_FALSE(q.Expire(10)[0].exhausted);
  q.Lease("w1", "cpu", 10);
  std::vector<TaskQueue::Requeue> r = q.Expire(20);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].exhausted);
  EXPECT_EQ(r[0].task.attempt(), 2);
  EXPECT_EQ(q.queued(), 0);
}

TEST(TaskQueueTest, CompleteAcceptsOnlyTheCurrentAttemptFromItsHolderOnce) {
  TaskQueue q(1000, 3);
  q.Add(Task("a"));
  q.Lease("w1", "cpu", 0);
  q.Expire(1000);               // attempt 1 lost
  q.Lease("w2", "cpu", 1000);   // attempt 2 on w2
  EXPECT_EQ(q.Complete("a", 1, "w1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.Complete("a", 2, "w1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(q.Complete("a", 2, "w2").ok());
  // Duplicate.
  EXPECT_EQ(q.Complete("a", 2, "w2").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.leased(), 0);
}

TEST(TaskQueueTest, ReleaseWorkerRequeuesItsLeasesAndRemoveJobDropsTasks) {
  TaskQueue q(1000, 3);
  q.Add(Task("a", "job-a"));
  q.Add(Task("b", "job-b"));
  q.Add(Task("c", "job-b"));
  q.Lease("w1", "cpu", 0);  // a
  q.Lease("w2", "cpu", 0);  // b
  std::vector<TaskQueue::Requeue> r = q.ReleaseWorker("w1");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].task.id(), "a");
  EXPECT_EQ(q.RemoveJob("job-b"), std::vector<std::string>{"b"});
  EXPECT_EQ(q.queued(), 1);  // only "a" is left
  EXPECT_EQ(q.leased(), 0);
}

}  // namespace
}  // namespace paratune::server
