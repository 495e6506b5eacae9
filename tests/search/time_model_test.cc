#include "search/time_model.h"

#include <gtest/gtest.h>

#include "search/collectives.h"
#include "search/gemm_efficiency.h"
#include "search/model_math.h"
#include "search/presets.h"
#include "search/sharded_data_parallel.h"

namespace paratune {
namespace {

// Korthikanti et al. 2022, Table 4: one GPT-22B layer, TP 8, micro-batch 4, seq 2048, A100.
class Table4Test : public ::testing::Test {
 protected:
  ModelSpec model_ = *FindPreset("gpt3-22b");
  TrainingSpec training_ = [] {
    TrainingSpec t;
    t.seq_length = 2048;
    t.global_batch_size = 4;
    t.flash_attention = false;
    t.dropout = true;
    return t;
  }();
  DeviceProfile a100_ = *FindDevice("a100-80gb");
  LayerTime Layer(bool sp, Recompute rc) const {
    ParallelConfig c;
    c.tp = 8;
    c.micro_batch_size = 4;
    c.sequence_parallel = sp;
    c.recompute = rc;
    return EstimateLayerTime(model_, training_, c, a100_, 8);
  }
};

TEST_F(Table4Test, PublishedForwardAndBackwardWithinFivePercent) {
  struct Row {
    bool sp;
    Recompute rc;
    double fwd_ms, bwd_ms;
  };
  for (const Row& r : {Row{false, Recompute::kNone, 7.7, 11.9}, Row{true, Recompute::kNone, 7.2, 11.8},
                       Row{false, Recompute::kFull, 7.7, 19.5},
                       Row{false, Recompute::kSelective, 7.7, 13.2},
                       Row{true, Recompute::kSelective, 7.2, 13.1}}) {
    const LayerTime t = Layer(r.sp, r.rc);
    EXPECT_NEAR(t.Forward() * 1e3, r.fwd_ms, 0.05 * r.fwd_ms);
    EXPECT_NEAR(t.Backward() * 1e3, r.bwd_ms, 0.05 * r.bwd_ms);
  }
}

TEST_F(Table4Test, RecomputeAddsTheRightForwardWork) {
  const LayerTime none = Layer(false, Recompute::kNone);
  const LayerTime full = Layer(false, Recompute::kFull);
  const LayerTime selective = Layer(false, Recompute::kSelective);
  // Full recompute re-runs the whole forward, communication included.
  EXPECT_DOUBLE_EQ(full.Backward() - none.Backward(), none.Forward());
  // Selective re-runs only the attention core.
  EXPECT_DOUBLE_EQ(selective.Backward() - none.Backward(), none.attention_forward);
  EXPECT_LT(selective.Backward(), full.Backward());
}

TEST_F(Table4Test, BackwardTpCommunicationIsPartlyHidden) {
  const LayerTime t = Layer(false, Recompute::kNone);
  // Forward: two serial all-reduces; backward: two all-reduces overlapped with the
  // weight-gradient GEMMs, so less than the forward's is exposed.
  EXPECT_GT(t.forward_tp_comm, 0);
  EXPECT_LT(t.backward_tp_comm, t.forward_tp_comm);
  ParallelConfig c;
  c.tp = 1;
  c.micro_batch_size = 4;
  const LayerTime single = EstimateLayerTime(model_, training_, c, a100_, 8);
  EXPECT_EQ(single.forward_tp_comm, 0);
  EXPECT_EQ(single.backward_tp_comm, 0);
}

TEST_F(Table4Test, TpCommOverlapHidesSequenceParallelCollectives) {
  ParallelConfig c;
  c.tp = 8;
  c.micro_batch_size = 4;
  c.sequence_parallel = true;
  const LayerTime serial = EstimateLayerTime(model_, training_, c, a100_, 8);
  c.tp_comm_overlap = true;
  const LayerTime overlapped = EstimateLayerTime(model_, training_, c, a100_, 8);
  // Most of the forward's collectives hide behind the GEMMs (the projection's short GEMM,
  // K = h/t = 768, leaves part of its reduce-scatter exposed), and the overlapped compute
  // slows by the device's overlap slowdown times what was hidden.
  EXPECT_LT(overlapped.forward_tp_comm, 0.25 * serial.forward_tp_comm);
  EXPECT_NEAR(overlapped.forward_compute - serial.forward_compute,
              a100_.comm_overlap_slowdown *
                  (serial.forward_tp_comm - overlapped.forward_tp_comm),
              1e-12);
  EXPECT_LT(overlapped.Forward(), serial.Forward());
  EXPECT_LT(overlapped.Backward(), serial.Backward());
}

JobSpec Korthikanti175b() {
  JobSpec spec;
  spec.model = *FindPreset("gpt3-175b");
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 64;
  spec.training.flash_attention = false;
  spec.training.dropout = true;
  spec.cluster.gpu = "a100-80gb";
  spec.cluster.num_gpus = 64;
  return spec;
}

// A sliding window w < s: a windowed query attends to min(i, w) keys, s*w - w^2/2 pairs of
// the causal s^2/2. GPT-OSS's pattern (window 128, every second layer full) at s 4096 on
// one H100: the flash core computes the mean of the two, (1/2 + (128 - 128^2/8192)/4096)/2
// of the full share (both over s), and the model FLOPs count 2sw - w^2 for the windowed
// layers; a window at least s long changes nothing.
TEST(AttentionKernelTest, SlidingWindowComputesOnlyTheWindowsPairs) {
  ModelSpec model = *FindPreset("llama2-13b");
  TrainingSpec t;
  t.seq_length = 4096;
  t.global_batch_size = 8;
  ParallelConfig c;
  c.micro_batch_size = 1;
  const DeviceProfile device = *FindDevice("h100-sxm-80gb");
  const double launch = device.kernel_launch_s;
  const LayerTime full = EstimateLayerTime(model, t, c, device, 8);
  model.sliding_window = 128;
  model.window_attn_skip_freq = 2;
  ASSERT_TRUE(model.Validate().ok()) << model.Validate();
  EXPECT_EQ(WindowedLayers(model), 20);  // 40 layers, every second one full
  const double s = 4096, w = 128;
  const double windowed_keys = (w - w * w / (2 * s)) / s;
  EXPECT_NEAR(AttendedKeyFraction(model, s), (0.5 + windowed_keys) / 2, 1e-15);
  const LayerTime mixed = EstimateLayerTime(model, t, c, device, 8);
  EXPECT_NEAR((mixed.attention_forward - launch) / (full.attention_forward - launch),
              (0.5 + windowed_keys) / 2 / 0.5, 1e-9);
  // The backward recomputes the scores: 2.5x the forward's matmuls at 0.8 of its rate.
  EXPECT_NEAR(full.backward_compute - mixed.backward_compute,
              2.5 / 0.8 * (full.attention_forward - mixed.attention_forward), 1e-12);
  ModelSpec dense = *FindPreset("llama2-13b");
  const double h = dense.hidden_size;
  EXPECT_NEAR(AttentionCoreForwardFlops(model, 1, s), 4.0 * h * (s * s + (2 * s * w - w * w)) / 2,
              1e-3);
  EXPECT_NEAR(AttentionCoreForwardFlops(dense, 1, s), 4.0 * h * s * s, 1e-3);
  model.sliding_window = 4096;  // the whole sequence
  EXPECT_NEAR(AttentionCoreForwardFlops(model, 1, s), AttentionCoreForwardFlops(dense, 1, s), 1e-3);
  EXPECT_NEAR(EstimateLayerTime(model, t, c, device, 8).attention_forward, full.attention_forward,
              1e-15);
}

// Korthikanti Table 5, GPT-3 175B on 64 A100s (TP 8, PP 8, VP 3, micro-batch 1, B 64):
// 18.13 s with full recompute, 13.75 s with SP + selective.
// The attention kernels: FlashAttention-1's core runs at 32.5/61.5 of FlashAttention-2's
// rate (Dao 2023's A100 ranges at their midpoints), FlashAttention-3's at 1.5x on Hopper,
// cuDNN's at 0.535 of the peak on Hopper (Shah et al. 2024, Fig. 5) and FA2's before;
// PyTorch-op norms move 28 + 4e bytes per element instead of 2e and launch 7 kernels
// instead of 1.
TEST(AttentionKernelTest, CoreRatesAndUnfusedNormsByHand) {
  const ModelSpec model = *FindPreset("llama2-13b");
  TrainingSpec t;
  t.seq_length = 2048;
  t.global_batch_size = 8;
  ParallelConfig c;
  c.tp = 2;
  c.micro_batch_size = 2;
  for (const char* gpu : {"a100-80gb", "h100-sxm-80gb"}) {
    const DeviceProfile device = *FindDevice(gpu);
    const double launch = device.kernel_launch_s;
    const LayerTime fa2 = EstimateLayerTime(model, t, c, device, 8);
    TrainingSpec v1 = t;
    v1.attention_kernel = AttentionKernel::kFlash1;
    const LayerTime fa1 = EstimateLayerTime(model, v1, c, device, 8);
    EXPECT_NEAR((fa1.attention_forward - launch) / (fa2.attention_forward - launch), 61.5 / 32.5,
                1e-9)
        << gpu;
    TrainingSpec v3 = t;
    v3.attention_kernel = AttentionKernel::kFlash3;
    const LayerTime fa3 = EstimateLayerTime(model, v3, c, device, 8);
    EXPECT_NEAR((fa2.attention_forward - launch) / (fa3.attention_forward - launch), 1.5, 1e-9);
    // cuDNN's: 0.535 of the BF16 peak on Hopper (0.40 for FlashAttention-2); no faster before.
    TrainingSpec cudnn = t;
    cudnn.attention_kernel = AttentionKernel::kCudnn;
    const LayerTime cu = EstimateLayerTime(model, cudnn, c, device, 8);
    EXPECT_NEAR((fa2.attention_forward - launch) / (cu.attention_forward - launch),
                device.HopperOrLater() ? 0.535 / 0.40 : 1.0, 1e-9)
        << gpu;
    // Materialised scores: the unfused softmax moves 3x the fused one's bytes.
    TrainingSpec fused = t, unfused = t;
    fused.attention_kernel = AttentionKernel::kFused;
    fused.flash_attention = false;
    unfused.attention_kernel = AttentionKernel::kUnfused;
    unfused.flash_attention = false;
    const double scores = 2.0 * (40.0 / 2) * 2048 * 2048;  // b * heads/t * s * s
    EXPECT_NEAR(EstimateLayerTime(model, unfused, c, device, 8).attention_forward -
                    EstimateLayerTime(model, fused, c, device, 8).attention_forward,
                StreamSeconds(device, 2.0 * 2.0 * 2 * scores) + 2 * launch, 1e-12);
    // Unfused norms: two norms over the [s*b, h] input (no SP: every TP rank), forward.
    TrainingSpec norms = t;
    norms.fused_norm = false;
    const LayerTime slow = EstimateLayerTime(model, norms, c, device, 8);
    const double x = 2048.0 * 2 * 5120;
    EXPECT_NEAR(slow.forward_compute - fa2.forward_compute,
                StreamSeconds(device, 2 * (28.0 + 4 * 2 - 2 * 2) * x) + 2 * 6 * launch, 1e-12);
  }
}

TEST(IterationTest, Korthikanti175bWithinFivePercent) {
  const JobSpec spec = Korthikanti175b();
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.vp = 3;
  c.recompute = Recompute::kFull;
  double times[2];
  for (int i = 0; i < 2; ++i) {
    if (i == 1) {
      c.recompute = Recompute::kSelective;
      c.sequence_parallel = true;
    }
    const LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, a100, 8);
    const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, a100, 8);
    absl::StatusOr<IterationEstimate> it =
        EstimateIteration(spec, c, a100, layer, edge, PipelineMode::kSimulated);
    ASSERT_TRUE(it.ok()) << it.status();
    times[i] = it->iteration_time_s;
  }
  EXPECT_NEAR(times[0], 18.13, 0.05 * 18.13);
  EXPECT_NEAR(times[1], 13.75, 0.05 * 13.75);
  EXPECT_NEAR(times[0] / times[1], 18.13 / 13.75, 0.05);
}

