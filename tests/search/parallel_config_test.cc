#include "search/parallel_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "search/presets.h"

namespace paratune {
namespace {

using ::testing::HasSubstr;

JobSpec Spec() {
  JobSpec spec;
  spec.model = *FindPreset("gpt3-175b");
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 1536;
  spec.cluster.gpu = "a100-80gb";
  spec.cluster.num_gpus = 1536;
  spec.cluster.gpus_per_node = 8;
  return spec;
}

ParallelConfig Megatron() {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 12;
  c.dp = 16;
  return c;
}

TEST(ParallelConfigTest, PublishedLayoutIsValid) {
  EXPECT_TRUE(ValidateParallelConfig(Megatron(), Spec()).ok());
  EXPECT_EQ(NumMicroBatches(Megatron(), Spec().training), 96);
}

TEST(ParallelConfigTest, RulesNameFieldsAndValues) {
  ParallelConfig c = Megatron();
  c.dp = 15;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.tp*search.pp*search.cp*search.dp (8*12*1*15 = 1440) must equal "
            "cluster.num_gpus (1536)");
  JobSpec spec = Spec();
  spec.cluster.num_gpus = 96 * 5;
  c = Megatron();
  c.tp = 5;
  c.pp = 12;
  c.dp = 8;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.tp (5) must divide model.num_attention_heads (96)");
  c = Megatron();
  c.pp = 64;
  c.dp = 3;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.pp (64) must divide model.num_layers (96)");
  c = Megatron();
  c.vp = 5;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.pp*search.vp (12*5 = 60) must divide model.num_layers (96)");
  c = Megatron();
  c.tp = 16;
  c.dp = 8;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.tp (16) must be <= cluster.gpus_per_node (8) unless "
            "search.allow_tp_across_nodes is set");
  c = Megatron();
  c.micro_batch_size = 5;
  EXPECT_FALSE(ValidateParallelConfig(c, Spec()).ok());
  c = Megatron();
  c.tp = 1;
  c.dp = 128;
  c.sequence_parallel = true;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.sequence_parallel requires search.tp > 1 (search.tp is 1)");
  c = Megatron();
  c.cp = 3;
  c.pp = 4;
  c.dp = 16;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "training.seq_length (2048) must be divisible by 2*search.cp (6)");
}

TEST(ParallelConfigTest, InterleavingNeedsEnoughMicroBatches) {
  JobSpec spec = Spec();
  spec.training.global_batch_size = 128;
  ParallelConfig c = Megatron();
  c.vp = 2;  // m = 128 / 16 = 8 < pp = 12.
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "the interleaved schedule (search.vp 2) needs micro-batches per iteration "
            "(training.global_batch_size / (search.micro_batch_size*search.dp) = 8) to be a "
            "multiple of search.pp (12)");
}

TEST(ParallelConfigTest, ToString) {
  ParallelConfig c = Megatron();
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  EXPECT_EQ(c.ToString(), "tp8 pp12 dp16 cp1 vp1 mb1 sp selective dopt");
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.shard_group_size = 8;
  EXPECT_EQ(c.ToString(), "tp8 pp12 dp16 cp1 vp1 mb1 sp selective fsdp/8");
}

// Sharding needs dp*cp > 1; a shard group needs sharding and must divide dp*cp.
TEST(ParallelConfigTest, DataParallelShardingRules) {
  ParallelConfig c = Megatron();
  c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
  EXPECT_TRUE(ValidateParallelConfig(c, Spec()).ok());
  EXPECT_EQ(c.ShardRanks(), 16);
  c.shard_group_size = 4;
  EXPECT_TRUE(ValidateParallelConfig(c, Spec()).ok());
  EXPECT_EQ(c.ShardRanks(), 4);
  c.shard_group_size = 6;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.shard_group_size (6) must be at least 2 and divide search.dp*search.cp (16)");
  c.data_parallel_sharding = DataParallelSharding::kNone;
  c.shard_group_size = 4;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.shard_group_size needs search.data_parallel_sharding other than none");
  EXPECT_EQ(c.ShardRanks(), 1);
  JobSpec spec = Spec();
  spec.cluster.num_gpus = 96;
  c.dp = 1;
  c.shard_group_size = 0;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.data_parallel_sharding full requires search.dp*search.cp > 1 (there is "
            "nothing to shard over)");
}

}  // namespace
}  // namespace paratune

