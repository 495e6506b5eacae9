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

TEST(ModelMathTest, PaddedVocab) {
  const ModelSpec m = Preset("gpt3-175b");
  EXPECT_EQ(PaddedVocab(m, 1), 51200);
  EXPECT_EQ(PaddedVocab(m, 8), 51200);
  ModelSpec llama = Preset("llama2-7b");
  EXPECT_EQ(PaddedVocab(llama, 8), 32768);
  EXPECT_EQ(PaddedVocab(llama, 1), 32000);
}

}  // namespace
}  // namespace paratune
