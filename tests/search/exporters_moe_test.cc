// Megatron-LM arguments and NeMo keys of mixture-of-experts layouts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "search/exporters.h"
#include "search/presets.h"

namespace paratune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

JobSpec DeepSeekV3Spec() {
  JobSpec spec;
  spec.model = *FindPreset("deepseek-v3");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 8192;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 1024;
  return spec;
}

ParallelConfig DeepSeekLayout() {
  ParallelConfig c;
  c.pp = 16;
  c.dp = 64;
  c.ep = 64;
  c.split_counts_embedding_and_loss = true;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.moe_token_dispatcher = MoeTokenDispatcher::kFlex;
  return c;
}

std::map<std::string, std::string> ArgMap(const JobSpec& spec, const ParallelConfig& c) {
  absl::StatusOr<std::vector<CommandLineFlag>> args = MegatronArgs(spec, c);
  EXPECT_TRUE(args.ok()) << args.status();
  std::map<std::string, std::string> out;
  if (args.ok()) {
    for (const auto& [flag, value] : *args) out[flag] = value;
  }
  return out;
}

TEST(ExportersMoeTest, MegatronDeepSeekV3) {
  const auto args = ArgMap(DeepSeekV3Spec(), DeepSeekLayout());
  EXPECT_EQ(args.at("--num-experts"), "256");
  EXPECT_EQ(args.at("--moe-router-topk"), "8");
  EXPECT_EQ(args.at("--moe-ffn-hidden-size"), "2048");
  EXPECT_EQ(args.at("--moe-shared-expert-intermediate-size"), "2048");
  EXPECT_EQ(args.at("--moe-layer-freq"), "([0]*3+[1]*58)");
  EXPECT_EQ(args.at("--expert-model-parallel-size"), "64");
  EXPECT_EQ(args.at("--expert-tensor-parallel-size"), "1");
  EXPECT_EQ(args.at("--moe-token-dispatcher-type"), "flex");
  EXPECT_EQ(args.count("--moe-grouped-gemm"), 1u);
  EXPECT_EQ(args.count("--moe-router-force-load-balancing"), 1u);
  EXPECT_EQ(args.count("--multi-latent-attention"), 1u);
  EXPECT_EQ(args.at("--q-lora-rank"), "1536");
  EXPECT_EQ(args.at("--kv-lora-rank"), "512");
  EXPECT_EQ(args.at("--qk-head-dim"), "128");
  EXPECT_EQ(args.at("--qk-pos-emb-head-dim"), "64");
  EXPECT_EQ(args.at("--v-head-dim"), "128");
  EXPECT_EQ(args.at("--mtp-num-layers"), "1");
  EXPECT_EQ(args.at("--moe-router-num-groups"), "8");
  EXPECT_EQ(args.at("--moe-router-group-topk"), "4");
  EXPECT_EQ(args.at("--ffn-hidden-size"), "18432");
  // 64 slots over 16 stages: the embedding and 3 layers, 14 x 4 layers, 2 layers, the MTP
  // module and the loss.
  std::string layout = "\"Ettt";
  for (int i = 0; i < 14; ++i) layout += "|tttt";
  layout += "|ttmL\"";
  EXPECT_EQ(args.at("--pipeline-model-parallel-layout"), layout);
  EXPECT_EQ(args.count("--account-for-embedding-in-pipeline-split"), 0u);
}

TEST(ExportersMoeTest, RoutingModes) {
  JobSpec spec = DeepSeekV3Spec();
  spec.training.moe_routing = MoeRouting::kCapacity;
  spec.training.moe_capacity_factor = 1.25;
  auto args = ArgMap(spec, DeepSeekLayout());
  EXPECT_EQ(args.at("--moe-expert-capacity-factor"), "1.25");
  EXPECT_EQ(args.count("--moe-router-force-load-balancing"), 0u);
  spec.training.moe_routing = MoeRouting::kDropless;
  spec.training.moe_capacity_factor = 0;
  args = ArgMap(spec, DeepSeekLayout());
  EXPECT_EQ(args.count("--moe-expert-capacity-factor"), 0u);
}

TEST(ExportersMoeTest, RecomputeModules) {
  JobSpec spec = DeepSeekV3Spec();
  ParallelConfig c = DeepSeekLayout();
  c.recompute = Recompute::kSelective;
  // Megatron's default (the attention core) needs no flag.
  EXPECT_EQ(ArgMap(spec, c).count("--recompute-modules"), 0u);
  spec.training.recompute_modules = {RecomputeModule::kLayernorm, RecomputeModule::kMoe};
  EXPECT_EQ(ArgMap(spec, c)["--recompute-modules"], "layernorm moe");
  absl::StatusOr<std::string> nemo = NemoConfigOverride(spec, c);
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_NE(nemo->find("  recompute_modules: [layernorm, moe]\n"), std::string::npos) << *nemo;
  // Only selective recompute takes the modules.
  c.recompute = Recompute::kNone;
  EXPECT_EQ(ArgMap(spec, c).count("--recompute-modules"), 0u);
}

