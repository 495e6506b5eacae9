// Validation rules of search/specs.h: each rule is hit once, and the message names the
// field and the rule.
#include "search/specs.h"

#include <cmath>
#include <functional>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "search/presets.h"

namespace paratune {
namespace {

using ::testing::HasSubstr;

/// GPT-3 175B on 1024 A100s (Narayanan et al. 2021, Table 1 last row).
JobSpec Gpt3Spec() {
  JobSpec spec;
  spec.name = "gpt3";
  spec.model.name = "gpt3-175b";
  spec.model.num_layers = 96;
  spec.model.hidden_size = 12288;
  spec.model.num_attention_heads = 96;
  spec.model.num_query_groups = 96;
  spec.model.ffn_hidden_size = 4 * 12288;
  spec.model.vocab_size = 51200;
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 1536;
  spec.cluster.gpu = "a100-80gb";
  spec.cluster.num_gpus = 1024;
  return spec;
}

/// Applies `mutate` to a valid spec and returns the message of the failed validation.
std::string Violation(const std::function<void(JobSpec&)>& mutate) {
  JobSpec spec = Gpt3Spec();
  mutate(spec);
  absl::Status s = spec.Validate();
  EXPECT_FALSE(s.ok()) << "expected a violation";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(SpecsTest, Gpt3SpecIsValid) { EXPECT_TRUE(Gpt3Spec().Validate().ok()) << Gpt3Spec().Validate(); }

TEST(SpecsTest, ModelSizesMustBePositive) {
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.num_layers = 0; }),
            "model.num_layers (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.hidden_size = -4; }),
            "model.hidden_size (-4) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.num_attention_heads = 0; }),
            "model.num_attention_heads (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.num_query_groups = 0; }),
            "model.num_query_groups (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.ffn_hidden_size = 0; }),
            "model.ffn_hidden_size (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.vocab_size = -1; }),
            "model.vocab_size (-1) must be positive");
}

TEST(SpecsTest, HeadsAndGroupsMustDivide) {
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.num_attention_heads = 100; }),
            "model.hidden_size (12288) must be divisible by model.num_attention_heads (100) unless "
            "model.kv_channels gives the head dimension");
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.num_query_groups = 7; }),
            "model.num_attention_heads (96) must be divisible by model.num_query_groups (7)");
  // More groups than heads is caught by the same rule.
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.num_query_groups = 192; }),
              HasSubstr("must be divisible by model.num_query_groups (192)"));
  // GQA with 8 groups is fine.
  JobSpec gqa = Gpt3Spec();
  gqa.model.num_query_groups = 8;
  EXPECT_TRUE(gqa.Validate().ok());
}

TEST(SpecsTest, SlidingWindowRules) {
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.sliding_window = -1; }),
            "model.sliding_window (-1) must be in [0, 16777216] (0: no sliding window)");
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.window_attn_skip_freq = -2; }),
              HasSubstr("model.window_attn_skip_freq (-2) must be in [0, "));
  EXPECT_EQ(Violation([](JobSpec& s) { s.model.window_attn_skip_freq = 2; }),
            "model.window_attn_skip_freq (2) needs model.sliding_window: it says which layers "
            "skip the window");
  // A head dimension of its own lifts the hidden % heads rule.
  JobSpec glm = Gpt3Spec();
  glm.model.num_attention_heads = 100;
  glm.model.num_query_groups = 100;
  glm.model.kv_channels = 128;
  glm.model.sliding_window = 4096;
  glm.model.window_attn_skip_freq = 4;
  EXPECT_TRUE(glm.Validate().ok()) << glm.Validate();
}

