#include "inference/measured_steps.h"

#include <gtest/gtest.h>

namespace paratune::inference {
namespace {

TEST(PiecewiseLinearTest, InterpolatesBetweenPointsAndExtendsTheLastSegment) {
  const PiecewiseLinear f({{4, 10}, {1, 1}, {2, 4}, {2, 2}}, /*through_origin=*/false);
  EXPECT_DOUBLE_EQ(f(1), 1);
  EXPECT_DOUBLE_EQ(f(2), 3);    // (4 + 2) / 2: equal x averaged.
  EXPECT_DOUBLE_EQ(f(1.5), 2);  // Halfway from 1 to 3.
  EXPECT_DOUBLE_EQ(f(3), 6.5);  // Halfway from 3 to 10.
  EXPECT_DOUBLE_EQ(f(6), 17);   // Slope 3.5 beyond the last point.
  EXPECT_DOUBLE_EQ(f(0.5), 1);  // The first point's value below it.
  const PiecewiseLinear g({{100, 5}}, /*through_origin=*/true);
  EXPECT_DOUBLE_EQ(g(50), 2.5);
  EXPECT_DOUBLE_EQ(g(300), 15);
}

// A grid whose parts follow hand-picked linear laws: GEMMs 10 us per row plus 50 us, TP
// communication 1 us per row, the rest 20 us per step, prompt attention 1 ns per causal
// pair, decode attention 2 ns per cached token, logits 3 us per sampled sequence.
StepSample Sample(ServingStepPhase phase, int64_t batch, int64_t length) {
  StepSample s;
  s.phase = phase;
  s.batch = batch;
  s.length = length;
  const double b = static_cast<double>(batch), len = static_cast<double>(length);
  const double rows = phase == ServingStepPhase::kPrefill ? b * len : b;
  s.gemm_s = 50e-6 + 10e-6 * rows;
  s.tp_comm_s = 1e-6 * rows;
  s.attention_s = phase == ServingStepPhase::kPrefill ? 1e-9 * b * len * len / 2 : 2e-9 * b * len;
  s.logits_s = 3e-6 * b;
  s.total_s = s.gemm_s + s.tp_comm_s + s.attention_s + s.logits_s + 20e-6;
  return s;
}

std::vector<StepSample> Grid() {
  std::vector<StepSample> v;
  for (int64_t b : {1, 2, 4}) v.push_back(Sample(ServingStepPhase::kPrefill, b, 64));
  for (int64_t b : {1, 2, 4, 8}) {
    v.push_back(Sample(ServingStepPhase::kDecode, b, 64));
    v.push_back(Sample(ServingStepPhase::kDecode, b, 80));
  }
  return v;
}

TEST(MeasuredStepTableTest, GridPointsGiveTheirMeasuredTotals) {
  auto table = MeasuredStepTable::Create(Grid());
  ASSERT_TRUE(table.ok()) << table.status();
  for (const StepSample& s : Grid()) {
    StepWork w;
    const double b = static_cast<double>(s.batch), len = static_cast<double>(s.length);
    if (s.phase == ServingStepPhase::kPrefill) {
      w.prefill_tokens = b * len;
      w.prefill_attention_pairs = b * len * len / 2;
    } else {
      w.decode_sequences = b;
      w.decode_context_tokens = b * len;
    }
    w.sampled_sequences = b;
    const StepBreakdown bd = table->Breakdown(w);
    EXPECT_NEAR(bd.total, s.total_s * 1e3, 1e-9) << s.batch << " x " << s.length;
    EXPECT_NEAR(bd.tp_comm, s.tp_comm_s * 1e3, 1e-9);
    EXPECT_EQ(bd.source, "measured");
  }
}

TEST(MeasuredStepTableTest, MixedStepAddsItsPartsAlongTheirOwnAxes) {
  auto table = MeasuredStepTable::Create(Grid());
  ASSERT_TRUE(table.ok()) << table.status();
  // A chunk of 32 prompt tokens after 32 already prefilled (32 x (32 + 16) = 1536 pairs)
  // beside 6 decodes of 70 cached tokens each; 7 sequences sample.
  StepWork w;
  w.prefill_tokens = 32;
  w.prefill_attention_pairs = 1536;
  w.decode_sequences = 6;
  w.decode_context_tokens = 420;
  w.sampled_sequences = 7;
  // Rows 38: GEMMs 50 + 380 us, TP 38 us, rest 20 us; attention 1.536 + 0.84 us; logits
  // 21 us.
  const double expected_ms = (50 + 380 + 38 + 20 + 1.536 + 0.84 + 21) * 1e-3;
  const StepBreakdown bd = table->Breakdown(w);
  EXPECT_NEAR(bd.total, expected_ms, 1e-9);
  EXPECT_NEAR(bd.tp_comm, 0.038, 1e-9);
  EXPECT_DOUBLE_EQ(bd.memory, 0);
}

TEST(MeasuredStepTableTest, NeedsBothPhases) {
  std::vector<StepSample> decode_only = {Sample(ServingStepPhase::kDecode, 1, 64)};
  EXPECT_FALSE(MeasuredStepTable::Create(decode_only).ok());
}

}  // namespace
}  // namespace paratune::inference
