// Megatron-LM arguments, NeMo overrides, DeepSpeed configs and torchtitan TOMLs for known
// layouts.
#include "search/exporters.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace paratune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

JobSpec Gpt3() {
  JobSpec spec;
  spec.model.name = "gpt3-175b";
  spec.model.num_layers = 96;
  spec.model.hidden_size = 12288;
  spec.model.num_attention_heads = 96;
  spec.model.num_query_groups = 96;
  spec.model.ffn_hidden_size = 49152;
  spec.model.vocab_size = 51200;
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 1536;
  spec.cluster.gpu = "a100-80gb";
  spec.cluster.num_gpus = 1024;
  return spec;
}

JobSpec Llama3_8B() {
  JobSpec spec;
  spec.model.name = "llama3-8b";
  spec.model.num_layers = 32;
  spec.model.hidden_size = 4096;
  spec.model.num_attention_heads = 32;
  spec.model.num_query_groups = 8;
  spec.model.ffn_hidden_size = 14336;
  spec.model.vocab_size = 128256;
  spec.model.activation = Activation::kSwiglu;
  spec.model.normalization = Normalization::kRmsNorm;
  spec.model.position_embedding = PositionEmbedding::kRope;
  spec.model.max_position_embeddings = 8192;
  spec.training.seq_length = 8192;
  spec.training.global_batch_size = 128;
  spec.training.precision = Precision::kFp8;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 8;
  return spec;
}

/// Flag → value ("" for switches); the flags must be unique.
std::map<std::string, std::string> ArgMap(const JobSpec& spec, const ParallelConfig& c) {
  auto args = MegatronArgs(spec, c);
  EXPECT_TRUE(args.ok()) << args.status();
  std::map<std::string, std::string> m;
  for (const auto& [flag, value] : *args) {
    EXPECT_TRUE(m.emplace(flag, value).second) << "duplicate " << flag;
  }
  return m;
}

TEST(ExportersTest, MegatronGpt3Interleaved) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.dp = 16;
  c.vp = 2;
  c.micro_batch_size = 1;
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  auto m = ArgMap(Gpt3(), c);
  EXPECT_EQ(m["--tensor-model-parallel-size"], "8");
  EXPECT_EQ(m["--pipeline-model-parallel-size"], "8");
  EXPECT_EQ(m["--num-layers-per-virtual-pipeline-stage"], "6");  // 96 / (8 * 2)
  EXPECT_EQ(m["--context-parallel-size"], "1");
  EXPECT_EQ(m.count("--sequence-parallel"), 1u);
  EXPECT_EQ(m["--micro-batch-size"], "1");
  EXPECT_EQ(m["--global-batch-size"], "1536");
  EXPECT_EQ(m["--recompute-granularity"], "selective");
  EXPECT_EQ(m.count("--recompute-method"), 0u);
  EXPECT_EQ(m.count("--use-distributed-optimizer"), 1u);
  EXPECT_EQ(m["--num-layers"], "96");
  EXPECT_EQ(m["--hidden-size"], "12288");
  EXPECT_EQ(m["--num-attention-heads"], "96");
  EXPECT_EQ(m.count("--group-query-attention"), 0u);  // MHA
  EXPECT_EQ(m["--ffn-hidden-size"], "49152");
  EXPECT_EQ(m["--seq-length"], "2048");
  EXPECT_EQ(m["--max-position-embeddings"], "2048");
  EXPECT_EQ(m.count("--swiglu"), 0u);
  EXPECT_EQ(m.count("--normalization"), 0u);
  EXPECT_EQ(m.count("--untie-embeddings-and-output-weights"), 1u);
  EXPECT_EQ(m.count("--position-embedding-type"), 0u);  // learned_absolute is the default
  EXPECT_EQ(m.count("--bf16"), 1u);
  EXPECT_EQ(m.count("--use-flash-attn"), 1u);
  EXPECT_EQ(m["--attention-dropout"], "0.0");
  EXPECT_EQ(m["--hidden-dropout"], "0.0");
}

