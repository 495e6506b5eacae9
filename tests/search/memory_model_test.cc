#include "search/memory_model.h"

#include <gtest/gtest.h>

#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/planner.h"
#include "search/presets.h"

namespace paratune {
namespace {

// One Llama 2 13B layer's parameters: s 2048, micro-batch 2, tp 2, flash, no dropout.
LayerActivationParams Llama13bTp2Params() {
  LayerActivationParams p;
  p.seq_length = 2048;
  p.parallel.micro_batch_size = 2;
  p.parallel.tp = 2;
  p.flash_attention = true;
  p.dropout = false;
  return p;
}

// Llama 2 13B on 16 A100-80GB: s 2048, global batch 64, flash, no dropout.
JobSpec Llama13bJob() {
  JobSpec spec;
  spec.model = *FindPreset("llama2-13b");
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 64;
  spec.training.flash_attention = true;
  spec.training.dropout = false;
  spec.cluster.gpu = "a100-80gb";
  spec.cluster.num_gpus = 16;
  return spec;
}

// A norm of PyTorch ops stores its input's FP32 copy and its 16-bit output instead of the
// 16-bit input: 4 more bytes per element, for each of the two norms of a layer.
TEST(UnfusedNormTest, StoresFourMoreBytesPerElementPerNorm) {
  const ModelSpec model = *FindPreset("llama2-13b");
  LayerActivationParams p = Llama13bTp2Params();
  const double fused = LayerActivationBytes(model, p);
  p.fused_norm = false;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(model, p) - fused, 2 * 4.0 * 2048 * 2 * 5120);
  // With sequence parallelism the norms' inputs are split over tp.
  p.parallel.sequence_parallel = true;
  const double unfused_sp = LayerActivationBytes(model, p);
  p.fused_norm = true;
  EXPECT_DOUBLE_EQ(unfused_sp - LayerActivationBytes(model, p), 2 * 4.0 * 2048 * 2 * 5120 / 2);
}

// A codebase of PyTorch ops: `silu(x) * gate` stores the activation's output (s*b*f/t
// more 16-bit elements), and a rearranged flash output is kept twice (s*b*h/t more for MHA).
TEST(UnfusedKernelsTest, PyTorchOpSwigluAndCopiedAttentionOutputByHand) {
  const ModelSpec model = *FindPreset("llama2-13b");  // h 5120, f 13824, MHA
  LayerActivationParams p = Llama13bTp2Params();
  const double fused = LayerActivationBytes(model, p);
  p.unfused_glu = true;
  const double glu = LayerActivationBytes(model, p);
  EXPECT_DOUBLE_EQ(glu - fused, 2.0 * 2048 * 2 * 13824 / 2);
  p.attention_output_copied = true;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(model, p) - glu, 2.0 * 2048 * 2 * 5120 / 2);
  // Full recompute keeps only the layer input either way.
  p.parallel.recompute = Recompute::kFull;
  const double full = LayerActivationBytes(model, p);
  p.unfused_glu = p.attention_output_copied = false;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(model, p), full);
  // EstimateMemory takes both from the framework terms.
  const JobSpec spec = Llama13bJob();
  ParallelConfig c;
  c.tp = 2;
  c.dp = 8;
  c.micro_batch_size = 2;
  FrameworkMemory megatron, pytorch_ops;
  pytorch_ops.unfused_glu = pytorch_ops.attention_output_copied = true;
  const double layers = static_cast<double>(model.num_layers);
  EXPECT_NEAR(EstimateMemory(spec, c, 80e9, pytorch_ops).activations -
                  EstimateMemory(spec, c, 80e9, megatron).activations,
              layers * 2.0 * 2048 * 2 * (13824 + 5120) / 2, 1.0);
}