TEST(SpecsTest, HugeSizesAreRejectedBeforeTheyOverflow) {
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.hidden_size = 1000000000000; }),
              HasSubstr("model.hidden_size (1000000000000) must be at most 1048576"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.num_layers = int64_t{1} << 40; }),
              HasSubstr("model.num_layers (1099511627776) must be at most 16384"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.vocab_size = std::numeric_limits<int64_t>::max(); }),
              HasSubstr("model.vocab_size (9223372036854775807) must be at most 16777216"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.training.seq_length = int64_t{1} << 30; }),
              HasSubstr("training.seq_length (1073741824) must be at most 16777216"));
  // Every size within its own limit, but tokens x hidden per step beyond 2^56.
  EXPECT_THAT(Violation([](JobSpec& s) {
                s.training.seq_length = int64_t{1} << 24;
                s.training.global_batch_size = int64_t{1} << 24;
              }),
              HasSubstr("must be at most 2^56"));
  // Parameters: 16384 layers x 12 x (2^20)^2 ~ 2.1e17 > 1e15.
  EXPECT_THAT(Violation([](JobSpec& s) {
                s.model.num_layers = 16384;
                s.model.hidden_size = 1 << 20;
                s.model.num_attention_heads = 1024;
                s.model.num_query_groups = 1024;
                s.model.ffn_hidden_size = 1 << 22;
              }),
              HasSubstr("parameters; at most 1e15 are supported"));
}

TEST(SpecsTest, MixtureOfExpertsRulesNameTheField) {
  auto moe = [](JobSpec& s) {
    s.model.num_experts = 8;
    s.model.moe_router_topk = 2;
    s.model.moe_ffn_hidden_size = 1024;
  };
  JobSpec valid = Gpt3Spec();
  moe(valid);
  EXPECT_TRUE(valid.Validate().ok()) << valid.Validate();
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.num_experts = 8; }),
              HasSubstr("model.moe_router_topk (0) must be in [1, model.num_experts (8)]"));
  EXPECT_THAT(Violation([&](JobSpec& s) {
                moe(s);
                s.model.moe_ffn_hidden_size = 0;
              }),
              HasSubstr("model.moe_ffn_hidden_size is required"));
  EXPECT_THAT(Violation([&](JobSpec& s) {
                moe(s);
                s.model.first_k_dense_layers = s.model.num_layers;
              }),
              HasSubstr("model.first_k_dense_layers"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.moe_router_topk = 2; }),
              HasSubstr("model.moe_router_topk (2) applies only to mixture-of-experts models"));
  // Group-limited routing: both fields, groups that split the experts, enough experts in
  // the chosen groups.
  const auto groups = [&](int64_t n, int64_t chosen) {
    return [=](JobSpec& s) {
      moe(s);
      s.model.moe_router_num_groups = n;
      s.model.moe_router_group_topk = chosen;
    };
  };
  JobSpec grouped = valid;
  groups(4, 1)(grouped);
  EXPECT_TRUE(grouped.Validate().ok()) << grouped.Validate();
  EXPECT_THAT(Violation(groups(4, 0)),
              HasSubstr("model.moe_router_num_groups (4) and model.moe_router_group_topk (0) "
                        "are set together"));
  EXPECT_THAT(Violation(groups(3, 1)),
              HasSubstr("model.moe_router_num_groups (3) must divide model.num_experts (8)"));
  EXPECT_THAT(Violation(groups(4, 5)), HasSubstr("model.moe_router_group_topk (5) must be at most "
                                                 "model.moe_router_num_groups (4)"));
  EXPECT_THAT(Violation(groups(8, 1)),
              HasSubstr("model.moe_router_topk (2) must be at most the 1 experts of the "
                        "model.moe_router_group_topk (1) groups a token may use"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.moe_router_num_groups = 2; }),
              HasSubstr("model.moe_router_num_groups (2) applies only to mixture-of-experts"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.q_lora_rank = 64; }),
              HasSubstr("model.q_lora_rank (64) applies only with model.attention mla"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.model.attention = AttentionType::kMla; }),
              HasSubstr("model.kv_lora_rank (0) must be positive with model.attention mla"));
  EXPECT_THAT(Violation([&](JobSpec& s) {
                moe(s);
                s.search.ep = {3};
              }),
              HasSubstr("search.ep value 3 must divide model.num_experts (8)"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.search.ep = {2}; }),
              HasSubstr("search.ep value 2 must be 1: the model has no experts"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.training.moe_routing = MoeRouting::kCapacity; }),
              HasSubstr("training.moe_capacity_factor (0) must be at least 1"));
  // Profile mode on a GPU device kind: its workers run the MoE layer task on CUDA.
  JobSpec profiled = Gpt3Spec();
  moe(profiled);
  profiled.search.mode = SearchMode::kProfile;
  EXPECT_TRUE(profiled.Validate().ok()) << profiled.Validate();
  EXPECT_THAT(Violation([](JobSpec& s) { s.cluster.nvlink_domain = 12; }),
              HasSubstr("cluster.nvlink_domain (12) must be a multiple or a divisor"));
}

