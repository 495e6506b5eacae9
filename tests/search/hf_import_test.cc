// Hugging Face config.json import: real configs of each family (tests/data/hf/) map to the
// published architecture; parameter counts of the imported models equal the published
// ones exactly where ParaTune's layer matches the family's (Llama, Mistral, GPT-2).
#include "search/hf_import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "search/model_math.h"
#include "search/presets.h"

namespace paratune {
namespace {

using ::testing::HasSubstr;

std::string ReadHfConfig(const std::string& name) {
  // PARATUNE_SOURCE_DIR under ctest; else this file's tests/search/ → the source root.
  const char* root = std::getenv("PARATUNE_SOURCE_DIR");
  const std::string source =
      root != nullptr
          ? std::string(root)
          : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  const std::string path = source + "/tests/data/hf/" + name + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ModelSpec Import(const std::string& name) {
  auto m = ModelSpecFromHfConfigText(ReadHfConfig(name));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelSpec{};
}

TEST(HfImportTest, Llama3_8B) {
  ModelSpec m = Import("llama3-8b");
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.hidden_size, 4096);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.ffn_hidden_size, 14336);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.max_position_embeddings, 8192);
  EXPECT_EQ(m.activation, Activation::kSwiglu);
  EXPECT_EQ(m.normalization, Normalization::kRmsNorm);
  EXPECT_EQ(m.position_embedding, PositionEmbedding::kRope);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  // Meta-Llama-3-8B has 8,030,261,248 parameters.
  EXPECT_EQ(TotalParams(m), 8030261248.0);
}

// Nemotron's squared ReLU ("relu2") and Gemma's gated GELU (GeGLU): an f-wide FC1 and two
// matrices against a 2f-wide FC1 and three.
TEST(HfImportTest, SquaredReluAndGeglu) {
  auto nemotron = ModelSpecFromHfConfigText(R"({"model_type": "nemotron", "num_hidden_layers": 32,
      "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
      "intermediate_size": 16384, "vocab_size": 256000, "hidden_act": "relu2",
      "norm_eps": 1e-5, "max_position_embeddings": 4096})");
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  EXPECT_EQ(nemotron->activation, Activation::kSquaredRelu);
  auto gemma = ModelSpecFromHfConfigText(R"({"model_type": "gemma", "num_hidden_layers": 28,
      "hidden_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 16,
      "intermediate_size": 24576, "vocab_size": 256000,
      "hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu", "rms_norm_eps": 1e-6,
      "max_position_embeddings": 8192})");
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->activation, Activation::kGeglu);
  ModelSpec plain = *nemotron;
  plain.activation = Activation::kSwiglu;
  // Per layer: SwiGLU's MLP has h*f more parameters than squared ReLU's.
  EXPECT_DOUBLE_EQ(LayerParams(plain) - LayerParams(*nemotron), 4096.0 * 16384);
  plain.activation = Activation::kGeglu;
  EXPECT_DOUBLE_EQ(LayerParams(plain), LayerParams(*nemotron) + 4096.0 * 16384);
}

TEST(HfImportTest, Mistral7B) {
  ModelSpec m = Import("mistral-7b");
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.vocab_size, 32000);
  EXPECT_EQ(m.activation, Activation::kSwiglu);
  // Mistral-7B-v0.1 has 7,241,732,096 parameters.
  EXPECT_EQ(TotalParams(m), 7241732096.0);
}

TEST(HfImportTest, Qwen2TiesEmbeddingsWhenTheConfigSaysSo) {
  ModelSpec m = Import("qwen2-0.5b");
  EXPECT_EQ(m.num_layers, 24);
  EXPECT_EQ(m.hidden_size, 896);
  EXPECT_EQ(m.num_attention_heads, 14);
  EXPECT_EQ(m.num_query_groups, 2);
  EXPECT_EQ(m.ffn_hidden_size, 4864);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_EQ(m.normalization, Normalization::kRmsNorm);
}