TEST(ExportersTest, Activations) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  JobSpec spec = Llama3_8B();
  spec.model.activation = Activation::kSquaredRelu;
  auto m = ArgMap(spec, c);
  EXPECT_EQ(m.count("--squared-relu"), 1u);
  EXPECT_EQ(m.count("--swiglu"), 0u);
  EXPECT_THAT(*NemoConfigOverride(spec, c), HasSubstr("  activation: squared-relu\n"));
  spec.model.activation = Activation::kGeglu;
  EXPECT_THAT(MegatronArgs(spec, c).status().message(),
              HasSubstr("model.activation geglu has no Megatron-LM argument"));
  EXPECT_THAT(*NemoConfigOverride(spec, c), HasSubstr("  activation: fast-geglu\n"));
}

TEST(ExportersTest, Offload) {
  ParallelConfig c;
  c.dp = 8;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.offload = Offload::kOptimizer;
  auto m = ArgMap(Llama3_8B(), c);
  EXPECT_EQ(m.count("--optimizer-cpu-offload"), 1u);
  EXPECT_EQ(m["--optimizer-offload-fraction"], "1.0");
  auto ds = nlohmann::json::parse(*DeepSpeedConfig(Llama3_8B(), c));
  EXPECT_EQ(ds["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_FALSE(ds["zero_optimization"].contains("offload_param"));
  c.data_parallel_sharding = DataParallelSharding::kFull;
  EXPECT_THAT(TorchtitanConfig(Llama3_8B(), c).status().message(),
              HasSubstr("offload optimizer has no torchtitan form"));
  c.offload = Offload::kOptimizerAndParams;
  ds = nlohmann::json::parse(*DeepSpeedConfig(Llama3_8B(), c));
  EXPECT_EQ(ds["zero_optimization"]["offload_param"]["device"], "cpu");
  absl::StatusOr<std::string> titan = TorchtitanConfig(Llama3_8B(), c);
  ASSERT_TRUE(titan.ok()) << titan.status();
  EXPECT_THAT(*titan, HasSubstr("enable_cpu_offload = true\n"));
  EXPECT_THAT(MegatronArgs(Llama3_8B(), c).status().message(),
              HasSubstr("offload optimizer_and_params has no Megatron-LM form"));
}

TEST(ExportersTest, AttentionKernels) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  JobSpec spec = Llama3_8B();
  EXPECT_EQ(ArgMap(spec, c).count("--use-flash-attn"), 1u);
  EXPECT_EQ(ArgMap(spec, c).count("--attention-backend"), 0u);
  spec.training.attention_kernel = AttentionKernel::kUnfused;
  spec.training.flash_attention = false;
  auto m = ArgMap(spec, c);
  EXPECT_EQ(m.count("--use-flash-attn"), 0u);
  EXPECT_EQ(m["--attention-backend"], "local");
  EXPECT_EQ(m.count("--no-masked-softmax-fusion"), 1u);
  spec.training.attention_kernel = AttentionKernel::kFused;
  EXPECT_EQ(ArgMap(spec, c).count("--no-masked-softmax-fusion"), 0u);
  // cuDNN's flash attention is Transformer Engine's FusedAttention backend.
  spec.training.attention_kernel = AttentionKernel::kCudnn;
  spec.training.flash_attention = true;
  m = ArgMap(spec, c);
  EXPECT_EQ(m["--attention-backend"], "fused");
  EXPECT_EQ(m.count("--use-flash-attn"), 0u);
}

TEST(ExportersTest, MegatronLlamaGqaFp8) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.micro_batch_size = 2;
  auto m = ArgMap(Llama3_8B(), c);
  EXPECT_EQ(m.count("--group-query-attention"), 1u);
  EXPECT_EQ(m["--num-query-groups"], "8");
  EXPECT_EQ(m.count("--swiglu"), 1u);
  EXPECT_EQ(m["--normalization"], "RMSNorm");
  EXPECT_EQ(m["--position-embedding-type"], "rope");
  EXPECT_EQ(m.count("--untie-embeddings-and-output-weights"), 1u);
  EXPECT_EQ(m.count("--bf16"), 1u);
  EXPECT_EQ(m["--fp8-format"], "hybrid");
  EXPECT_EQ(m.count("--num-layers-per-virtual-pipeline-stage"), 0u);
  EXPECT_EQ(m.count("--sequence-parallel"), 0u);
  EXPECT_EQ(m.count("--recompute-granularity"), 0u);
  EXPECT_EQ(m.count("--use-distributed-optimizer"), 0u);
  EXPECT_EQ(m["--max-position-embeddings"], "8192");
  EXPECT_EQ(m.count("--window-size"), 0u);
}

