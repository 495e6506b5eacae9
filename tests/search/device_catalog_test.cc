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
       {"a100-40gb", "a100-80gb", "h100-sxm-80gb", "h200-141gb", "b200-192gb", "gb200", "b300",
        "gb300", "h800-80gb", "cpu"}) {
    absl::StatusOr<DeviceProfile> d = FindDevice(name);
    ASSERT_TRUE(d.ok()) << name;
    EXPECT_FALSE(d->source.empty());
    EXPECT_GT(d->memory_bandwidth, 0);
  }
  EXPECT_EQ(FindDevice("v100").status().code(), absl::StatusCode::kNotFound);
}

// Dense peaks of the Blackwell parts: the datasheets' sparse rack figures over 72 GPUs,
// halved (GB200: 1,440 PFLOP/s FP4 sparse -> 10 PFLOP/s dense per GPU).
TEST(DeviceCatalogTest, BlackwellBlockScaledPeaks) {
  const DeviceProfile gb200 = *FindDevice("gb200");
  EXPECT_DOUBLE_EQ(gb200.PeakFlops(Precision::kNvfp4), 1440e15 / 72 / 2);
  EXPECT_DOUBLE_EQ(gb200.PeakFlops(Precision::kMxfp8), 720e15 / 72 / 2);
  EXPECT_DOUBLE_EQ(gb200.PeakFlops(Precision::kBf16), 360e15 / 72 / 2);
  EXPECT_EQ(gb200.nvlink_domain, 72);
  const DeviceProfile gb300 = *FindDevice("gb300");
  EXPECT_DOUBLE_EQ(gb300.PeakFlops(Precision::kNvfp4), 1080e15 / 72);  // Dense in the sheet.
  EXPECT_NEAR(gb300.memory_bytes / 1e9, 20.7e3 / 72, 1.0);
  EXPECT_DOUBLE_EQ(FindDevice("b300")->PeakFlops(Precision::kNvfp4), 108e15 / 8);
  // H800: the H100's compute, 4/9 of its NVLink.
  const DeviceProfile h800 = *FindDevice("h800-80gb");
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  EXPECT_DOUBLE_EQ(h800.PeakFlops(Precision::kFp8), h100.PeakFlops(Precision::kFp8));
  EXPECT_NEAR(h800.nvlink_bandwidth / h100.nvlink_bandwidth, 4.0 / 9.0, 1e-9);
  // Hopper has no FP4 units: an NVFP4 GEMM would run at the FP8 rate.
  EXPECT_DOUBLE_EQ(h100.PeakFlops(Precision::kNvfp4), h100.PeakFlops(Precision::kFp8));
}

TEST(DeviceCatalogTest, BlockScaledFormatsNeedBlackwell) {
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  absl::Status s = CheckDeviceSupports(h100, Precision::kMxfp8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("training.precision mxfp8 is not supported by cluster.gpu "
                             "h100-sxm-80gb: the device has no block-scaled (MX) FP8"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("gb200"), std::string::npos) << s;
  EXPECT_EQ(CheckDeviceSupports(h100, Precision::kNvfp4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckDeviceSupports(h100, Precision::kFp8).ok());
  for (const char* name : {"b200-192gb", "gb200", "b300", "gb300"}) {
    const DeviceProfile d = *FindDevice(name);
    EXPECT_TRUE(CheckDeviceSupports(d, Precision::kMxfp8).ok()) << name;
    EXPECT_TRUE(CheckDeviceSupports(d, Precision::kNvfp4).ok()) << name;
  }
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  EXPECT_NE(CheckDeviceSupports(a100, Precision::kFp8).message().find("no FP8 tensor cores"),
            std::string::npos);
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
