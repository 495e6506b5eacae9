#include "search/presets.h"

#include <gtest/gtest.h>

#include "search/model_math.h"

namespace paratune {
namespace {

TEST(PresetsTest, ShapesFromThePapers) {
  const ModelSpec m = *FindPreset("gpt3-175b");
  EXPECT_EQ(m.num_layers, 96);
  EXPECT_EQ(m.hidden_size, 12288);
  EXPECT_EQ(m.num_attention_heads, 96);
  EXPECT_EQ(m.ffn_hidden_size, 4 * 12288);
  const ModelSpec l = *FindPreset("llama3.1-405b");
  EXPECT_EQ(l.num_query_groups, 8);
  EXPECT_EQ(l.ffn_hidden_size, 53248);
  EXPECT_EQ(l.vocab_size, 128256);
  EXPECT_EQ(FindPreset("gpt3-1t")->hidden_size, 25600);
}

// NeMo's Nemotron-3 8B and 22B (NeMo-Framework-Launcher configs): by hand, 32 layers of
// 4h^2 attention + 2 * 4h^2 squared-ReLU MLP at h = 4096 (6.44 B) and 40 at h = 6144
// (18.12 B), plus two untied 256,000-entry embedding tables (2.10 B and 3.15 B), the norms
// aside: 8.54 B ("8B") and 21.27 B ("22B").
TEST(PresetsTest, NemotronSizesFromTheirConfigs) {
  const ModelSpec small = *FindPreset("nemotron-8b");
  EXPECT_EQ(small.activation, Activation::kSquaredRelu);
  EXPECT_EQ(small.num_query_groups, 32);
  EXPECT_NEAR(TotalParams(small), 32 * 12.0 * 4096 * 4096 + 2.0 * 256000 * 4096,
              1e-3 * TotalParams(small));
  const ModelSpec mid = *FindPreset("nemotron-22b");
  EXPECT_NEAR(TotalParams(mid), 40 * 12.0 * 6144 * 6144 + 2.0 * 256000 * 6144,
              1e-3 * TotalParams(mid));
  EXPECT_NEAR(TotalParams(mid) / 1e9, 21.27, 0.05);
}

TEST(PresetsTest, EveryPresetValidates) {
  const std::vector<std::string> names = PresetNames();
  EXPECT_GE(names.size(), 23u);
  for (const std::string& n : names) {
    absl::StatusOr<ModelSpec> m = FindPreset(n);
    ASSERT_TRUE(m.ok()) << n;
    EXPECT_TRUE(m->Validate().ok()) << n << ": " << m->Validate();
  }
}

TEST(PresetsTest, UnknownNameListsKnownOnes) {
  absl::StatusOr<ModelSpec> m = FindPreset("gpt5");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("llama3-8b"), std::string::npos);
}

TEST(PresetsTest, ServingPresetsMatchTheirPublishedSizes) {
  // Model cards: Llama 3.1 8B 8.03 B parameters, Llama 3.1/3.3 70B 70.6 B, Mistral 7B 7.24 B.
  EXPECT_NEAR(TotalParams(*FindPreset("llama3.1-8b")) / 1e9, 8.03, 0.01);
  EXPECT_NEAR(TotalParams(*FindPreset("llama3.1-70b")) / 1e9, 70.55, 0.05);
  EXPECT_NEAR(TotalParams(*FindPreset("llama3.3-70b")) / 1e9, 70.55, 0.05);
  EXPECT_NEAR(TotalParams(*FindPreset("mistral-7b")) / 1e9, 7.24, 0.01);
  EXPECT_EQ(FindPreset("qwen3-32b")->vocab_size, 151936);
  // GPT-J 6B: 6,053,381,344 in its model card; the biases (0.003 B) are not counted here.
  EXPECT_NEAR(TotalParams(*FindPreset("gpt-j-6b")) / 6.0534e9, 1.0, 0.001);
  // Falcon-180B "180B" (by hand: 80 layers of 2.22 B, 0.97 B of tied embeddings: 178.6 B).
  EXPECT_NEAR(TotalParams(*FindPreset("falcon-180b")) / 180e9, 1.0, 0.01);
  EXPECT_TRUE(FindPreset("falcon-180b")->tie_embeddings);
}

}  // namespace
}  // namespace paratune
