#include "search/pipeline_schedule.h"

#include <gtest/gtest.h>

namespace paratune {
namespace {

PipelineInput Uniform(int64_t p, int64_t v, int64_t m, double f, double b) {
  PipelineInput in;
  in.stages = p;
  in.chunks = v;
  in.micro_batches = m;
  in.forward.assign(static_cast<size_t>(p * v), f);
  in.backward.assign(static_cast<size_t>(p * v), b);
  return in;
}

// 1F1B with identical stages: (m + p - 1) * (F + B) (Narayanan et al. 2021, Section 2.2.1).
TEST(PipelineScheduleTest, OneFOneBMakespan) {
  for (int64_t p : {1, 2, 4, 8}) {
    for (int64_t m : {1, 3, 8, 32}) {
      absl::StatusOr<PipelineResult> r = SimulatePipeline(Uniform(p, 1, m, 1.0, 2.0));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_DOUBLE_EQ(r->makespan, (m + p - 1) * 3.0) << "p=" << p << " m=" << m;
      EXPECT_DOUBLE_EQ(r->bottleneck_busy, m * 3.0);
    }
  }
}

// Interleaved: each chunk is 1/v of a stage, the bubble shrinks to (p - 1) chunk slots:
// m*v*(f+b) + (p-1)*(f+b) with f, b per chunk (Section 2.2.2).
TEST(PipelineScheduleTest, InterleavedBubbleShrinksByV) {
  for (int64_t p : {2, 4, 8}) {
    for (int64_t v : {2, 3, 4}) {
      const int64_t m = 2 * p;
      absl::StatusOr<PipelineResult> r = SimulatePipeline(Uniform(p, v, m, 1.0, 2.0));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_DOUBLE_EQ(r->makespan, (m * v + p - 1) * 3.0) << "p=" << p << " v=" << v;
    }
  }
}

TEST(PipelineScheduleTest, WarmupCountsFollowMegatron) {
  auto warmup = [](const std::vector<PipelineOp>& ops) {
    int64_t n = 0;
    while (n < static_cast<int64_t>(ops.size()) && ops[n].forward) ++n;
    return n - 1;  // The first steady-state forward is followed by a backward.
  };
  EXPECT_EQ(warmup(StageSchedule(0, 4, 1, 8)), 3);
  EXPECT_EQ(warmup(StageSchedule(3, 4, 1, 8)), 0);
  EXPECT_EQ(warmup(StageSchedule(0, 4, 2, 8)), 2 * 3 + 4);
  EXPECT_EQ(warmup(StageSchedule(3, 4, 2, 8)), 4);
  // Every (chunk, micro-batch) runs forward and backward exactly once.
  const std::vector<PipelineOp> ops = StageSchedule(1, 4, 3, 8);
  EXPECT_EQ(ops.size(), 2u * 3 * 8);
}

// A heavier last stage (the logits) sets the steady-state pace.
TEST(PipelineScheduleTest, HeavyLastStageIsTheBottleneck) {
  PipelineInput in = Uniform(4, 1, 16, 1.0, 2.0);
  in.forward[3] += 0.5;
  in.backward[3] += 1.0;
  absl::StatusOr<PipelineResult> r = SimulatePipeline(in);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->bottleneck_busy, 16 * 4.5);
  EXPECT_GE(r->makespan, 16 * 4.5 + 3 * 3.0);
}

// Extrapolating the steady state gives the full simulation's answer.
TEST(PipelineScheduleTest, ExtrapolationMatchesFullSimulation) {
  for (int64_t v : {1, 2}) {
    PipelineInput in = Uniform(4, v, 64, 1.0, 2.0);
    in.forward[0] += 0.3;
    in.backward[4 * v - 1] += 0.7;
    in.p2p_s = 0.05;
    absl::StatusOr<PipelineResult> full = SimulatePipeline(in);
    in.max_simulated_micro_batches = 16;
    absl::StatusOr<PipelineResult> capped = SimulatePipeline(in);
    ASSERT_TRUE(full.ok() && capped.ok());
    EXPECT_NEAR(capped->makespan, full->makespan, 1e-9 * full->makespan) << "v=" << v;
  }
}

TEST(PipelineScheduleTest, RejectsInconsistentInput) {
  PipelineInput in = Uniform(4, 2, 6, 1.0, 2.0);  // m % p != 0 with interleaving.
  EXPECT_EQ(SimulatePipeline(in).status().code(), absl::StatusCode::kInvalidArgument);
  in = Uniform(4, 1, 6, 1.0, 2.0);
  in.forward.pop_back();
  EXPECT_EQ(SimulatePipeline(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PipelineScheduleTest, ClosedFormMatchesUniformOneFOneB) {
  const PipelineInput in = Uniform(8, 1, 32, 1.0, 2.0);
  EXPECT_DOUBLE_EQ(PipelineClosedForm(in), (32 + 7) * 3.0);
}

}  // namespace
}  // namespace paratune
