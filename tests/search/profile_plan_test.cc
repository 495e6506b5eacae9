#include "search/profile_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "search/memory_model.h"

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
  // Three layer shapes, their first- and last-stage variants, one all-reduce sweep per
  // distinct dp > 1 (4 and 2), and the CPU job's optimizer task.
  ASSERT_EQ(p->tasks.size(), 12u);
  EXPECT_EQ(p->candidates.size(), 6u);
  for (size_t i = 3; i < 9; ++i) {
    const ProfileTaskSpec& x = p->tasks[i];
    EXPECT_EQ(x.kind, ProfileTaskSpec::Kind::kLayer);
    // Pairs (first, last) of the plain tasks, in their order, with the same shape.
    const ProfileTaskSpec& plain = p->tasks[(i - 3) / 2];
    EXPECT_EQ(x.layer.extras, i % 2 == 1 ? StageExtras::kFirst : StageExtras::kLast);
    EXPECT_EQ(x.key, plain.key + (i % 2 == 1 ? " ex=first" : " ex=last"));
    EXPECT_EQ(x.key, x.layer.Key());
    EXPECT_EQ(x.layer.tp, plain.layer.tp);
    EXPECT_EQ(x.layer.micro_batch_size, plain.layer.micro_batch_size);
    EXPECT_EQ(plain.layer.extras, StageExtras::kNone);
  }
  EXPECT_EQ(p->tasks[9].kind, ProfileTaskSpec::Kind::kCollective);
  EXPECT_EQ(p->tasks[9].collective.op, CollectiveOp::kAllReduce);
  EXPECT_EQ(p->tasks[9].collective.group_size, 4);
  EXPECT_EQ(p->tasks[10].collective.group_size, 2);
  EXPECT_EQ(p->tasks[10].collective.sizes_bytes.back(), 16 << 20);  // CPU sweep
  EXPECT_EQ(p->tasks[10].key, p->tasks[10].collective.Key());
  // The optimizer at the largest per-rank parameter count (tp1 pp1: the whole model):
  // 8 layers of 4h² + 2hf + 9h + f = 49,984 parameters, the untied input and output
  // embeddings (2·V·h = 16,384), and at most the s·h position table and the final norm.
  const ProfileTaskSpec& opt = p->tasks[11];
  EXPECT_EQ(opt.kind, ProfileTaskSpec::Kind::kOptimizer);
  EXPECT_EQ(opt.optimizer.params,
            std::llround(MaxParamsPerGpu(Spec().model, plan.ranked[0].config)));
  EXPECT_GE(opt.optimizer.params, 8 * 49984 + 2 * 8192);
  EXPECT_LE(opt.optimizer.params, 8 * 49984 + 2 * 8192 + 32 * 64 + 2 * 64);
  EXPECT_EQ(opt.key, "optimizer params=" + std::to_string(opt.optimizer.params) +
                         " dt=fp32 w=2 i=5");
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
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.extras = StageExtras::kFirst; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.attention_only = true; }));
  EXPECT_TRUE(differs([](LayerProfileSpec& l) { l.attention_window = 128; }));
  LayerProfileSpec first = base, last = base;
  first.extras = StageExtras::kFirst;
  last.extras = StageExtras::kLast;
  EXPECT_NE(first.Key(), last.Key());
  // A plain task's key is unchanged by the extras and attention-only fields (cached plain
  // results stay valid).
  EXPECT_EQ(key.find("ex="), std::string::npos);
  EXPECT_EQ(key.find("mlp="), std::string::npos);
  EXPECT_EQ(key.find("win="), std::string::npos);
}

