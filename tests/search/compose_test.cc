#include "search/compose.h"

#include <gtest/gtest.h>

#include <optional>

#include "search/device_catalog.h"
#include "search/memory_model.h"
#include "search/time_model.h"

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

// Edges measured equal to the plain layer: no embedding or logits time.
void NoEdges(const JobSpec& spec, const ParallelConfig& c, Measurements& m) {
  const std::string plain = LayerTasksFor(spec, c, ProfilePlanOptions()).back().Key();
  m.first_stage[plain] = m.layers.at(plain);
  m.last_stage[plain] = m.layers.at(plain);
}

// An all-reduce sweep whose time is exactly 100 us + bytes / (1 GB/s) at every size.
CommMeasurement LinearSweep() {
  CommMeasurement comm;
  for (int64_t mib : {1, 4, 16}) {
    const double bytes = static_cast<double>(mib << 20);
    comm.samples.push_back({mib << 20, 1e-4 + bytes / 1e9, 0});
  }
  return comm;
}

TEST(ComposeTest, OneStageIsMicroBatchesTimesMeasuredLayersEdgesThenReduceAndOptimizer) {
  JobSpec spec = Spec();
  spec.training.precision = Precision::kFp32;
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.overlap_grad_reduce = false;
  const ParallelConfig& c = modelled.config;
  const std::string key = LayerTasksFor(spec, c, options)[0].Key();
  Measurements m;
  m.layers[key] = Measured(0.010, 0.020);
  // The extras' own parts as the step runner times them: embedding 1 ms forward, 1.5 ms
  // backward; logits and loss 4 ms and 6 ms. The tasks' totals are not differenced (they
  // are set off from the plain layer's on purpose, as noise would).
  m.first_stage[key] = Measured(0.0105, 0.0205);
  m.first_stage[key].extras_forward_s = 0.001;
  m.first_stage[key].extras_backward_s = 0.0015;
  m.last_stage[key] = Measured(0.016, 0.023);
  m.last_stage[key].extras_forward_s = 0.004;
  m.last_stage[key].extras_backward_s = 0.006;
  m.collectives[DpSweepFor(spec, c, options)->Key()] = LinearSweep();
  m.optimizer_seconds_per_param = 5e-9;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // m = 8 / (1 * 2) = 4 micro-batches of 4 layers * 30 ms + 2.5 ms + 10 ms = 132.5 ms; the
  // FP32 gradients (4 bytes per parameter) all-reduced after the backward (no overlap);
  // AdamW on every parameter.
  const double params = MaxParamsPerGpu(spec.model, c);
  const double dp = 1e-4 + 4 * params / 1e9;
  EXPECT_NEAR(r->time.compute, 4 * 0.1325, 1e-9);
  EXPECT_NEAR(r->time.dp_comm, dp, 1e-12);
  EXPECT_NEAR(r->time.optimizer, 5e-9 * params, 1e-12);
  const double expected = 4 * 0.1325 + dp + 5e-9 * params;
  EXPECT_NEAR(r->iteration_time_s, expected, 1e-9);
  EXPECT_EQ(r->source, ResultSource::kMeasured);
  // Throughput scales inversely with the iteration.
  EXPECT_NEAR(r->tokens_per_sec_per_gpu, 1000 * 1.0 / expected, 1e-6);
  EXPECT_NEAR(r->mfu, 0.5 / expected, 1e-9);
}