TEST(HfImportTest, Gpt2UsesItsOwnFieldNames) {
  ModelSpec m = Import("gpt2");
  EXPECT_EQ(m.num_layers, 12);
  EXPECT_EQ(m.hidden_size, 768);
  EXPECT_EQ(m.num_attention_heads, 12);
  EXPECT_EQ(m.num_query_groups, 12);
  EXPECT_EQ(m.ffn_hidden_size, 3072);  // n_inner absent: 4 * n_embd
  EXPECT_EQ(m.vocab_size, 50257);
  EXPECT_EQ(m.max_position_embeddings, 1024);
  EXPECT_EQ(m.activation, Activation::kGelu);
  EXPECT_EQ(m.normalization, Normalization::kLayerNorm);
  EXPECT_EQ(m.position_embedding, PositionEmbedding::kLearned);
  EXPECT_TRUE(m.tie_embeddings);
  // GPT-2 small has 124,439,808 parameters (biases, learned positions, tied output).
  EXPECT_EQ(TotalParams(m), 124439808.0);
}

TEST(HfImportTest, GptNeoX20B) {
  ModelSpec m = Import("gpt-neox-20b");
  EXPECT_EQ(m.num_layers, 44);
  EXPECT_EQ(m.hidden_size, 6144);
  EXPECT_EQ(m.num_attention_heads, 64);
  EXPECT_EQ(m.ffn_hidden_size, 24576);
  EXPECT_EQ(m.vocab_size, 50432);
  EXPECT_EQ(m.activation, Activation::kGelu);
  EXPECT_EQ(m.normalization, Normalization::kLayerNorm);
  EXPECT_EQ(m.position_embedding, PositionEmbedding::kRope);
  EXPECT_FALSE(m.tie_embeddings);
}

TEST(HfImportTest, FalconMultiQueryAndNewDecoderArchitecture) {
  ModelSpec f7 = Import("falcon-7b");
  EXPECT_EQ(f7.num_layers, 32);
  EXPECT_EQ(f7.hidden_size, 4544);
  EXPECT_EQ(f7.num_attention_heads, 71);
  EXPECT_EQ(f7.num_query_groups, 1);          // multi_query
  EXPECT_EQ(f7.ffn_hidden_size, 4 * 4544);   // no ffn_hidden_size: 4h
  EXPECT_EQ(f7.vocab_size, 65024);
  EXPECT_EQ(f7.position_embedding, PositionEmbedding::kRope);
  EXPECT_TRUE(f7.tie_embeddings);
  EXPECT_TRUE(f7.Validate().ok()) << f7.Validate();

  ModelSpec f40 = Import("falcon-40b");
  EXPECT_EQ(f40.num_layers, 60);
  EXPECT_EQ(f40.num_attention_heads, 128);
  EXPECT_EQ(f40.num_query_groups, 8);  // new_decoder_architecture: num_kv_heads

  // The original RefinedWebModel keys (n_layer, n_head, n_head_kv).
  auto legacy = ModelSpecFromHfConfig(nlohmann::json{{"model_type", "RefinedWeb"},
                                                     {"n_layer", 60},
                                                     {"n_head", 128},
                                                     {"n_head_kv", 8},
                                                     {"hidden_size", 8192},
                                                     {"vocab_size", 65024}});
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->num_layers, 60);
  EXPECT_EQ(legacy->num_query_groups, 8);
}

TEST(HfImportTest, Mixtral8x7BMatchesItsPublishedSizes) {
  ModelSpec m = Import("mixtral-8x7b");
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.moe_router_topk, 2);
  EXPECT_EQ(m.moe_ffn_hidden_size, 14336);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.attention, AttentionType::kGqa);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  // Mistral AI: 46.7B parameters, 12.9B used per token.
  EXPECT_NEAR(TotalParams(m) / 46.7e9, 1.0, 0.005);
  EXPECT_NEAR(ActiveParams(m) / 12.9e9, 1.0, 0.005);
}

