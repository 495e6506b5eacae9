// Weight-only int8/int4 GEMM against fp32 with the bound that rounding to nearest gives:
// |w − ŵ| ≤ scale/2 per element, hence |y − ŷ| ≤ Σ_c |x_c|·scale(r, c)/2 per output.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/hash_random.h"
#include "kernels/serving/weight_only_linear.h"

namespace paratune::kernels::serving {
namespace {

constexpr int64_t kRows = 5, kIn = 128, kOut = 72;

float W(int64_t r, int64_t c) {
  return static_cast<float>(2.0 * HashUniform(9, r * kIn + c) - 1.0);
}

std::vector<float> X() {
  std::vector<float> x(kRows * kIn);
  for (int64_t i = 0; i < kRows * kIn; ++i)
    x[i] = static_cast<float>(2.0 * HashUniform(3, i) - 1.0);
  return x;
}

// Exact fp64 reference with the fp32 weights.
std::vector<double> Reference(const std::vector<float>& x) {
  std::vector<double> y(kRows * kOut, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t r = 0; r < kOut; ++r) {
      for (int64_t c = 0; c < kIn; ++c) y[i * kOut + r] += double(x[i * kIn + c]) * W(r, c);
    }
  }
  return y;
}

void CheckBound(WeightQuant quant, int64_t group, double expected_bytes) {
  auto backend = MakeCpuBackend(0, 1);
  auto lin = WeightOnlyLinear::Create(*backend, kOut, kIn, W, quant, group);
  ASSERT_TRUE(lin.ok()) << lin.status();
  EXPECT_EQ(lin->bytes(), expected_bytes);
  const std::vector<float> x = X();
  std::vector<float> y(kRows * kOut);
  lin->Forward(x.data(), kRows, y.data(), 2);
  const std::vector<double> ref = Reference(x);
  double worst = 0, largest_error = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t r = 0; r < kOut; ++r) {
      double bound = 0, magnitude = 0;
      for (int64_t c = 0; c < kIn; ++c) {
        bound += std::abs(x[i * kIn + c]) * lin->ScaleOf(r, c) / 2;
        magnitude += std::abs(x[i * kIn + c] * W(r, c));
      }
      bound += 1e-6 * magnitude;  // fp32 accumulation
      const double err = std::abs(y[i * kOut + r] - ref[i * kOut + r]);
      worst = std::max(worst, err / bound);
      largest_error = std::max(largest_error, err);
    }
  }
  EXPECT_LE(worst, 1.0) << ToString(quant);
  // Quantization really happened: the error is far above fp32 rounding.
  EXPECT_GT(largest_error, 1e-4) << ToString(quant);
}

TEST(WeightOnlyLinear, Int8ErrorWithinHalfAScalePerWeight) {
  CheckBound(WeightQuant::kInt8, 0, kOut * kIn + kOut * 4);
}

TEST(WeightOnlyLinear, Int4ErrorWithinHalfAGroupScalePerWeight) {
  CheckBound(WeightQuant::kInt4, 32, kOut * kIn / 2 + kOut * (kIn / 32) * 4);
}

TEST(WeightOnlyLinear, Fp32MatchesTheReference) {
  auto backend = MakeCpuBackend(0, 1);
  auto lin = WeightOnlyLinear::Create(*backend, kOut, kIn, W, WeightQuant::kNone, 0);
  ASSERT_TRUE(lin.ok()) << lin.status();
  const std::vector<float> x = X();
  std::vector<float> y(kRows * kOut);
  lin->Forward(x.data(), kRows, y.data(), 1);
  const std::vector<double> ref = Reference(x);
  for (int64_t i = 0; i < kRows * kOut; ++i) EXPECT_NEAR(y[i], ref[i], 1e-4);
}

TEST(WeightOnlyLinear, Int4RoundTripsRepresentableValuesExactly) {
  // Values k·0.5 for k in [−7, 7] are exactly representable with scale 0.5 (absmax 3.5).
  auto value = [](int64_t r, int64_t c) {
    return c % 32 == 0 ? 3.5f : 0.5f * static_cast<float>(((r + c) % 15) - 7);
  };
  auto backend = MakeCpuBackend(0, 1);
  auto lin = WeightOnlyLinear::Create(*backend, 4, 64, value, WeightQuant::kInt4, 32);
  ASSERT_TRUE(lin.ok()) << lin.status();
  const std::vector<float> w = lin->Dequantized();
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 64; ++c) EXPECT_EQ(w[r * 64 + c], value(r, c)) << r << "," << c;
  }
}

}  // namespace
}  // namespace paratune::kernels::serving