// Megatron's window of a causal model, (left, 0), and which layers skip it.
TEST(ExportersTest, SlidingWindow) {
  JobSpec spec = Llama3_8B();
  spec.model.sliding_window = 128;
  spec.model.window_attn_skip_freq = 2;
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  auto m = ArgMap(spec, c);
  EXPECT_EQ(m["--window-size"], "128,0");
  EXPECT_EQ(m["--window-attn-skip-freq"], "2");
  spec.model.window_attn_skip_freq = 0;  // every layer windowed
  m = ArgMap(spec, c);
  EXPECT_EQ(m["--window-size"], "128,0");
  EXPECT_EQ(m.count("--window-attn-skip-freq"), 0u);
}

TEST(ExportersTest, BlockScaledRecipes) {
  JobSpec spec = Llama3_8B();
  spec.cluster.gpu = "gb200";
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  spec.training.precision = Precision::kMxfp8;
  std::map<std::string, std::string> m = ArgMap(spec, c);
  EXPECT_EQ(m["--fp8-format"], "e4m3");
  EXPECT_EQ(m["--fp8-recipe"], "mxfp8");
  EXPECT_EQ(m.count("--bf16"), 1u);
  spec.training.precision = Precision::kNvfp4;
  m = ArgMap(spec, c);
  EXPECT_EQ(m["--fp4-format"], "e2m1");
  EXPECT_EQ(m["--fp4-recipe"], "nvfp4");
  EXPECT_EQ(m.count("--fp8-format"), 0u);
  absl::StatusOr<std::string> nemo = NemoConfigOverride(spec, c);
  ASSERT_TRUE(nemo.ok());
  EXPECT_NE(nemo->find("  fp4_recipe: nvfp4\n"), std::string::npos) << *nemo;
  EXPECT_NE(nemo->find("precision: bf16-mixed"), std::string::npos) << *nemo;
}

TEST(ExportersTest, FullRecomputeMethods) {
  JobSpec spec = Gpt3();
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;  // 12 layers per stage
  c.dp = 16;
  c.recompute = Recompute::kFull;
  c.recompute_num_layers = 0;  // every layer
  auto m = ArgMap(spec, c);
  EXPECT_EQ(m["--recompute-granularity"], "full");
  EXPECT_EQ(m["--recompute-method"], "uniform");
  EXPECT_EQ(m["--recompute-num-layers"], "1");
  c.recompute_num_layers = 12;  // = every layer of the stage
  EXPECT_EQ(ArgMap(spec, c)["--recompute-method"], "uniform");
  c.recompute_num_layers = 5;  // only 5 of 12 layers per stage
  m = ArgMap(spec, c);
  EXPECT_EQ(m["--recompute-method"], "block");
  EXPECT_EQ(m["--recompute-num-layers"], "5");
  c.vp = 2;  // block counts per model chunk: 4 per stage = 2 per chunk
  c.recompute_num_layers = 4;
  EXPECT_EQ(ArgMap(spec, c)["--recompute-num-layers"], "2");
  c.recompute_num_layers = 5;  // rounded up to 3 per chunk, with a note
  EXPECT_EQ(ArgMap(spec, c)["--recompute-num-layers"], "3");
  auto text = FormatMegatronArgs(spec, c);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("# note: recompute_num_layers 5 per stage rounded up to 3"));
}

TEST(ExportersTest, RejectsLayersNotDivisibleByStages) {
  ParallelConfig c;
  c.pp = 7;
  auto args = MegatronArgs(Gpt3(), c);
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.status().message(),
            "model.num_layers (96) must be divisible by pp x vp (7 x 1) to export the layout");
  EXPECT_FALSE(NemoConfigOverride(Gpt3(), c).ok());
}