TEST(HfImportTest, Qwen3MoeReadsTheHeadDimensionAndTheExperts) {
  ModelSpec m = Import("qwen3-235b-a22b");
  EXPECT_EQ(m.kv_channels, 128);  // 4096 / 64 = 64 would be wrong.
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.moe_router_topk, 8);
  EXPECT_EQ(m.moe_ffn_hidden_size, 1536);
  EXPECT_EQ(m.moe_layer_freq, 1);
  EXPECT_EQ(m.num_shared_experts, 0);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  EXPECT_NEAR(TotalParams(m) / 235e9, 1.0, 0.005);
}

TEST(HfImportTest, Qwen2MoeHasOneSharedExpert) {
  ModelSpec m = Import("qwen1.5-moe-a2.7b");
  EXPECT_EQ(m.num_experts, 60);
  EXPECT_EQ(m.moe_router_topk, 4);
  EXPECT_EQ(m.moe_ffn_hidden_size, 1408);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_expert_ffn_hidden_size, 5632);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  // Qwen: 14.3B parameters, 2.7B activated (the QKV biases and the shared-expert gate,
  // 0.01 %, are not modelled).
  EXPECT_NEAR(TotalParams(m) / 14.3e9, 1.0, 0.005);
}

TEST(HfImportTest, DeepSeekV3HasLatentAttentionDenseLayersAndMtp) {
  ModelSpec m = Import("deepseek-v3");
  EXPECT_EQ(m.attention, AttentionType::kMla);
  EXPECT_EQ(m.q_lora_rank, 1536);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.qk_head_dim, 128);
  EXPECT_EQ(m.qk_rope_head_dim, 64);
  EXPECT_EQ(m.v_head_dim, 128);
  EXPECT_EQ(m.num_experts, 256);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_expert_ffn_hidden_size, 2048);
  EXPECT_EQ(m.first_k_dense_layers, 3);
  EXPECT_EQ(m.ffn_hidden_size, 18432);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(m.moe_router_num_groups, 8);  // n_group 8, topk_group 4, noaux_tc
  EXPECT_EQ(m.moe_router_group_topk, 4);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  EXPECT_NEAR(TotalParams(m) / 671e9, 1.0, 0.005);
}

// One group, or the plain greedy top-k (DeepSeek-V2-Lite), is not group-limited routing.
TEST(HfImportTest, RouterGroupsOnlyWhereTheyLimitTheRouting) {
  nlohmann::json config = nlohmann::json::parse(ReadHfConfig("deepseek-v3"));
  config["n_group"] = 1;
  config["topk_group"] = 1;
  auto m = ModelSpecFromHfConfig(config);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->moe_router_num_groups, 0);
  config["n_group"] = 8;
  config["topk_method"] = "greedy";
  m = ModelSpecFromHfConfig(config);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->moe_router_group_topk, 0);
}

TEST(HfImportTest, GptOssReadsExpertsPerToken) {
  ModelSpec m = Import("gpt-oss-120b");
  // Its 128-token window in every other layer (transformers' default layer_types).
  EXPECT_EQ(m.sliding_window, 128);
  EXPECT_EQ(m.window_attn_skip_freq, 2);
  auto preset = FindPreset("gpt-oss-120b");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(preset->sliding_window, 128);
  EXPECT_EQ(preset->window_attn_skip_freq, 2);
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.moe_router_topk, 4);
  EXPECT_EQ(m.moe_ffn_hidden_size, 2880);
  EXPECT_EQ(m.kv_channels, 64);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  // OpenAI: 116.83B parameters (biases and attention sinks, 0.03 %, not modelled).
  EXPECT_NEAR(TotalParams(m) / 116.83e9, 1.0, 0.005);
}

