// Mixture-of-experts memory (search/memory_model.h): expert parameters split over ep*etp,
// their optimizer state sharded over the expert data-parallel group, expert-layer
// activations by hand, the routing load.
#include <gtest/gtest.h>

#include "search/memory_model.h"
#include "search/model_math.h"
#include "search/presets.h"

namespace paratune {
namespace {

// DeepSeek-V3 on 1024 H100s: pp 16 over 61 layers + embedding + MTP + loss = 64 slots.
JobSpec DeepSeekV3Spec() {
  JobSpec spec;
  spec.model = *FindPreset("deepseek-v3");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 8192;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 1024;
  return spec;
}

ParallelConfig DeepSeekLayout(int64_t ep) {
  ParallelConfig c;
  c.pp = 16;
  c.dp = 64;
  c.ep = ep;
  c.split_counts_embedding_and_loss = true;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  return c;
}

TEST(MoeMemoryTest, StagesHoldTheirExpertLayers) {
  const JobSpec spec = DeepSeekV3Spec();
  const ParallelConfig c = DeepSeekLayout(8);
  // Four slots per stage: the first stage holds the embedding and dense layers 0-2, the
  // last two expert layers, the MTP module and the loss.
  EXPECT_EQ(ExpertLayersOnStage(spec.model, c, 0), 0);
  EXPECT_EQ(ExpertLayersOnStage(spec.model, c, 1), 4);
  EXPECT_EQ(ExpertLayersOnStage(spec.model, c, 15), 2);
  int64_t total = 0;
  for (int64_t r = 0; r < 16; ++r) total += ExpertLayersOnStage(spec.model, c, r);
  EXPECT_EQ(total, 58);
}

TEST(MoeMemoryTest, ExpertStatePerRankAtEp8AndEp64) {
  const JobSpec spec = DeepSeekV3Spec();
  const double expert = 3.0 * 7168 * 2048;  // One SwiGLU expert.
  // A middle stage: 4 expert layers x 256 experts over ep ranks.
  const StageParams ep8 = StageParamsSplit(spec.model, DeepSeekLayout(8), 5);
  const StageParams ep64 = StageParamsSplit(spec.model, DeepSeekLayout(64), 5);
  EXPECT_DOUBLE_EQ(ep8.expert, 4 * 256 * expert / 8);    // 5.64e9 parameters
  EXPECT_DOUBLE_EQ(ep64.expert, 4 * 256 * expert / 64);  // 7.05e8
  EXPECT_DOUBLE_EQ(ep8.dense, ep64.dense);
  // Weights (2 bytes) and FP32 gradients (4) of the experts fall 8x; the distributed
  // optimizer's 12 bytes per parameter are sharded over edp = 64 / ep, so each rank keeps
  // 12 x 4 x 256 x expert / 64 bytes of expert optimizer state either way.
  EXPECT_EQ(DeepSeekLayout(8).edp(), 8);
  EXPECT_EQ(DeepSeekLayout(64).edp(), 1);
  const double optimizer8 = 12.0 * ep8.expert / DeepSeekLayout(8).edp();
  const double optimizer64 = 12.0 * ep64.expert / DeepSeekLayout(64).edp();
  EXPECT_DOUBLE_EQ(optimizer8, optimizer64);
  EXPECT_NEAR(6.0 * (ep8.expert - ep64.expert) / (1 << 30), 27.56, 0.01);  // GiB saved by EP 64
}

TEST(MoeMemoryTest, TheLastStageHoldsTheMtpModule) {
  const JobSpec spec = DeepSeekV3Spec();
  const ParallelConfig c = DeepSeekLayout(8);
  const double expert = 3.0 * 7168 * 2048;
  // Two expert layers and the MTP module's experts.
  EXPECT_DOUBLE_EQ(StageParamsSplit(spec.model, c, 15).expert, 3 * 256 * expert / 8);
}

// One rank, no parallelism: s 4096, b 1, BF16, flash attention, no dropout.
LayerActivationParams MixtralOneRank() {
  LayerActivationParams p;
  p.seq_length = 4096;
  p.flash_attention = true;
  p.dropout = false;
  p.bytes_per_element = 2;
  return p;
}

TEST(MoeMemoryTest, ExpertLayerActivationsByHand) {
  // Mixtral 8x7B, one rank, no parallelism: s 4096, b 1, top-2, h 4096, f 14336, BF16,
  // flash attention, no dropout.
  ModelSpec m = *FindPreset("mixtral-8x7b");
  LayerActivationParams p = MixtralOneRank();
  const double tokens = 4096, h = 4096, f = 14336, k = 2;
  ModelSpec attention_only = m;
  attention_only.ffn_hidden_size = 0;
  // Per routed copy: permuted input 2h, SwiGLU input 2 x 2f, FC2 input 2f, expert output
  // 2h; the router 9 bytes x 8 experts per token.
  const double routed = tokens * k * (2 * h + 4 * f + 2 * f + 2 * h) + tokens * 8 * 9;
  EXPECT_DOUBLE_EQ(ExpertLayerActivationBytes(m, p, 1.0),
                   LayerActivationBytes(attention_only, p) + routed);
  // Twice the load doubles the routed part only.
  EXPECT_DOUBLE_EQ(ExpertLayerActivationBytes(m, p, 2.0) - ExpertLayerActivationBytes(m, p, 1.0),
                   routed - tokens * 8 * 9);
  // Full recompute keeps the layer input only.
  p.parallel.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(ExpertLayerActivationBytes(m, p, 1.0), 2 * tokens * h);
}

TEST(MoeMemoryTest, SelectiveRecomputeModulesDropTheirTensors) {
  // Mixtral 8x7B, one rank, s 4096, b 1, BF16, flash attention, no dropout, selective.
  ModelSpec m = *FindPreset("mixtral-8x7b");
  LayerActivationParams p = MixtralOneRank();
  p.parallel.recompute = Recompute::kSelective;
  const double tokens = 4096, h = 4096, f = 14336, k = 2, a = 32;
  const double core_attn_only = ExpertLayerActivationBytes(m, p, 1.0);
  // Without the attention core among the modules its FP32 log-sum-exp statistics stay.
  p.selective.core_attn = false;
  EXPECT_DOUBLE_EQ(ExpertLayerActivationBytes(m, p, 1.0) - core_attn_only, 4 * a * tokens);
  p.selective.core_attn = true;
  // layernorm: the two norms' outputs (QKV's and the router's input), 2h bytes per token each.
  p.selective.layernorm = true;
  EXPECT_DOUBLE_EQ(core_attn_only - ExpertLayerActivationBytes(m, p, 1.0), 2 * 2 * tokens * h);
  p.selective.layernorm = false;
  // moe_act: the experts' FC2 input, 2f bytes per routed copy.
  p.selective.moe_act = true;
  EXPECT_DOUBLE_EQ(core_attn_only - ExpertLayerActivationBytes(m, p, 1.0), tokens * k * 2 * f);
  // moe: every routed copy's tensors and the router's, as in the by-hand test above.
  p.selective.moe = true;
  const double routed = tokens * k * (2 * h + 4 * f + 2 * f + 2 * h) + tokens * 8 * 9;
  EXPECT_DOUBLE_EQ(core_attn_only - ExpertLayerActivationBytes(m, p, 1.0), routed);
}

TEST(MoeMemoryTest, SelectiveMlpRecomputeKeepsOnlyTheMlpInput) {
  // GPT-3 1.7B (h 2304, f 9216, GeLU), tp 2 with SP, s 2048, b 1, BF16, flash, no dropout.
  JobSpec spec;
  spec.model = *FindPreset("gpt3-1.7b");
  spec.training.seq_length = 2048;
  ParallelConfig c;
  c.tp = 2;
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  const double base = LayerActivationBytes(spec.model, ActivationParamsFor(spec.model,
                                                                           spec.training, c));
  spec.training.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kMlp};
  const double mlp = LayerActivationBytes(spec.model, ActivationParamsFor(spec.model,
                                                                          spec.training, c));
  // The GeLU input and FC2 input, s*f each at 2 bytes, split over tp.
  EXPECT_DOUBLE_EQ(base - mlp, 2.0 * 2 * 2048 * 9216 / 2);
}

TEST(MoeMemoryTest, RoutingLoad) {
  JobSpec spec = DeepSeekV3Spec();
  ParallelConfig c = DeepSeekLayout(64);
  EXPECT_EQ(ExpertLoadFactor(spec, c), 1.0);  // balanced
  spec.training.moe_routing = MoeRouting::kDropless;
  // 4096 tokens x 8 copies per rank, 256 experts over 64 ranks (4 each), expert shares
  // with a coefficient of variation of 1.15: 1 + sqrt(2 ln 64 (1.15^2 / 4 + 1 / 32768)).
  const double ep64 = 1.0 + std::sqrt(2 * std::log(64.0) * (1.15 * 1.15 / 4 + 1.0 / 32768));
  EXPECT_NEAR(ExpertLoadFactor(spec, c), ep64, 1e-12);
  // More experts per rank average the popularity down: EP 8 holds 32 each.
  EXPECT_NEAR(ExpertLoadFactor(spec, DeepSeekLayout(8)),
              1.0 + std::sqrt(2 * std::log(8.0) * (1.15 * 1.15 / 32 + 1.0 / 32768)), 1e-12);
  EXPECT_LT(ExpertLoadFactor(spec, DeepSeekLayout(8)), ep64);
  spec.training.moe_routing = MoeRouting::kCapacity;
  spec.training.moe_capacity_factor = 1.01;
  EXPECT_DOUBLE_EQ(ExpertLoadFactor(spec, c), 1.01);
}

TEST(MoeMemoryTest, EstimateMemoryFallsWithEp) {
  const JobSpec spec = DeepSeekV3Spec();
  const MemoryBreakdown ep8 = EstimateMemory(spec, DeepSeekLayout(8), 80.0 * (1 << 30));
  const MemoryBreakdown ep64 = EstimateMemory(spec, DeepSeekLayout(64), 80.0 * (1 << 30));
  EXPECT_GT(ep8.weights, ep64.weights);
  EXPECT_GT(ep8.Peak(), ep64.Peak());
}

}  // namespace
}  // namespace paratune