// A pipeline that keeps each in-flight micro-batch's stage output until its backward
// (DeepSpeed's PipelineEngine) holds one more 16-bit [s, b, h] tensor per in-flight
// micro-batch on every stage but the last: on the first stage of pp 4 with 1F1B, four.
// Megatron-Core frees it once sent; FrameworkMemoryFor reads it from the framework.
TEST(PipelineOutputsTest, KeptStageOutputsByHand) {
  const JobSpec spec = Llama13bJob();  // h 5120
  ParallelConfig c;
  c.tp = 2;
  c.pp = 4;
  c.dp = 2;
  c.micro_batch_size = 2;
  FrameworkMemory megatron, deepspeed;
  deepspeed.pipeline_keeps_outputs = true;
  // The first stage holds the most in-flight micro-batches and no loss buffers: the peak.
  const MemoryBreakdown freed = EstimateMemory(spec, c, 80e9, megatron);
  const MemoryBreakdown kept = EstimateMemory(spec, c, 80e9, deepspeed);
  ASSERT_EQ(freed.loss_buffers, 0);
  ASSERT_EQ(kept.loss_buffers, 0);
  EXPECT_NEAR(kept.activations - freed.activations, 4 * 2.0 * 2048 * 2 * 5120, 1.0);
  // One stage: nothing is sent, nothing kept.
  c.pp = 1;
  c.dp = 8;
  EXPECT_DOUBLE_EQ(EstimateMemory(spec, c, 80e9, deepspeed).activations,
                   EstimateMemory(spec, c, 80e9, megatron).activations);
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  EXPECT_TRUE(FrameworkMemoryFor(a100, Framework::kMegatronDeepspeed).pipeline_keeps_outputs);
  EXPECT_TRUE(FrameworkMemoryFor(a100, Framework::kDeepspeed).pipeline_keeps_outputs);
  EXPECT_FALSE(FrameworkMemoryFor(a100, Framework::kMegatronCore).pipeline_keeps_outputs);
}

// Korthikanti et al. 2022, Section 4, for GPT with dropout, no flash attention, 16-bit.
class KorthikantiTest : public ::testing::TestWithParam<const char*> {
 protected:
  ModelSpec model_ = *FindPreset(GetParam());
  LayerActivationParams Params(int64_t tp, bool sp, Recompute rc) const {
    LayerActivationParams p;
    p.seq_length = 2048;
    p.parallel.micro_batch_size = 4;
    p.parallel.tp = tp;
    p.parallel.sequence_parallel = sp;
    p.parallel.recompute = rc;
    p.flash_attention = false;
    p.dropout = true;
    p.bytes_per_element = 2;
    return p;
  }
  double sbh() const { return 2048.0 * 4 * model_.hidden_size; }
  double as_h() const {
    return static_cast<double>(model_.num_attention_heads) * 2048 / model_.hidden_size;
  }
};

TEST_P(KorthikantiTest, NoParallelism) {
  EXPECT_NEAR(LayerActivationBytes(model_, Params(1, false, Recompute::kNone)),
              sbh() * (34 + 5 * as_h()), 1e-6 * sbh());
}
TEST_P(KorthikantiTest, TensorParallel) {
  const double t = 8;
  EXPECT_NEAR(LayerActivationBytes(model_, Params(8, false, Recompute::kNone)),
              sbh() * (10 + 24 / t + 5 * as_h() / t), 1e-6 * sbh());
}
TEST_P(KorthikantiTest, TensorAndSequenceParallel) {
  EXPECT_NEAR(LayerActivationBytes(model_, Params(8, true, Recompute::kNone)),
              sbh() / 8 * (34 + 5 * as_h()), 1e-6 * sbh());
}
TEST_P(KorthikantiTest, SequenceParallelSelective) {
  EXPECT_NEAR(LayerActivationBytes(model_, Params(8, true, Recompute::kSelective)),
              34 * sbh() / 8, 1e-6 * sbh());
}
TEST_P(KorthikantiTest, FullRecompute) {
  EXPECT_NEAR(LayerActivationBytes(model_, Params(8, false, Recompute::kFull)), 2 * sbh(),
              1e-6 * sbh());
  EXPECT_NEAR(LayerActivationBytes(model_, Params(8, true, Recompute::kFull)), 2 * sbh() / 8,
              1e-6 * sbh());
}
INSTANTIATE_TEST_SUITE_P(Gpt, KorthikantiTest,
                         ::testing::Values("gpt3-22b", "gpt3-175b", "gpt3-530b", "gpt3-1t"));

