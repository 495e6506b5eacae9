#include "search/gemm_efficiency.h"

#include <gtest/gtest.h>

namespace paratune {
namespace {

TEST(GemmEfficiencyTest, LargeGemmApproachesTheDeviceEfficiency) {
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  // 108 SMs x (256 x 128) tiles exactly: one full wave, no tile waste.
  const double e = GemmEfficiency(a100, 256 * 12, 128 * 9 * 4, 8192, 1, Precision::kBf16);
  EXPECT_NEAR(e, a100.gemm_efficiency * 8192 / (8192 + a100.gemm_k_overhead), 1e-12);
}

TEST(GemmEfficiencyTest, WaveAndTileQuantisation) {
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  const double full = GemmEfficiency(a100, 256 * 12, 128 * 36, 4096, 1, Precision::kBf16);
  // One tile row more than fills the machine: a partial last wave.
  const double spill = GemmEfficiency(a100, 256 * 12 + 1, 128 * 36, 4096, 1, Precision::kBf16);
  EXPECT_LT(spill, full);
  // A 64-wide problem wastes most of a 128-wide tile or uses a slower small tile.
  EXPECT_LT(GemmEfficiency(a100, 4096, 64, 4096, 1, Precision::kBf16), full);
  // Short K amortises the per-tile overhead worse.
  EXPECT_LT(GemmEfficiency(a100, 4096, 4608, 256, 1, Precision::kBf16), full);
}

TEST(GemmEfficiencyTest, SecondsAreFlopsOverRateOrTraffic) {
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  const double m = 8192, n = 8192, k = 8192;
  const double e = GemmEfficiency(h100, m, n, k, 1, Precision::kBf16);
  EXPECT_NEAR(GemmSeconds(h100, m, n, k, 1, Precision::kBf16),
              2 * m * n * k / (989.4e12 * e) + h100.kernel_launch_s, 1e-12);
  // FP8 runs at the FP8 peak with its own efficiency: faster than BF16.
  EXPECT_LT(GemmSeconds(h100, m, n, k, 1, Precision::kFp8),
            0.7 * GemmSeconds(h100, m, n, k, 1, Precision::kBf16));
  // A matrix-vector product is bound by memory traffic.
  const double gemv = GemmSeconds(h100, 1, 8192, 8192, 1, Precision::kBf16);
  EXPECT_NEAR(gemv, StreamSeconds(h100, (8192.0 * 8192 + 8192 + 8192) * 2) + h100.kernel_launch_s,
              1e-12);
}

}  // namespace
}  // namespace paratune
