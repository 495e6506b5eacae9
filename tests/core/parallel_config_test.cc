#include "core/parallel_config.h"

#include <gtest/gtest.h>

namespace paratune {
namespace {

TEST(ParallelConfigTest, DefaultsAreOneRankWithMegatronsOverlaps) {
  const ParallelConfig c;
  EXPECT_EQ(c.world_size(), 1);
  EXPECT_EQ(c.recompute, Recompute::kNone);
  EXPECT_TRUE(c.overlap_grad_reduce);
  EXPECT_TRUE(c.overlap_p2p_comm);
  EXPECT_FALSE(c.tp_comm_overlap);
  EXPECT_EQ(c.ToString(), "tp1 pp1 dp1 cp1 vp1 mb1 none");
}

TEST(ParallelConfigTest, WorldSizeCountsEveryDimension) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 4;
  c.cp = 2;
  c.dp = 3;
  c.vp = 5;  // Virtual stages share their pipeline rank's devices.
  EXPECT_EQ(c.world_size(), 8 * 4 * 2 * 3);
}

TEST(ParallelConfigTest, EvenSplitAndEmbeddingAndLossAwareSplit) {
  ParallelConfig c;
  c.pp = 4;
  c.vp = 2;
  for (int64_t stage = 0; stage < 4; ++stage) {
    for (int64_t chunk = 0; chunk < 2; ++chunk) EXPECT_EQ(c.LayersInChunk(32, stage, chunk), 4);
    EXPECT_EQ(c.LayersOnStage(32, stage), 8);
  }
  // 30 + 2 over 8 chunks: 4 slots each; the embedding and the loss take one slot each.
  c.split_counts_embedding_and_loss = true;
  EXPECT_EQ(c.LayersInChunk(30, 0, 0), 3);
  EXPECT_EQ(c.LayersInChunk(30, 0, 1), 4);
  EXPECT_EQ(c.LayersInChunk(30, 3, 1), 3);
  EXPECT_EQ(c.LayersOnStage(30, 0), 7);
  EXPECT_EQ(c.LayersOnStage(30, 1), 8);
  EXPECT_EQ(c.LayersOnStage(30, 3), 7);
  int64_t total = 0;
  for (int64_t stage = 0; stage < 4; ++stage) total += c.LayersOnStage(30, stage);
  EXPECT_EQ(total, 30);
}

// Where p*v does not divide the slots, the first virtual stages (chunk j of stage r is
// virtual stage j*p + r) take one more each, as torch.distributed.pipelining's frameworks
// split: torchtitan's generate_llm_fqn_per_model_part(8, 32) with first/last_stage_less_layers
// 1 gives 34 slots as 5, 5, 4, 4, 4, 4, 4, 4, so 4, 5, 4, 4, 4, 4, 4, 3 layers.
TEST(ParallelConfigTest, UnevenSplitGivesTheRemainderToTheFirstVirtualStages) {
  ParallelConfig c;
  c.pp = 8;
  c.split_counts_embedding_and_loss = true;
  const int64_t titan[] = {4, 5, 4, 4, 4, 4, 4, 3};
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(c.LayersInChunk(32, r, 0), titan[r]) << r;
  // 61 layers alone over 4 x 8 chunks (NeMo AutoModel's split of DeepSeek-V3): virtual
  // stages 0-28 hold 2, 29-31 hold 1; stage 0 has 16, stages 1-3 have 15.
  c = ParallelConfig{};
  c.pp = 4;
  c.vp = 8;
  EXPECT_EQ(c.LayersInChunk(61, 0, 7), 2);  // virtual stage 28
  EXPECT_EQ(c.LayersInChunk(61, 1, 7), 1);  // virtual stage 29
  EXPECT_EQ(c.LayersOnStage(61, 0), 16);
  int64_t total = 0;
  for (int64_t r = 0; r < 4; ++r) {
    if (r > 0) {
      EXPECT_EQ(c.LayersOnStage(61, r), 15) << r;
    }
    total += c.LayersOnStage(61, r);
  }
  EXPECT_EQ(total, 61);
}

TEST(ParallelConfigTest, ToStringNamesFlagsAndEqualityComparesThem) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.vp = 8;
  c.dp = 2;
  c.sequence_parallel = true;
  c.tp_comm_overlap = true;
  c.recompute = Recompute::kFull;
  c.recompute_num_layers = 2;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.split_counts_embedding_and_loss = true;
  EXPECT_EQ(c.ToString(), "tp8 pp8 dp2 cp1 vp8 mb1 sp+overlap full(2) dopt split+2");
  ParallelConfig d = c;
  EXPECT_EQ(c, d);
  d.overlap_p2p_comm = false;
  EXPECT_NE(c, d);
}

// The extras are the one-liner's tokens a plan table's columns do not show, in its order.
TEST(ParallelConfigTest, ExtrasAreTheOneLinersTokensBeyondTheColumns) {
  ParallelConfig c;
  c.tp = 4;
  c.dp = 8;
  c.sequence_parallel = true;
  c.recompute = Recompute::kFull;
  c.recompute_num_layers = 2;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  EXPECT_EQ(c.ExtrasString(), "");  // plain sp, full(2) and dopt are columns
  c.tp_comm_overlap = true;
  c.shard_group_size = 4;
  c.overlap_grad_reduce = false;
  c.ep = 4;
  c.moe_token_dispatcher = MoeTokenDispatcher::kFlex;
  EXPECT_EQ(c.ExtrasString(), "sp+overlap dopt/4 no-grad-overlap ep4 etp1 flex");
  EXPECT_EQ(c.ToString(),
            "tp4 pp1 dp8 cp1 vp1 mb1 sp+overlap full(2) dopt/4 no-grad-overlap ep4 etp1 flex");
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.shard_group_size = 0;
  c.activation_offload = true;
  EXPECT_EQ(c.ExtrasString(), "sp+overlap fsdp act-offload no-grad-overlap ep4 etp1 flex");
}

}  // namespace
}  // namespace paratune