TEST(LayerActivationTest, FlashAttentionRemovesTheQuadraticTerm) {
  const ModelSpec m = *FindPreset("gpt3-175b");
  LayerActivationParams p;
  p.seq_length = 2048;
  p.parallel.micro_batch_size = 1;
  p.flash_attention = true;
  p.dropout = true;
  const double sbh = 2048.0 * m.hidden_size;
  // 34*sbh plus the fp32 softmax statistics (4 bytes * a * s * b).
  EXPECT_NEAR(LayerActivationBytes(m, p), 34 * sbh + 4.0 * 96 * 2048, 1e-6 * sbh);
  // Doubling the sequence doubles the bytes (no s^2 term).
  LayerActivationParams p2 = p;
  p2.seq_length = 4096;
  EXPECT_NEAR(LayerActivationBytes(m, p2), 2 * LayerActivationBytes(m, p), 1e-6 * sbh);
}

TEST(LayerActivationTest, ContextParallelSplitsTheSequence) {
  const ModelSpec m = *FindPreset("llama3-8b");
  LayerActivationParams p;
  p.seq_length = 8192;
  p.flash_attention = true;
  p.dropout = false;
  p.parallel.tp = 2;
  p.parallel.sequence_parallel = true;
  LayerActivationParams p2 = p;
  p2.parallel.cp = 2;
  EXPECT_NEAR(LayerActivationBytes(m, p2), LayerActivationBytes(m, p) / 2, 1.0);
}

TEST(LayerActivationTest, GqaSwigluNoDropoutByHand) {
  // Llama 3 8B: h 4096, a 32, g 8, f 14336; flash, no dropout, 16-bit, b=1, s=8192.
  const ModelSpec m = *FindPreset("llama3-8b");
  LayerActivationParams p;
  p.seq_length = 8192;
  p.flash_attention = true;
  p.dropout = false;
  const double x = 8192.0 * 4096;
  const double expected = 2 * x * 4         // LN1, QKV in, LN2, FC1 in
                          + 2 * x * 1.25    // Q, K (g/a = 1/4)
                          + 2 * x * 0.25    // V
                          + 2 * x           // projection input
                          + 4.0 * 32 * 8192  // softmax statistics
                          + 2 * 8192.0 * 2 * 14336  // SwiGLU input
                          + 2 * 8192.0 * 14336;     // FC2 input
  EXPECT_NEAR(LayerActivationBytes(m, p), expected, 1.0);
  // FP8 stores the four linear inputs in one byte.
  LayerActivationParams f8 = p;
  f8.fp8_linear_inputs = true;
  EXPECT_NEAR(LayerActivationBytes(m, p) - LayerActivationBytes(m, f8),
              3 * x + 8192.0 * 14336, 1.0);
}

JobSpec Gpt175bSpec() {
  JobSpec spec;
  spec.model = *FindPreset("gpt3-175b");
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 1536;
  spec.training.flash_attention = false;
  spec.training.dropout = true;
  spec.cluster.gpu = "a100-80gb";
  spec.cluster.num_gpus = 1536;
  return spec;
}

// bench/verify's small GPT: fp32 on two CPU ranks.
JobSpec SmallCpuSpec() {
  JobSpec spec;
  spec.model.num_layers = 4;
  spec.model.hidden_size = 256;
  spec.model.num_attention_heads = 8;
  spec.model.num_query_groups = 8;
  spec.model.ffn_hidden_size = 1024;
  spec.model.vocab_size = 2048;
  spec.training.seq_length = 128;
  spec.training.global_batch_size = 8;
  spec.training.precision = Precision::kFp32;
  spec.cluster.gpu = "cpu";
  spec.cluster.num_gpus = 2;
  spec.cluster.gpus_per_node = 2;
  return spec;
}

// Megatron's published GPT-3 175B layout: tp 8 pp 12 dp 16 with SP and selective recompute.
ParallelConfig Gpt175bLayout() {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 12;
  c.dp = 16;
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  return c;
}

TEST(EstimateMemoryTest, StaticMemoryByHand) {
  const JobSpec spec = Gpt175bSpec();
  ParallelConfig c = Gpt175bLayout();
  const double params = MaxParamsPerGpu(spec.model, c);
  // 8 layers of 12h^2+13h over 8 ranks plus the word and position embeddings / 8.
  const double h = 12288;
  const double expected = (8 * (12 * h * h + 13 * h) + 51200 * h + 2048 * h) / 8;
  EXPECT_NEAR(params / expected, 1.0, 1e-9);
  MemoryBreakdown mem = EstimateMemory(spec, c, 80.0 * (1ull << 30));
  EXPECT_NEAR(mem.weights, 2 * params, 1);
  EXPECT_NEAR(mem.gradients, 4 * params, 1);
  EXPECT_NEAR(mem.optimizer, 12 * params, 1);
  // First stage: p = 12 in-flight micro-batches x 8 layers x 34sbh/t.
  EXPECT_NEAR(mem.activations, 12 * 8 * 34 * 2048.0 * h / 8 + 12 * 2048.0 * h / 8, 1e3);
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  EXPECT_NEAR(EstimateMemory(spec, c, 0).optimizer, 12 * params / 16, 1);
}