// Every second layer attends to a 16-token window: the windowed and the whole-context layer
// are measured by tasks of their own, and a stage's layers take their mean by count.
TEST(ComposeTest, SlidingWindowLayersAreMeasuredApartAndMixedByCount) {
  JobSpec spec = Spec();
  spec.training.precision = Precision::kFp32;
  spec.model.sliding_window = 16;
  spec.model.window_attn_skip_freq = 2;
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.overlap_grad_reduce = false;
  const ParallelConfig& c = modelled.config;
  const std::vector<LayerKind> kinds = LayerKinds(spec.model, spec.training.seq_length);
  ASSERT_EQ(kinds.size(), 2u);
  const std::string windowed = LayerTasksFor(spec, c, options, 16)[0].Key();
  const std::string full = LayerTasksFor(spec, c, options, 0)[0].Key();
  EXPECT_NE(windowed.find(" win=16 "), std::string::npos) << windowed;
  EXPECT_EQ(full.find(" win="), std::string::npos) << full;
  EXPECT_EQ(LayerTasksFor(spec, c, options)[0].Key(), windowed);  // The first kind.
  Measurements m;
  m.layers[windowed] = Measured(0.006, 0.012);
  m.collectives[DpSweepFor(spec, c, options)->Key()] = LinearSweep();
  m.optimizer_seconds_per_param = 5e-9;
  // Without the whole-context layer's measurement the layout stays modelled.
  EXPECT_FALSE(ComposeCandidate(spec, modelled, options, m).ok());
  m.layers[full] = Measured(0.010, 0.020);
  NoEdges(spec, c, m);
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // 4 micro-batches of 2 x 18 ms + 2 x 30 ms.
  EXPECT_NEAR(r->time.compute, 4 * 0.096, 1e-9);
  bool noted = false;
  for (const std::string& note : r->notes) {
    noted = noted || note ==
                         "2 of 4 layers attend to a 16-token window: measured fwd 6.000 ms, bwd "
                         "12.000 ms; the others fwd 10.000 ms, bwd 20.000 ms; the stages' layers "
                         "take the mean by count";
  }
  EXPECT_TRUE(noted);
  // Every layer windowed: one kind, the windowed task alone.
  spec.model.window_attn_skip_freq = 0;
  ASSERT_EQ(LayerKinds(spec.model, spec.training.seq_length).size(), 1u);
  m.layers.erase(full);
  r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->time.compute, 4 * 0.072, 1e-9);
}

TEST(ComposeTest, PipelineAddsOneFOneBFillAndDrain) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  const RankedConfig modelled = Candidate(1, 2, 1, 1.0, 0.5, 0.0, 0.1);
  Measurements m;
  m.layers[LayerTasksFor(spec, modelled.config, options)[0].Key()] =
      Measured(0.010, 0.020, 0.0, 0.004);
  NoEdges(spec, modelled.config, m);
  m.optimizer_seconds_per_param = 1e-15;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // m = 8 micro-batches, 2 layers per stage: a 60 ms slot; 1F1B takes (m + p - 1) slots =
  // 540 ms, plus modelled p2p transfers of 8 KiB (~22 us each, a few dozen at most).
  EXPECT_NEAR(r->iteration_time_s, 0.540, 2e-3);
  EXPECT_GT(r->iteration_time_s, 0.540);
  // TP communication: 8 micro-batches * 2 layers * 4 ms.
  EXPECT_NEAR(r->time.tp_comm, 0.064, 1e-9);
  EXPECT_NEAR(r->time.pp_bubble + r->time.pp_p2p, 0.060, 2e-3);
}

// The measured grad_sync phase (SP norm gradients) enters once per step: 4 layers and the
// final norm (half a layer's two), not once per micro-batch.
TEST(ComposeTest, MeasuredGradSyncIsAddedOncePerStep) {
  const JobSpec spec = Spec();
  ProfilePlanOptions options;
  const RankedConfig modelled = Candidate(2, 1, 1, 1.0, 0.5);  // tp 2 with SP
  ASSERT_TRUE(modelled.config.sequence_parallel);
  Measurements m;
  LayerMeasurement layer = Measured(0.010, 0.020, 0.0, 0.004);
  layer.grad_sync_s = 0.002;
  m.layers[LayerTasksFor(spec, modelled.config, options)[0].Key()] = layer;
  NoEdges(spec, modelled.config, m);
  m.optimizer_seconds_per_param = 1e-15;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // m = 8 micro-batches of 4 layers * 30 ms = 960 ms, plus 4.5 * 2 ms once.
  EXPECT_NEAR(r->iteration_time_s - r->time.optimizer, 0.960 + 0.009, 1e-9);
  EXPECT_NEAR(r->time.tp_comm, 8 * 4 * 0.004 + 0.009, 1e-9);
}

