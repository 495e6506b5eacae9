#include "search/compose.h"

#include <gtest/gtest.h>

#include "search/device_catalog.h"

namespace paratune {
namespace {

// L=4, h=64, a=g=4, f=256, V=128, s=32, B=8 on 2 CPU "GPUs".
JobSpec Spec() {
  JobSpec s;
  s.model.name = "tiny";
  s.model.num_layers = 4;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.num_query_groups = 4;
  s.model.ffn_hidden_size = 256;
  s.model.vocab_size = 128;
  s.training.seq_length = 32;
  s.training.global_batch_size = 8;
  s.cluster.gpu = "cpu";
  s.cluster.num_gpus = 2;
  s.cluster.gpus_per_node = 2;
  return s;
}

RankedConfig Candidate(int64_t tp, int64_t pp, int64_t dp, double iteration_s, double compute_s,
                       double tp_comm_s = 0, double bubble_s = 0) {
  RankedConfig r;
  r.config.tp = tp;
  r.config.pp = pp;
  r.config.dp = dp;
  r.config.sequence_parallel = tp > 1;
  r.iteration_time_s = iteration_s;
  r.time.compute = compute_s;
  r.time.tp_comm = tp_comm_s;
  r.time.pp_bubble = bubble_s;
  r.tokens_per_sec_per_gpu = 1000;
  r.mfu = 0.5;
  return r;
}

LayerMeasurement Measured(double fwd, double bwd, double recompute = 0, double comm = 0) {
  LayerMeasurement m;
  m.forward_s = fwd;
  m.backward_s = bwd;
  m.recompute_s = recompute;
  m.tp_comm_s = comm;
  return m;
}

TEST(ComposeTest, NonLayerShareIsTheLogitsFlopShare) {
  // Layer: 2bs(qkv 12288 + proj 4096 + mlp 32768) + 4bs^2h = 3145728 + 262144 = 3407872;
  // logits 2bshV = 524288; 4 layers: 524288 / (524288 + 13631488) = 1/27.
  ParallelConfig c;
  EXPECT_NEAR(NonLayerComputeShare(Spec(), c, 4), 1.0 / 27.0, 1e-15);
  // SwiGLU with GQA (g=2, f=128), 2 layers: qkv 8192, proj 4096, mlp 3*64*128 = 24576 ->
  // layer 2359296 + 262144 = 2621440; 524288 / (524288 + 5242880) = 1/11.
  JobSpec s = Spec();
  s.model.activation = Activation::kSwiglu;
  s.model.num_query_groups = 2;
  s.model.ffn_hidden_size = 128;
  EXPECT_NEAR(NonLayerComputeShare(s, c, 2), 1.0 / 11.0, 1e-15);
}

TEST(ComposeTest, ReplacesLayerComputeCommAndBubbleWithMeasuredStageTimes) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  const RankedConfig modelled = Candidate(1, 2, 1, 1.0, 0.5, 0.0, 0.1);
  Measurements m;
  m.layers[LayerTasksFor(spec, modelled.config, options)[0].Key()] =
      Measured(0.010, 0.020, 0.0, 0.004);
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // m = 8 micro-batches, 2 layers per stage: stage = 2 * 30 ms = 60 ms, 8 ms of it comm.
  // compute = 8 * 52 ms + 0.5 / 14 (logits share for 2 layers); comm = 8 * 8 ms;
  // bubble = (p - 1) * 60 ms.
  EXPECT_NEAR(r->time.compute, 8 * 0.052 + 0.5 / 14.0, 1e-12);
  EXPECT_NEAR(r->time.tp_comm, 0.064, 1e-12);
  EXPECT_NEAR(r->time.pp_bubble, 0.060, 1e-12);
  const double expected = 1.0 - 0.6 + 8 * 0.052 + 0.5 / 14.0 + 0.064 + 0.060;
  EXPECT_NEAR(r->iteration_time_s, expected, 1e-12);
  EXPECT_EQ(r->source, ResultSource::kMeasured);
  // Throughput scales inversely with the iteration.
  EXPECT_NEAR(r->tokens_per_sec_per_gpu, 1000 * 1.0 / expected, 1e-9);
  EXPECT_NEAR(r->mfu, 0.5 / expected, 1e-12);
}

TEST(ComposeTest, PartialRecomputeMixesTheTwoMeasuredLayers) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.recompute = Recompute::kFull;
  modelled.config.recompute_num_layers = 1;
  std::vector<LayerProfileSpec> tasks = LayerTasksFor(spec, modelled.config, options);
  ASSERT_EQ(tasks.size(), 2u);
  Measurements m;
  m.layers[tasks[0].Key()] = Measured(0.010, 0.020, 0.010);  // recomputed: 40 ms
  m.layers[tasks[1].Key()] = Measured(0.010, 0.020);         // plain: 30 ms
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok());
  // m = 4; stage = 1 * 40 + 3 * 30 = 130 ms.
  EXPECT_NEAR(r->time.compute, 4 * 0.130 + 0.6 / 27.0, 1e-12);
  EXPECT_NEAR(r->time.pp_bubble, 0.0, 1e-15);
}