TEST(ExportersMoeTest, DenseModelsGetNoExpertArguments) {
  JobSpec spec = DeepSeekV3Spec();
  spec.model = *FindPreset("llama3-8b");
  spec.cluster.num_gpus = 8;
  ParallelConfig c;
  c.tp = 8;
  const auto args = ArgMap(spec, c);
  EXPECT_EQ(args.count("--num-experts"), 0u);
  EXPECT_EQ(args.count("--expert-model-parallel-size"), 0u);
}

TEST(ExportersMoeTest, NemoKeys) {
  absl::StatusOr<std::string> yaml = NemoConfigOverride(DeepSeekV3Spec(), DeepSeekLayout());
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("  num_moe_experts: 256\n"));
  EXPECT_THAT(*yaml, HasSubstr("  expert_model_parallel_size: 64\n"));
  EXPECT_THAT(*yaml, HasSubstr("  expert_tensor_parallel_size: 1\n"));
  EXPECT_THAT(*yaml, HasSubstr("  moe_token_dispatcher_type: flex\n"));
  EXPECT_THAT(*yaml, HasSubstr("  moe_grouped_gemm: true\n"));
  EXPECT_THAT(*yaml, HasSubstr("  multi_latent_attention: true\n"));
  EXPECT_THAT(*yaml, HasSubstr("  moe_layer_freq: \"([0]*3+[1]*58)\"\n"));
  EXPECT_THAT(*yaml, HasSubstr("  mtp_num_layers: 1\n"));
  EXPECT_THAT(*yaml, Not(HasSubstr("kv_channels")));
}

// torchtitan carries the expert layout (EP folded out of its FSDP and TP ranks) and the
// flex dispatcher as its DeepEP backend (HybridEP in an NVLink rack); it has no all-gather
// dispatcher, which the export says.
TEST(ExportersMoeTest, TorchtitanExpertDegrees) {
  ParallelConfig c = DeepSeekLayout();
  c.data_parallel_sharding = DataParallelSharding::kFull;
  absl::StatusOr<std::string> toml = TorchtitanConfig(DeepSeekV3Spec(), c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("expert_parallel_degree = 64\nexpert_tensor_parallel_degree = 1\n"
                               "expert_parallel_comm_backend = \"deepep\"\n"));
  JobSpec rack = DeepSeekV3Spec();
  rack.cluster.nvlink_domain = 72;
  toml = TorchtitanConfig(rack, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("expert_parallel_comm_backend = \"hybridep\"\n"));
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllGather;
  toml = TorchtitanConfig(DeepSeekV3Spec(), c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("scored with the allgather token dispatcher"));
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllToAll;
  toml = TorchtitanConfig(DeepSeekV3Spec(), c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, Not(HasSubstr("token dispatcher")));
  EXPECT_THAT(*toml, Not(HasSubstr("expert_parallel_comm_backend")));
  JobSpec dense = DeepSeekV3Spec();
  dense.model = *FindPreset("llama3-8b");
  c.ep = 1;
  toml = TorchtitanConfig(dense, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, Not(HasSubstr("expert_parallel_degree")));
}

// NeMo AutoModel: ep_size, the experts' grouped GEMM and the flex dispatcher as DeepEP;
// forced balance as its fake balanced gate.
TEST(ExportersMoeTest, AutomodelExperts) {
  JobSpec spec = DeepSeekV3Spec();
  spec.training.framework = Framework::kNemoAutomodel;
  spec.training.moe_routing = MoeRouting::kBalanced;
  ParallelConfig c = DeepSeekLayout();
  c.split_counts_embedding_and_loss = false;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  absl::StatusOr<std::string> yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("  ep_size: 64\n"));
  EXPECT_THAT(*yaml, HasSubstr("model:\n  backend:\n    experts: gmm\n    dispatcher: deepep\n"
                               "    fake_balanced_gate: true\n"));
  // Its MoE parallelizer keeps the parameters gathered unless told otherwise.
  EXPECT_THAT(*yaml, HasSubstr("set the MoE parallelizer's reshard_after_forward to true"));
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, Not(HasSubstr("MoE parallelizer")));
  // 61 layers over 16 stages: a value of 4 gives ceil(61 / 4) = 16.
  EXPECT_THAT(*yaml, HasSubstr("    layers_per_stage: 4\n"));
  // Its torch dispatcher all-gathers; an all-to-all layout (exported from another
  // framework's spec) says so, as does expert TP, which AutoModel lacks.
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllGather;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("    experts: torch_mm\n    dispatcher: torch\n"));
  EXPECT_THAT(*yaml, Not(HasSubstr("# note")));
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllToAll;
  c.etp = 2;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("scored with the alltoall token dispatcher"));
  EXPECT_THAT(*yaml, HasSubstr("scored with expert tensor parallelism (etp 2)"));
}

}  // namespace
}  // namespace paratune