TEST(HfImportTest, Llama4ReadsItsTextConfig) {
  ModelSpec m = Import("llama4-scout");
  EXPECT_EQ(m.num_layers, 48);
  EXPECT_EQ(m.hidden_size, 5120);
  EXPECT_EQ(m.num_experts, 16);
  EXPECT_EQ(m.moe_router_topk, 1);
  EXPECT_EQ(m.moe_ffn_hidden_size, 8192);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.ffn_hidden_size, 16384);
  EXPECT_EQ(m.first_k_dense_layers, 0);
  EXPECT_EQ(m.moe_layer_freq, 1);
  EXPECT_EQ(HeadDim(m), 128);  // head_dim 128 = 5120 / 40: no kv_channels of its own.
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  // Maverick's pattern: every second layer, counting from 1, is an expert layer.
  nlohmann::json maverick = nlohmann::json::parse(ReadHfConfig("llama4-scout"));
  maverick["text_config"]["interleave_moe_layer_step"] = 2;
  maverick["text_config"]["num_local_experts"] = 128;
  auto mv = ModelSpecFromHfConfig(maverick);
  ASSERT_TRUE(mv.ok()) << mv.status();
  EXPECT_FALSE(IsExpertLayer(*mv, 0));
  EXPECT_TRUE(IsExpertLayer(*mv, 1));
  EXPECT_FALSE(IsExpertLayer(*mv, 2));
  EXPECT_EQ(NumExpertLayers(*mv), 24);
}

// By hand, per layer: attention h(q + 2kv) + qh with q = 96 x 128, kv = 8 x 128; two norms
// of h; a dense FFN 3hf; an expert 3h x 1536; an expert layer (160 routed + 1 shared)
// experts and a 160-wide router. GLM-4.5: 92 layers, the first 3 dense, untied 151552-entry
// vocabulary: 352,796,472,320 (the published "355B" also counts part of the MTP module,
// which is not in the total here as for DeepSeek-V3's 671B); active (8 routed + 1 shared):
// 33,630,909,440, of which the two embedding tables are 1,551,892,480 (published "32B"
// without them).
TEST(HfImportTest, Glm45IsGroupedQueryAttentionWithDeepSeekStyleExperts) {
  ModelSpec m = Import("glm-4.5");
  EXPECT_EQ(m.attention, AttentionType::kGqa);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.kv_channels, 128);  // 5120 / 96 is not the head dimension.
  EXPECT_EQ(m.num_experts, 160);
  EXPECT_EQ(m.moe_router_topk, 8);
  EXPECT_EQ(m.moe_ffn_hidden_size, 1536);
  EXPECT_EQ(m.ffn_hidden_size, 12288);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_expert_ffn_hidden_size, 1536);
  EXPECT_EQ(m.first_k_dense_layers, 3);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(m.moe_router_num_groups, 0);  // n_group 1: not limited.
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  EXPECT_NEAR(TotalParams(m) / 352796472320.0, 1.0, 1e-4);
  EXPECT_NEAR(ActiveParams(m) / 33630909440.0, 1.0, 1e-4);
  EXPECT_NEAR(TotalParams(m) / 355e9, 1.0, 0.01);
  // The preset is the same model.
  auto preset = FindPreset("glm-4.5");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(TotalParams(*preset), TotalParams(m));
  EXPECT_EQ(ActiveParams(*preset), ActiveParams(m));
  EXPECT_EQ(preset->mtp_layers, m.mtp_layers);
  // GLM-4.5-Air by the same count: 46 layers (1 dense of 10944), h 4096, 128 experts of
  // 1408: 106,851,586,048 (published 106B), active 13,423,464,448.
  auto air = FindPreset("glm-4.5-air");
  ASSERT_TRUE(air.ok());
  EXPECT_TRUE(air->Validate().ok()) << air->Validate();
  EXPECT_NEAR(TotalParams(*air) / 106851586048.0, 1.0, 1e-4);
  EXPECT_NEAR(ActiveParams(*air) / 13423464448.0, 1.0, 1e-4);
}

