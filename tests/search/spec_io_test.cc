// JSON spec reading (strict), defaults, presets and HF overrides, the canonical writer, and
// pinned layouts.
#include "search/spec_io.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "search/model_math.h"

namespace paratune {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

json MinimalSpec() {
  return json::parse(R"({
    "model": {"num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
              "vocab_size": 51200},
    "training": {"seq_length": 2048, "global_batch_size": 512},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 64}
  })");
}

std::string ErrorOf(const json& j) {
  auto spec = JobSpecFromJson(j);
  EXPECT_FALSE(spec.ok()) << "expected an error for " << j.dump();
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST(SpecIoTest, MinimalSpecGetsTheDocumentedDefaults) {
  auto spec = JobSpecFromJson(MinimalSpec());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_query_groups, 16);     // = heads (MHA)
  EXPECT_EQ(spec->model.ffn_hidden_size, 8192);    // = 4h
  EXPECT_EQ(spec->model.activation, Activation::kGelu);
  EXPECT_EQ(spec->model.normalization, Normalization::kLayerNorm);
  EXPECT_EQ(spec->model.position_embedding, PositionEmbedding::kLearned);
  EXPECT_FALSE(spec->model.tie_embeddings);
  EXPECT_EQ(spec->model.name, "custom");
  EXPECT_EQ(spec->training.precision, Precision::kBf16);
  EXPECT_TRUE(spec->training.flash_attention);
  EXPECT_FALSE(spec->training.dropout);
  EXPECT_EQ(spec->training.total_tokens, 0);
  EXPECT_EQ(spec->cluster.gpus_per_node, 8);
  EXPECT_EQ(spec->search.top_k, 10);
  EXPECT_TRUE(spec->search.tp.empty());
  EXPECT_EQ(spec->search.objective, Objective::kThroughput);
  EXPECT_EQ(spec->search.mode, SearchMode::kModel);
}

TEST(SpecIoTest, EveryFieldIsRead) {
  json j = json::parse(R"({
    "name": "llama-run",
    "model": {"name": "mine", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_query_groups": 8, "ffn_hidden_size": 14336, "vocab_size": 128256,
              "activation": "swiglu", "normalization": "rmsnorm", "tie_embeddings": true,
              "position_embedding": "rope", "num_experts": 1},
    "training": {"seq_length": 8192, "global_batch_size": 256, "precision": "fp8",
                 "flash_attention": false, "dropout": true, "optimizer": "adam",
                 "total_tokens": 15000000000000},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16, "gpus_per_node": 8,
                "nvlink_bandwidth_gbps": 450, "network_bandwidth_gbps": 50.5, "memory_gib": 79},
    "search": {"tp": [1, 2, 4], "pp": 2, "dp": [2, 4], "cp": [1], "vp": [1, 2],
               "micro_batch_size": [1, 2], "sequence_parallel": [true, false],
               "recompute": ["selective", "full"], "recompute_num_layers": [4],
               "distributed_optimizer": true, "top_k": 5, "objective": "min_memory",
               "mode": "profile", "allow_tp_across_nodes": true, "verify_top_k": 2}
  })");
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "llama-run");
  EXPECT_EQ(spec->model.name, "mine");
  EXPECT_EQ(spec->model.num_query_groups, 8);
  EXPECT_EQ(spec->model.ffn_hidden_size, 14336);
  EXPECT_EQ(spec->model.activation, Activation::kSwiglu);
  EXPECT_EQ(spec->model.normalization, Normalization::kRmsNorm);
  EXPECT_TRUE(spec->model.tie_embeddings);
  EXPECT_EQ(spec->model.position_embedding, PositionEmbedding::kRope);
  EXPECT_EQ(spec->training.precision, Precision::kFp8);
  EXPECT_FALSE(spec->training.flash_attention);
  EXPECT_TRUE(spec->training.dropout);
  EXPECT_EQ(spec->training.total_tokens, 15000000000000);
  EXPECT_EQ(spec->cluster.gpu, "h100-sxm-80gb");
  EXPECT_DOUBLE_EQ(spec->cluster.nvlink_bandwidth_gbps, 450);
  EXPECT_DOUBLE_EQ(spec->cluster.network_bandwidth_gbps, 50.5);
  EXPECT_DOUBLE_EQ(spec->cluster.memory_gib, 79);
  EXPECT_EQ(spec->search.tp, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(spec->search.pp, (std::vector<int64_t>{2}));  // scalar = one-element list
  EXPECT_EQ(spec->search.sequence_parallel, (std::vector<bool>{true, false}));
  EXPECT_EQ(spec->search.recompute,
            (std::vector<Recompute>{Recompute::kSelective, Recompute::kFull}));
  EXPECT_EQ(spec->search.recompute_num_layers, (std::vector<int64_t>{4}));
  EXPECT_EQ(spec->search.data_parallel_sharding,
            (std::vector<DataParallelSharding>{DataParallelSharding::kOptimizer}));
  EXPECT_EQ(spec->search.top_k, 5);
  EXPECT_EQ(spec->search.objective, Objective::kMinMemory);
  EXPECT_EQ(spec->search.mode, SearchMode::kProfile);
  EXPECT_TRUE(spec->search.allow_tp_across_nodes);
  EXPECT_EQ(spec->search.verify_top_k, 2);
}

