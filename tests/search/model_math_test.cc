#include "search/model_math.h"

#include <gtest/gtest.h>

#include "search/presets.h"

namespace paratune {
namespace {

ModelSpec Preset(const std::string& name) {
  absl::StatusOr<ModelSpec> m = FindPreset(name);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// Published sizes, within 0.5%.
TEST(ModelMathTest, ParameterCountsMatchPublishedSizes) {
  EXPECT_NEAR(TotalParams(Preset("gpt3-175b")) / 174.6e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("llama2-70b")) / 68.98e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("llama3-8b")) / 8.03e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("llama2-7b")) / 6.74e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("llama3-70b")) / 70.55e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("llama3.1-405b")) / 405.85e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("bloom-176b")) / 176.25e9, 1.0, 0.005);
  // Narayanan Table 1's sizes are quoted to one decimal.
  EXPECT_NEAR(TotalParams(Preset("gpt3-1.7b")) / 1.7e9, 1.0, 0.03);
  EXPECT_NEAR(TotalParams(Preset("gpt3-39.1b")) / 39.1e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("gpt3-145.6b")) / 145.6e9, 1.0, 0.005);
  EXPECT_NEAR(TotalParams(Preset("gpt3-1t")) / 1008.0e9, 1.0, 0.005);
}

// Hand count of one GPT-3 175B layer: 12h^2 matmul weights + 13h biases and norms.
TEST(ModelMathTest, Gpt175bLayerByHand) {
  const ModelSpec m = Preset("gpt3-175b");
  const double h = 12288;
  EXPECT_DOUBLE_EQ(LayerMatmulParams(m), 12 * h * h);
  EXPECT_DOUBLE_EQ(LayerParams(m), 12 * h * h + 13 * h);
}

// Narayanan et al. 2021: 72*B*s*L*h^2*(1 + s/6h + V/12hL) model FLOPs per iteration.
TEST(ModelMathTest, ModelFlopsReproduceNarayanan) {
  for (const char* name : {"gpt3-1.7b", "gpt3-175b", "gpt3-1t", "gpt3-22b"}) {
    const ModelSpec m = Preset(name);
    const double B = 1536, s = 2048, L = m.num_layers, h = m.hidden_size, V = m.vocab_size;
    const double expected = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    EXPECT_NEAR(ModelFlopsPerIteration(m, B, s) / expected, 1.0, 1e-12) << name;
  }
}

// Narayanan's Eq. 3 (full recompute, counted): 96*B*s*L*h^2*(1 + s/6h + V/16hL).
TEST(ModelMathTest, FullRecomputeHardwareFlopsReproduceEq3) {
  const ModelSpec m = Preset("gpt3-175b");
  const double B = 1536, s = 2048, L = m.num_layers, h = m.hidden_size, V = m.vocab_size;
  const double expected = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * h * L));
  EXPECT_NEAR(HardwareFlopsPerIteration(m, B, s, Recompute::kFull, 1.0) / expected, 1.0,
              1e-12);
  // Selective adds one forward of the attention core: 4*B*s^2*h per layer.
  EXPECT_DOUBLE_EQ(HardwareFlopsPerIteration(m, B, s, Recompute::kSelective, 0) -
                       ModelFlopsPerIteration(m, B, s),
                   4 * B * s * s * h * L);
}

// Causal halving of the attention scores: 72*B*s*L*h^2*(1 + s/12h + V/12hL) for GPT.
TEST(ModelMathTest, CausalModelFlopsHalveTheAttentionScores) {
  const ModelSpec m = Preset("gpt3-175b");
  const double B = 8, s = 8192, L = m.num_layers, h = m.hidden_size, V = m.vocab_size;
  const double expected = 72 * B * s * L * h * h * (1 + s / (12 * h) + V / (12 * h * L));
  EXPECT_NEAR(CausalModelFlopsPerIteration(m, B, s) / expected, 1.0, 1e-12);
}