// With one stage and one data-parallel rank the iteration is m x (forward + backward) of
// all layers plus the embedding, the logits and the optimizer step.
TEST(IterationTest, SingleStageIsASum) {
  JobSpec spec = Korthikanti175b();
  spec.model = *FindPreset("gpt3-1.7b");
  spec.cluster.num_gpus = 1;
  spec.training.global_batch_size = 8;
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  ParallelConfig c;
  c.micro_batch_size = 2;
  const LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, a100, 8);
  const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, a100, 8);
  absl::StatusOr<IterationEstimate> it =
      EstimateIteration(spec, c, a100, layer, edge, PipelineMode::kSimulated);
  ASSERT_TRUE(it.ok());
  const double per_micro_batch = 24 * (layer.Forward() + layer.Backward()) +
                                 edge.embedding_forward + edge.embedding_backward +
                                 edge.logits_forward + edge.logits_backward;
  EXPECT_NEAR(it->iteration_time_s, 4 * per_micro_batch + it->time.optimizer, 1e-9);
  EXPECT_NEAR(it->time.pp_bubble, 0, 1e-12);
  EXPECT_EQ(it->time.dp_comm, 0);
}

// The SP-replicated norm gradients are all-reduced once per step on each stage (its
// layers, plus the final norm on the last), not once per micro-batch: with M micro-batches
// the iteration grows by sync·(layers on the critical stage + 0.5), and so does tp_comm.
TEST(IterationTest, SequenceParallelGradSyncIsOncePerStep) {
  JobSpec spec = Korthikanti175b();
  spec.model = *FindPreset("gpt3-1.7b");  // 24 layers
  spec.cluster.num_gpus = 4;
  spec.training.global_batch_size = 16;
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  c.sequence_parallel = true;
  LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, a100, 8);
  EXPECT_GT(layer.grad_sync_tp_comm, 0);  // modelled: a 4h-element all-reduce over TP
  const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, a100, 8);
  layer.grad_sync_tp_comm = 0;
  absl::StatusOr<IterationEstimate> without =
      EstimateIteration(spec, c, a100, layer, edge, PipelineMode::kSimulated);
  layer.grad_sync_tp_comm = 0.01;
  absl::StatusOr<IterationEstimate> with =
      EstimateIteration(spec, c, a100, layer, edge, PipelineMode::kSimulated);
  ASSERT_TRUE(without.ok() && with.ok());
  // 12 layers per stage; the critical stage is the first (it finishes its backward last)
  // unless the final norm's half share tips it: either way 12 or 12.5 syncs, never 16·12.
  const double added = with->iteration_time_s - without->iteration_time_s;
  EXPECT_GE(added, 0.01 * 12 - 1e-9);
  EXPECT_LE(added, 0.01 * 12.5 + 1e-9);
  EXPECT_NEAR(with->time.tp_comm - without->time.tp_comm, added, 0.01 * 0.5 + 1e-9);

  c.sequence_parallel = false;
  EXPECT_EQ(EstimateLayerTime(spec.model, spec.training, c, a100, 8).grad_sync_tp_comm, 0);
}