TEST(ProfilePlanTest, DistributedOptimizerGetsReduceScatterAndAllGatherSweeps) {
  PlanResult plan;
  plan.ranked = {Candidate(1, 1, 4, 1), Candidate(1, 1, 4, 2), Candidate(1, 2, 2, 1)};
  plan.ranked[1].config.data_parallel_sharding = DataParallelSharding::kOptimizer;
  plan.ranked[2].config.data_parallel_sharding = DataParallelSharding::kOptimizer;
  absl::StatusOr<ProfilePlan> p = PlanProfiles(Spec(), plan, {});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::pair<CollectiveOp, int64_t>> sweeps;
  std::vector<int64_t> sizes;
  for (const ProfileTaskSpec& t : p->tasks) {
    if (t.kind != ProfileTaskSpec::Kind::kCollective) continue;
    sweeps.emplace_back(t.collective.op, t.collective.group_size);
    if (sizes.empty()) sizes = t.collective.sizes_bytes;
    EXPECT_EQ(t.collective.sizes_bytes, sizes);
    EXPECT_EQ(t.key, t.collective.Key());
  }
  // dp 4 without it: all-reduce; dp 4 and dp 2 with it: reduce-scatter and all-gather.
  const std::vector<std::pair<CollectiveOp, int64_t>> want = {
      {CollectiveOp::kAllReduce, 4}, {CollectiveOp::kReduceScatter, 4},
      {CollectiveOp::kAllGather, 4}, {CollectiveOp::kReduceScatter, 2},
      {CollectiveOp::kAllGather, 2}};
  EXPECT_EQ(sweeps, want);
  EXPECT_EQ(sizes, (std::vector<int64_t>{1 << 20, 4 << 20, 16 << 20}));
  // Layers: tp1 mb1 (shared by the pp1 and pp2 layouts) and tp1 mb2, 2 variants each.
  int64_t layers = 0, extras = 0;
  for (const ProfileTaskSpec& t : p->tasks) {
    if (t.kind != ProfileTaskSpec::Kind::kLayer) continue;
    (t.layer.extras == StageExtras::kNone ? layers : extras) += 1;
  }
  EXPECT_EQ(layers, 2);
  EXPECT_EQ(extras, 4);
  EXPECT_EQ(DpSweepsFor(Spec(), Candidate(2, 2, 1, 1).config, {}).size(), 0u);
}

TEST(ProfilePlanTest, GpuJobsGetNoOptimizerTaskAndPartialRecomputeExtrasUseThePlainTask) {
  JobSpec spec = Spec();
  spec.cluster.gpu = "h100-sxm-80gb";
  PlanResult plan;
  // 8 layers over pp=2, 1 of each stage's 4 fully recomputed: full and plain tasks; the
  // stage variants are of the plain one (the last of LayerTasksFor).
  plan.ranked = {Candidate(1, 2, 2, 1, Recompute::kFull, 1)};
  absl::StatusOr<ProfilePlan> p = PlanProfiles(spec, plan, {});
  ASSERT_TRUE(p.ok()) << p.status();
  // full, plain, plain+first, plain+last, the dp=2 all-reduce; no optimizer task.
  ASSERT_EQ(p->tasks.size(), 5u);
  EXPECT_EQ(p->tasks[0].layer.recompute, Recompute::kFull);
  EXPECT_EQ(p->tasks[2].key, p->tasks[1].key + " ex=first");
  EXPECT_EQ(p->tasks[3].key, p->tasks[1].key + " ex=last");
  EXPECT_EQ(p->tasks[4].kind, ProfileTaskSpec::Kind::kCollective);
  EXPECT_EQ(p->tasks[4].collective.sizes_bytes.back(), 256 << 20);  // GPU sweep
  for (const ProfileTaskSpec& t : p->tasks) {
    EXPECT_NE(t.kind, ProfileTaskSpec::Kind::kOptimizer);
  }
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
  // 2 layer shapes, their 4 stage variants, sweeps for dp 4 and dp 2, the optimizer.
  ASSERT_EQ(p->tasks.size(), 9u);
  EXPECT_EQ(p->tasks[1].layer.tp, 2);
  options.iters = 0;
  absl::Status bad = PlanProfiles(Spec(), plan, options).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("iters (0)"), std::string::npos) << bad;
}