// Megatron-Core's logged TFLOP/s of the Qwen3-235B-A22B model-zoo rows that publish both
// TFLOP/s and the step time (245 TFLOP/s at 1663.4 tokens/s/GPU, 167 at 1129.9) imply
// 147.3 and 147.8 GFLOP per token at s = 4096: the causal count, not the full one.
TEST(ModelMathTest, CausalCountMatchesMegatronLoggedFlopsOfQwen3) {
  const ModelSpec m = Preset("qwen3-235b-a22b");
  const double s = 4096;
  const double causal = CausalModelFlopsPerIteration(m, 1, s) / s;
  EXPECT_NEAR(causal / (245e12 / 1663.4), 1.0, 0.01);
  EXPECT_NEAR(causal / (167e12 / 1129.9), 1.0, 0.01);
  EXPECT_GT(ModelFlopsPerIteration(m, 1, s) / s / (245e12 / 1663.4), 1.1);
}

TEST(ModelMathTest, PaddedVocab) {
  const ModelSpec m = Preset("gpt3-175b");
  EXPECT_EQ(PaddedVocab(m, 1), 51200);
  EXPECT_EQ(PaddedVocab(m, 8), 51200);
  ModelSpec llama = Preset("llama2-7b");
  EXPECT_EQ(PaddedVocab(llama, 8), 32768);
  EXPECT_EQ(PaddedVocab(llama, 1), 32000);
}

// Mixture-of-experts sizes against the published totals and active counts.
TEST(ModelMathTest, MixtureOfExpertsParameterCountsMatchPublishedSizes) {
  // Mistral AI: Mixtral 8x7B 46.7B total, 12.9B per token.
  EXPECT_NEAR(TotalParams(Preset("mixtral-8x7b")) / 46.7e9, 1.0, 0.005);
  EXPECT_NEAR(ActiveParams(Preset("mixtral-8x7b")) / 12.9e9, 1.0, 0.005);
  // Qwen: 235B total, 22B activated (A22B, rounded to the billion).
  EXPECT_NEAR(TotalParams(Preset("qwen3-235b-a22b")) / 235e9, 1.0, 0.005);
  EXPECT_NEAR(ActiveParams(Preset("qwen3-235b-a22b")) / 1e9, 22.0, 0.5);
  EXPECT_NEAR(TotalParams(Preset("qwen3-30b-a3b")) / 30.5e9, 1.0, 0.005);
  // Kimi K2 by hand from its config.json: 60 expert layers of 384 x 3 x 7168 x 2048 routed
  // weights (1014.6B), their shared experts (2.6B), 61 MLA attention blocks (6.2B), the
  // dense layer (0.4B), routers (0.2B) and untied 163840-row embeddings (2.35B): 1.026T.
  // Moonshot publishes "1T total, 32B activated" (the technical report's 1.04T counts more
  // than the released config holds).
  EXPECT_NEAR(TotalParams(Preset("kimi-k2")) / 1.026e12, 1.0, 0.002);
  EXPECT_NEAR(ActiveParams(Preset("kimi-k2")) / 32e9, 1.0, 0.03);
  // Moonlight by hand from its config.json: 26 expert layers of 64 x 3 x 2048 x 1408
  // routed weights (14.39B) and 2 shared experts each (0.45B), the dense layer (0.07B), 27
  // MLA blocks without a query low-rank (0.37B), routers and untied 163840-row embeddings
  // (0.67B): 15.96B; 6 routed experts per token make 2.9B active. Moonshot publishes
  // "16B total, 3B activated".
  EXPECT_NEAR(TotalParams(Preset("moonlight-16b-a3b")) / 15.96e9, 1.0, 0.005);
  EXPECT_NEAR(ActiveParams(Preset("moonlight-16b-a3b")) / 3e9, 1.0, 0.05);
  // OpenAI: gpt-oss-120b 116.83B total.
  EXPECT_NEAR(TotalParams(Preset("gpt-oss-120b")) / 116.83e9, 1.0, 0.005);
  // DeepSeek-V3: 671B total without the 14B MTP module (685B with it).
  const ModelSpec dsv3 = Preset("deepseek-v3");
  EXPECT_NEAR(TotalParams(dsv3) / 671e9, 1.0, 0.005);
  EXPECT_NEAR((TotalParams(dsv3) + MtpParams(dsv3)) / 685e9, 1.0, 0.005);
  // "37B activated": by hand 37.55B with both embedding tables (36.63B without the input
  // lookup table), which the report rounds to 37B.
  EXPECT_NEAR(ActiveParams(dsv3) / 37e9, 1.0, 0.015);
}

