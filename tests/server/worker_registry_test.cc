#include "server/worker_registry.h"

#include <gtest/gtest.h>

namespace paratune::server {
namespace {

v1::WorkerInfo Worker(const std::string& id, const std::string& kind, int devices) {
  v1::WorkerInfo w;
  w.set_id(id);
  w.set_device_kind(kind);
  w.set_backend("cpu");
  w.set_memory_bytes(int64_t{8} << 30);
  for (int i = 0; i < devices; ++i) w.add_devices()->set_index(i);
  return w;
}

TEST(WorkerRegistryTest, AWorkerSilentLongerThanTheTimeoutIsLostOnceAndContactRevivesIt) {
  FakeClock clock(10'000);
  WorkerRegistry registry(&clock, /*lost_after_ms=*/1000);
  const std::string a = registry.Register(Worker("", "cpu", 2));
  EXPECT_EQ(a.rfind("w-", 0), 0u) << a;
  EXPECT_EQ(registry.Register(Worker("w-kept", "cpu", 4)), "w-kept");
  clock.AdvanceMs(1000);
  EXPECT_TRUE(registry.MarkLost().empty());  // exactly the timeout: not yet
  ASSERT_TRUE(registry.Touch("w-kept"));
  clock.AdvanceMs(1);
  EXPECT_EQ(registry.MarkLost(), std::vector<std::string>{a});
  EXPECT_TRUE(registry.MarkLost().empty());  // reported once
  std::map<std::string, int64_t> counts = registry.CountByState();
  EXPECT_EQ(counts["lost"], 1);
  EXPECT_EQ(counts["idle"], 1);
  // A lost worker is not offered for placement and does not count as the largest.
  EXPECT_EQ(registry.LargestDeviceCount("cpu"), 4);
  registry.Remove("w-kept");
  EXPECT_EQ(registry.LargestDeviceCount("cpu"), 0);
  EXPECT_TRUE(registry.VerifyHosts("cpu").empty());
  std::optional<v1::WorkerInfo> back = registry.TouchAndGet(a);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->state(), "idle");
  EXPECT_EQ(back->last_heartbeat_unix_ms(), 11'001);
  EXPECT_EQ(registry.VerifyHosts("cpu").size(), 1u);
  EXPECT_FALSE(registry.Touch("w-nobody"));
  EXPECT_FALSE(registry.TouchAndGet("w-nobody").has_value());
}

TEST(WorkerRegistryTest, RunningStateFollowsTheTaskItRuns) {
  FakeClock clock;
  WorkerRegistry registry(&clock, 1000);
  const std::string w = registry.Register(Worker("w-1", "cpu", 1));
  registry.SetRunning(w, "job-t3");
  EXPECT_EQ(registry.List()[0].state(), "busy");
  EXPECT_EQ(registry.List()[0].current_task_id(), "job-t3");
  registry.TaskEnded(w, "job-t9");  // another task: still busy
  EXPECT_EQ(registry.List()[0].state(), "busy");
  registry.TaskEnded(w, "job-t3");
  EXPECT_EQ(registry.List()[0].state(), "idle");
  EXPECT_TRUE(registry.List()[0].current_task_id().empty());
}

TEST(WorkerRegistryTest, VerifyHostsCarryDevicesAndMemoryOfTheKindAsked) {
  FakeClock clock;
  WorkerRegistry registry(&clock, 1000);
  v1::WorkerInfo gpu = Worker("w-gpu", "h100-sxm-80gb", 2);
  gpu.set_backend("cuda");
  gpu.mutable_devices(0)->set_memory_bytes(int64_t{80} << 30);
  registry.Register(gpu);
  registry.Register(Worker("w-cpu", "cpu", 3));
  std::vector<VerifyHost> hosts = registry.VerifyHosts("h100-sxm-80gb");
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].id, "w-gpu");
  EXPECT_EQ(hosts[0].backend, "cuda");
  EXPECT_EQ(hosts[0].devices, 2);
  EXPECT_EQ(hosts[0].device_memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(registry.LargestDeviceCount("cpu"), 3);
}

}  // namespace
}  // namespace paratune::server
