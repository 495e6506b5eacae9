// Device discovery (CPU path; CUDA only where built with it and a device exists) and the
// reconnect backoff.
#include "worker/device_discovery.h"

#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "worker/backoff.h"

namespace paratune::worker {
namespace {

TEST(DeviceDiscoveryTest, ParsesMemTotalInKiB) {
  const std::string meminfo =
      "MemFree:         1000 kB\n"
      "MemTotal:       24576000 kB\n"
      "Buffers:          12 kB\n";
  absl::StatusOr<int64_t> bytes = ParseMemTotalBytes(meminfo);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, int64_t{24576000} * 1024);
  EXPECT_EQ(ParseMemTotalBytes("MemFree: 3 kB\n").status().message(),
            "meminfo: no valid 'MemTotal: <n> kB' line");
  EXPECT_EQ(ParseMemTotalBytes("MemTotal: 3 MB\n").status().message(),
            "meminfo: unknown MemTotal unit 'MB'");
}

TEST(DeviceDiscoveryTest, HostFiguresMatchTheSystem) {
  EXPECT_EQ(OnlineCpuCores(), sysconf(_SC_NPROCESSORS_ONLN));
  absl::StatusOr<int64_t> mem = HostMemoryBytes();
  ASSERT_TRUE(mem.ok());
  // Pages × page size is MemTotal up to the kernel's reserved memory (a few percent).
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_NEAR(static_cast<double>(*mem) / pages, 1.0, 0.001);
}

TEST(DeviceDiscoveryTest, CpuBackendHasOneSlotPerCoreOrPerListedIndex) {
  absl::StatusOr<DeviceInventory> all = DiscoverDevices("cpu", {}, "");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->backend, "cpu");
  EXPECT_EQ(all->device_kind, "cpu");
  EXPECT_EQ(static_cast<int>(all->devices.size()), OnlineCpuCores());
  EXPECT_EQ(all->cpu_cores, OnlineCpuCores());
  EXPECT_EQ(all->devices[0].memory_bytes(), all->memory_bytes);

  absl::StatusOr<DeviceInventory> listed = DiscoverDevices("cpu", {0, 2, 5}, "cpu-test");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->devices.size(), 3u);
  EXPECT_EQ(listed->devices[2].index(), 5);
  EXPECT_EQ(listed->device_kind, "cpu-test");
}

TEST(DeviceDiscoveryTest, AutoFallsBackToCpuWithoutACudaDevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device exists: auto picks cuda";
  absl::StatusOr<DeviceInventory> inv = DiscoverDevices("auto", {}, "");
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->backend, "cpu");
  absl::StatusOr<DeviceInventory> cuda = DiscoverDevices("cuda", {}, "");
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DiscoverDevices("tpu", {}, "").status().message(),
            "backend (tpu) must be one of auto, cuda, cpu");
}

TEST(DeviceDiscoveryTest, CudaDevicesHaveMemoryAndAKind) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  absl::StatusOr<DeviceInventory> inv = DiscoverDevices("cuda", {}, "");
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(static_cast<int>(inv->devices.size()), CudaDeviceCount());
  for (const v1::Device& d : inv->devices) {
    EXPECT_GT(d.memory_bytes(), int64_t{1} << 30);
    for (int peer : d.nvlink_peers()) EXPECT_NE(peer, d.index());
  }
  EXPECT_EQ(DiscoverDevices("cuda", {CudaDeviceCount()}, "").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DeviceDiscoveryTest, SelectingCudaDevicesWithoutADeviceKeepsCpuSlots) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device exists";
  unsetenv("CUDA_VISIBLE_DEVICES");
  absl::StatusOr<bool> selected = SelectCudaDevices({2, 3});
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_FALSE(*selected);
  EXPECT_EQ(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr);  // environment restored
}

TEST(DeviceDiscoveryTest, DeviceKindFromCudaName) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(DeviceKindFromName("NVIDIA H100 80GB HBM3", 80 * kGiB), "h100-sxm-80gb");
  EXPECT_EQ(DeviceKindFromName("NVIDIA H200", 141 * kGiB), "h200-141gb");
  EXPECT_EQ(DeviceKindFromName("NVIDIA A100-SXM4-40GB", 40 * kGiB), "a100-40gb");
  EXPECT_EQ(DeviceKindFromName("NVIDIA A100-SXM4-80GB", 80 * kGiB), "a100-80gb");
  EXPECT_EQ(DeviceKindFromName("NVIDIA B200", 180 * kGiB), "b200-192gb");
  EXPECT_EQ(DeviceKindFromName("NVIDIA GeForce RTX 4090", 24 * kGiB),
            "nvidia-geforce-rtx-4090");
}

TEST(BackoffTest, DoublesUpToTheCapAndResets) {
  Backoff b(100, 500);
  EXPECT_EQ(b.NextDelayMs(), 100);
  EXPECT_EQ(b.NextDelayMs(), 200);
  EXPECT_EQ(b.NextDelayMs(), 400);
  EXPECT_EQ(b.NextDelayMs(), 500);
  EXPECT_EQ(b.NextDelayMs(), 500);
  b.Reset();
  EXPECT_EQ(b.NextDelayMs(), 100);
}

}  // namespace
}  // namespace paratune::worker