TEST(ComposeTest, PartialRecomputeMixesTheTwoMeasuredLayers) {
  JobSpec spec = Spec();
  spec.training.precision = Precision::kFp32;
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.recompute = Recompute::kFull;
  modelled.config.recompute_num_layers = 1;
  modelled.config.overlap_grad_reduce = false;
  std::vector<LayerProfileSpec> tasks = LayerTasksFor(spec, modelled.config, options);
  ASSERT_EQ(tasks.size(), 2u);
  Measurements m;
  m.layers[tasks[0].Key()] = Measured(0.010, 0.020, 0.010);  // recomputed: 40 ms
  m.layers[tasks[1].Key()] = Measured(0.010, 0.020);         // plain: 30 ms
  NoEdges(spec, modelled.config, m);
  m.collectives[DpSweepFor(spec, modelled.config, options)->Key()] = LinearSweep();
  m.optimizer_seconds_per_param = 5e-9;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // m = 4; stage = 1 * 40 + 3 * 30 = 130 ms; no pipeline: no bubble.
  const double params = MaxParamsPerGpu(spec.model, modelled.config);
  EXPECT_NEAR(r->time.compute, 4 * 0.130, 1e-9);
  EXPECT_NEAR(r->time.pp_bubble, 0.0, 1e-12);
  EXPECT_NEAR(r->iteration_time_s, 4 * 0.130 + 1e-4 + 4 * params / 1e9 + 5e-9 * params, 1e-9);
}

TEST(ComposeTest, UnmeasuredEdgesAreModelledEdgesScaledByTheMeasuredLayerSpeed) {
  JobSpec spec = Spec();
  ProfilePlanOptions options;
  const RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  const ParallelConfig& c = modelled.config;
  const DeviceProfile device = *DeviceForCluster(spec.cluster);
  const LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, device, 2);
  const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, device, 2);
  const double layer_s = layer.Forward() + layer.Backward();
  Measurements m;
  // The device runs the layer 3x slower than its catalog entry says.
  m.layers[LayerTasksFor(spec, c, options)[0].Key()] = Measured(layer_s, 2 * layer_s);
  m.optimizer_seconds_per_param = 1e-15;
  m.collectives[DpSweepFor(spec, c, options)->Key()] = LinearSweep();
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  const double edges = 3 * (edge.embedding_forward + edge.embedding_backward +
                            edge.logits_forward + edge.logits_backward);
  EXPECT_NEAR(r->time.compute, 4 * (4 * 3 * layer_s + edges), 1e-12);
}

TEST(ComposeTest, SweepTimeIsInterpolatedAtTheGradientBytes) {
  JobSpec spec = Spec();
  spec.training.precision = Precision::kFp32;
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.overlap_grad_reduce = false;
  const ParallelConfig& c = modelled.config;
  Measurements m;
  m.layers[LayerTasksFor(spec, c, options)[0].Key()] = Measured(0.010, 0.020);
  m.optimizer_seconds_per_param = 1e-15;
  std::optional<CollectiveSweepSpec> sweep = DpSweepFor(spec, c, options);
  ASSERT_TRUE(sweep.has_value());
  EXPECT_EQ(sweep->group_size, 2);
  CommMeasurement comm;  // Out of order on purpose.
  comm.samples = {{16 << 20, 0.008, 0}, {1 << 20, 0.001, 0}, {4 << 20, 0.002, 0}};
  m.collectives[sweep->Key()] = comm;
  const double bytes = 4 * MaxParamsPerGpu(spec.model, c);
  ASSERT_LT(bytes, 1 << 20);
  // Below 1 MiB: along the 1-4 MiB segment, 1 ms per 3 MiB.
  const double ar = 0.001 - (double(1 << 20) - bytes) * 0.001 / double(3 << 20);
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->time.dp_comm, ar, 1e-12);
  // The distributed optimizer: reduce-scatter and all-gather are half the all-reduce each
  // without their own sweeps; with them, theirs.
  modelled.config.data_parallel_sharding = DataParallelSharding::kOptimizer;
  r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->time.dp_comm, 0.5 * ar + 0.5 * ar, 1e-12);
  CollectiveSweepSpec rs = *sweep, ag = *sweep;
  rs.op = CollectiveOp::kReduceScatter;
  ag.op = CollectiveOp::kAllGather;
  m.collectives[rs.Key()] = LinearSweep();
  CommMeasurement slow = LinearSweep();
  for (auto& x : slow.samples) x.time_s *= 2;
  m.collectives[ag.Key()] = slow;
  r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->time.dp_comm, (1e-4 + bytes / 1e9) + 2 * (1e-4 + bytes / 1e9), 1e-12);
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
  // Two layer shapes, their first- and last-stage variants, A's dp=2 all-reduce sweep and
  // the optimizer task; C does not fit: not profiled.
  ASSERT_EQ(profile->tasks.size(), 8u);
  EXPECT_EQ(profile->tasks[6].kind, ProfileTaskSpec::Kind::kCollective);
  EXPECT_EQ(profile->tasks[7].kind, ProfileTaskSpec::Kind::kOptimizer);
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

