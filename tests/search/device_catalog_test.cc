#include "search/device_catalog.h"

#include <gtest/gtest.h>

namespace paratune {
namespace {

TEST(DeviceCatalogTest, PeaksAndFallbacks) {
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  EXPECT_DOUBLE_EQ(a100.PeakFlops(Precision::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(a100.PeakFlops(Precision::kFp8), 312e12);  // No FP8 on Ampere.
  EXPECT_DOUBLE_EQ(a100.memory_bytes, 80.0 * (1ull << 30));
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  EXPECT_DOUBLE_EQ(h100.PeakFlops(Precision::kFp8), 1978.9e12);
  for (const char* name :
       {"a100-40gb", "a100-80gb", "h100-sxm-80gb", "h200-141gb", "b200-192gb", "cpu"}) {
    absl::StatusOr<DeviceProfile> d = FindDevice(name);
    ASSERT_TRUE(d.ok()) << name;
    EXPECT_FALSE(d->source.empty());
    EXPECT_GT(d->memory_bandwidth, 0);
  }
  EXPECT_EQ(FindDevice("v100").status().code(), absl::StatusCode::kNotFound);
}

TEST(DeviceCatalogTest, ClusterOverrides) {
  ClusterSpec c;
  c.gpu = "a100-80gb";
  c.network_bandwidth_gbps = 6.25;  // BLOOM's cluster: a quarter of a DGX's.
  c.memory_gib = 40;
  const DeviceProfile d = *DeviceForCluster(c);
  EXPECT_DOUBLE_EQ(d.network_bandwidth, 6.25e9);
  EXPECT_DOUBLE_EQ(d.memory_bytes, 40.0 * (1ull << 30));
  c.gpu = "tpu";
  EXPECT_EQ(DeviceForCluster(c).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace paratune