// The breakdown splits the iteration: compute, TP, CP, DP and optimizer of the critical
// stage, and the rest is pipeline transfer plus bubble, so the seven parts add up to the
// iteration in every kind of layout (1F1B and interleaved, blocking and overlapped p2p,
// CP, the distributed optimizer, tied embeddings over several stages, full recompute of
// some layers), in both pipeline modes.
TEST(IterationTest, BreakdownAddsUpToTheIteration) {
  JobSpec spec = Korthikanti175b();
  spec.model = *FindPreset("gpt3-1.7b");  // 24 layers, tied embeddings
  spec.training.flash_attention = true;
  spec.training.dropout = false;
  spec.training.global_batch_size = 64;
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  struct Case {
    int64_t tp, pp, vp, dp, cp, mb;
    bool dopt, overlap_p2p;
    Recompute recompute;
    int64_t recompute_layers;
  };
  const Case cases[] = {
      {1, 1, 1, 64, 1, 1, false, true, Recompute::kNone, 0},
      {2, 4, 1, 8, 1, 2, true, true, Recompute::kSelective, 0},
      {2, 4, 3, 4, 2, 1, true, true, Recompute::kNone, 0},
      {2, 4, 3, 4, 2, 1, true, false, Recompute::kNone, 0},
      {8, 2, 2, 4, 1, 4, false, true, Recompute::kFull, 4},
      {1, 8, 1, 8, 1, 1, false, false, Recompute::kFull, 0},
  };
  for (const Case& k : cases) {
    ParallelConfig c;
    c.tp = k.tp;
    c.pp = k.pp;
    c.vp = k.vp;
    c.dp = k.dp;
    c.cp = k.cp;
    c.micro_batch_size = k.mb;
    c.sequence_parallel = k.tp > 1;
    c.data_parallel_sharding =
        k.dopt ? DataParallelSharding::kOptimizer : DataParallelSharding::kNone;
    c.overlap_p2p_comm = k.overlap_p2p;
    c.recompute = k.recompute;
    c.recompute_num_layers = k.recompute_layers;
    const LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, a100, 8);
    const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, a100, 8);
    for (PipelineMode mode : {PipelineMode::kClosedForm, PipelineMode::kSimulated}) {
      absl::StatusOr<IterationEstimate> it = EstimateIteration(spec, c, a100, layer, edge, mode);
      ASSERT_TRUE(it.ok()) << c.ToString() << ": " << it.status();
      const TimeBreakdown& t = it->time;
      const double parts =
          t.compute + t.tp_comm + t.cp_comm + t.dp_comm + t.optimizer + t.pp_p2p + t.pp_bubble;
      EXPECT_NEAR(parts, it->iteration_time_s, 1e-9 * it->iteration_time_s) << c.ToString();
      EXPECT_GE(t.pp_bubble, 0) << c.ToString();
      EXPECT_EQ(t.cp_comm > 0, k.cp > 1) << c.ToString();
      EXPECT_EQ(t.pp_p2p > 0, k.pp > 1) << c.ToString();
      // Tied embeddings over several stages add their gradient all-reduce to dp_comm.
      EXPECT_GT(t.dp_comm, 0) << c.ToString();
    }
  }
}