TEST(ModelMathTest, DeepSeekV3LayerByHand) {
  const ModelSpec m = Preset("deepseek-v3");
  const double h = 7168, a = 128;
  // MLA: q down 7168x1536, q up 1536 x 128*(128+64), kv down 7168 x (512+64), kv up
  // 512 x 128*(128+128), output 128*128 x 7168.
  const double attention = h * 1536 + 1536 * a * 192 + h * 576 + 512 * a * 256 + a * 128 * h;
  EXPECT_DOUBLE_EQ(AttentionMatmulParams(m), attention);
  EXPECT_DOUBLE_EQ(ExpertParams(m), 3 * h * 2048);
  EXPECT_DOUBLE_EQ(RouterParams(m), h * 256);
  EXPECT_EQ(NumExpertLayers(m), 58);
  EXPECT_FALSE(IsExpertLayer(m, 2));
  EXPECT_TRUE(IsExpertLayer(m, 3));
  // Two RMSNorms of h plus the q and kv latent norms.
  EXPECT_DOUBLE_EQ(ExpertLayerParams(m),
                   attention + 2 * h + 1536 + 512 + h * 256 + 257 * 3 * h * 2048);
  // One token: attention, router, 8 routed experts and the shared one.
  EXPECT_DOUBLE_EQ(ExpertLayerActiveMatmulParams(m), attention + h * 256 + 9 * 3 * h * 2048);
}

TEST(ModelMathTest, ActiveFlopsPerTokenCountOnlyTheRoutedExperts) {
  ModelSpec m = Preset("mixtral-8x7b");
  const double s = 4096, h = 4096;
  // Per token forward: 2 x (attention 2h^2 + 2*h*1024, router 8h, two experts of 3*h*14336)
  // plus the attention core 4*s*h, over 32 layers; then the logits 2*h*V.
  const double layer = 2 * (2 * h * h + 2 * h * 1024 + 8 * h + 2 * 3 * h * 14336) + 4 * s * h;
  const double per_token = 32 * layer + 2 * h * 32000;
  EXPECT_DOUBLE_EQ(ModelFlopsPerIteration(m, 1, s) / s, 3 * per_token);
  // Doubling the experts at the same top-k adds only the router's 8 more columns.
  m.num_experts = 16;
  EXPECT_DOUBLE_EQ(ModelFlopsPerIteration(m, 1, s) / s, 3 * (per_token + 32 * 2 * 8 * h));
  // DeepSeek-V3: the MTP module adds its layer, its 2h -> h projection and its logits.
  const ModelSpec dsv3 = Preset("deepseek-v3");
  ModelSpec no_mtp = dsv3;
  no_mtp.mtp_layers = 0;
  const double mtp = ExpertLayerForwardFlops(dsv3, 1, s) + 2 * s * 2 * 7168.0 * 7168 +
                     LogitsForwardFlops(dsv3, 1, s);
  EXPECT_NEAR(ModelFlopsPerIteration(dsv3, 1, s) - ModelFlopsPerIteration(no_mtp, 1, s), 3 * mtp,
              1e-6 * mtp);
}

}  // namespace
}  // namespace paratune
