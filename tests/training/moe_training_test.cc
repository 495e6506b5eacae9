// Whole-model training with mixture-of-experts layers (kernels/moe_layer.h in place of the
// MLP) under expert-parallel layouts equals the single-rank run: the same model, data and
// seed, 5 AdamW steps, fp32. With dropless routing and no auxiliary loss the layouts only
// reorder sums (the experts' rows arrive in another order, TP and DP partial sums), so the
// losses agree to the dense trainer's bound, 1e-5 relative.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/training/training.h"
#include "tests/training/loss_harness.h"

namespace paratune::kernels::training {
namespace {

// Four layers: one dense, then three expert layers of four experts, top-2.
TrainConfig TinyMoe() {
  TrainConfig c = Tiny();
  c.shape.activation = Activation::kSwiglu;
  c.shape.normalization = Normalization::kRmsNorm;
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden = 16;
  c.moe.routing = ExpertRouting::kDropless;
  c.first_k_dense_layers = 1;
  return c;
}

// One rank, the same global batch as M·dp micro-batches.
TrainConfig SingleRank(TrainConfig c) {
  c.num_micro_batches *= c.parallel.dp;
  c.parallel.tp = c.parallel.pp = c.parallel.dp = c.parallel.vp = 1;
  c.parallel.ep = c.parallel.etp = 1;
  c.parallel.sequence_parallel = false;
  c.parallel.recompute = Recompute::kNone;
  c.parallel.data_parallel_sharding = DataParallelSharding::kNone;
  return c;
}

void ExpectEqualsSingleRank(const TrainConfig& c) { ExpectSame(Losses(c), Losses(SingleRank(c))); }

TEST(MoeTrainingTest, SingleRankLearnsAndIsNotTheDenseModel) {
  const std::vector<double> moe = Losses(TinyMoe());
  ASSERT_EQ(moe.size(), 5u);
  // As the dense trainer's test: near ln 64 untrained, more than a nat lower after five
  // steps at lr 1e-2 (updates that were lost would stay near 4.2).
  EXPECT_GT(moe[0], 3.5);
  EXPECT_LT(moe[0], 5.0);
  EXPECT_LT(moe[4], moe[0] - 1.0);
  TrainConfig dense = TinyMoe();
  dense.moe = MoeLayerConfig();
  const std::vector<double> d = Losses(dense);
  ASSERT_EQ(d.size(), 5u);
  // Same attention and embedding weights, other MLP blocks: another first loss.
  EXPECT_GT(std::abs(moe[0] - d[0]), 1e-4);
}

// EP over the data-parallel ranks (each routes its own micro-batches; the experts' rows
// travel by all-to-all).
TEST(MoeTrainingTest, Ep2OverDp2EqualsSingleRank) {
  TrainConfig c = TinyMoe();
  c.parallel.dp = c.parallel.ep = 2;
  ExpectEqualsSingleRank(c);
}

// EP over the TP ranks with sequence parallelism: each TP rank routes its s/t rows; the
// router's gradient is then a partial sum all-reduced over TP as the norms' are.
TEST(MoeTrainingTest, Ep2OverTp2WithSequenceParallelismEqualsSingleRank) {
  TrainConfig c = TinyMoe();
  c.parallel.tp = c.parallel.ep = 2;
  c.parallel.sequence_parallel = true;
  c.moe.num_shared_experts = 1;
  c.moe.shared_ffn_hidden = 16;
  ExpectEqualsSingleRank(c);
}

// ETP = TP: the TP group gathers its rows before the block, every expert's FFN is split
// over it; EP over DP; shared experts split over ETP too.
TEST(MoeTrainingTest, Etp2Ep2Dp2EqualsSingleRank) {
  TrainConfig c = TinyMoe();
  c.parallel.tp = c.parallel.etp = 2;
  c.parallel.sequence_parallel = true;
  c.parallel.dp = c.parallel.ep = 2;
  c.moe.num_shared_experts = 1;
  c.moe.shared_ffn_hidden = 16;
  c.moe.score = MoeScoreFunction::kSigmoid;
  c.moe.normalize_topk = true;
  ExpectEqualsSingleRank(c);
}

// Pipelining keeps several micro-batches of each expert layer in flight (1F1B: up to pp
// forwards before their backwards); the expert-data-parallel group (tp·dp / ep = 2 ranks)
// reduces the experts' gradients and, with the distributed optimizer, shards their state.
TEST(MoeTrainingTest, PipelinedExpertLayersWithExpertDataParallelismEqualSingleRank) {
  TrainConfig c = TinyMoe();
  c.parallel.tp = 2;
  c.parallel.sequence_parallel = true;
  c.parallel.pp = c.parallel.dp = c.parallel.ep = 2;
  c.parallel.data_parallel_sharding = DataParallelSharding::kOptimizer;
  ExpectEqualsSingleRank(c);
}

// The interleaved schedule with full recompute: each expert layer runs its forward again
// in backward (routing, dispatch and combine included).
TEST(MoeTrainingTest, InterleavedScheduleWithFullRecomputeEqualsSingleRank) {
  TrainConfig c = TinyMoe();
  c.parallel.pp = c.parallel.vp = 2;
  c.parallel.dp = c.parallel.ep = 2;
  c.parallel.recompute = Recompute::kFull;
  ExpectEqualsSingleRank(c);
}

// Stages need not hold expert layers: with two dense layers first and PP 2, stage 0 has
// none (its expert groups and expert buffers stay empty) while stage 1's train; and every
// second layer an expert layer (moe_layer_freq 2) gives each stage one of each.
TEST(MoeTrainingTest, StagesWithAndWithoutExpertLayersEqualSingleRank) {
  TrainConfig c = TinyMoe();
  c.first_k_dense_layers = 2;
  c.parallel.pp = c.parallel.dp = c.parallel.ep = 2;
  ExpectEqualsSingleRank(c);
  absl::StatusOr<TrainResult> r = RunTrainingInProcess(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ranks[0].expert_parameter_count, 0);  // stage 0: layers 0 and 1, dense
  EXPECT_GT(r->ranks[2].expert_parameter_count, 0);
  c.first_k_dense_layers = 0;
  c.moe_layer_freq = 2;
  ExpectEqualsSingleRank(c);
}

// The Switch auxiliary loss pools the tokens of an EP group. EP over the two TP ranks of
// one micro-batch pools exactly that micro-batch, as one rank does, so the losses still
// agree; and the loss's gradient reaches the router (the run differs from coefficient 0).
TEST(MoeTrainingTest, AuxiliaryLossOverOneMicroBatchEqualsSingleRankAndChangesTraining) {
  TrainConfig c = TinyMoe();
  c.parallel.tp = c.parallel.ep = 2;
  c.parallel.sequence_parallel = true;
  c.moe.aux_loss_coeff = 1.0;
  const std::vector<double> with = Losses(c);
  ExpectSame(with, Losses(SingleRank(c)));
  c.moe.aux_loss_coeff = 0;
  const std::vector<double> without = Losses(c);
  ASSERT_EQ(with.size(), without.size());
  EXPECT_EQ(with[0], without[0]);  // the same weights: the first forward is the same
  EXPECT_GT(std::abs(with.back() - without.back()), 1e-5);
}

// A rank holds E/ep of each expert layer's routed experts: 3 expert layers × E × (2f·h +
// h·f) elements in all, half of them at EP 2; the rest of the model is the same.
TEST(MoeTrainingTest, RanksHoldTheirShareOfTheRoutedExperts) {
  const TrainConfig one = TinyMoe();
  TrainConfig two = one;
  two.parallel.dp = two.parallel.ep = 2;
  absl::StatusOr<TrainResult> a = RunTrainingInProcess(one);
  absl::StatusOr<TrainResult> b = RunTrainingInProcess(two);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const int64_t h = 32, f = 16, e = 4, layers = 3;
  const int64_t routed = layers * e * 3 * f * h;
  EXPECT_EQ(a->ranks[0].expert_parameter_count, routed);
  for (const RankResult& r : b->ranks) {
    EXPECT_EQ(r.expert_parameter_count, routed / 2) << "rank " << r.rank;
    EXPECT_EQ(r.parameter_count - r.expert_parameter_count, a->ranks[0].parameter_count - routed)
        << "rank " << r.rank;
  }
}

TEST(MoeTrainingTest, LayoutsTheTrainerCannotRunNameTheField) {
  TrainConfig c = TinyMoe();
  c.parallel.tp = 2;
  c.parallel.sequence_parallel = false;
  absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sequence_parallel"), std::string::npos) << s;

  c = TinyMoe();
  c.parallel.tp = 4;
  c.parallel.sequence_parallel = true;
  c.parallel.etp = 2;
  s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("etp (2) must be 1 or tp (4)"), std::string::npos) << s;

  c = TinyMoe();
  c.parallel.dp = 2;
  c.parallel.ep = 4;
  s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ep·etp (4) must divide tp·dp (2)"), std::string::npos) << s;

  c = TinyMoe();
  c.moe = MoeLayerConfig();
  c.parallel.dp = c.parallel.ep = 2;
  s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("without experts"), std::string::npos) << s;

  c = TinyMoe();
  c.backend = BackendKind::kCuda;
  c.moe.aux_loss_coeff = 0.01;
  s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("cpu backend only"), std::string::npos) << s;
}

TEST(MoeTrainingTest, ExpertLayersFollowFirstKDenseAndTheFrequency) {
  TrainConfig c = TinyMoe();
  c.num_layers = 8;
  c.first_k_dense_layers = 2;
  c.moe_layer_freq = 3;
  std::vector<int64_t> expert;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.IsExpertLayer(l)) expert.push_back(l);
  }
  EXPECT_EQ(expert, (std::vector<int64_t>{2, 5}));
  c.moe = MoeLayerConfig();
  EXPECT_FALSE(c.IsExpertLayer(2));
}

}  // namespace
}  // namespace paratune::kernels::training