// Kimi K2 is DeepSeek-V3's architecture under its own model_type; Kimi K2.5 nests it in
// text_config.
TEST(HfImportTest, KimiK2ImportsAsItsPreset) {
  ModelSpec m = Import("kimi-k2");
  EXPECT_EQ(m.attention, AttentionType::kMla);
  EXPECT_EQ(m.num_experts, 384);
  EXPECT_EQ(m.num_attention_heads, 64);
  EXPECT_EQ(m.first_k_dense_layers, 1);
  EXPECT_EQ(m.mtp_layers, 0);
  EXPECT_EQ(m.moe_router_num_groups, 0);
  EXPECT_TRUE(m.Validate().ok()) << m.Validate();
  auto preset = FindPreset("kimi-k2");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(TotalParams(m), TotalParams(*preset));
  EXPECT_EQ(ActiveParams(m), ActiveParams(*preset));

  nlohmann::json k25 = {{"model_type", "kimi_k25"},
                        {"_name_or_path", "moonshotai/Kimi-K2.5"},
                        {"text_config", nlohmann::json::parse(ReadHfConfig("kimi-k2"))}};
  auto nested = ModelSpecFromHfConfig(k25);
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(TotalParams(*nested), TotalParams(m));
  EXPECT_EQ(nested->name, "moonshotai/Kimi-K2.5");
}

// intermediate_size is one expert's width in these families. By hand (attention 4h·hd·a-ish
// terms as above, experts 3h·f): OLMoE-1B-7B 6,919,096,320 total, 1,281,951,744 active
// (published 6.9B / 1.3B); Phi-3.5-MoE 41,872,527,360 / 6,640,373,760 (41.9B / 6.6B);
// MiniMax-M2 228,689,304,576 / 11,030,092,800 (published 230B, and 10B active without the
// two embedding tables' 1.23B).
TEST(HfImportTest, ExpertWidthFamiliesMatchTheirPublishedSizes) {
  ModelSpec olmoe = Import("olmoe-1b-7b");
  EXPECT_EQ(olmoe.num_experts, 64);
  EXPECT_EQ(olmoe.moe_router_topk, 8);
  EXPECT_EQ(olmoe.moe_ffn_hidden_size, 1024);
  EXPECT_EQ(olmoe.attention, AttentionType::kMha);
  EXPECT_TRUE(olmoe.Validate().ok()) << olmoe.Validate();
  EXPECT_NEAR(TotalParams(olmoe) / 6919096320.0, 1.0, 1e-4);
  EXPECT_NEAR(ActiveParams(olmoe) / 1281951744.0, 1.0, 1e-4);

  ModelSpec phi = Import("phi-3.5-moe");
  EXPECT_EQ(phi.num_experts, 16);
  EXPECT_EQ(phi.moe_router_topk, 2);
  EXPECT_EQ(phi.moe_ffn_hidden_size, 6400);
  EXPECT_EQ(phi.num_query_groups, 8);
  EXPECT_EQ(phi.normalization, Normalization::kLayerNorm);  // despite rms_norm_eps
  EXPECT_TRUE(phi.Validate().ok()) << phi.Validate();
  EXPECT_NEAR(TotalParams(phi) / 41.9e9, 1.0, 0.005);
  EXPECT_NEAR(ActiveParams(phi) / 6.6e9, 1.0, 0.01);

  ModelSpec mm = Import("minimax-m2");
  EXPECT_EQ(mm.num_experts, 256);
  EXPECT_EQ(mm.moe_router_topk, 8);
  EXPECT_EQ(mm.moe_ffn_hidden_size, 1536);
  EXPECT_EQ(mm.kv_channels, 128);
  EXPECT_EQ(mm.num_shared_experts, 0);
  EXPECT_EQ(mm.mtp_layers, 3);  // use_mtp: 3 modules of 1 layer.
  EXPECT_TRUE(mm.Validate().ok()) << mm.Validate();
  EXPECT_NEAR(TotalParams(mm) / 228689304576.0, 1.0, 1e-3);
  EXPECT_NEAR(ActiveParams(mm) / 11030092800.0, 1.0, 1e-3);

  nlohmann::json no_mtp = nlohmann::json::parse(ReadHfConfig("minimax-m2"));
  no_mtp["use_mtp"] = false;
  EXPECT_EQ(ModelSpecFromHfConfig(no_mtp)->mtp_layers, 0);
  nlohmann::json lightning = nlohmann::json::parse(ReadHfConfig("minimax-m2"));
  lightning["attn_type_list"] = {1, 0, 1};
  EXPECT_THAT(ModelSpecFromHfConfig(lightning).status().message(),
              HasSubstr("hf_config.attn_type_list holds 0"));
  lightning["attn_type_list"] = std::vector<int>(62, 1);
  EXPECT_TRUE(ModelSpecFromHfConfig(lightning).ok());
}