// Megatron-LM's distributed-optimizer docs give bytes per parameter of weights + gradients
// + optimizer state: 16 for FP32 params and grads (4 + 4 + Adam m, v 8: no master copy),
// 18 for BF16 params with FP32 grads (2 + 4 + master 4 + m, v 8); with the distributed
// optimizer over d ranks 8 + 8/d and 6 + 12/d.
TEST(EstimateMemoryTest, Fp32TrainingKeepsNoMasterCopy) {
  JobSpec spec = SmallCpuSpec();
  ParallelConfig c;
  c.dp = 2;
  const double params = MaxParamsPerGpu(spec.model, c);
  MemoryBreakdown fp32 = EstimateMemory(spec, c, 0);
  EXPECT_NEAR(fp32.weights, 4 * params, 1);
  EXPECT_NEAR(fp32.gradients, 4 * params, 1);
  EXPECT_NEAR(fp32.optimizer, 8 * params, 1);
  EXPECT_NEAR((fp32.weights + fp32.gradients + fp32.optimizer) / params, 16.0, 1e-9);
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  MemoryBreakdown sharded = EstimateMemory(spec, c, 0);
  EXPECT_NEAR((sharded.weights + sharded.gradients + sharded.optimizer) / params, 8 + 8.0 / 2,
              1e-9);
  spec.training.precision = Precision::kBf16;
  c.data_parallel_sharding = DataParallelSharding::kNone;
  MemoryBreakdown bf16 = EstimateMemory(spec, c, 0);
  EXPECT_NEAR((bf16.weights + bf16.gradients + bf16.optimizer) / params, 18.0, 1e-9);
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  bf16 = EstimateMemory(spec, c, 0);
  EXPECT_NEAR((bf16.weights + bf16.gradients + bf16.optimizer) / params, 6 + 12.0 / 2, 1e-9);
  EXPECT_EQ(OptimizerBytesPerParam(Precision::kFp8), 12.0);
}

// The "cpu" device has no fixed framework workspace and no fragmentation allowance: the
// GPU defaults add exactly workspace + 10 % of the activation-sized buffers (activations +
// the transient working set, which is all of "other" on the cpu device) to "other", and
// the planner's Estimate uses the cpu terms for a cpu cluster.
TEST(EstimateMemoryTest, CpuDeviceHasNoFrameworkWorkspace) {
  const JobSpec spec = SmallCpuSpec();
  ParallelConfig c;
  c.dp = 2;
  const FrameworkMemory cpu = FrameworkMemoryFor(*FindDevice("cpu"), Framework::kMegatronCore);
  EXPECT_EQ(cpu.workspace_bytes, 0);
  EXPECT_EQ(cpu.fragmentation_fraction, 0);
  EXPECT_EQ(
      FrameworkMemoryFor(*FindDevice("h100-sxm-80gb"), Framework::kMegatronCore).workspace_bytes,
      kFrameworkWorkspaceBytes);
  // What decides is the profile's host_memory, not its name.
  DeviceProfile host;
  host.name = "my-cpu-box";
  host.host_memory = true;
  EXPECT_EQ(FrameworkMemoryFor(host, Framework::kMegatronCore).workspace_bytes, 0);
  DeviceProfile renamed = *FindDevice("h100-sxm-80gb");
  renamed.name = "cpu";
  EXPECT_EQ(FrameworkMemoryFor(renamed, Framework::kMegatronCore).workspace_bytes,
            kFrameworkWorkspaceBytes);
  const MemoryBreakdown on_cpu = EstimateMemory(spec, c, 16.0 * (1ull << 30), cpu);
  const MemoryBreakdown gpu_terms = EstimateMemory(spec, c, 16.0 * (1ull << 30));
  EXPECT_NEAR(gpu_terms.other - on_cpu.other,
              kFrameworkWorkspaceBytes + 0.10 * (on_cpu.activations + on_cpu.other), 1.0);
  absl::StatusOr<RankedConfig> ranked = Estimate(spec, c);
  ASSERT_TRUE(ranked.ok()) << ranked.status();
  EXPECT_NEAR(ranked->memory.Peak(), on_cpu.Peak(), 1.0);
}