TEST(SpecsTest, TrainingRules) {
  EXPECT_EQ(Violation([](JobSpec& s) { s.training.global_batch_size = -8; }),
            "training.global_batch_size (-8) must be positive");
  EXPECT_THAT(Violation([](JobSpec& s) { s.training.total_tokens = -1; }),
              HasSubstr("training.total_tokens (-1) must not be negative"));
  EXPECT_EQ(Violation([](JobSpec& s) {
              s.training.recompute_modules = {RecomputeModule::kCoreAttn,
                                              RecomputeModule::kLayernorm,
                                              RecomputeModule::kCoreAttn};
            }),
            "training.recompute_modules[2] (core_attn) repeats training.recompute_modules[0]: "
            "each module once");
  EXPECT_THAT(Violation([](JobSpec& s) { s.training.recompute_modules.clear(); }),
              HasSubstr("set search.recompute: [none]"));
  EXPECT_EQ(Violation([](JobSpec& s) {
              s.training.recompute_modules = {RecomputeModule::kMoeAct};
            }),
            "training.recompute_modules[0] (moe_act) has nothing to recompute: the model has no "
            "expert layers");
  EXPECT_THAT(Violation([](JobSpec& s) {
                s.training.recompute_modules = {RecomputeModule::kMlaUpProj};
              }),
              HasSubstr("the model's attention is not mla"));
  EXPECT_THAT(Violation([](JobSpec& s) {
                s.training.recompute_modules = {RecomputeModule::kMlp};
                s.search.mode = SearchMode::kProfile;
              }),
              HasSubstr("not supported with search.mode profile"));
}

TEST(SpecsTest, ClusterRules) {
  EXPECT_THAT(Violation([](JobSpec& s) { s.cluster.gpu = ""; }), HasSubstr("cluster.gpu is required"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.cluster.gpu = "v100-16gb"; }),
              HasSubstr("cluster.gpu ('v100-16gb') is not a known device kind; known: "));
  EXPECT_THAT(Violation([](JobSpec& s) { s.cluster.gpu = "v100-16gb"; }), HasSubstr("a100-80gb"));
  EXPECT_EQ(Violation([](JobSpec& s) { s.cluster.num_gpus = 0; }),
            "cluster.num_gpus (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.cluster.num_gpus = 12; }),
            "cluster.num_gpus (12) must be a multiple of cluster.gpus_per_node (8) when it "
            "spans more than one node");
  EXPECT_THAT(Violation([](JobSpec& s) { s.cluster.network_bandwidth_gbps = -25; }),
              HasSubstr("cluster.network_bandwidth_gbps (-25) must not be negative"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.cluster.memory_gib = std::nan(""); }),
              HasSubstr("cluster.memory_gib (nan) must be finite"));
  // Fewer GPUs than one node is a partial node, not an error.
  JobSpec small = Gpt3Spec();
  small.cluster.num_gpus = 4;
  EXPECT_TRUE(small.Validate().ok());
}