TEST(ComposeTest, RanksAgainAndKeepsModelledFiguresWhereMeasurementsAreMissing) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  PlanResult plan;
  // Modelled order: A (tp1 dp2) then B (tp2 dp1) then C (tp1 pp2, does not fit).
  plan.ranked = {Candidate(1, 1, 2, 1.0, 0.6), Candidate(2, 1, 1, 1.1, 0.6),
                 Candidate(1, 2, 1, 1.2, 0.6)};
  plan.ranked[2].fits = false;
  absl::StatusOr<ProfilePlan> profile = PlanProfiles(spec, plan, options);
  ASSERT_TRUE(profile.ok());
  // Two layer shapes and A's dp=2 all-reduce sweep; C does not fit: not profiled.
  ASSERT_EQ(profile->tasks.size(), 3u);
  EXPECT_EQ(profile->tasks[2].kind, ProfileTaskSpec::Kind::kCollective);
  Measurements m;
  // A's layer is slow on this device, B's is fast.
  m.layers[profile->tasks[0].key] = Measured(0.100, 0.200);
  m.layers[profile->tasks[1].key] = Measured(0.001, 0.002);
  PlanResult composed = ComposePlan(spec, plan, *profile, options, m);
  ASSERT_EQ(composed.ranked.size(), 3u);
  EXPECT_EQ(composed.ranked[0].config.tp, 2);  // B wins after measurement
  EXPECT_EQ(composed.ranked[0].rank, 1);
  EXPECT_EQ(composed.ranked[1].config.tp, 1);
  EXPECT_EQ(composed.ranked[1].config.pp, 1);
  EXPECT_EQ(composed.ranked[2].config.pp, 2);  // not fitting stays last
  EXPECT_EQ(composed.ranked[2].source, ResultSource::kModelled);
  EXPECT_EQ(composed.ranked[2].iteration_time_s, 1.2);

  // Without B's measurement B keeps its modelled time and says why.
  m.layers.erase(profile->tasks[1].key);
  composed = ComposePlan(spec, plan, *profile, options, m);
  const RankedConfig& b = composed.ranked[0];
  EXPECT_EQ(b.config.tp, 2);
  EXPECT_EQ(b.source, ResultSource::kModelled);
  EXPECT_EQ(b.iteration_time_s, 1.1);
  ASSERT_FALSE(b.notes.empty());
  EXPECT_NE(b.notes.back().find("no measurement"), std::string::npos) << b.notes.back();
}

TEST(ComposeTest, DataParallelReduceScalesWithMeasuredBusBandwidth) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.time.dp_comm = 0.1;
  Measurements m;
  m.layers[LayerTasksFor(spec, modelled.config, options)[0].Key()] = Measured(0.010, 0.020);
  std::optional<CollectiveSweepSpec> sweep = DpSweepFor(spec, modelled.config, options);
  ASSERT_TRUE(sweep.has_value());
  EXPECT_EQ(sweep->group_size, 2);
  CommMeasurement comm;
  comm.samples = {{1 << 20, 0.01, 1.0e9}, {16 << 20, 0.02, 2.5e9}, {4 << 20, 0.01, 2.0e9}};
  m.collectives[sweep->Key()] = comm;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // tp*cp*dp = 2 fits in a node of 2: the modelled link is the intra-node one.
  const double modelled_bw = FindDevice("cpu")->nvlink_bandwidth;
  const double dp = 0.1 * modelled_bw / 2.5e9;  // the largest size's bus bandwidth
  EXPECT_NEAR(r->time.dp_comm, dp, 1e-12);
  EXPECT_NEAR(r->iteration_time_s, 1.0 - 0.7 + 4 * 4 * 0.030 + 0.6 / 27.0 + dp, 1e-12);
  // Without the sweep the modelled DP time stays.
  m.collectives.clear();
  EXPECT_NEAR(ComposeCandidate(spec, modelled, options, m)->time.dp_comm, 0.1, 1e-15);
}

TEST(ComposeTest, MeasuredOutOfMemoryMarksTheLayoutAsNotFitting) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  const RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  Measurements m;
  LayerMeasurement oom;
  oom.outcome = LayerMeasurement::Outcome::kOom;
  oom.message = "out of memory, 1024 bytes requested";
  m.layers[LayerTasksFor(spec, modelled.config, options)[0].Key()] = oom;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->fits);
  EXPECT_EQ(r->source, ResultSource::kMeasured);
}

}  // namespace
}  // namespace paratune