TEST(ExportersTest, FormattedArgsAreAShellContinuation) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 16;
  c.dp = 8;
  auto text = FormatMegatronArgs(Gpt3(), c);
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  ASSERT_GT(lines.size(), 3u);
  EXPECT_THAT(lines[0], HasSubstr("# Megatron-LM arguments for gpt3-175b"));
  EXPECT_THAT(lines[1], HasSubstr("1024 GPUs = tp 8 x pp 16 x cp 1 x dp 8"));
  EXPECT_THAT(lines[1], HasSubstr("128 node(s) x 8 GPUs"));
  EXPECT_EQ(lines[2], "--tensor-model-parallel-size 8 \\");
  for (size_t i = 2; i + 1 < lines.size(); ++i) {
    EXPECT_TRUE(lines[i].ends_with(" \\")) << lines[i];
    EXPECT_TRUE(lines[i].starts_with("--")) << lines[i];
  }
  EXPECT_THAT(lines.back(), Not(HasSubstr("\\")));
}

TEST(ExportersTest, NemoOverride) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.dp = 16;
  c.vp = 2;
  c.micro_batch_size = 2;
  c.sequence_parallel = true;
  c.recompute = Recompute::kFull;
  c.recompute_num_layers = 0;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  auto yaml = NemoConfigOverride(Gpt3(), c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  for (const char* line :
       {"trainer:\n", "  num_nodes: 128\n", "  devices: 8\n", "  precision: bf16-mixed\n",
        "model:\n", "  micro_batch_size: 2\n", "  global_batch_size: 1536\n",
        "  tensor_model_parallel_size: 8\n", "  pipeline_model_parallel_size: 8\n",
        "  virtual_pipeline_model_parallel_size: 2\n", "  context_parallel_size: 1\n",
        "  sequence_parallel: true\n", "  activations_checkpoint_granularity: full\n",
        "  activations_checkpoint_method: uniform\n",
        "  activations_checkpoint_num_layers: 1\n", "  num_layers: 96\n",
        "  num_query_groups: null\n", "  activation: gelu\n", "  normalization: layernorm\n",
        "  position_embedding_type: learned_absolute\n",
        "  share_embeddings_and_output_weights: false\n", "  encoder_seq_length: 2048\n",
        "  optim:\n    name: distributed_fused_adam\n"}) {
    EXPECT_THAT(*yaml, HasSubstr(line));
  }

  ParallelConfig small;
  small.tp = 2;
  small.dp = 4;
  small.recompute = Recompute::kSelective;
  yaml = NemoConfigOverride(Llama3_8B(), small);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  for (const char* line :
       {"  num_nodes: 1\n", "  devices: 8\n", "  virtual_pipeline_model_parallel_size: null\n",
        "  activations_checkpoint_granularity: selective\n",
        "  activations_checkpoint_method: null\n", "  num_query_groups: 8\n",
        "  activation: fast-swiglu\n", "  normalization: rmsnorm\n",
        "  position_embedding_type: rope\n", "  fp8: true\n", "  fp8_hybrid: true\n",
        "  max_position_embeddings: 8192\n", "    name: fused_adam\n"}) {
    EXPECT_THAT(*yaml, HasSubstr(line));
  }
}

// Llama 3.1 405B (126 layers) on PP 8 x VP 8 only splits evenly when the embedding and
// the loss count as a layer each: (126 + 2) / 64 = 2 layers per model chunk.
TEST(ExportersTest, MegatronUnevenSplitCountsEmbeddingAndLoss) {
  JobSpec spec = Llama3_8B();
  spec.model.name = "llama3.1-405b";
  spec.model.num_layers = 126;
  spec.cluster.num_gpus = 1024;
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.vp = 8;
  c.cp = 2;
  c.dp = 8;
  c.split_counts_embedding_and_loss = true;
  const auto args = ArgMap(spec, c);
  EXPECT_EQ(args.at("--num-layers-per-virtual-pipeline-stage"), "2");
  EXPECT_TRUE(args.count("--account-for-embedding-in-pipeline-split"));
  EXPECT_TRUE(args.count("--account-for-loss-in-pipeline-split"));
  EXPECT_TRUE(args.count("--overlap-grad-reduce"));

  c.split_counts_embedding_and_loss = false;
  const auto plain = MegatronArgs(spec, c);
  ASSERT_FALSE(plain.ok());
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr("model.num_layers (126)"));
}