// The sliding window and which layers skip it: layer_types' period, Gemma 3's
// sliding_window_pattern, every layer (Mistral 7B v0.1), none where use_sliding_window is
// false (Qwen2) or no layer is windowed; an irregular pattern is refused naming the key.
TEST(HfImportTest, SlidingWindowLayers) {
  nlohmann::json oss = nlohmann::json::parse(ReadHfConfig("gpt-oss-120b"));
  std::vector<std::string> types;
  for (int i = 0; i < 36; ++i) types.push_back(i % 3 == 2 ? "full_attention" : "sliding_attention");
  oss["layer_types"] = types;
  auto m = ModelSpecFromHfConfig(oss);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->window_attn_skip_freq, 3);
  EXPECT_EQ(WindowedLayers(*m), 24);
  oss["layer_types"] = std::vector<std::string>(36, "full_attention");
  EXPECT_EQ(ModelSpecFromHfConfig(oss)->sliding_window, 0);
  types[4] = "full_attention";
  oss["layer_types"] = types;
  EXPECT_THAT(ModelSpecFromHfConfig(oss).status().message(),
              HasSubstr("hf_config.layer_types: the full-attention layers are not every n-th"));

  ModelSpec mistral = Import("mistral-7b");
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.window_attn_skip_freq, 0);
  EXPECT_EQ(WindowedLayers(mistral), 32);
  EXPECT_EQ(Import("qwen2-0.5b").sliding_window, 0);  // use_sliding_window: false

  nlohmann::json gemma3 = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  gemma3["model_type"] = "gemma3_text";
  gemma3["sliding_window"] = 1024;
  gemma3["sliding_window_pattern"] = 6;
  auto g = ModelSpecFromHfConfig(gemma3);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->sliding_window, 1024);
  EXPECT_EQ(g->window_attn_skip_freq, 6);
  EXPECT_TRUE(g->Validate().ok()) << g->Validate();
}

// Hybrids whose layers are not all attention would be planned as transformers: refused,
// naming the key.
TEST(HfImportTest, StateSpaceAndLinearAttentionHybridsAreRejected) {
  nlohmann::json nemotron_h = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  nemotron_h["model_type"] = "nemotron_h";
  nemotron_h["hybrid_override_pattern"] = "M-M-M-M*-M-M-M-M*-";
  auto s = ModelSpecFromHfConfig(nemotron_h);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("hf_config.hybrid_override_pattern"));
  EXPECT_THAT(s.status().message(), HasSubstr("state-space or linear-attention layers"));

  nlohmann::json mamba_keys = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  mamba_keys["mamba_d_state"] = 128;
  EXPECT_THAT(ModelSpecFromHfConfig(mamba_keys).status().message(),
              HasSubstr("hf_config.mamba_d_state (128)"));

  nlohmann::json qwen3_next = nlohmann::json::parse(ReadHfConfig("qwen3-235b-a22b"));
  qwen3_next["model_type"] = "qwen3_next";
  qwen3_next["layer_types"] = {"linear_attention", "linear_attention", "full_attention"};
  EXPECT_THAT(ModelSpecFromHfConfig(qwen3_next).status().message(),
              HasSubstr("hf_config.layer_types holds \"linear_attention\""));

  // Sliding-window and full attention layers (GPT-OSS, Gemma) are attention layers.
  nlohmann::json sliding = nlohmann::json::parse(ReadHfConfig("gpt-oss-120b"));
  sliding["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_TRUE(ModelSpecFromHfConfig(sliding).ok());
}

