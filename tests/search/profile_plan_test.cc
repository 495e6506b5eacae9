#include "search/profile_plan.h"

#include <gtest/gtest.h>

namespace paratune {
namespace {

JobSpec Spec() {
  JobSpec s;
  s.model.name = "tiny";
  s.model.num_layers = 8;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.num_query_groups = 4;
  s.model.ffn_hidden_size = 256;
  s.model.vocab_size = 128;
  s.training.seq_length = 32;
  s.training.global_batch_size = 16;
  s.cluster.gpu = "cpu";
  s.cluster.num_gpus = 4;
  s.cluster.gpus_per_node = 4;
  return s;
}

RankedConfig Candidate(int64_t tp, int64_t pp, int64_t dp, int64_t mb,
                       Recompute rc = Recompute::kNone, int64_t rc_layers = 0) {
  RankedConfig r;
  r.config.tp = tp;
  r.config.pp = pp;
  r.config.dp = dp;
  r.config.micro_batch_size = mb;
  r.config.sequence_parallel = tp > 1;
  r.config.recompute = rc;
  r.config.recompute_num_layers = rc_layers;
  return r;
}

TEST(ProfilePlanTest, LayoutsThatRunTheSameLayerShareOneTask) {
  PlanResult plan;
  // Same (tp, sp, mb, recompute): pp and dp do not change the layer's work.
  plan.ranked = {Candidate(1, 1, 4, 1), Candidate(1, 2, 2, 1), Candidate(1, 4, 1, 1),
                 // Different micro-batch, different TP: new tasks.
                 Candidate(1, 1, 4, 2), Candidate(2, 1, 2, 1), Candidate(2, 2, 1, 1)};
  absl::StatusOr<ProfilePlan> p = PlanProfiles(Spec(), plan, {});
  ASSERT_TRUE(p.ok()) << p.status();
  // Three layer shapes, then one all-reduce sweep per distinct dp > 1 (4 and 2).
  ASSERT_EQ(p->tasks.size(), 5u);
  EXPECT_EQ(p->candidates.size(), 6u);
  EXPECT_EQ(p->tasks[3].kind, ProfileTaskSpec::Kind::kCollective);
  EXPECT_EQ(p->tasks[3].collective.group_size, 4);
  EXPECT_EQ(p->tasks[4].collective.group_size, 2);
  EXPECT_EQ(p->tasks[4].collective.sizes_bytes.back(), 16 << 20);  // CPU sweep
  EXPECT_EQ(p->tasks[4].key, p->tasks[4].collective.Key());
  EXPECT_EQ(p->tasks[0].layer.tp, 1);
  EXPECT_EQ(p->tasks[0].layer.micro_batch_size, 1);
  EXPECT_EQ(p->tasks[1].layer.micro_batch_size, 2);
  EXPECT_EQ(p->tasks[2].layer.tp, 2);
  EXPECT_TRUE(p->tasks[2].layer.sequence_parallel);
  EXPECT_EQ(p->tasks[2].device_kind, "cpu");
  EXPECT_EQ(p->tasks[2].key, p->tasks[2].layer.Key());
  // Defaults filled from the model: the task carries the full shape.
  EXPECT_EQ(p->tasks[0].layer.ffn_hidden_size, 256);
  EXPECT_EQ(p->tasks[0].layer.seq_length, 32);
}

TEST(ProfilePlanTest, KeyChangesWithEveryFieldOfTheWork) {
  LayerProfileSpec base;
  base.hidden_size = 64;
  const std::string key = base.Key();
  EXPECT_EQ(key, LayerProfileSpec(base).Key());
  auto differs = [&](auto mutate) {
    LayerProfileSpec other = base;
    mutate(other);
    return other.Key() != key;
  };
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.hidden_size = 128; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.num_query_groups = 2; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.activation = Activation::kSwiglu; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.tp = 2; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.sequence_parallel = true; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.cp = 2; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.micro_batch_size = 2; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.seq_length = 4096; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.recompute = Recompute::kSelective; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.dtype = Precision::kFp8; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.flash_attention = false; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.dropout = true; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.iters = 50; }));
}

TEST(ProfilePlanTest, PartialFullRecomputeNeedsARecomputedAndAPlainLayer) {
  // 8 layers over pp=2: 4 per stage, 1 of them fully recomputed.
  std::vector<LayerProfileSpec> t =
      LayerTasksFor(Spec(), Candidate(1, 2, 2, 1, Recompute::kFull, 1).config, {});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].recompute, Recompute::kFull);
  EXPECT_EQ(t[1].recompute, Recompute::kNone);
  // Every layer of the stage recomputed: one task.
  EXPECT_EQ(LayerTasksFor(Spec(), Candidate(1, 2, 2, 1, Recompute::kFull, 4).config, {}).size(),
            1u);
}

TEST(ProfilePlanTest, SkipsLayoutsThatDoNotFitAndHonoursMaxCandidates) {
  PlanResult plan;
  plan.ranked = {Candidate(1, 1, 4, 1), Candidate(1, 1, 4, 2), Candidate(2, 1, 2, 1),
                 Candidate(4, 1, 1, 1)};
  plan.ranked[1].fits = false;
  ProfilePlanOptions options;
  options.max_candidates = 2;
  absl::StatusOr<ProfilePlan> p = PlanProfiles(Spec(), plan, options);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->candidates, (std::vector<int64_t>{0, 2}));
  ASSERT_EQ(p->tasks.size(), 4u);  // 2 layer shapes, sweeps for dp 4 and dp 2
  EXPECT_EQ(p->tasks[1].layer.tp, 2);
  options.iters = 0;
  absl::Status bad = PlanProfiles(Spec(), plan, options).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("iters (0)"), std::string::npos) << bad;
}

}  // namespace
}  // namespace paratune