TEST(SpecsTest, SearchListRules) {
  EXPECT_EQ(Violation([](JobSpec& s) { s.search.tp = {1, 0}; }), "search.tp[1] (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.search.micro_batch_size = {-2}; }),
            "search.micro_batch_size[0] (-2) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.search.pp = {2, 4, 2}; }), "search.pp lists 2 twice");
  EXPECT_EQ(Violation([](JobSpec& s) { s.search.recompute = {Recompute::kFull, Recompute::kFull}; }),
            "search.recompute lists 'full' twice");
  EXPECT_THAT(Violation([](JobSpec& s) {
                s.search.recompute = {Recompute::kSelective};
                s.search.recompute_num_layers = {1};
              }),
              HasSubstr("search.recompute_num_layers applies only to full recompute"));
  EXPECT_EQ(Violation([](JobSpec& s) { s.search.top_k = 0; }), "search.top_k (0) must be positive");
  EXPECT_EQ(Violation([](JobSpec& s) { s.search.verify_top_k = 11; }),
            "search.verify_top_k (11) must be at most search.top_k (10)");
}

TEST(SpecsTest, PinnedDegreesMustMultiplyToTheClusterSize) {
  EXPECT_EQ(Violation([](JobSpec& s) {
              s.search.tp = {8};
              s.search.pp = {12};
              s.search.cp = {1};
              s.search.dp = {8};
            }),
            "search.tp x search.pp x search.cp x search.dp (8 x 12 x 1 x 8 = 768) must equal "
            "cluster.num_gpus (1024)");
  JobSpec ok = Gpt3Spec();
  ok.search.tp = {8};
  ok.search.pp = {8};
  ok.search.cp = {1};
  ok.search.dp = {16};
  EXPECT_TRUE(ok.Validate().ok());
  // With lists, one matching combination is enough (8 x 16 x 1 x 8 = 1024).
  ok.search.pp = {8, 16};
  ok.search.dp = {8, 16};
  EXPECT_TRUE(ok.Validate().ok());
  EXPECT_THAT(Violation([](JobSpec& s) { s.search.tp = {2048}; }),
              HasSubstr("search.tp value 2048 must be at most cluster.num_gpus (1024)"));
  EXPECT_THAT(Violation([](JobSpec& s) { s.search.pp = {128}; }),
              HasSubstr("search.pp value 128 must be at most model.num_layers (96)"));
}

TEST(SpecsTest, EveryPresetPassesModelValidation) {
  ASSERT_FALSE(PresetNames().empty());
  for (const std::string& name : PresetNames()) {
    auto model = FindPreset(name);
    ASSERT_TRUE(model.ok()) << name << ": " << model.status();
    EXPECT_TRUE(model->Validate().ok()) << name << ": " << model->Validate();
  }
}

TEST(SpecsTest, EnumNamesRoundTrip) {
  for (Activation v : {Activation::kGelu, Activation::kSwiglu}) {
    EXPECT_EQ(*ParseActivation(ToString(v)), v);
  }
  for (Normalization v : {Normalization::kLayerNorm, Normalization::kRmsNorm}) {
    EXPECT_EQ(*ParseNormalization(ToString(v)), v);
  }
  for (PositionEmbedding v : {PositionEmbedding::kLearned, PositionEmbedding::kRope}) {
    EXPECT_EQ(*ParsePositionEmbedding(ToString(v)), v);
  }
  for (Precision v : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8}) {
    EXPECT_EQ(*ParsePrecision(ToString(v)), v);
  }
  for (Recompute v : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    EXPECT_EQ(*ParseRecompute(ToString(v)), v);
  }
  for (Objective v : {Objective::kThroughput, Objective::kMinMemory}) {
    EXPECT_EQ(*ParseObjective(ToString(v)), v);
  }
  for (SearchMode v : {SearchMode::kModel, SearchMode::kProfile}) {
    EXPECT_EQ(*ParseSearchMode(ToString(v)), v);
  }
  EXPECT_STREQ(ToString(Recompute::kSelective), "selective");
  EXPECT_STREQ(ToString(Objective::kMinMemory), "min_memory");
  EXPECT_EQ(ParsePrecision("tf32").status().message(),
            "unknown precision 'tf32' (expected fp32, bf16, fp16, fp8, mxfp8, nvfp4)");
  EXPECT_EQ(ParseRecompute("Full").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace paratune