TEST(HfImportTest, OtherMixtureOfExpertsFamiliesAreRejected) {
  auto dbrx = ModelSpecFromHfConfig(
      nlohmann::json{{"model_type", "dbrx"}, {"num_experts", 16}, {"num_hidden_layers", 40}});
  ASSERT_FALSE(dbrx.ok());
  EXPECT_EQ(dbrx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dbrx.status().message(), HasSubstr("hf_config.num_experts (16)"));
  EXPECT_THAT(dbrx.status().message(), HasSubstr("qwen3_moe"));

  auto no_type = ModelSpecFromHfConfig(nlohmann::json{{"n_routed_experts", 64}});
  EXPECT_THAT(no_type.status().message(), HasSubstr("hf_config.n_routed_experts (64)"));

  auto moe_key = ModelSpecFromHfConfig(nlohmann::json{{"moe_intermediate_size", 1408}});
  EXPECT_THAT(moe_key.status().message(), HasSubstr("hf_config.moe_intermediate_size"));

  nlohmann::json qwen = nlohmann::json::parse(ReadHfConfig("qwen3-235b-a22b"));
  qwen["mlp_only_layers"] = {0, 5};
  EXPECT_THAT(ModelSpecFromHfConfig(qwen).status().message(),
              HasSubstr("hf_config.mlp_only_layers"));

  // A dense config that spells out "no experts" is fine.
  nlohmann::json dense = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  dense["num_experts"] = nullptr;
  dense["num_local_experts"] = 1;
  EXPECT_TRUE(ModelSpecFromHfConfig(dense).ok());
}

TEST(HfImportTest, MalformedConfigsNameTheKey) {
  EXPECT_EQ(ModelSpecFromHfConfig(nlohmann::json{{"hidden_size", 64}}).status().message(),
            "hf_config.num_hidden_layers / hf_config.n_layer / hf_config.num_layers is required");
  nlohmann::json bad = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  bad["num_hidden_layers"] = "thirty-two";
  EXPECT_EQ(ModelSpecFromHfConfig(bad).status().message(),
            "hf_config.num_hidden_layers must be an integer, got \"thirty-two\"");
  bad = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  bad["hidden_act"] = "sigmoid";
  EXPECT_THAT(ModelSpecFromHfConfig(bad).status().message(),
              HasSubstr("hf_config.hidden_act ('sigmoid') is not supported"));
  bad = nlohmann::json::parse(ReadHfConfig("llama3-8b"));
  bad["head_dim"] = -2;
  EXPECT_THAT(ModelSpecFromHfConfig(bad).status().message(),
              HasSubstr("hf_config.head_dim (-2) must be positive"));
  bad["head_dim"] = 256;  // Not hidden / heads: the head dimension of its own.
  EXPECT_EQ(ModelSpecFromHfConfig(bad)->kv_channels, 256);
  EXPECT_THAT(ModelSpecFromHfConfigText("{\"num_hidden_layers\": 2,").status().message(),
              HasSubstr("hf_config is not valid JSON"));
  EXPECT_THAT(ModelSpecFromHfConfig(nlohmann::json::array()).status().message(),
              HasSubstr("must be a JSON object"));
  EXPECT_THAT(ModelSpecFromHfConfig(nlohmann::json{{"is_encoder_decoder", true}}).status().message(),
              HasSubstr("decoder-only"));
}

}  // namespace
}  // namespace paratune