// The loss buffers (part of "other") by hand for bench/verify's small GPT: 6 bytes per
// token and vocabulary entry (Megatron's FP32 logits and 16-bit output) of one micro-batch
// on the last stage: 6·128·2·2048 bytes at mb 2 without TP, half of that per rank at TP 2
// (vocab-parallel loss). With PP 2 and mb 1 the first stage holds the peak (more weights
// from the embedding; twice the in-flight activations), and it has no loss buffers.
TEST(EstimateMemoryTest, LossBuffersByHand) {
  const JobSpec spec = SmallCpuSpec();
  const FrameworkMemory cpu = FrameworkMemoryFor(*FindDevice("cpu"), Framework::kMegatronCore);
  ParallelConfig c;
  c.dp = 2;
  c.micro_batch_size = 2;
  EXPECT_DOUBLE_EQ(EstimateMemory(spec, c, 0, cpu).loss_buffers, 6.0 * 128 * 2 * 2048);
  c.dp = 1;
  c.tp = 2;
  EXPECT_DOUBLE_EQ(EstimateMemory(spec, c, 0, cpu).loss_buffers, 6.0 * 128 * 2 * 2048 / 2);
  ParallelConfig pp;
  pp.pp = 2;
  const MemoryBreakdown first = EstimateMemory(spec, pp, 0, cpu);
  EXPECT_EQ(first.loss_buffers, 0.0);
  EXPECT_GT(first.activations, 0.0);
}

// The last stage's transient is the larger of its loss-phase buffers (the loss buffers
// and the output layer's input) and one layer's backward working set, not their sum: the
// loss buffers are freed when the output layer has its input gradient, before the last
// layer's backward starts. On the cpu device "other" is the transient alone. With a 50304
// vocabulary the loss phase is larger: 6·128·2·50304 + 4·128·2·256 bytes (fp32
// activations, mb 2). With 2048 the working set is; the first stage of PP 2 has only it.
TEST(EstimateMemoryTest, LossBuffersAndTheLastLayersWorkingSetDoNotAddUp) {
  JobSpec spec = SmallCpuSpec();
  const FrameworkMemory cpu = FrameworkMemoryFor(*FindDevice("cpu"), Framework::kMegatronCore);
  ParallelConfig c;
  c.dp = 2;
  c.micro_batch_size = 2;
  LayerActivationParams act = ActivationParamsFor(spec.model, spec.training, c);
  ASSERT_EQ(act.bytes_per_element, 4.0);
  act.parallel.recompute = Recompute::kNone;
  const double working_set = LayerActivationBytes(spec.model, act);
  const double small_loss_phase = 6.0 * 128 * 2 * 2048 + 4.0 * 128 * 2 * 256;
  ASSERT_GT(working_set, small_loss_phase);
  EXPECT_DOUBLE_EQ(EstimateMemory(spec, c, 0, cpu).other, working_set);
  ParallelConfig pp;
  pp.pp = 2;
  pp.micro_batch_size = 2;
  const MemoryBreakdown first = EstimateMemory(spec, pp, 0, cpu);
  ASSERT_EQ(first.loss_buffers, 0.0);  // the first stage holds the peak (the embedding)
  EXPECT_DOUBLE_EQ(first.other, working_set);
  spec.model.vocab_size = 50304;
  const double large_loss_phase = 6.0 * 128 * 2 * 50304 + 4.0 * 128 * 2 * 256;
  ASSERT_GT(large_loss_phase, working_set);
  EXPECT_DOUBLE_EQ(EstimateMemory(spec, c, 0, cpu).other, large_loss_phase);
}

TEST(EstimateMemoryTest, InterleavingAddsKorthikantiFactor) {
  const JobSpec spec = Gpt175bSpec();
  ParallelConfig c = Gpt175bLayout();
  ParallelConfig ci = c;
  ci.vp = 2;
  const double h = 12288;
  const double emb = 2048.0 * h / 8;  // Embedding dropout mask per in-flight micro-batch.
  const double base = EstimateMemory(spec, c, 0).activations - 12 * emb;
  const double factor = 1 + 11.0 / 24.0;
  EXPECT_NEAR(EstimateMemory(spec, ci, 0).activations - 12 * factor * emb, base * factor, 1e3);
}

