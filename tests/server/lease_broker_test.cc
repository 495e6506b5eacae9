#include "server/lease_broker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace paratune::server {
namespace {

v1::ProfileTask LayerTask(const std::string& id) {
  v1::ProfileTask t;
  t.set_id(id);
  t.set_job_id("job-a");
  t.set_device_kind("cpu");
  t.mutable_layer()->set_tp(1);
  return t;
}

v1::ProfileTask VerifyPart(const std::string& id) {
  v1::ProfileTask t;
  t.set_id(id);
  t.set_job_id("job-a");
  t.set_device_kind("cpu");
  t.mutable_verify()->set_rank_count(1);
  return t;
}

LeaseRequest On(const std::string& worker, const std::string& host) {
  LeaseRequest r;
  r.worker_id = worker;
  r.device_kind = "cpu";
  r.host = host;
  return r;
}

// No waiting: the deadline has passed.
std::optional<GrantedLease> TryLease(LeaseBroker& broker, const LeaseRequest& request) {
  return broker.Lease(request, std::chrono::steady_clock::now());
}

class LeaseBrokerTest : public ::testing::Test {
 protected:
  FakeClock clock_{1000};
  LeaseBroker broker_{&clock_, /*lease_timeout_ms=*/500, /*max_attempts=*/3};
};

TEST_F(LeaseBrokerTest, AWorkerWaitsWhileAnotherOnItsHostMeasures) {
  for (const char* id : {"t1", "t2", "t3"}) broker_.Add(LayerTask(id));
  std::optional<GrantedLease> a = TryLease(broker_, On("w1", "node-a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->task.id(), "t1");
  EXPECT_EQ(a->expires_ms, 1500);
  // w2 shares node-a: nothing, although two tasks are queued.
  EXPECT_FALSE(TryLease(broker_, On("w2", "node-a")).has_value());
  EXPECT_EQ(broker_.queued(), 2);
  // w3 on another host measures at the same time; w1 itself may take its next task.
  EXPECT_EQ(TryLease(broker_, On("w3", "node-b"))->task.id(), "t2");
  std::optional<GrantedLease> next = TryLease(broker_, On("w1", "node-a"));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->task.id(), "t3");
  // w1 finishes both: node-a is free for w2.
  ASSERT_TRUE(broker_.Complete("t1", 1, "w1").ok());
  EXPECT_FALSE(TryLease(broker_, On("w2", "node-a")).has_value());  // t3 still leased
  ASSERT_TRUE(broker_.Complete("t3", 1, "w1").ok());
  broker_.Add(LayerTask("t4"));
  EXPECT_EQ(TryLease(broker_, On("w2", "node-a"))->task.id(), "t4");
}

TEST_F(LeaseBrokerTest, AnExpiredLeaseFreesTheHost) {
  broker_.Add(LayerTask("t1"));
  broker_.Add(LayerTask("t2"));
  ASSERT_TRUE(TryLease(broker_, On("w1", "node-a")).has_value());
  EXPECT_FALSE(TryLease(broker_, On("w2", "node-a")).has_value());
  clock_.AdvanceMs(499);
  EXPECT_TRUE(broker_.Expire().empty());
  EXPECT_FALSE(TryLease(broker_, On("w2", "node-a")).has_value());
  clock_.AdvanceMs(1);
  std::vector<TaskQueue::Requeue> expired = broker_.Expire();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].task.id(), "t1");
  EXPECT_FALSE(expired[0].exhausted);
  // The oldest queued task is t2; t1 went back behind it.
  std::optional<GrantedLease> b = TryLease(broker_, On("w2", "node-a"));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->task.id(), "t2");
  EXPECT_EQ(b->expires_ms, 1000 + 500 + 500);
}

TEST_F(LeaseBrokerTest, VerifyPartsOfAGangRunTogetherOnOneHost) {
  broker_.Add(VerifyPart("v1"));
  broker_.Add(VerifyPart("v2"));
  ASSERT_TRUE(TryLease(broker_, On("w1", "node-a")).has_value());
  EXPECT_TRUE(TryLease(broker_, On("w2", "node-a")).has_value());
  // A verify run on the host does not hold back a profile task either way round: only
  // profile leases count.
  broker_.Add(LayerTask("t1"));
  EXPECT_TRUE(TryLease(broker_, On("w3", "node-a")).has_value());
}

TEST_F(LeaseBrokerTest, WorkersThatNameNoHostAreHostsOfTheirOwn) {
  broker_.Add(LayerTask("t1"));
  broker_.Add(LayerTask("t2"));
  EXPECT_TRUE(TryLease(broker_, On("w1", "")).has_value());
  EXPECT_TRUE(TryLease(broker_, On("w2", "")).has_value());
}

TEST_F(LeaseBrokerTest, UndoQueuesTheTaskAgainWithItsFormerAttempt) {
  broker_.Add(LayerTask("t1"));
  std::optional<GrantedLease> a = TryLease(broker_, On("w1", "node-a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->task.attempt(), 1);
  broker_.Undo(*a, "w1");
  EXPECT_FALSE(broker_.IsLeased("t1"));
  // The undone lease does not hold the host.
  std::optional<GrantedLease> b = TryLease(broker_, On("w2", "node-a"));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->task.attempt(), 1);
  EXPECT_EQ(broker_.leases_granted(), 2);
}

TEST_F(LeaseBrokerTest, AWaitingLeaseWakesWhenATaskArrivesAndShutdownEndsIt) {
  std::optional<GrantedLease> got;
  std::thread waiter([&] {
    got = broker_.Lease(On("w1", "node-a"),
                        std::chrono::steady_clock::now() + std::chrono::seconds(30));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  broker_.Add(LayerTask("t1"));
  waiter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->task.id(), "t1");
  std::thread stopped([&] {
    got = broker_.Lease(On("w2", "node-b"),
                        std::chrono::steady_clock::now() + std::chrono::seconds(30));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  broker_.Shutdown();
  stopped.join();
  EXPECT_FALSE(got.has_value());
}

}  // namespace
}  // namespace paratune::server