// Sharded data parallelism: an HSDP shard group of the whole dp*cp group is plain
// sharding; full sharding's per-micro-batch all-gathers are on the critical path at least
// for each chunk's first layer (forward and backward, not prefetched) and are reported in
// dp_comm; the breakdown still adds up.
TEST(IterationTest, ShardedDataParallelism) {
  JobSpec spec = Korthikanti175b();
  spec.model = *FindPreset("gpt3-1.7b");
  spec.training.flash_attention = true;
  spec.training.dropout = false;
  spec.training.global_batch_size = 64;
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  c.dp = 16;
  c.micro_batch_size = 1;
  c.sequence_parallel = true;
  auto estimate = [&](const ParallelConfig& config) {
    const LayerTime layer = EstimateLayerTime(spec.model, spec.training, config, h100, 8);
    const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, config, h100, 8);
    absl::StatusOr<IterationEstimate> it =
        EstimateIteration(spec, config, h100, layer, edge, PipelineMode::kSimulated);
    EXPECT_TRUE(it.ok()) << it.status();
    return *it;
  };
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  const IterationEstimate zero1 = estimate(c);
  c.shard_group_size = 16;
  EXPECT_DOUBLE_EQ(estimate(c).iteration_time_s, zero1.iteration_time_s);

  c.shard_group_size = 0;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  const IterationEstimate full = estimate(c);
  const ShardedLayerComm layer_comm =
      ShardedLayerCommSeconds(c, LayerParams(spec.model) / 2, 2, 4, h100, 8);
  ASSERT_GT(layer_comm.forward_gather, 0);
  const double micro_batches = 64.0 / 16;
  EXPECT_GE(full.time.dp_comm,
            micro_batches * (layer_comm.forward_gather + layer_comm.backward_gather));
  const TimeBreakdown& t = full.time;
  EXPECT_NEAR(t.compute + t.tp_comm + t.cp_comm + t.dp_comm + t.optimizer + t.pp_p2p + t.pp_bubble,
              full.iteration_time_s, 1e-9 * full.iteration_time_s);
}

}  // namespace
}  // namespace paratune