// The ZeRO paper's Figure 1 (Rajbhandari et al. 2020): a 7.5B-parameter model on Nd = 64
// data-parallel ranks with mixed-precision Adam (2 bytes of weights, 2 of gradients, K = 12
// of optimizer state per parameter) holds 120 GB per rank unsharded, 31.4 GB with the
// optimizer state sharded (P_os), 16.6 GB with gradients too (P_os+g) and 1.9 GB with
// everything (P_os+g+p).
TEST(ShardedModelStateTest, ZeroPaperFigureOne) {
  const double psi = 7.5e9;
  ParallelConfig c;
  c.dp = 64;
  auto total = [&](DataParallelSharding stage) {
    c.data_parallel_sharding = stage;
    const ShardedModelState s = ShardedModelStateBytes(c, psi, 0, 2, 2, 12);
    return (s.weights + s.gradients + s.optimizer) / 1e9;
  };
  EXPECT_NEAR(total(DataParallelSharding::kNone), 120.0, 0.05);
  EXPECT_NEAR(total(DataParallelSharding::kOptimizer), 31.4, 0.05);
  EXPECT_NEAR(total(DataParallelSharding::kOptimizerGrads), 16.6, 0.05);
  EXPECT_NEAR(total(DataParallelSharding::kFull), 1.9, 0.05);
}

// Per stage, with Megatron's FP32 gradients (G = 4) and the buffers: full sharding holds two
// gathered layers (W each) and two layers' unsharded gradients (G each); ZeRO-2 two 40M
// buckets (G each). HSDP divides by the shard group, not by dp*cp.
TEST(ShardedModelStateTest, PerStageBytesAndBuffersByHand) {
  const double psi = 1e9, layer = 50e6;
  ParallelConfig c;
  c.dp = 16;
  c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
  ShardedModelState s = ShardedModelStateBytes(c, psi, layer, 2, 4, 12);
  EXPECT_DOUBLE_EQ(s.weights, 2e9);
  EXPECT_DOUBLE_EQ(s.gradients, 4e9 / 16);
  EXPECT_DOUBLE_EQ(s.optimizer, 12e9 / 16);
  EXPECT_DOUBLE_EQ(s.gathered_weights, 0);
  EXPECT_DOUBLE_EQ(s.reduce_buffers, 2 * 40e6 * 4);
  c.data_parallel_sharding = DataParallelSharding::kFull;
  s = ShardedModelStateBytes(c, psi, layer, 2, 4, 12);
  EXPECT_DOUBLE_EQ(s.weights, 2e9 / 16);
  EXPECT_DOUBLE_EQ(s.gradients, 4e9 / 16);
  EXPECT_DOUBLE_EQ(s.gathered_weights, 2 * 50e6 * 2);
  EXPECT_DOUBLE_EQ(s.reduce_buffers, 2 * 50e6 * 4);
  c.shard_group_size = 8;  // HSDP: 2 replicas of 8-way shards.
  s = ShardedModelStateBytes(c, psi, layer, 2, 4, 12);
  EXPECT_DOUBLE_EQ(s.weights, 2e9 / 8);
  EXPECT_DOUBLE_EQ(s.optimizer, 12e9 / 8);
}

// EstimateMemory puts the gathered layers under weights and the reduce-scatter buffers under
// gradients: GPT-3 175B on tp 8 pp 12 dp 16 (one stage's 8 layers), fully sharded.
TEST(ShardedModelStateTest, EstimateMemoryUsesTheShardedState) {
  const JobSpec spec = Gpt175bSpec();
  ParallelConfig c = Gpt175bLayout();
  c.data_parallel_sharding = DataParallelSharding::kFull;
  const double params = MaxParamsPerGpu(spec.model, c);
  const double layer = LayerParams(spec.model) / 8;
  const MemoryBreakdown mem = EstimateMemory(spec, c, 0);
  EXPECT_NEAR(mem.weights, 2 * params / 16 + 2 * layer * 2, 1);
  EXPECT_NEAR(mem.gradients, 4 * params / 16 + 2 * layer * 4, 1);
  EXPECT_NEAR(mem.optimizer, 12 * params / 16, 1);
}

}  // namespace
}  // namespace paratune