TEST(SpecIoTest, UnknownFieldsAreRejectedWithTheirPath) {
  json j = MinimalSpec();
  j["model"]["hiden_size"] = 2048;
  EXPECT_THAT(ErrorOf(j), HasSubstr("unknown field 'model.hiden_size' (did you mean "
                                    "'model.hidden_size'?)"));
  j = MinimalSpec();
  j["serach"] = json::object();
  EXPECT_THAT(ErrorOf(j), HasSubstr("unknown field 'serach' (did you mean 'search'?)"));
  j = MinimalSpec();
  j["cluster"]["interconnect"] = "ib";
  EXPECT_THAT(ErrorOf(j), HasSubstr("unknown field 'cluster.interconnect'; allowed: gpu, "));
  j = MinimalSpec();
  j["search"] = {{"tensor_parallel", 2}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("unknown field 'search.tensor_parallel'"));
}

TEST(SpecIoTest, WrongTypesNameTheField) {
  json j = MinimalSpec();
  j["model"]["num_layers"] = "many";
  EXPECT_EQ(ErrorOf(j), "model.num_layers must be an integer, got \"many\"");
  j["model"]["num_layers"] = 2.5;
  EXPECT_EQ(ErrorOf(j), "model.num_layers must be an integer, got 2.5");
  j["model"]["num_layers"] = true;
  EXPECT_EQ(ErrorOf(j), "model.num_layers must be an integer, got true");
  j = MinimalSpec();
  j["model"]["tie_embeddings"] = "yes";
  EXPECT_EQ(ErrorOf(j), "model.tie_embeddings must be true or false, got \"yes\"");
  j = MinimalSpec();
  j["training"]["precision"] = 16;
  EXPECT_EQ(ErrorOf(j), "training.precision must be a string, got 16");
  j = MinimalSpec();
  j["training"]["precision"] = "fp4";
  EXPECT_EQ(ErrorOf(j), "training.precision: unknown precision 'fp4' (expected fp32, bf16, "
                        "fp16, fp8, mxfp8, nvfp4)");
  j = MinimalSpec();
  j["search"] = {{"tp", {1, "two"}}};
  EXPECT_EQ(ErrorOf(j), "search.tp[1] must be an integer, got \"two\"");
  j = MinimalSpec();
  j["search"] = {{"recompute", {"selective", "most"}}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.recompute[1]: unknown recompute 'most'"));
  j = MinimalSpec();
  j["training"]["recompute_modules"] = {"core_attn", "norm"};
  EXPECT_EQ(ErrorOf(j), "training.recompute_modules[1]: unknown recompute module 'norm' (expected "
                        "core_attn, layernorm, mlp, moe_act, moe, shared_experts, mla_up_proj)");
  j = MinimalSpec();
  j["training"]["recompute_modules"] = json::array();
  EXPECT_THAT(ErrorOf(j), HasSubstr("training.recompute_modules must name at least one module"));
  j = MinimalSpec();
  j["cluster"]["memory_gib"] = "80GB";
  EXPECT_EQ(ErrorOf(j), "cluster.memory_gib must be a number, got \"80GB\"");
  j = MinimalSpec();
  j["model"] = {1, 2};
  EXPECT_THAT(ErrorOf(j), HasSubstr("model must be an object"));
  EXPECT_THAT(ErrorOf(json::array()), HasSubstr("a job spec must be an object"));
}

TEST(SpecIoTest, Int64AsDecimalStringIsAccepted) {
  // The proto JSON mapping prints int64 as strings; the REST body may carry them.
  json j = MinimalSpec();
  j["training"]["seq_length"] = "4096";
  j["search"] = {{"tp", {"2", "4"}}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training.seq_length, 4096);
  EXPECT_EQ(spec->search.tp, (std::vector<int64_t>{2, 4}));
  j["training"]["seq_length"] = "4096x";
  EXPECT_EQ(ErrorOf(j), "training.seq_length must be an integer, got \"4096x\"");
}

TEST(SpecIoTest, NegativeZeroAndHugeValuesAreRejected) {
  json j = MinimalSpec();
  j["training"]["global_batch_size"] = -512;
  EXPECT_EQ(ErrorOf(j), "training.global_batch_size (-512) must be positive");
  j = MinimalSpec();
  j["model"]["num_layers"] = 0;
  EXPECT_EQ(ErrorOf(j), "model.num_layers (0) must be positive");
  j = MinimalSpec();
  j["model"]["hidden_size"] = 1e12;  // a JSON float with an integral value
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.hidden_size (1000000000000) must be at most 1048576"));
  j["model"]["hidden_size"] = 1e30;
  EXPECT_EQ(ErrorOf(j), "model.hidden_size (1e+30) is out of the 64-bit integer range");
  j["model"]["hidden_size"] = 18446744073709551615ull;
  EXPECT_EQ(ErrorOf(j),
            "model.hidden_size (18446744073709551615) is out of the 64-bit integer range");
  j = MinimalSpec();
  j["model"]["num_attention_heads"] = 12;  // 2048 % 12 != 0
  EXPECT_EQ(ErrorOf(j),
            "model.hidden_size (2048) must be divisible by model.num_attention_heads (12) unless "
            "model.kv_channels gives the head dimension");
  j = MinimalSpec();
  j["cluster"]["gpu"] = "tpu-v5";
  EXPECT_THAT(ErrorOf(j), HasSubstr("cluster.gpu ('tpu-v5') is not a known device kind"));
}

TEST(SpecIoTest, MissingRequiredFields) {
  json j = MinimalSpec();
  j.erase("training");
  EXPECT_EQ(ErrorOf(j), "section 'training' is required");
  j = MinimalSpec();
  j["training"].erase("seq_length");
  EXPECT_EQ(ErrorOf(j), "training.seq_length is required (tokens per sequence)");
  j = MinimalSpec();
  j["training"]["seq_length"] = nullptr;  // e.g. a truncated YAML `seq_length:`
  EXPECT_EQ(ErrorOf(j), "training.seq_length is required (tokens per sequence)");
  j = MinimalSpec();
  j["model"].erase("vocab_size");
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.vocab_size is required"));
  j = MinimalSpec();
  j["cluster"].erase("gpu");
  EXPECT_THAT(ErrorOf(j), HasSubstr("cluster.gpu is required"));
}

TEST(SpecIoTest, ZeroMeansTheProtoDefaultWhereDocumented) {
  json j = MinimalSpec();
  j["model"]["num_query_groups"] = 0;
  j["model"]["ffn_hidden_size"] = 0;
  j["cluster"]["gpus_per_node"] = 0;
  j["search"] = {{"top_k", 0}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_query_groups, 16);
  EXPECT_EQ(spec->model.ffn_hidden_size, 8192);
  EXPECT_EQ(spec->cluster.gpus_per_node, 8);
  EXPECT_EQ(spec->search.top_k, 10);
}

TEST(SpecIoTest, PresetWithOverrides) {
  json j = MinimalSpec();
  j["model"] = {{"preset", "gpt3-175b"}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_layers, 96);
  EXPECT_EQ(spec->model.hidden_size, 12288);
  EXPECT_EQ(spec->model.num_attention_heads, 96);
  EXPECT_EQ(spec->name, spec->model.name);

  j["model"]["num_layers"] = 48;  // explicit fields override the preset
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_layers, 48);
  EXPECT_EQ(spec->model.hidden_size, 12288);

  j["model"] = {{"preset", "gpt5"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.preset: unknown model preset \"gpt5\"; known: "));
}