namespace paratune {
namespace {

// Llama 3.1 405B (126 layers) on 1024 H100: tp 8, pp 8, cp 2, dp 8 and `vp` chunks.
JobSpec Llama405bOn1024() {
  JobSpec spec;
  spec.model = *FindPreset("llama3.1-405b");
  spec.training.seq_length = 8192;
  spec.training.global_batch_size = 512;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 1024;
  return spec;
}
ParallelConfig Llama405bLayout(int64_t vp) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.vp = vp;
  c.cp = 2;
  c.dp = 8;
  return c;
}

// Llama 3.1 405B in Megatron-Core: 126 layers + embedding + loss = 128 over PP 8 x VP 8.
TEST(ParallelConfigTest, EmbeddingAndLossAwareSplit) {
  const JobSpec spec = Llama405bOn1024();
  ParallelConfig c = Llama405bLayout(8);
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.pp (8) must divide model.num_layers (126)");
  c.split_counts_embedding_and_loss = true;
  EXPECT_TRUE(ValidateParallelConfig(c, spec).ok()) << ValidateParallelConfig(c, spec);
  // The +2 is explained where it is asked for: 126 + 2 = 128 is not a multiple of 8 * 5.
  c.vp = 5;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.pp*search.vp (8*5 = 40) must divide model.num_layers + 2 (128: the "
            "embedding and the loss are counted as one layer each when the stages are split "
            "as Megatron-Core does) with at least 1 per chunk");
  // 128 chunks of one slot: the first holds the embedding alone, the last the loss alone.
  c.pp = 16;
  c.vp = 8;
  c.dp = 4;
  EXPECT_TRUE(ValidateParallelConfig(c, spec).ok()) << ValidateParallelConfig(c, spec);
  EXPECT_EQ(c.LayersInChunk(126, 0, 0), 0);
  EXPECT_EQ(c.LayersInChunk(126, 1, 0), 1);
  EXPECT_EQ(c.LayersInChunk(126, 15, 7), 0);
  c.pp = 8;
  c.dp = 8;
  c.vp = 8;
  EXPECT_EQ(c.LayersInChunk(126, 0, 0), 1);
  EXPECT_EQ(c.LayersInChunk(126, 0, 1), 2);
  EXPECT_EQ(c.LayersInChunk(126, 7, 7), 1);
  EXPECT_EQ(c.LayersOnStage(126, 0), 15);
  EXPECT_EQ(c.LayersOnStage(126, 3), 16);
  int64_t total = 0;
  for (int64_t r = 0; r < 8; ++r) total += c.LayersOnStage(126, r);
  EXPECT_EQ(total, 126);
}

// torchtitan splits the stages unevenly (the first ones one layer more): any p*v that
// leaves every chunk a slot; Megatron-Core's split must divide.
TEST(ParallelConfigTest, UnevenSplitOnlyWhereTheFrameworkRunsIt) {
  JobSpec spec = Llama405bOn1024();
  ParallelConfig c = Llama405bLayout(5);
  // Pipelined FSDP2 under torchtitan: kept gathered, synced after the last backward.
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.overlap_grad_reduce = false;
  spec.training.framework = Framework::kTorchtitan;
  EXPECT_TRUE(ValidateParallelConfig(c, spec).ok()) << ValidateParallelConfig(c, spec);
  c.split_counts_embedding_and_loss = true;
  EXPECT_TRUE(ValidateParallelConfig(c, spec).ok()) << ValidateParallelConfig(c, spec);
  spec.training.framework = Framework::kMegatronCore;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  EXPECT_THAT(ValidateParallelConfig(c, spec).message(),
              HasSubstr("must divide model.num_layers + 2 (128"));
  // 128 slots over 8 x 17 = 136 chunks: some would hold nothing.
  spec.training.framework = Framework::kTorchtitan;
  c.vp = 17;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.pp*search.vp (8*17 = 136) must leave every model chunk at least 1 of the "
            "128 pipeline slots (model.num_layers + 2: training.framework torchtitan counts the "
            "embedding and the loss as one layer each)");
  c.split_counts_embedding_and_loss = false;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.pp*search.vp (8*17 = 136) must not exceed model.num_layers (126): every "
            "model chunk holds at least one layer");
}

// Mixtral 8x7B on 64 GPUs: attention tp2 pp4 dp8, experts folded as etp*ep*edp over the
// same 16 ranks of a stage.
JobSpec MixtralSpec() {
  JobSpec spec;
  spec.model = *FindPreset("mixtral-8x7b");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 256;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 64;
  return spec;
}

TEST(ParallelConfigTest, ExpertLayoutFollowsParallelFolding) {
  const JobSpec spec = MixtralSpec();
  ParallelConfig c;
  c.tp = 2;
  c.pp = 4;
  c.dp = 8;
  c.ep = 8;
  EXPECT_NE(ValidateParallelConfig(c, spec).message().find("search.sequence_parallel is required"),
            std::string::npos);
  c.sequence_parallel = true;
  EXPECT_TRUE(ValidateParallelConfig(c, spec).ok()) << ValidateParallelConfig(c, spec);
  EXPECT_EQ(c.edp(), 2);
  // EP is not nested in DP: ep 8 x etp 2 = 16 = tp 2 x dp 8 is a valid fold.
  c.etp = 2;
  EXPECT_TRUE(ValidateParallelConfig(c, spec).ok()) << ValidateParallelConfig(c, spec);
  EXPECT_EQ(c.edp(), 1);
  c.etp = 4;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.etp*search.ep (4*8 = 32) must divide search.tp*search.cp*search.dp "
            "(2*1*8 = 16): the expert layers fold the same ranks as etp*ep*edp");
  c.etp = 1;
  c.ep = 16;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.ep (16) must divide model.num_experts (8)");
  c.ep = 8;
  c.etp = 3;
  EXPECT_EQ(ValidateParallelConfig(c, spec).message(),
            "search.etp (3) must divide model.moe_ffn_hidden_size (14336)");
  c.ep = 1;
  c.etp = 1;
  c.moe_token_dispatcher = MoeTokenDispatcher::kFlex;
  EXPECT_NE(ValidateParallelConfig(c, spec).message().find("needs search.ep*search.etp > 1"),
            std::string::npos);
}

TEST(ParallelConfigTest, DenseModelsHaveNoExpertLayout) {
  ParallelConfig c = Megatron();
  c.ep = 2;
  EXPECT_EQ(ValidateParallelConfig(c, Spec()).message(),
            "search.ep (2) and search.etp (1) must be 1: the model has no experts "
            "(model.num_experts 1)");
}

}  // namespace
}  // namespace paratune