// A model whose every second layer attends to a 16-token window: each layout gets a layer
// task per kind (windowed first), and an MoE model an attention-only twin of each; the
// stage-extras variants go with the windowed task.
TEST(ProfilePlanTest, SlidingWindowModelsGetATaskPerKindOfLayer) {
  JobSpec spec = Spec();
  spec.model.sliding_window = 16;
  spec.model.window_attn_skip_freq = 2;
  const std::vector<LayerKind> kinds = LayerKinds(spec.model, spec.training.seq_length);
  ASSERT_EQ(kinds.size(), 2u);
  EXPECT_EQ(kinds[0].attention_window, 16);
  EXPECT_DOUBLE_EQ(kinds[0].share, 0.5);
  EXPECT_EQ(kinds[1].attention_window, 0);
  EXPECT_DOUBLE_EQ(kinds[1].share, 0.5);
  PlanResult plan;
  plan.ranked = {Candidate(1, 1, 4, 1)};
  absl::StatusOr<ProfilePlan> p = PlanProfiles(spec, plan, {});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int64_t> plain_windows, extras_windows;
  for (const ProfileTaskSpec& t : p->tasks) {
    if (t.kind != ProfileTaskSpec::Kind::kLayer) continue;
    (t.layer.extras == StageExtras::kNone ? plain_windows : extras_windows)
        .push_back(t.layer.attention_window);
  }
  EXPECT_EQ(plain_windows, (std::vector<int64_t>{16, 0}));
  EXPECT_EQ(extras_windows, (std::vector<int64_t>{16, 16}));

  spec.model.num_experts = 4;
  spec.model.moe_router_topk = 2;
  spec.model.moe_ffn_hidden_size = 128;
  p = PlanProfiles(spec, plan, {});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int64_t> attention_windows;
  for (const ProfileTaskSpec& t : p->tasks) {
    if (t.kind == ProfileTaskSpec::Kind::kLayer && t.layer.attention_only) {
      attention_windows.push_back(t.layer.attention_window);
    }
  }
  EXPECT_EQ(attention_windows, (std::vector<int64_t>{16, 0}));

  // Every layer windowed, or none: one kind.
  spec.model.window_attn_skip_freq = 0;
  EXPECT_EQ(LayerKinds(spec.model, spec.training.seq_length).size(), 1u);
  EXPECT_EQ(LayerKinds(spec.model, spec.training.seq_length)[0].attention_window, 16);
  // A window as long as the sequence attends to every earlier key: no window.
  EXPECT_EQ(LayerKinds(spec.model, 16)[0].attention_window, 0);
  spec.model.sliding_window = 0;
  EXPECT_EQ(LayerKinds(spec.model, spec.training.seq_length)[0].attention_window, 0);
}

