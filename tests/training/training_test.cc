// Whole-model training under parallel layouts equals the single-rank run: same model, data
// and seed, 5 AdamW steps. fp32; the layouts only reorder sums (TP partial sums, DP and
// micro-batch gradient accumulation), so the losses agree to ~1e-8 relative (measured); the
// bound asserted is 1e-5 relative.
#include "kernels/training/training.h"

#include <cmath>

#include "gtest/gtest.h"
#include "tests/training/loss_harness.h"

namespace paratune::kernels::training {
namespace {

// The reference: one rank, the same global batch as M·dp micro-batches.
std::vector<double> Reference(TrainConfig c) {
  c.num_micro_batches *= c.parallel.dp;
  c.parallel.tp = c.parallel.pp = c.parallel.dp = c.parallel.vp = 1;
  c.parallel.sequence_parallel = false;
  c.parallel.data_parallel_sharding = DataParallelSharding::kNone;
  return Losses(c);
}

/// `c` at TP 2 × PP 2 × DP 2.
TrainConfig Tp2Pp2Dp2(TrainConfig c) {
  c.parallel.tp = c.parallel.pp = c.parallel.dp = 2;
  return c;
}

/// The first losses of two runs differ: they train different models (or data).
void ExpectDifferentFirstLoss(const std::vector<double>& a, const std::vector<double>& b,
                              double by) {
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_GT(std::abs(a[0] - b[0]), by);
}

TEST(TrainingTest, SingleRankLossStartsNearLogVocabAndFalls) {
  const std::vector<double> ref = Reference(Tiny());
  ASSERT_EQ(ref.size(), 5u);
  // Untrained: about ln(64) = 4.16 (plus the spread of random logits). The data follow
  // next = (5·prev + 3) mod 64 three times in four, so training can reach about
  // 0.25·ln 64 + 0.56 = 1.6; five AdamW steps at lr 1e-2 must take off more than a nat
  // (measured: 4.27 → 2.86). A run whose updates were lost would stay near 4.2.
  EXPECT_GT(ref[0], 3.5);
  EXPECT_LT(ref[0], 5.0);
  EXPECT_LT(ref[4], ref[0] - 1.0);
  EXPECT_GT(ref[4], 1.5);
}

TEST(TrainingTest, Tp2Pp2Dp2EqualsSingleRank) {
  const TrainConfig c = Tp2Pp2Dp2(Tiny());
  ExpectSame(Losses(c), Reference(c));
}

// Every second layer attends to a 5-key window (flash and naive attention): the model
// differs from the whole-context one, and every layout trains the single rank's model.
TEST(TrainingTest, SlidingWindowLayersEqualSingleRankInEveryLayout) {
  for (bool flash : {false, true}) {
    TrainConfig c = Tiny();
    c.flash_attention = flash;
    c.attention_window = 5;
    c.window_attn_skip_freq = 2;
    EXPECT_EQ(c.AttentionWindowOf(0), 5);
    EXPECT_EQ(c.AttentionWindowOf(1), 0);
    EXPECT_EQ(c.AttentionWindowOf(3), 0);
    const TrainConfig tp2pp2dp2 = Tp2Pp2Dp2(c);
    ExpectSame(Losses(tp2pp2dp2), Reference(tp2pp2dp2));
    TrainConfig interleaved = c;
    interleaved.parallel.pp = 2;
    interleaved.parallel.vp = 2;
    const std::vector<double> ref = Reference(c);
    ExpectSame(Losses(interleaved), ref);
    TrainConfig full = Tiny();
    full.flash_attention = flash;
    ExpectDifferentFirstLoss(ref, Reference(full), 1e-4);
  }
  TrainConfig bad = Tiny();
  bad.attention_window = -1;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(TrainingTest, InterleavedPp2Vp2EqualsSingleRank) {
  TrainConfig c = Tiny();
  c.parallel.pp = 2;
  c.parallel.vp = 2;
  ExpectSame(Losses(c), Reference(c));
}

// Uneven splits: 4 layers over 3 stages (2, 1, 1: torch.distributed.pipelining's and
// DeepSpeed's), and with the embedding and the loss counted as layers, 4 + 2 slots over 3
// stages (1, 2, 1) and over 2 x 3 chunks (the first and last chunks hold no layer, the
// embedding and the loss alone); every one trains the single rank's model.
TEST(TrainingTest, UnevenAndEmbeddingAwareSplitsEqualSingleRank) {
  TrainConfig c = Tiny();
  c.parallel.pp = 3;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_EQ(c.parallel.LayersOnStage(c.num_layers, 0), 2);
  ExpectSame(Losses(c), Reference(c));
  c.parallel.split_counts_embedding_and_loss = true;
  EXPECT_EQ(c.parallel.LayersOnStage(c.num_layers, 1), 2);
  ExpectSame(Losses(c), Reference(c));
  c.parallel.pp = 3;
  c.parallel.vp = 2;
  c.num_micro_batches = 3;
  EXPECT_EQ(c.parallel.LayersInChunk(c.num_layers, 0, 0), 0);
  EXPECT_EQ(c.parallel.LayersInChunk(c.num_layers, 2, 1), 0);
  ExpectSame(Losses(c), Reference(c));
}

TEST(TrainingTest, SequenceParallelRecomputeDistributedOptimizerEqualsSingleRank) {
  TrainConfig c = Tiny();
  c.parallel.tp = 2;
  c.parallel.pp = 2;
  c.parallel.vp = 2;
  c.parallel.sequence_parallel = true;
  c.parallel.recompute = Recompute::kFull;
  c.parallel.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.parallel.dp = 2;
  ExpectSame(Losses(c), Reference(c));
}

// Dropout's masks are functions of (layer seed, element index), the same in every layout:
// with dropout on, TP × PP × DP and the interleaved schedule still equal one rank. It does
// drop: the first loss (the same weights and data) moves, and the masks it stores (one
// byte per element of the embedding output and after each output projection, and the
// attention probabilities' mask and output without flash) raise the peak.
TEST(TrainingTest, DropoutRunsInEveryLayoutAndStillEqualsSingleRank) {
  TrainConfig c = Tp2Pp2Dp2(Tiny());
  c.dropout = true;
  const std::vector<double> ref = Reference(c);
  ExpectSame(Losses(c), ref);
  c.parallel.tp = c.parallel.dp = 1;
  c.parallel.vp = 2;
  c.num_micro_batches *= 2;  // the same global batch on one DP rank
  ExpectSame(Losses(c), ref);
  TrainConfig off = Tiny();
  ExpectDifferentFirstLoss(Reference(off), ref, 1e-4);
  off.steps = c.steps = 1;
  c.parallel.tp = c.parallel.pp = c.parallel.dp = c.parallel.vp = 1;
  auto with = RunTrainingInProcess(c), without = RunTrainingInProcess(off);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(with->ranks[0].peak_bytes, without->ranks[0].peak_bytes);
}

// Tied embeddings (GPT's default): one stage computes the logits with the embedding's own
// table; over several stages the last holds a copy and the two gradients are summed, so
// every layout, the interleaved one and the distributed optimizer's shards included, still
// trains the single rank's model. Without the sum the copies would drift apart after the
// first update and the losses from step 2 on would differ.
TEST(TrainingTest, TiedEmbeddingsEqualSingleRankInEveryLayout) {
  TrainConfig c = Tp2Pp2Dp2(Tiny());
  c.tie_embeddings = true;
  const std::vector<double> ref = Reference(c);
  ExpectSame(Losses(c), ref);
  c.parallel.vp = 2;
  c.parallel.sequence_parallel = true;
  c.parallel.data_parallel_sharding = DataParallelSharding::kOptimizer;
  ExpectSame(Losses(c), ref);
  // A different model from the untied one: the same first batch gives another loss.
  ExpectDifferentFirstLoss(Reference(Tiny()), ref, 1e-3);
}

// A learned position table (GPT's) is one more replicated parameter of the first stage:
// every layout, SP and the interleaved schedule included, still trains the single rank's
// model, a different one from the model without positions, and the first stage holds
// exactly rows·h more parameters.
TEST(TrainingTest, LearnedPositionsEqualSingleRankInEveryLayout) {
  TrainConfig c = Tp2Pp2Dp2(Tiny());
  c.position_rows = 24;  // more than seq_length 16: the rows past it get no gradient
  const std::vector<double> ref = Reference(c);
  ExpectSame(Losses(c), ref);
  c.parallel.vp = 2;
  c.parallel.sequence_parallel = true;
  c.tie_embeddings = true;
  ExpectSame(Losses(c), Reference(c));
  ExpectDifferentFirstLoss(Reference(Tiny()), ref, 1e-3);
  TrainConfig one = Tiny();
  one.steps = 1;
  auto without = RunTrainingInProcess(one);
  one.position_rows = 24;
  auto with = RunTrainingInProcess(one);
  ASSERT_TRUE(without.ok() && with.ok());
  EXPECT_EQ(with->ranks[0].parameter_count - without->ranks[0].parameter_count,
            24 * one.shape.hidden_size);
  one.position_rows = 8;
  EXPECT_EQ(one.Validate().message(), "position_rows (8) must be 0 or at least seq_length (16)");
}

// On one stage the tied model holds one V × h table fewer: the rank's parameters drop by
// exactly V·h and its peak by that table's weight, gradient, m and v (4 fp32 values each,
// 16 bytes). Over two stages the last stage's copy keeps every rank's count unchanged.
TEST(TrainingTest, TiedEmbeddingsHoldOneTableOnOneStageAndACopyOnTwo) {
  // One step of `c` untied and tied; empty where a run failed.
  const auto untied_and_tied = [](TrainConfig c) {
    std::vector<TrainResult> out;
    for (bool tie : {false, true}) {
      c.tie_embeddings = tie;
      absl::StatusOr<TrainResult> r = RunTrainingInProcess(c);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return std::vector<TrainResult>();
      out.push_back(*std::move(r));
    }
    return out;
  };
  TrainConfig c = Tiny();
  c.steps = 1;
  const std::vector<TrainResult> one = untied_and_tied(c);
  ASSERT_EQ(one.size(), 2u);
  const int64_t table = c.shape.vocab_size * c.shape.hidden_size;
  EXPECT_EQ(one[0].ranks[0].parameter_count - one[1].ranks[0].parameter_count, table);
  EXPECT_EQ(one[0].ranks[0].peak_bytes - one[1].ranks[0].peak_bytes, 16 * table);
  c.parallel.pp = 2;
  const std::vector<TrainResult> two = untied_and_tied(c);
  ASSERT_EQ(two.size(), 2u);
  ASSERT_EQ(two[1].ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(two[1].ranks[r].parameter_count, two[0].ranks[r].parameter_count) << "rank " << r;
  }
}

// The distributed optimizer keeps m and v for its 1/dp shard only and nothing else extra
// (fp32: no master copy; reduce-scatter and all-gather work in place in the flat buffers),
// so a rank's peak is lower by exactly the two fp32 states of the other shards:
// 2 · 4 bytes · (numel − ceil(numel / dp)).
TEST(TrainingTest, DistributedOptimizerSavesExactlyTheOtherShardsOfMAndV) {
  TrainConfig c = Tiny();
  c.parallel.dp = 2;
  auto plain = RunTrainingInProcess(c);
  ASSERT_TRUE(plain.ok()) << plain.status();
  c.parallel.data_parallel_sharding = DataParallelSharding::kOptimizer;
  auto sharded = RunTrainingInProcess(c);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  ASSERT_EQ(plain->ranks.size(), 2u);
  ASSERT_EQ(sharded->ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    const int64_t numel = plain->ranks[r].parameter_count;
    const int64_t shard = (numel + 1) / 2;
    EXPECT_EQ(plain->ranks[r].peak_bytes - sharded->ranks[r].peak_bytes, 8 * (numel - shard))
        << "rank " << r;
  }
  ExpectSame(sharded->losses, plain->losses);
}

TEST(TrainingTest, ScheduleRunsEveryForwardBeforeItsBackward) {
  TrainConfig c = Tiny();
  c.parallel.pp = 4;
  c.parallel.vp = 2;
  c.num_layers = 8;
  for (int64_t p = 0; p < c.parallel.pp; ++p) {
    const auto ops = PipelineSchedule(c, p);
    ASSERT_EQ(ops.size(), static_cast<size_t>(2 * c.num_micro_batches * c.parallel.vp));
    std::vector<int> seen(c.parallel.vp * c.num_micro_batches, 0);
    for (const auto& op : ops) {
      int& s = seen[op.chunk * c.num_micro_batches + op.micro_batch];
      EXPECT_EQ(s, op.forward ? 0 : 1);
      s += 1;
    }
  }
  // 1F1B warm-up on the first of 4 stages: 3 forwards, then alternating.
  c.parallel.vp = 1;
  const auto ops = PipelineSchedule(c, 0);
  EXPECT_TRUE(ops[0].forward && ops[1].forward && ops[2].forward && ops[3].forward);
  EXPECT_FALSE(ops[4].forward);
}

// p2p_wait_seconds is the time a rank spends in Take, waiting for another stage. Without
// PP there is nothing to wait for: exactly 0. With PP the last stage's first forward needs
// the first stage's whole forward of micro-batch 0 (embedding and two layers), so it waits
// a positive time in every step; every rank's wait is a part of its step.
TEST(TrainingTest, PipelineWaitIsTimedOnlyWithStagesAndIsPartOfTheStep) {
  TrainConfig c = Tiny();
  c.steps = 3;
  auto plain = RunTrainingInProcess(c);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (double w : plain->ranks[0].p2p_wait_seconds) EXPECT_EQ(w, 0.0);
  c.parallel.pp = 2;
  auto piped = RunTrainingInProcess(c);
  ASSERT_TRUE(piped.ok()) << piped.status();
  ASSERT_EQ(piped->ranks.size(), 2u);
  for (const RankResult& r : piped->ranks) {
    ASSERT_EQ(r.p2p_wait_seconds.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_GE(r.p2p_wait_seconds[i], 0.0);
      EXPECT_LE(r.p2p_wait_seconds[i] + r.dp_seconds[i] + r.optimizer_seconds[i],
                r.step_seconds[i]);
      if (r.rank == 1) {
        EXPECT_GT(r.p2p_wait_seconds[i], 0.0) << "step " << i;
      }
    }
  }
}

TEST(TrainingTest, RejectsMoreChunksThanLayers) {
  TrainConfig c = Tiny();
  c.parallel.pp = 5;
  const absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "pp·vp (5) must be at most num_layers, 4");
  c.parallel.pp = 7;
  c.parallel.split_counts_embedding_and_loss = true;
  EXPECT_EQ(c.Validate().message(),
            "pp·vp (7) must be at most num_layers + 2 (the embedding's and the loss's slots), 6");
}

TEST(TrainingTest, LayoutFieldsTheTrainerDoesNotRunAreUnimplemented) {
  TrainConfig c = Tiny();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  c.parallel.cp = 2;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(c.Validate().message(),
            "context parallelism (cp 2) is not implemented by kernels/training");
  c = Tiny();
  c.parallel.recompute = Recompute::kFull;
  c.parallel.recompute_num_layers = 1;
  EXPECT_EQ(c.Validate().message(),
            "recompute_num_layers (1) must be 0: kernels/training recomputes every layer or none");
  // The overlap flags change no arithmetic, so any setting trains.
  c = Tiny();
  c.parallel.overlap_grad_reduce = false;
  c.parallel.overlap_p2p_comm = false;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(TrainingTest, SixteenBitTrainingNeedsTheCudaBackend) {
  TrainConfig c = Tiny();
  c.dtype = DType::kBF16;
  const absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dtype (bf16) needs the cuda backend"), std::string::npos) << s;
  c.dtype = DType::kF64;
  EXPECT_NE(c.Validate().message().find("must be fp32, bf16 or fp16"), std::string::npos);
  c.dtype = DType::kBF16;
  c.backend = BackendKind::kCuda;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(TrainingTest, RankOrderIsTpThenDpThenPp) {
  TrainConfig c = Tiny();
  c.parallel.tp = 2;
  c.parallel.dp = 2;
  c.parallel.pp = 2;
  const RankCoords x = CoordsOf(c, 5);  // 5 = tp 1 + 2·(dp 0 + 2·pp 1)
  EXPECT_EQ(x.tp, 1);
  EXPECT_EQ(x.dp, 0);
  EXPECT_EQ(x.pp, 1);
  EXPECT_EQ(RankOf(c, x), 5);
}

}  // namespace
}  // namespace paratune::kernels::training