// The tiny spec as a mixture-of-experts model: one dense layer, then three expert layers of
// 4 experts (top-2, FFN 128), fp32.
JobSpec MoeSpec() {
  JobSpec s = Spec();
  s.training.precision = Precision::kFp32;
  s.model.num_experts = 4;
  s.model.moe_router_topk = 2;
  s.model.moe_ffn_hidden_size = 128;
  s.model.first_k_dense_layers = 1;
  return s;
}

MoeMeasurement MeasuredMoe(double fwd, double bwd, double dispatch_fwd, double dispatch_bwd) {
  MoeMeasurement m;
  m.forward_s = fwd;
  m.backward_s = bwd;
  m.dispatch_combine_forward_s = dispatch_fwd;
  m.dispatch_combine_backward_s = dispatch_bwd;
  return m;
}

TEST(ComposeTest, ExpertLayersAreTheMeasuredAttentionPartPlusTheMeasuredMoeLayer) {
  const JobSpec spec = MoeSpec();
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.ep = 2;
  modelled.config.overlap_grad_reduce = false;
  const ParallelConfig& c = modelled.config;
  Measurements m;
  m.layers[LayerTasksFor(spec, c, options)[0].Key()] = Measured(0.010, 0.020);
  NoEdges(spec, c, m);
  m.collectives[DpSweepFor(spec, c, options)->Key()] = LinearSweep();
  m.optimizer_seconds_per_param = 5e-9;
  const std::optional<MoeProfileSpec> task = MoeTaskFor(spec, c, options);
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->ep, 2);
  EXPECT_EQ(task->tokens, 32);  // One 32-token sequence per micro-batch, no CP or SP.
  // The expert block: 5 ms forward (1 ms of it dispatch and combine), 8 ms backward (2 ms).
  m.moe_layers[task->Key()] = MeasuredMoe(0.005, 0.008, 0.001, 0.002);
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();

  // The attention part of an expert layer: the measured dense layer times the model's
  // attention-only share of each term (the dense layer at ffn_hidden_size 0).
  const DeviceProfile device = *FindDevice("cpu");
  ModelSpec attention_only = spec.model;
  attention_only.ffn_hidden_size = 0;
  const LayerTime a = EstimateLayerTime(attention_only, spec.training, c, device, 2);
  const LayerTime d = EstimateLayerTime(spec.model, spec.training, c, device, 2);
  const double attention_ms =
      10 * a.forward_compute / d.forward_compute + 20 * a.backward_compute / d.backward_compute;
  ASSERT_GT(attention_ms, 0);
  ASSERT_LT(attention_ms, 30);
  // 8 / (1 * 2) = 4 micro-batches of one dense layer (30 ms) and three expert layers
  // (attention + 4 ms + 6 ms of expert compute, 1 ms + 2 ms of dispatch and combine).
  const double compute = 4 * (0.030 + 3 * (attention_ms + 4 + 6) / 1e3);
  const double ep_comm = 4 * 3 * 0.003;
  EXPECT_NEAR(r->time.compute, compute, 1e-9);
  EXPECT_NEAR(r->time.ep_comm, ep_comm, 1e-12);
  EXPECT_EQ(r->time.tp_comm, 0);
  EXPECT_GT(r->time.dp_comm, 0);
  EXPECT_NEAR(r->iteration_time_s, compute + ep_comm + r->time.dp_comm + r->time.optimizer, 1e-9);
  EXPECT_EQ(r->source, ResultSource::kMeasured);
  ASSERT_FALSE(r->notes.empty());
  EXPECT_NE(r->notes.back().find("MoE layer measured (ep 2, etp 1, 32 tokens): fwd 5.000 ms "
                                 "(dispatch+combine 1.000 ms), bwd 8.000 ms"),
            std::string::npos)
      << r->notes.back();
  EXPECT_NE(r->notes.back().find("measured parts: layers, embedding, logits, optimizer, moe"),
            std::string::npos)
      << r->notes.back();

  // With the layer task's attention-only twin measured (4 ms forward, 9 ms backward), that
  // is the attention part, whatever the model's share says.
  m.attention_parts[LayerTasksFor(spec, c, options)[0].Key()] = Measured(0.004, 0.009);
  r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->time.compute, 4 * (0.030 + 3 * (4 + 9 + 4 + 6) / 1e3), 1e-9);
  EXPECT_NEAR(r->time.ep_comm, ep_comm, 1e-12);
  EXPECT_NE(r->notes.back().find("expert layers: attention part measured (13.000 of the dense "
                                 "layer's 30.000 ms), MoE layer measured"),
            std::string::npos)
      << r->notes.back();
  EXPECT_NE(r->notes.back().find("measured parts: layers, embedding, logits, optimizer, "
                                 "attention, moe"),
            std::string::npos)
      << r->notes.back();

  // An attention part measured as long as the whole dense layer (a worker that ran the MLP
  // anyway) is not used: the model's share applies again, and the note says why.
  m.attention_parts[LayerTasksFor(spec, c, options)[0].Key()] = Measured(0.010, 0.020);
  r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->time.compute, compute, 1e-9);
  EXPECT_NE(r->notes.back().find("; the attention-only task measured 30.000 ms, not less than "
                                 "the dense layer's 30.000 ms)"),
            std::string::npos)
      << r->notes.back();
  EXPECT_EQ(r->notes.back().find("attention, moe"), std::string::npos) << r->notes.back();
}

