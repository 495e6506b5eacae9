#include "kernels/step_runner.h"

#include <string>

#include <gtest/gtest.h>

namespace paratune::kernels {
namespace {

StepConfig Tiny() {
  StepConfig c;
  c.layer.shape.hidden_size = 32;
  c.layer.shape.num_attention_heads = 4;
  c.layer.shape.ffn_hidden_size = 64;
  c.layer.shape.vocab_size = 64;
  c.layer.seq_length = 16;
  c.layer.parallel.micro_batch_size = 2;
  c.layer.hidden_dropout = 0.1f;
  c.layer.attention_dropout = 0.1f;
  c.warmup = 1;
  c.iters = 3;
  c.blas_threads_per_rank = 1;
  return c;
}

TEST(StepRunnerTest, ReportsPhasesMemoryAndFlops) {
  StepConfig c = Tiny();
  c.layer.parallel.tp = 2;
  c.layer.parallel.recompute = Recompute::kSelective;
  auto r = RunLayerStep(c);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const char* phase : {"forward", "backward", "recompute", "tp_comm", "total"}) {
    const PhaseTiming* p = r->Find(phase);
    ASSERT_NE(p, nullptr) << phase;
    EXPECT_LE(p->min_s, p->median_s);
    EXPECT_LE(p->median_s, p->max_s);
  }
  EXPECT_GT(r->Find("recompute")->median_s, 0.0);  // selective recomputes the core
  EXPECT_GT(r->Find("tp_comm")->median_s, 0.0);
  ASSERT_EQ(r->peak_bytes_per_rank.size(), 2u);
  // Weights per rank (fp32): 2 LayerNorms (2h each) + QKV 3h²/t + proj h²/t + fc1, fc2 hf/t.
  const int64_t h = 32, f = 64, t = 2;
  const int64_t weight_bytes = 4 * (4 * h + 4 * h * h / t + 2 * h * f / t);
  EXPECT_EQ(r->peak_bytes_by_tag[static_cast<int>(MemoryTag::kWeights)], weight_bytes);
  EXPECT_EQ(r->peak_bytes_by_tag[static_cast<int>(MemoryTag::kGradients)], weight_bytes);
  EXPECT_GT(r->peak_bytes_per_rank[0], 2 * weight_bytes + r->activation_bytes);
  // Selective with TP = 2, no SP: 4 B·(4sbh + 3sbh/t + sbh/t + 2sbf/t) + masks 2sbh + stats.
  const int64_t s = 16, b = 2, sbh = s * b * h;
  EXPECT_EQ(r->activation_bytes,
            4 * (4 * sbh + 3 * sbh / t + sbh / t + 2 * s * b * f / t) + 2 * sbh + 16 * s * b);
  // FLOPs: 3 × (2·sb·(4h² + 2hf) + 4·b·s²·h) / t.
  EXPECT_DOUBLE_EQ(r->flops_per_step,
                   3.0 * (2.0 * s * b * (4 * h * h + 2 * h * f) + 4.0 * b * s * s * h) / t);
  // A 4-key window: 2sw − w² = 112 score pairs per sequence and head group instead of s².
  c.layer.attention_window = 4;
  r = RunLayerStep(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->flops_per_step,
                   3.0 * (2.0 * s * b * (4 * h * h + 2 * h * f) + 4.0 * b * 112 * h) / t);
}

// The SP norm-gradient all-reduce is its own per-step phase (the trainer runs it once per
// step, not per micro-batch): measured with SP at tp 2, exactly absent without SP (no
// collective is issued, so nothing but a clock read is timed).
TEST(StepRunnerTest, GradSyncIsTimedApartAndOnlyWithSequenceParallelism) {
  StepConfig c = Tiny();
  c.layer.parallel.tp = 2;
  c.layer.hidden_dropout = c.layer.attention_dropout = 0;
  double sync[2];
  for (int sp = 0; sp < 2; ++sp) {
    c.layer.parallel.sequence_parallel = sp == 1;
    auto r = RunLayerStep(c);
    ASSERT_TRUE(r.ok()) << r.status();
    const PhaseTiming* p = r->Find("grad_sync");
    ASSERT_NE(p, nullptr);
    sync[sp] = p->median_s;
  }
  EXPECT_LT(sync[0], 1e-4);
  EXPECT_GT(sync[1], sync[0]);
}

TEST(StepRunnerTest, OutOfMemoryIsAResultWithTheBytesRequested) {
  StepConfig c = Tiny();
  c.capacity_bytes_per_rank = 100;  // below the first weight (norm1.weight: 32 floats)
  auto r = RunLayerStep(c);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  ASSERT_TRUE(OomBytesRequested(r.status()).has_value());
  EXPECT_EQ(*OomBytesRequested(r.status()), 128);
}

TEST(StepRunnerTest, OutOfMemoryMidStepOnTwoRanksDoesNotHang) {
  StepConfig c = Tiny();
  c.layer.parallel.tp = 2;
  c.layer.parallel.sequence_parallel = true;
  auto ok = RunLayerStep(c);
  ASSERT_TRUE(ok.ok()) << ok.status();
  c.capacity_bytes_per_rank = ok->peak_bytes_per_rank[0] - 1;
  auto r = RunLayerStep(c);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(OomBytesRequested(r.status()).has_value());
}

TEST(StepRunnerTest, FirstAndLastStageExtrasRun) {
  for (StageExtras e : {StageExtras::kFirst, StageExtras::kLast}) {
    StepConfig c = Tiny();
    c.layer.parallel.tp = 2;
    c.layer.parallel.sequence_parallel = true;
    c.extras = e;
    auto r = RunLayerStep(c);
    ASSERT_TRUE(r.ok()) << r.status();
    // The vocab tables (V/t·h fp32) add to the weights.
    const int64_t h = 32, f = 64, t = 2, v = 64;
    const int64_t layer_weights = 4 * (4 * h + 4 * h * h / t + 2 * h * f / t);
    const int64_t extra = e == StageExtras::kFirst ? 4 * v * h / t : 4 * (v * h / t + 2 * h);
    EXPECT_EQ(r->peak_bytes_by_tag[static_cast<int>(MemoryTag::kWeights)], layer_weights + extra);
    // The extras are timed on their own, inside forward and backward.
    for (const char* phase : {"forward", "backward"}) {
      const PhaseTiming* extras = r->Find(std::string("extras_") + phase);
      ASSERT_NE(extras, nullptr) << phase;
      EXPECT_GT(extras->min_s, 0) << phase;
      EXPECT_LT(extras->min_s, r->Find(phase)->max_s) << phase;
    }
  }
  StepConfig plain = Tiny();
  auto r = RunLayerStep(plain);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Find("extras_forward")->max_s, 0);
  EXPECT_EQ(r->Find("extras_backward")->max_s, 0);
}

TEST(StepRunnerTest, RejectsBadConfigs) {
  StepConfig c = Tiny();
  c.iters = 0;
  EXPECT_EQ(RunLayerStep(c).status().message(), "iters (0) must be >= 1");
  c = Tiny();
  c.layer.dtype = DType::kBF16;
  EXPECT_TRUE(absl::IsInvalidArgument(RunLayerStep(c).status()));
  c = Tiny();
  c.extras = StageExtras::kLast;
  c.layer.shape.vocab_size = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(RunLayerStep(c).status()));
}

}  // namespace
}  // namespace paratune::kernels