// Without data parallelism there is no gradient reduce to overlap; with the overlap off
// (Megatron-LM 2021's local DDP) the flag must not be emitted.
TEST(ExportersTest, MegatronOverlapGradReduceOnlyWhenItApplies) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.dp = 1;
  EXPECT_FALSE(ArgMap(Gpt3(), c).count("--overlap-grad-reduce"));
  c.dp = 16;
  EXPECT_TRUE(ArgMap(Gpt3(), c).count("--overlap-grad-reduce"));
  c.overlap_grad_reduce = false;
  EXPECT_FALSE(ArgMap(Gpt3(), c).count("--overlap-grad-reduce"));
}

// Megatron: the distributed optimizer for ZeRO-1; Megatron-FSDP's strategy for ZeRO-2/3
// (with the distributed optimizer it requires); HSDP as distributed-optimizer instances.
TEST(ExportersTest, MegatronDataParallelSharding) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.recompute = Recompute::kSelective;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  auto m = ArgMap(Llama3_8B(), c);
  EXPECT_EQ(m.count("--use-distributed-optimizer"), 1u);
  EXPECT_EQ(m.count("--use-megatron-fsdp"), 0u);
  EXPECT_EQ(m.count("--num-distributed-optimizer-instances"), 0u);
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.shard_group_size = 2;
  m = ArgMap(Llama3_8B(), c);
  EXPECT_EQ(m.count("--use-distributed-optimizer"), 1u);
  EXPECT_EQ(m.count("--use-megatron-fsdp"), 1u);
  EXPECT_EQ(m["--data-parallel-sharding-strategy"], "optim_grads_params");
  EXPECT_EQ(m["--num-distributed-optimizer-instances"], "2");
  c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
  c.shard_group_size = 0;
  m = ArgMap(Llama3_8B(), c);
  EXPECT_EQ(m["--data-parallel-sharding-strategy"], "optim_grads");
  auto yaml = NemoConfigOverride(Llama3_8B(), c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("  fsdp: true\n  fsdp_sharding_strategy: grad\n"));
  EXPECT_THAT(*yaml, HasSubstr("    name: fused_adam\n"));
}

// DeepSpeed: the ZeRO stage is the sharding's index, the batch splits into micro-batches and
// accumulation steps (128 = 1 x 32 x 4), AutoTP carries tp; what DeepSpeed cannot run is
// refused by name.
TEST(ExportersTest, DeepSpeedConfig) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.recompute = Recompute::kFull;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.shard_group_size = 2;
  auto text = DeepSpeedConfig(Llama3_8B(), c);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json ds = nlohmann::json::parse(*text);
  EXPECT_EQ(ds["train_batch_size"], 128);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 1);
  EXPECT_EQ(ds["gradient_accumulation_steps"], 32);
  EXPECT_EQ(ds["bf16"]["enabled"], true);
  EXPECT_EQ(ds["zero_optimization"]["stage"], 3);
  EXPECT_EQ(ds["zero_optimization"]["zero_hpz_partition_size"], 2);
  EXPECT_EQ(ds["tensor_parallel"]["autotp_size"], 2);
  EXPECT_EQ(ds["activation_checkpointing"]["number_checkpoints"], 32);
  for (auto [stage, want] : {std::pair{DataParallelSharding::kNone, 0},
                             {DataParallelSharding::kOptimizer, 1},
                             {DataParallelSharding::kOptimizerGrads, 2}}) {
    c.data_parallel_sharding = stage;
    c.shard_group_size = 0;
    EXPECT_EQ(nlohmann::json::parse(*DeepSpeedConfig(Llama3_8B(), c))["zero_optimization"]["stage"],
              want);
  }
  c.pp = 2;
  c.dp = 2;
  EXPECT_THAT(DeepSpeedConfig(Llama3_8B(), c).status().message(),
              HasSubstr("pipeline engine supports ZeRO stage 0 or 1 only"));
  c.pp = 1;
  c.sequence_parallel = true;
  EXPECT_EQ(DeepSpeedConfig(Llama3_8B(), c).status().code(), absl::StatusCode::kInvalidArgument);
}