TEST(ProfilePlanTest, MoeJobsGetOneMoeLayerTaskPerExpertLayout) {
  JobSpec spec = Spec();
  spec.training.precision = Precision::kFp32;
  spec.model.num_experts = 4;
  spec.model.moe_router_topk = 2;
  spec.model.moe_ffn_hidden_size = 128;
  spec.model.num_shared_experts = 1;
  PlanResult plan;
  // ep 1 and ep 2 at mb 1, ep 2 again at another pp (same work), ep 2 with tp 2 and SP
  // (16 tokens per EP rank), and a layout with the allgather dispatcher (no task: the MoE
  // layer task dispatches with all-to-all).
  plan.ranked = {Candidate(1, 1, 4, 1), Candidate(1, 1, 4, 1), Candidate(1, 2, 2, 1),
                 Candidate(2, 1, 2, 1), Candidate(1, 1, 4, 1)};
  plan.ranked[1].config.ep = 2;
  plan.ranked[2].config.ep = 2;
  plan.ranked[3].config.ep = 2;
  plan.ranked[4].config.ep = 4;
  plan.ranked[4].config.moe_token_dispatcher = MoeTokenDispatcher::kAllGather;
  absl::StatusOr<ProfilePlan> p = PlanProfiles(spec, plan, {});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<const MoeProfileSpec*> moe;
  for (const ProfileTaskSpec& t : p->tasks) {
    if (t.kind != ProfileTaskSpec::Kind::kMoeLayer) continue;
    EXPECT_EQ(t.key, t.moe.Key());
    moe.push_back(&t.moe);
  }
  ASSERT_EQ(moe.size(), 3u);
  // Each distinct layer task (tp 1 and tp 2 with SP) has an attention-only twin, the same
  // work with the MLP block the identity, right before the MoE layer tasks.
  std::vector<const ProfileTaskSpec*> attention;
  std::set<std::string> plain;
  for (const ProfileTaskSpec& t : p->tasks) {
    if (t.kind != ProfileTaskSpec::Kind::kLayer) continue;
    if (t.layer.attention_only) {
      attention.push_back(&t);
    } else if (t.layer.extras == StageExtras::kNone) {
      plain.insert(t.key);
    }
  }
  ASSERT_EQ(attention.size(), 2u);
  EXPECT_EQ(attention[0]->layer.tp, 1);
  EXPECT_EQ(attention[1]->layer.tp, 2);
  for (const ProfileTaskSpec* t : attention) {
    EXPECT_EQ(t->key, t->layer.Key());
    LayerProfileSpec twin = t->layer;
    twin.attention_only = false;
    EXPECT_EQ(plain.count(twin.Key()), 1u) << t->key;
  }
  EXPECT_EQ(AttentionTasksFor(Spec(), plan.ranked[0].config, {}).size(), 0u)
      << "a dense model has no attention-only tasks";
  EXPECT_EQ(moe[0]->ep, 1);
  EXPECT_EQ(moe[0]->tokens, 32);
  EXPECT_EQ(moe[1]->ep, 2);
  EXPECT_EQ(moe[1]->tokens, 32);
  EXPECT_EQ(moe[2]->ep, 2);
  EXPECT_EQ(moe[2]->tokens, 16);
  // The shared expert's width resolves to moe_ffn_hidden_size.
  EXPECT_EQ(moe[0]->shared_expert_ffn_hidden_size, 128);
  std::string why;
  EXPECT_FALSE(MoeTaskFor(spec, plan.ranked[4].config, {}, &why).has_value());
  EXPECT_EQ(why,
            "the MoE layer task dispatches with all-to-all; this layout's token dispatcher is "
            "allgather");

  // Every field the worker runs with is in the key.
  const MoeProfileSpec base = *moe[0];
  std::set<std::string> keys = {base.Key()};
  auto differs = [&](auto edit) {
    MoeProfileSpec m = base;
    edit(m);
    return keys.insert(m.Key()).second;
  };
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.hidden_size = 128; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.num_experts = 8; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.moe_router_topk = 1; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.moe_ffn_hidden_size = 64; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.num_shared_experts = 2; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.shared_expert_ffn_hidden_size = 64; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.routing = MoeRouting::kDropless; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.capacity_factor = 1.5; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.ep = 4; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.etp = 2; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.tokens = 64; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.dtype = Precision::kBf16; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.warmup = 3; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.iters = 7; }));
  EXPECT_TRUE(differs([](MoeProfileSpec& m) { m.seed = 2; }));

  // A GPU device kind gets the same task in the spec's precision (CUDA workers run it).
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.training.precision = Precision::kBf16;
  const std::optional<MoeProfileSpec> gpu = MoeTaskFor(spec, plan.ranked[0].config, {}, &why);
  ASSERT_TRUE(gpu.has_value()) << why;
  EXPECT_EQ(gpu->dtype, Precision::kBf16);
  EXPECT_EQ(gpu->ep, plan.ranked[0].config.ep);
}

}  // namespace
}  // namespace paratune