TEST(SpecIoTest, HfConfigWithOverrides) {
  const std::string llama = R"({"model_type": "llama", "num_hidden_layers": 32,
      "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
      "intermediate_size": 14336, "vocab_size": 128256, "hidden_act": "silu",
      "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false})";
  json j = MinimalSpec();
  j["model"] = {{"hf_config_json", llama}, {"num_layers", 16}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_layers, 16);
  EXPECT_EQ(spec->model.num_query_groups, 8);
  EXPECT_EQ(spec->model.activation, Activation::kSwiglu);
  EXPECT_EQ(spec->model.name, "llama");

  // An inline object works too (a YAML mapping under model.hf_config).
  j["model"] = {{"hf_config", json::parse(llama)}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_layers, 32);

  j["model"] = {{"hf_config", "config.json"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.hf_config_json"));
  j["model"] = {{"hf_config_json", "{\"num_local_experts\": 8}"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.hf_config.num_local_experts (8)"));
  j["model"] = {{"hf_config_json", llama}, {"preset", "gpt3-175b"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("mutually exclusive"));
}

TEST(SpecIoTest, OnlyAdamIsModelled) {
  json j = MinimalSpec();
  j["training"]["optimizer"] = "sgd";
  EXPECT_THAT(ErrorOf(j), HasSubstr("training.optimizer ('sgd') is not supported"));
}

TEST(SpecIoTest, CanonicalJsonRoundTrips) {
  json j = MinimalSpec();
  j["model"]["num_query_groups"] = 4;
  j["training"]["total_tokens"] = 300000000000;
  j["search"] = {{"tp", {2, 4}}, {"recompute", "full"}, {"recompute_num_layers", 3},
                 {"sequence_parallel", true}, {"top_k", 3}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const json canonical = JobSpecToJson(*spec);
  auto again = JobSpecFromJson(canonical);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(JobSpecToJson(*again), canonical);
  EXPECT_EQ(canonical["search"]["recompute"], json({"full"}));
  EXPECT_EQ(canonical["model"]["num_query_groups"], 4);
  // Megatron-Core's default modules when none are named; a named list (or a scalar) as given.
  EXPECT_EQ(canonical["training"]["recompute_modules"], json({"core_attn"}));
  j["training"]["recompute_modules"] = "mlp";
  auto mlp = JobSpecFromJson(j);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ(JobSpecToJson(*mlp)["training"]["recompute_modules"], json({"mlp"}));
  EXPECT_EQ(JobSpecToJson(*JobSpecFromJson(JobSpecToJson(*mlp))), JobSpecToJson(*mlp));
  // The overlap lists: empty by default, as given otherwise, a scalar as one entry.
  EXPECT_EQ(canonical["search"]["tp_comm_overlap"], json::array());
  j["search"]["tp_comm_overlap"] = {false, true};
  j["search"]["overlap_grad_reduce"] = false;
  auto overlaps = JobSpecFromJson(j);
  ASSERT_TRUE(overlaps.ok()) << overlaps.status();
  EXPECT_EQ(overlaps->search.tp_comm_overlap, (std::vector<bool>{false, true}));
  EXPECT_EQ(overlaps->search.overlap_grad_reduce, std::vector<bool>{false});
  EXPECT_EQ(JobSpecToJson(*JobSpecFromJson(JobSpecToJson(*overlaps))), JobSpecToJson(*overlaps));
  j["search"]["overlap_p2p_comm"] = {true, true};
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.overlap_p2p_comm"));
}

TEST(SpecIoTest, OffloadListAndHostOverrides) {
  json j = MinimalSpec();
  j["search"] = {{"offload", {"none", "optimizer"}}};
  j["cluster"]["host_memory_gib"] = 512;
  j["cluster"]["host_link_bandwidth_gbps"] = 50;
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->search.offload, (std::vector<Offload>{Offload::kNone, Offload::kOptimizer}));
  EXPECT_EQ(spec->cluster.host_memory_gib, 512);
  EXPECT_EQ(JobSpecToJson(*JobSpecFromJson(JobSpecToJson(*spec))), JobSpecToJson(*spec));
  EXPECT_EQ(JobSpecToJson(*spec)["search"]["offload"], json({"none", "optimizer"}));
  j["search"]["offload"] = "nvme";
  EXPECT_EQ(ErrorOf(j), "search.offload: unknown offload 'nvme' (expected none, optimizer, "
                        "optimizer_and_params)");
  j["search"]["offload"] = "optimizer";
  j["cluster"]["host_link_bandwidth_gbps"] = -1;
  EXPECT_THAT(ErrorOf(j), HasSubstr("cluster.host_link_bandwidth_gbps (-1) must not be negative"));
  j["cluster"].erase("host_link_bandwidth_gbps");
  j["cluster"]["gpu"] = "cpu";
  j["cluster"]["num_gpus"] = 2;
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.offload needs a host behind each GPU"));
  j["cluster"]["gpu"] = "a100-80gb";
  j["search"]["mode"] = "profile";
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.offload is not supported with search.mode profile"));
}

TEST(SpecIoTest, AttentionKernelAndFlashAttentionAgree) {
  json j = MinimalSpec();
  auto kernel_of = [](const json& spec) {
    auto s = JobSpecFromJson(spec);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? JobSpecToJson(*s)["training"] : json();
  };
  EXPECT_EQ(kernel_of(j)["attention_kernel"], "flash2");
  EXPECT_EQ(kernel_of(j)["fused_norm"], true);
  j["training"]["flash_attention"] = false;
  EXPECT_EQ(kernel_of(j)["attention_kernel"], "fused");
  j["training"]["attention_kernel"] = "unfused";
  j["training"]["fused_norm"] = false;
  const json t = kernel_of(j);
  EXPECT_EQ(t["attention_kernel"], "unfused");
  EXPECT_EQ(t["flash_attention"], false);
  EXPECT_EQ(t["fused_norm"], false);
  j["training"]["attention_kernel"] = "flash1";
  EXPECT_EQ(ErrorOf(j), "training.flash_attention (false) contradicts "
                        "training.attention_kernel (flash1): give one of them");
  j["training"].erase("flash_attention");
  EXPECT_EQ(kernel_of(j)["flash_attention"], true);
  j["training"]["attention_kernel"] = "flash4";
  EXPECT_THAT(ErrorOf(j), HasSubstr("training.attention_kernel: unknown attention kernel "
                                    "'flash4' (expected flash3, flash2, flash1, cudnn, fused, "
                                    "unfused)"));
  // FlashAttention-3 is Hopper's.
  j["training"]["attention_kernel"] = "flash3";
  j["cluster"]["gpu"] = "a100-80gb";
  EXPECT_THAT(ErrorOf(j), HasSubstr("flash3 runs on Hopper (sm90) only"));
  j["cluster"]["gpu"] = "h100-sxm-80gb";
  EXPECT_EQ(kernel_of(j)["attention_kernel"], "flash3");
}

// A spec that names no kernel gets its framework's on its device: Transformer Engine picks
// cuDNN's flash attention on Hopper and later under Megatron-Core and NeMo; FlashAttention-2
// elsewhere, under the other codebases and in profile mode (the workers time their own).
TEST(SpecIoTest, AttentionKernelDefaultsToTheFrameworksOnTheDevice) {
  auto kernel_of = [](const json& spec) -> std::string {
    auto s = JobSpecFromJson(spec);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? ToString(s->training.attention_kernel) : "";
  };
  json j = MinimalSpec();
  EXPECT_EQ(kernel_of(j), "flash2");  // A100
  j["cluster"]["gpu"] = "l40s-48gb";
  EXPECT_EQ(kernel_of(j), "flash2");  // Ada: compute capability 8.9
  for (const char* gpu : {"h100-sxm-80gb", "b200-192gb"}) {
    j["cluster"]["gpu"] = gpu;
    EXPECT_EQ(kernel_of(j), "cudnn") << gpu;
    // The resolved kernel is written out, so the canonical form reads back the same.
    auto spec = JobSpecFromJson(j);
    ASSERT_TRUE(spec.ok());
    EXPECT_EQ(JobSpecToJson(*spec)["training"]["attention_kernel"], "cudnn");
  }
  j["training"]["framework"] = "nemo";
  EXPECT_EQ(kernel_of(j), "cudnn");
  j["training"]["framework"] = "nemo-automodel";  // Transformer Engine's attention
  EXPECT_EQ(kernel_of(j), "cudnn");
  for (const char* framework : {"torchtitan", "llm-foundry", "deepspeed", "megatron-deepspeed"}) {
    j["training"]["framework"] = framework;
    EXPECT_EQ(kernel_of(j), "flash2") << framework;
  }
  j["training"]["framework"] = "megatron-core";
  j["cluster"]["gpu"] = "h100-sxm-80gb";
  j["training"]["flash_attention"] = true;
  EXPECT_EQ(kernel_of(j), "flash2");  // named: kept
  j["training"].erase("flash_attention");
  j["training"]["attention_kernel"] = "flash3";
  EXPECT_EQ(kernel_of(j), "flash3");
  j["training"].erase("attention_kernel");
  j["search"]["mode"] = "profile";
  EXPECT_EQ(kernel_of(j), "flash2");
}

// Megatron-LM's --max-position-embeddings defaults to --seq-length, and a learned table needs
// a row per position: the rows the model counts are the rows the exported arguments name.
TEST(SpecIoTest, LearnedPositionRowsDefaultToSeqLengthAndAreNeverFewer) {
  auto rows = [](const json& j) -> int64_t {
    auto spec = JobSpecFromJson(j);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? spec->model.max_position_embeddings : -1;
  };
  json j = MinimalSpec();  // learned positions, seq 2048, no table size given
  EXPECT_EQ(rows(j), 2048);
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(EmbeddingParams(spec->model), (51200.0 + 2048.0) * 2048.0);
  EXPECT_EQ(JobSpecToJson(*spec)["model"]["max_position_embeddings"], 2048);
  j["model"]["max_position_embeddings"] = 0;
  EXPECT_EQ(rows(j), 2048);
  j["model"]["max_position_embeddings"] = 4096;
  EXPECT_EQ(rows(j), 4096);
  j["model"]["max_position_embeddings"] = 1024;
  EXPECT_EQ(ErrorOf(j),
            "model.max_position_embeddings (1024) must be at least training.seq_length (2048): "
            "a learned position table needs a row for every position (0 means seq_length)");
  j["model"]["max_position_embeddings"] = -1;
  EXPECT_EQ(ErrorOf(j), "model.max_position_embeddings (-1) must not be negative");

  // A preset's table (GPT-3: 2048 rows) grows to a longer sequence and keeps its size for a
  // shorter one.
  json preset = MinimalSpec();
  preset["model"] = {{"preset", "gpt3-1.7b"}};
  preset["training"]["seq_length"] = 4096;
  EXPECT_EQ(rows(preset), 4096);
  preset["training"]["seq_length"] = 1024;
  EXPECT_EQ(rows(preset), 2048);

  // RoPE has no table: the field is kept as given and no rows are counted.
  json rope = MinimalSpec();
  rope["model"]["position_embedding"] = "rope";
  EXPECT_EQ(rows(rope), 0);
  rope["model"]["max_position_embeddings"] = 1024;
  EXPECT_EQ(rows(rope), 1024);
  spec = JobSpecFromJson(rope);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(EmbeddingParams(spec->model), 51200.0 * 2048.0);
}

TEST(SpecIoTest, PinnedLayout) {
  json j = MinimalSpec();
  j["search"] = {{"tp", 2}, {"pp", 2}, {"cp", 1}, {"micro_batch_size", 1},
                 {"recompute", "none"}, {"sequence_parallel", true},
                 {"distributed_optimizer", true}, {"vp", 1}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto c = PinnedLayout(*spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tp, 2);
  EXPECT_EQ(c->pp, 2);
  EXPECT_EQ(c->dp, 16);  // derived: 64 / (2 * 2 * 1)
  EXPECT_TRUE(c->sequence_parallel);
  EXPECT_TRUE(c->distributed_optimizer());

  // Dimensions with only one meaningful value need not be given.
  j["search"] = {{"tp", 1}, {"pp", 1}, {"cp", 1}, {"dp", 64}, {"micro_batch_size", 2},
                 {"recompute", "selective"}, {"distributed_optimizer", false}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  c = PinnedLayout(*spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vp, 1);
  EXPECT_FALSE(c->sequence_parallel);
  EXPECT_EQ(c->recompute, Recompute::kSelective);

  j["search"] = {{"tp", 3}, {"pp", 1}, {"cp", 1}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(PinnedLayout(*spec).status().message(),
            "cluster.num_gpus (64) must be divisible by tp x pp x cp (3 x 1 x 1) to derive dp");

  j["search"] = {{"tp", {1, 2}}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(PinnedLayout(*spec).status().message(),
            "search.tp is not pinned: a single layout needs exactly one value, got 2 values");
  j["search"] = {{"tp", 8}, {"pp", 1}, {"cp", 1}, {"micro_batch_size", 1}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(PinnedLayout(*spec).status().message(),
            "search.sequence_parallel is not pinned: a single layout needs exactly one value, "
            "got none");
  // Full recompute without a layer count recomputes every layer of the stage (as the
  // planner reads an absent list); two counts are not one layout.
  j["search"] = {{"tp", 1}, {"pp", 1}, {"cp", 1}, {"micro_batch_size", 1},
                 {"recompute", "full"}, {"distributed_optimizer", true}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ParallelConfig> all_layers = PinnedLayout(*spec);
  ASSERT_TRUE(all_layers.ok()) << all_layers.status();
  EXPECT_EQ(all_layers->recompute_num_layers, 0);
  j["search"]["recompute_num_layers"] = {1, 2};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(PinnedLayout(*spec).status().message(),
            "search.recompute_num_layers is not pinned: a single layout needs exactly one value, "
            "got 2 values");
}

// A pinned layout's stages split as training.framework splits them: 22 layers over pp 4
// count the embedding and the loss under Megatron-Core (22 + 2 = 4 x 6) and torchtitan, not
// under Megatron-DeepSpeed; 24 layers divide, so Megatron-Core splits them alone.
TEST(SpecIoTest, PinnedLayoutSplitsAsTheFrameworkDoes) {
  json j = MinimalSpec();
  j["model"]["num_layers"] = 22;
  // vp absent: one chunk per stage.
  j["search"] = {{"tp", 1},
                 {"pp", 4},
                 {"cp", 1},
                 {"micro_batch_size", 1},
                 {"recompute", "none"},
                 {"data_parallel_sharding", "none"}};
  const auto split = [&](const char* framework) {
    j["training"]["framework"] = framework;
    absl::StatusOr<JobSpec> spec = JobSpecFromJson(j);
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<ParallelConfig> c = spec.ok() ? PinnedLayout(*spec) : spec.status();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() && c->split_counts_embedding_and_loss;
  };
  EXPECT_TRUE(split("megatron-core"));
  EXPECT_TRUE(split("torchtitan"));
  EXPECT_FALSE(split("megatron-deepspeed"));
  j["training"]["framework"] = "megatron-core";
  absl::StatusOr<ParallelConfig> one_chunk = PinnedLayout(*JobSpecFromJson(j));
  ASSERT_TRUE(one_chunk.ok()) << one_chunk.status();
  EXPECT_EQ(one_chunk->vp, 1);
  j["search"]["vp"] = {1, 2};
  EXPECT_EQ(PinnedLayout(*JobSpecFromJson(j)).status().message(),
            "search.vp is not pinned: a single layout needs exactly one value, got 2 values");
  j["search"].erase("vp");
  j["model"]["num_layers"] = 24;
  EXPECT_FALSE(split("megatron-core"));
  EXPECT_TRUE(split("torchtitan"));
}

TEST(SpecIoTest, KindTrainingIsAcceptedAndOtherKindsNamed) {
  json j = MinimalSpec();
  j["kind"] = "training";
  EXPECT_TRUE(JobSpecFromJson(j).ok());
  j["kind"] = "inference";
  EXPECT_THAT(ErrorOf(j), HasSubstr("kind ('inference') must be training for a training spec"));
}

// search.data_parallel_sharding lists stages; search.distributed_optimizer stays accepted as
// its alias (true = optimizer, false = none), not both at once; search.shard_group_size is
// one number; the canonical JSON writes the stages by name.
TEST(SpecIoTest, DataParallelShardingAndItsAlias) {
  json j = MinimalSpec();
  j["search"] = {{"data_parallel_sharding", {"none", "optimizer_grads", "full"}},
                 {"shard_group_size", 8}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->search.data_parallel_sharding,
            (std::vector<DataParallelSharding>{DataParallelSharding::kNone,
                                               DataParallelSharding::kOptimizerGrads,
                                               DataParallelSharding::kFull}));
  EXPECT_EQ(spec->search.shard_group_size, 8);
  const json canonical = JobSpecToJson(*spec);
  EXPECT_EQ(canonical["search"]["data_parallel_sharding"],
            json({"none", "optimizer_grads", "full"}));
  EXPECT_EQ(canonical["search"]["shard_group_size"], 8);
  EXPECT_EQ(JobSpecToJson(*JobSpecFromJson(canonical)), canonical);

  j["search"] = {{"distributed_optimizer", {false, true}}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->search.data_parallel_sharding,
            (std::vector<DataParallelSharding>{DataParallelSharding::kNone,
                                               DataParallelSharding::kOptimizer}));

  j["search"] = {{"distributed_optimizer", true}, {"data_parallel_sharding", "full"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("give one of the two"));
  j["search"] = {{"data_parallel_sharding", "zero3"}};
  EXPECT_EQ(ErrorOf(j),
            "search.data_parallel_sharding: unknown data parallel sharding 'zero3' (expected "
            "none, optimizer, optimizer_grads, full)");
  j["search"] = {{"data_parallel_sharding", {"full", "full"}}};
  EXPECT_EQ(ErrorOf(j), "search.data_parallel_sharding lists 'full' twice");
  j["search"] = {{"shard_group_size", -2}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.shard_group_size (-2) must be in [0, "));

  // A pinned layout takes the one stage and the shard group.
  j["search"] = {{"tp", 2},
                 {"pp", 1},
                 {"cp", 1},
                 {"micro_batch_size", 1},
                 {"recompute", "none"},
                 {"sequence_parallel", true},
                 {"data_parallel_sharding", "full"},
                 {"shard_group_size", 8}};
  spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto c = PinnedLayout(*spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_parallel_sharding, DataParallelSharding::kFull);
  EXPECT_EQ(c->shard_group_size, 8);
  EXPECT_EQ(c->ShardRanks(), 8);
}

// sliding_window: 0 beside a preset with a window turns the window off, its skip frequency
// with it; naming a skip frequency without a window is still refused.
TEST(SpecIoTest, TurningAPresetsWindowOff) {
  auto off = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "gpt-oss-120b", "sliding_window": 0},
    "training": {"seq_length": 4096, "global_batch_size": 64},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})"));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->model.sliding_window, 0);
  EXPECT_EQ(off->model.window_attn_skip_freq, 0);
  auto both = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "gpt-oss-120b", "sliding_window": 0, "window_attn_skip_freq": 2},
    "training": {"seq_length": 4096, "global_batch_size": 64},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})"));
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("model.window_attn_skip_freq (2) needs"));
}

TEST(SpecIoTest, MixtureOfExpertsFieldsAreRead) {
  auto spec = JobSpecFromJson(json::parse(R"({
    "model": {"num_layers": 16, "hidden_size": 2048, "num_attention_heads": 16,
              "num_query_groups": 4, "vocab_size": 32000, "activation": "swiglu",
              "num_experts": 64, "moe_router_topk": 6, "moe_ffn_hidden_size": 1408,
              "num_shared_experts": 2, "first_k_dense_layers": 1, "moe_layer_freq": 0,
              "kv_channels": 128, "moe_router_num_groups": 8, "moe_router_group_topk": 3,
              "sliding_window": 1024, "window_attn_skip_freq": 4},
    "training": {"seq_length": 4096, "global_batch_size": 256, "moe_routing": "dropless"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64, "nvlink_domain": 8},
    "search": {"ep": [8, 16], "etp": 1, "moe_token_dispatcher": "flex"}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelSpec& m = spec->model;
  EXPECT_EQ(m.num_experts, 64);
  EXPECT_EQ(m.moe_router_topk, 6);
  EXPECT_EQ(m.num_shared_experts, 2);
  EXPECT_EQ(m.moe_layer_freq, 1);               // 0 = the default, 1
  EXPECT_EQ(m.moe_router_num_groups, 8);
  EXPECT_EQ(m.moe_router_group_topk, 3);
  EXPECT_EQ(m.sliding_window, 1024);
  EXPECT_EQ(m.window_attn_skip_freq, 4);
  EXPECT_EQ(m.ffn_hidden_size, 1408);           // the dense layer defaults to the expert width
  EXPECT_EQ(m.attention, AttentionType::kGqa);  // from num_query_groups
  EXPECT_EQ(spec->training.moe_routing, MoeRouting::kDropless);
  EXPECT_EQ(spec->cluster.NvlinkDomain(), 8);
  EXPECT_EQ(spec->search.ep, (std::vector<int64_t>{8, 16}));
  ASSERT_EQ(spec->search.moe_token_dispatcher.size(), 1u);
  EXPECT_EQ(spec->search.moe_token_dispatcher[0], MoeTokenDispatcher::kFlex);
  // The canonical JSON reads back to the same spec.
  auto back = JobSpecFromJson(JobSpecToJson(*spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(JobSpecToJson(*back), JobSpecToJson(*spec));
}

TEST(SpecIoTest, MixtureOfExpertsErrorsNameTheField) {
  json j = MinimalSpec();
  j["model"]["attention"] = "mha";
  j["model"]["num_query_groups"] = 4;
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.attention mha needs model.num_query_groups (4)"));
  j = MinimalSpec();
  j["model"]["attention"] = "latent";
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.attention: unknown attention 'latent'"));
  j = MinimalSpec();
  j["search"]["moe_token_dispatcher"] = {"deepep"};
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.moe_token_dispatcher[0]: unknown moe token "
                                    "dispatcher 'deepep' (expected alltoall, allgather, flex)"));
  j = MinimalSpec();
  j["model"]["num_experts"] = 8;
  EXPECT_THAT(ErrorOf(j), HasSubstr("model.moe_router_topk (0) must be in [1, model.num_experts"));
  j = MinimalSpec();
  j["model"]["preset"] = "mixtral-8x7b";
  j["model"].erase("num_layers");
  j["model"].erase("hidden_size");
  j["model"].erase("num_attention_heads");
  j["model"].erase("vocab_size");
  j["search"]["ep"] = {3};
  EXPECT_THAT(ErrorOf(j), HasSubstr("search.ep value 3 must divide model.num_experts (8)"));
}

TEST(SpecIoTest, PinnedExpertLayout) {
  json j = MinimalSpec();
  j["model"] = {{"preset", "mixtral-8x7b"}};
  j["search"] = {{"tp", 1},
                 {"pp", 1},
                 {"cp", 1},
                 {"micro_batch_size", 1},
                 {"recompute", "selective"},
                 {"distributed_optimizer", true},
                 {"ep", 8},
                 {"etp", 1},
                 {"moe_token_dispatcher", "allgather"}};
  auto spec = JobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto c = PinnedLayout(*spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ep, 8);
  EXPECT_EQ(c->etp, 1);
  EXPECT_EQ(c->moe_token_dispatcher, MoeTokenDispatcher::kAllGather);
  EXPECT_TRUE(ValidateParallelConfig(*c, *spec).ok()) << ValidateParallelConfig(*c, *spec);
}

}  // namespace
}  // namespace paratune