TEST(ComposeTest, WithoutAnMoeMeasurementTheExpertBlockStaysModelled) {
  const JobSpec spec = MoeSpec();
  ProfilePlanOptions options;
  RankedConfig modelled = Candidate(1, 1, 2, 1.0, 0.6);
  modelled.config.overlap_grad_reduce = false;
  const ParallelConfig& c = modelled.config;
  Measurements m;
  m.layers[LayerTasksFor(spec, c, options)[0].Key()] = Measured(0.010, 0.020);
  NoEdges(spec, c, m);
  MoeMeasurement failed;
  failed.ok = false;
  failed.message = "task needs 2 ranks (ep 2 x etp 1); this worker has 1";
  m.moe_layers[MoeTaskFor(spec, c, options)->Key()] = failed;
  absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, options, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // The modelled expert block is the expert layer less its attention part (no shared
  // experts: the dense layer at ffn_hidden_size 0); its EP communication is the model's.
  const DeviceProfile device = *FindDevice("cpu");
  const LayerTime e = EstimateExpertLayerTime(spec, c, device);
  EXPECT_NEAR(r->time.ep_comm, 4 * 3 * (e.forward_ep_comm + e.backward_ep_comm), 1e-12);
  EXPECT_EQ(r->source, ResultSource::kMeasured);
  EXPECT_NE(r->notes.back().find("expert block modelled (the MoE layer task did not run: task "
                                 "needs 2 ranks"),
            std::string::npos)
      << r->notes.back();
  EXPECT_EQ(r->notes.back().find(", moe (the rest"), std::string::npos);
}

}  // namespace
}  // namespace paratune
