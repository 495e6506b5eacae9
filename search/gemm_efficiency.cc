#include "search/gemm_efficiency.h"

#include <algorithm>
#include <cmath>

namespace paratune {
namespace {

struct Tile {
  double m, n, efficiency;  // Efficiency of this tile relative to the largest one.
};
// Smaller tiles re-read operands more often (lower arithmetic intensity per SM) and reach
// a lower fraction of peak; cuBLAS heuristics pick them for small problems.
constexpr Tile kTiles[] = {{256, 128, 1.0}, {128, 128, 0.95}, {128, 64, 0.85}, {64, 64, 0.70}};

}  // namespace

double GemmEfficiency(const DeviceProfile& device, double m, double n, double k, double batch,
                      Precision precision) {
  const double base = (IsLowPrecisionGemm(precision) && device.peak_fp8_tflops > 0)
                          ? device.fp8_gemm_efficiency
                          : device.gemm_efficiency;
  const double sms = static_cast<double>(std::max(device.num_sms, 1));
  const double scale_m = static_cast<double>(device.gemm_tile_m) / 256.0;
  const double scale_n = static_cast<double>(device.gemm_tile_n) / 128.0;
  double best = 0;
  for (const Tile& tile : kTiles) {
    const double tm = tile.m * scale_m, tn = tile.n * scale_n;
    const double rows = std::ceil(m / tm), cols = std::ceil(n / tn);
    const double tile_util = (m * n) / (rows * tm * cols * tn);
    const double tiles = rows * cols * batch;
    const double wave_util = tiles / (std::ceil(tiles / sms) * sms);
    best = std::max(best, tile.efficiency * tile_util * wave_util);
  }
  const double k_util = k / (k + device.gemm_k_overhead);
  return base * best * k_util;
}

double GemmSeconds(const DeviceProfile& device, double m, double n, double k, double batch,
                   Precision precision) {
  const double flops = 2.0 * m * n * k * batch;
  const double efficiency = GemmEfficiency(device, m, n, k, batch, precision);
  const double compute = flops / (device.PeakFlops(precision) * efficiency);
  const double element = precision == Precision::kFp32 ? 4.0 : 2.0;
  const double traffic = (m * k + k * n + m * n) * batch * element;
  return std::max(compute, StreamSeconds(device, traffic)) + device.kernel_launch_s;
}

double StreamSeconds(const DeviceProfile& device, double bytes) {
  return bytes / (device.memory_bandwidth * device.memory_efficiency);
}

}  // namespace paratune