// torchtitan: FSDP2's shard and replicate degrees over DP x CP (shard degree excludes cp),
// reshard after forward by stage; ZeRO-1 alone has no torchtitan form.
TEST(ExportersTest, TorchtitanConfig) {
  JobSpec spec = Llama3_8B();
  spec.cluster.num_gpus = 32;
  ParallelConfig c;
  c.tp = 2;
  c.cp = 2;
  c.dp = 8;
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.shard_group_size = 8;  // 8 of the 16 DP x CP ranks: shard 4 x cp 2, 2 replicas.
  auto toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  for (const char* line :
       {"data_parallel_replicate_degree = 2\n", "data_parallel_shard_degree = 4\n",
        "fsdp_reshard_after_forward = \"default\"\n", "tensor_parallel_degree = 2\n",
        "context_parallel_degree = 2\n", "pipeline_parallel_degree = 1\n", "seq_len = 8192\n",
        "global_batch_size = 128\n", "mode = \"selective\"\n", "converters = [\"float8\"]\n"}) {
    EXPECT_THAT(*toml, HasSubstr(line));
  }
  c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
  c.shard_group_size = 0;
  toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("data_parallel_shard_degree = 8\n"));
  EXPECT_THAT(*toml, HasSubstr("data_parallel_replicate_degree = 1\n"));
  EXPECT_THAT(*toml, HasSubstr("fsdp_reshard_after_forward = \"never\"\n"));
  c.data_parallel_sharding = DataParallelSharding::kNone;
  toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("data_parallel_replicate_degree = 8\n"));
  EXPECT_THAT(*toml, Not(HasSubstr("fsdp_reshard_after_forward")));
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  EXPECT_THAT(TorchtitanConfig(spec, c).status().message(),
              HasSubstr("no torchtitan form without a pipeline"));
  // Under its pipeline FSDP2 keeps the gathered parameters: "default" does not reshard
  // with PP.
  c.pp = 2;
  c.dp = 4;
  toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("data_parallel_shard_degree = 4\n"));
  EXPECT_THAT(*toml, HasSubstr("fsdp_reshard_after_forward = \"default\"\n"));
}

// torchtitan's virtual stages: two per rank is its default; more are set by
// pipeline_parallel_layers_per_stage where ceil((L + 2) / k) gives p*v stages, else listed.
TEST(ExportersTest, TorchtitanVirtualStages) {
  JobSpec spec = Llama3_8B();  // 32 layers
  spec.cluster.num_gpus = 32;
  spec.training.framework = Framework::kTorchtitan;
  ParallelConfig c;
  c.pp = 4;
  c.dp = 8;
  c.vp = 2;
  c.split_counts_embedding_and_loss = true;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  auto toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("pipeline_parallel_schedule = \"Interleaved1F1B\"\n"));
  EXPECT_THAT(*toml, Not(HasSubstr("layers_per_stage")));
  // 34 slots over 16 stages: k = 3 gives ceil(34 / 3) = 12 stages, so the 16 are listed:
  // 34 = 2 x 3 + 14 x 2, the first holding the embedding and 2 layers, the last 1 and the
  // output.
  c.vp = 4;
  toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("module_fqns_per_model_part = [[\"tok_embeddings\", "
                               "\"layers.0\", \"layers.1\"], [\"layers.2\", \"layers.3\", "
                               "\"layers.4\"], [\"layers.5\", \"layers.6\"]"));
  EXPECT_THAT(*toml, HasSubstr("[\"layers.31\", \"norm\", \"output\"]]\n"));
  // 34 slots over 4 x 3 = 12 stages: k = 3 gives exactly 12.
  c.vp = 3;
  c.dp = 8;
  toml = TorchtitanConfig(spec, c);
  ASSERT_TRUE(toml.ok()) << toml.status();
  EXPECT_THAT(*toml, HasSubstr("pipeline_parallel_layers_per_stage = 3\n"));
}

