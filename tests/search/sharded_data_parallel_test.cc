#include "search/sharded_data_parallel.h"

#include <gtest/gtest.h>

#include "search/device_catalog.h"

namespace paratune {
namespace {

ParallelConfig Sharded(DataParallelSharding stage, int64_t dp, int64_t group = 0) {
  ParallelConfig c;
  c.dp = dp;
  c.data_parallel_sharding = stage;
  c.shard_group_size = group;
  return c;
}

// Bytes entering the data-parallel collectives per step, Ψ = 1e9 parameters, m = 4
// micro-batches, 2-byte weights, 4-byte gradients: DDP all-reduces Ψ G once; ZeRO-1
// reduce-scatters Ψ G and all-gathers Ψ W once; ZeRO-2 reduce-scatters every micro-batch;
// ZeRO-3 also all-gathers the weights twice per micro-batch (forward and backward): 3Ψ per
// micro-batch against DDP's 2Ψ, the ZeRO paper's 1.5x (Section 7.2.2) at m = 1 and W = G.
TEST(ShardedTrafficTest, VolumePerStepByStage) {
  const double psi = 1e9;
  ShardedTraffic t = ShardedTrafficPerStep(Sharded(DataParallelSharding::kNone, 8), psi, 4, 2, 4);
  EXPECT_DOUBLE_EQ(t.all_reduce, 4e9);
  EXPECT_DOUBLE_EQ(t.all_gather + t.reduce_scatter, 0);
  t = ShardedTrafficPerStep(Sharded(DataParallelSharding::kOptimizer, 8), psi, 4, 2, 4);
  EXPECT_DOUBLE_EQ(t.reduce_scatter, 4e9);
  EXPECT_DOUBLE_EQ(t.all_gather, 2e9);
  EXPECT_DOUBLE_EQ(t.all_reduce, 0);
  t = ShardedTrafficPerStep(Sharded(DataParallelSharding::kOptimizerGrads, 8), psi, 4, 2, 4);
  EXPECT_DOUBLE_EQ(t.reduce_scatter, 4 * 4e9);
  EXPECT_DOUBLE_EQ(t.all_gather, 2e9);
  t = ShardedTrafficPerStep(Sharded(DataParallelSharding::kFull, 8), psi, 4, 2, 4);
  EXPECT_DOUBLE_EQ(t.reduce_scatter, 4 * 4e9);
  EXPECT_DOUBLE_EQ(t.all_gather, 2 * 4 * 2e9);
  // m = 1, W = G = 2: a ring moves 2Ψ (k-1)/k per rank for DDP's all-reduce, 3Ψ (k-1)/k for
  // full sharding's two all-gathers and one reduce-scatter.
  const ShardedTraffic ddp =
      ShardedTrafficPerStep(Sharded(DataParallelSharding::kNone, 8), psi, 1, 2, 2);
  const ShardedTraffic fsdp =
      ShardedTrafficPerStep(Sharded(DataParallelSharding::kFull, 8), psi, 1, 2, 2);
  EXPECT_DOUBLE_EQ((fsdp.all_gather + fsdp.reduce_scatter) / (2 * ddp.all_reduce), 1.5);
  // Nothing to shard over.
  t = ShardedTrafficPerStep(Sharded(DataParallelSharding::kFull, 1), psi, 4, 2, 4);
  EXPECT_DOUBLE_EQ(t.all_gather + t.reduce_scatter + t.all_reduce, 0);
}

// HSDP, 16 ranks in 4-way shard groups: each reduce-scatter call is followed by an
// all-reduce of its 1/4 shard over the 4 replicas.
TEST(ShardedTrafficTest, HybridShardingAllReducesTheShardAcrossReplicas) {
  const ShardedTraffic t =
      ShardedTrafficPerStep(Sharded(DataParallelSharding::kFull, 16, 4), 1e9, 2, 2, 4);
  EXPECT_DOUBLE_EQ(t.reduce_scatter, 2 * 4e9);
  EXPECT_DOUBLE_EQ(t.all_reduce, 2 * 4e9 / 4);
  const ShardedLinks links = ShardedDataParallelLinks(Sharded(DataParallelSharding::kFull, 16, 4),
                                                      *FindDevice("h100-sxm-80gb"), 8);
  EXPECT_EQ(links.shard_ranks, 4);
  EXPECT_EQ(links.replica_ranks, 4);
  // Shards of 4 consecutive ranks stay in an 8-GPU node; the replicas 4 apart span 2 nodes,
  // two members on each, whose rings run over two NICs.
  EXPECT_EQ(links.shard.bandwidth, FindDevice("h100-sxm-80gb")->nvlink_bandwidth);
  EXPECT_DOUBLE_EQ(links.replica.bandwidth, 2 * FindDevice("h100-sxm-80gb")->network_bandwidth);
}

// One layer's per-micro-batch collectives are the ring formulas on the shard group's link.
TEST(ShardedLayerCommTest, GathersAndReduceScattersOfOneLayer) {
  const DeviceProfile device = *FindDevice("h100-sxm-80gb");
  const double layer = 200e6;
  const ParallelConfig full = Sharded(DataParallelSharding::kFull, 8);
  const Link link = GroupLink(device, 8, 1, 8);
  ShardedLayerComm comm = ShardedLayerCommSeconds(full, layer, 2, 4, device, 8);
  EXPECT_DOUBLE_EQ(comm.forward_gather, AllGatherSeconds(layer * 2, 8, link));
  EXPECT_DOUBLE_EQ(comm.backward_gather, comm.forward_gather);
  EXPECT_DOUBLE_EQ(comm.backward_reduce, ReduceScatterSeconds(layer * 4, 8, link));
  comm = ShardedLayerCommSeconds(Sharded(DataParallelSharding::kOptimizerGrads, 8), layer, 2, 4,
                                 device, 8);
  EXPECT_DOUBLE_EQ(comm.forward_gather + comm.backward_gather, 0);
  EXPECT_DOUBLE_EQ(comm.backward_reduce, ReduceScatterSeconds(layer * 4, 8, link));
  comm =
      ShardedLayerCommSeconds(Sharded(DataParallelSharding::kOptimizer, 8), layer, 2, 4, device, 8);
  EXPECT_DOUBLE_EQ(comm.forward_gather + comm.backward_gather + comm.backward_reduce, 0);
}

// Parameter offload: each layer's shard crosses the GPU-host link (PCIe Gen5 x16, 64 GB/s
// at 80 %) before each gather, its gradient shard after the reduce-scatter; the host's Adam
// step streams 30 bytes per parameter at 80 % of the DGX H100's 614.4 GB/s over 8 GPUs.
TEST(ShardedLayerCommTest, ParameterOffloadAddsTheHostTransfers) {
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  const double layer = 200e6;
  ParallelConfig full = Sharded(DataParallelSharding::kFull, 8);
  const ShardedLayerComm plain = ShardedLayerCommSeconds(full, layer, 2, 4, h100, 8);
  full.offload = Offload::kOptimizerAndParams;
  const ShardedLayerComm offload = ShardedLayerCommSeconds(full, layer, 2, 4, h100, 8);
  const double link = 64e9 * 0.8;
  EXPECT_DOUBLE_EQ(offload.forward_gather - plain.forward_gather, layer / 8 * 2 / link);
  EXPECT_DOUBLE_EQ(offload.backward_gather - plain.backward_gather, layer / 8 * 2 / link);
  EXPECT_DOUBLE_EQ(offload.backward_reduce - plain.backward_reduce, layer / 8 * 4 / link);
  // The optimizer alone moves nothing per layer.
  full.offload = Offload::kOptimizer;
  EXPECT_DOUBLE_EQ(ShardedLayerCommSeconds(full, layer, 2, 4, h100, 8).forward_gather,
                   plain.forward_gather);
  EXPECT_NEAR(HostAdamSeconds(1e9, h100), 1e9 * 30 / (614.4e9 / 8 * 0.8), 1e-12);  // 0.488 s
  EXPECT_NEAR(HostAdamSeconds(1e9, h100), 0.488, 0.001);
}

// Layer-by-layer overlap: the first collective exposed, then what each window does not hide,
// plus the slowdown of the compute a collective overlaps.
TEST(ShardedLayerCommTest, OverlapByHand) {
  // 4 layers, collective 1.0, compute 3.0: only the first is exposed; 10 % slowdown of 1.0.
  EXPECT_DOUBLE_EQ(OverlappedLayerCommSeconds(4, 1.0, 3.0, 1.0, 0.1), 1.0 + 4 * 0.1);
  // Collective 5.0 over compute 3.0: 2.0 exposed per layer, 3.0 hidden.
  EXPECT_DOUBLE_EQ(OverlappedLayerCommSeconds(4, 5.0, 3.0, 5.0, 0.0), 5.0 + 4 * 2.0);
  EXPECT_DOUBLE_EQ(OverlappedLayerCommSeconds(4, 0.0, 3.0, 0.0, 0.1), 0.0);
}

}  // namespace
}  // namespace paratune
