// Synthetic traces: lengths within their jitter, Poisson gaps with the rate's mean,
// deterministic prompts, and the validation messages.
#include <gtest/gtest.h>

#include "kernels/serving/request_trace.h"

namespace paratune::kernels::serving {
namespace {

TEST(RequestTrace, JitteredLengthsStayInTheirRangeAndOfflineArrivesAtZero) {
  TraceOptions o;
  o.num_requests = 400;
  o.isl = 100;
  o.osl = 20;
  o.isl_jitter = 0.5;
  o.osl_jitter = 0.25;
  auto trace = MakeTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 400u);
  int64_t isl_sum = 0, distinct = 0;
  for (size_t i = 0; i < trace->size(); ++i) {
    const TraceRequest& r = (*trace)[i];
    EXPECT_EQ(r.id, static_cast<int64_t>(i));
    EXPECT_GE(r.isl, 50);
    EXPECT_LE(r.isl, 150);
    EXPECT_GE(r.osl, 15);
    EXPECT_LE(r.osl, 25);
    EXPECT_EQ(r.arrival_s, 0.0);
    isl_sum += r.isl;
    distinct += r.isl != 100;
  }
  // Uniform in [50, 150]: the mean of 400 draws is within 5 of 100 (σ of the mean ≈ 1.4).
  EXPECT_NEAR(isl_sum / 400.0, 100.0, 5.0);
  EXPECT_GT(distinct, 300);
}

TEST(RequestTrace, PoissonGapsAverageOneOverTheRate) {
  TraceOptions o;
  o.num_requests = 2000;
  o.request_rate = 50.0;
  auto trace = MakeTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  double prev = 0;
  for (const TraceRequest& r : *trace) {
    EXPECT_GT(r.arrival_s, prev);
    prev = r.arrival_s;
  }
  // Mean gap 1/50 s; σ of the mean of 2000 exponential gaps is 0.02/√2000 ≈ 4.5e-4.
  EXPECT_NEAR(prev / 2000.0, 0.02, 2e-3);
  EXPECT_STREQ(o.mode(), "rate");
}

TEST(RequestTrace, PromptsAreDeterministicAndInTheVocabulary) {
  const std::vector<int32_t> a = PromptTokens(7, 3, 50, 100), b = PromptTokens(7, 3, 50, 100);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, PromptTokens(7, 4, 50, 100));
  for (int32_t t : a) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 100);
  }
}

TEST(RequestTrace, ValidateNamesTheFieldAndTheRule) {
  TraceOptions o;
  o.osl = 0;
  EXPECT_EQ(o.Validate().message(), "osl (0) must be positive");
  o = TraceOptions();
  o.concurrency = 4;
  o.request_rate = 2;
  EXPECT_EQ(o.Validate().message(), "set concurrency or request_rate, not both");
}

}  // namespace
}  // namespace paratune::kernels::serving