// NeMo AutoModel's recipe keys. Its split gives ceil(L / layers_per_stage) stages, the
// first (L mod stages) one layer more: 32 layers over 4 x 2 stages take 4 each, over 3 a
// value of 11 gives 11, 11, 10; over 4 x 3 = 12 no value gives 12 stages (3 gives 11), so
// the 12 are listed: 8 of 3 layers, then 4 of 2.
TEST(ExportersTest, AutomodelConfig) {
  JobSpec spec = Llama3_8B();  // 32 layers
  spec.training.precision = Precision::kBf16;
  spec.training.framework = Framework::kNemoAutomodel;
  spec.cluster.num_gpus = 64;
  ParallelConfig c;
  c.pp = 4;
  c.vp = 2;
  c.dp = 16;
  c.micro_batch_size = 1;
  c.recompute = Recompute::kFull;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  absl::StatusOr<std::string> yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  for (const char* line :
       {"  global_batch_size: 128\n", "  local_batch_size: 8\n", "  strategy: fsdp2\n",
        "  tp_size: 1\n", "  pp_size: 4\n", "  ep_size: 1\n", "  activation_checkpointing: true\n",
        "    pp_schedule: interleaved1f1b\n", "    pp_microbatch_size: 1\n",
        "    layers_per_stage: 4\n"}) {
    EXPECT_THAT(*yaml, HasSubstr(line));
  }
  EXPECT_THAT(*yaml, Not(HasSubstr("model:\n")));  // no experts' backend for a dense model
  // Full sharding reshards after the forward and syncs every micro-batch; optimizer keeps
  // the parameters gathered and syncs once per step.
  EXPECT_THAT(*yaml, HasSubstr("  reshard_after_forward: true\n  defer_fsdp_grad_sync: false\n"));
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.tp_comm_overlap = true;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("  strategy: fsdp2\n"));
  EXPECT_THAT(*yaml, HasSubstr("  reshard_after_forward: false\n  defer_fsdp_grad_sync: true\n"
                               "  enable_async_tensor_parallel: true\n"));
  c.tp_comm_overlap = false;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.pp = 3;
  c.vp = 1;
  c.dp = 8;
  spec.cluster.num_gpus = 24;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("    pp_schedule: 1f1b\n"));
  EXPECT_THAT(*yaml, HasSubstr("    layers_per_stage: 11\n"));
  c.pp = 4;
  c.vp = 3;
  spec.cluster.num_gpus = 32;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, Not(HasSubstr("layers_per_stage")));
  EXPECT_THAT(*yaml, HasSubstr("      - [model.embed_tokens, model.layers.0, model.layers.1, "
                               "model.layers.2, model.rotary_emb]\n"));
  EXPECT_THAT(*yaml, HasSubstr("      - [model.layers.24, model.layers.25, model.rotary_emb]\n"));
  EXPECT_THAT(*yaml, HasSubstr("      - [model.layers.30, model.layers.31, model.norm, lm_head, "
                               "model.rotary_emb]\n"));
  // Without sharding: DDP, one micro-batch per pass without a pipeline.
  c.pp = 1;
  c.vp = 1;
  c.dp = 8;
  c.micro_batch_size = 2;
  c.data_parallel_sharding = DataParallelSharding::kNone;
  spec.cluster.num_gpus = 8;
  yaml = AutomodelConfig(spec, c);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(*yaml, HasSubstr("  strategy: ddp\n"));
  EXPECT_THAT(*yaml, HasSubstr("  local_batch_size: 2\n"));
  EXPECT_THAT(*yaml, Not(HasSubstr("pipeline:")));
  EXPECT_THAT(*yaml, Not(HasSubstr("reshard_after_forward")));
  // What it has no form for, named.
  c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
  EXPECT_THAT(AutomodelConfig(spec, c).status().message(),
              HasSubstr("data_parallel_sharding optimizer_grads has no NeMo AutoModel form"));
  c.data_parallel_sharding = DataParallelSharding::kFull;
  spec.training.precision = Precision::kFp8;
  EXPECT_THAT(AutomodelConfig(spec, c).status().message(),
              HasSubstr("training.precision fp8 has no NeMo AutoModel form"));
}

TEST(ExportersTest, EveryFormatIsInTheTable) {
  EXPECT_EQ(TrainingExportFormatList(), "megatron, nemo, deepspeed, torchtitan or automodel");
  EXPECT_EQ(TrainingExportFormatList("json"),
            "megatron, nemo, deepspeed, torchtitan, automodel or json");
  for (const char* format : {"megatron", "nemo", "deepspeed", "torchtitan", "automodel"}) {
    const TrainingExporter* e = FindTrainingExporter(format);
    ASSERT_NE(e, nullptr) << format;
    EXPECT_STREQ(e->format, format);
  }
  EXPECT_EQ(FindTrainingExporter("vllm"), nullptr);
}

}  // namespace
}  // namespace paratune
