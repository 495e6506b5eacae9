// Sharded data parallelism's communication (ZeRO-1/2/3, FSDP, HSDP; Rajbhandari et al.
// 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", Section 7):
// what each stage moves per optimizer step, and the per-layer collectives that the pipeline
// overlaps with compute. The memory side is memory_model.h's ShardedModelStateBytes.
//
// Per micro-batch and layer, by stage (N ranks shard, R = dp*cp / N replicate):
//   optimizer        nothing per micro-batch; after the last backward the gradients are
//                    reduce-scattered (in buckets, overlapped) and after the step the
//                    updated parameters all-gathered (Megatron's distributed optimizer).
//   optimizer_grads  each micro-batch's gradients reduce-scattered during its backward
//                    (no full gradient is kept); parameters all-gathered after the step.
//   full             each layer's parameters all-gathered before its forward and again
//                    before its backward (prefetched one layer ahead, so the gather of
//                    layer i+1 runs during the compute of layer i; the first is exposed),
//                    its gradients reduce-scattered after its backward.
// HSDP adds an all-reduce of each reduced shard (1/N of the buffer) over the R replicas.
#ifndef PARATUNE_SEARCH_SHARDED_DATA_PARALLEL_H_
#define PARATUNE_SEARCH_SHARDED_DATA_PARALLEL_H_

#include <cstdint>

#include "core/parallel_config.h"
#include "search/collectives.h"
#include "search/device_catalog.h"

namespace paratune {

/// Bytes entering each kind of data-parallel collective on one rank in one optimizer step
/// (the full buffer of each call: the gathered output, the tensor before reduction), for
/// `params` parameters (one pipeline stage, per TP rank), `micro_batches` micro-batches,
/// W = `weight_bytes` and G = `gradient_bytes` per parameter (Ψ = params):
///   none            all_reduce Ψ G
///   optimizer       reduce_scatter Ψ G,     all_gather Ψ W
///   optimizer_grads reduce_scatter m Ψ G,   all_gather Ψ W
///   full            reduce_scatter m Ψ G,   all_gather 2 m Ψ W
/// and with HSDP (N < dp*cp) all_reduce of the shards: Ψ G / N per reduce-scatter call.
/// All zero when dp*cp is 1.
struct ShardedTraffic {
  double all_gather = 0;
  double reduce_scatter = 0;
  double all_reduce = 0;
};
ShardedTraffic ShardedTrafficPerStep(const ParallelConfig& config, double params,
                                     int64_t micro_batches, double weight_bytes,
                                     double gradient_bytes);

/// The routed experts' data-parallel group (mixture of experts) as a layout of its own: edp
/// ranks, ep*etp apart (the stride the links read from tp), sharded over the whole group as
/// `c` shards. Its ShardRanks() is edp with sharding, 1 without.
ParallelConfig ExpertDataParallelGroup(const ParallelConfig& c);

/// The links of the sharded data-parallel groups (TP innermost, then CP, DP): the shard
/// group of N consecutive DP x CP ranks, and the replica group (R ranks N apart).
struct ShardedLinks {
  Link shard, replica;
  int64_t shard_ranks = 1, replica_ranks = 1;
};
ShardedLinks ShardedDataParallelLinks(const ParallelConfig& config, const DeviceProfile& device,
                                      int64_t gpus_per_node);

/// Seconds of one layer's per-micro-batch sharded collectives (0 where the stage has none):
/// the parameter all-gather before its forward and before its backward (full), and the
/// gradient reduce-scatter (plus HSDP's replica all-reduce) after its backward (full,
/// optimizer_grads).
// ---- Offload ----
/// Fraction of a GPU-host link's rate a pinned copy reaches (CUDA's bandwidthTest: about
/// 25 of PCIe Gen4 x16's 32 GB/s).
inline constexpr double kHostLinkEfficiency = 0.8;
/// Fraction of the host's DRAM bandwidth a streaming kernel reaches (STREAM triad on
/// two-socket servers: about 80 % of the channels' rate).
inline constexpr double kHostMemoryEfficiency = 0.8;
/// Host bytes the Adam step moves per parameter (DeepSpeed's CPU-Adam, Megatron's host
/// optimizer): read the FP32 parameter, gradient and both moments, write the parameter,
/// the moments and the 16-bit copy for the GPU: 4·4 + 3·4 + 2.
inline constexpr double kHostAdamBytesPerParam = 30;
/// Seconds to move `bytes` over the GPU-host link one way.
double HostTransferSeconds(double bytes, const DeviceProfile& device);
/// Seconds of the host's Adam step over `params` parameters (memory-bound on the host's
/// DRAM bandwidth per GPU).
double HostAdamSeconds(double params, const DeviceProfile& device);

struct ShardedLayerComm {
  double forward_gather = 0, backward_gather = 0, backward_reduce = 0;
};
ShardedLayerComm ShardedLayerCommSeconds(const ParallelConfig& config, double layer_params,
                                         double weight_bytes, double gradient_bytes,
                                         const DeviceProfile& device, int64_t gpus_per_node);

/// What `layers` layers' collectives of `comm` seconds each add to a chunk whose layers
/// compute `compute` seconds each, when each layer's collective overlaps the previous
/// layer's compute: `first` seconds before the first layer can start (not prefetched), the
/// part of each collective its window does not hide, and the slowdown (the device's
/// comm_overlap_slowdown) of the compute it does overlap.
double OverlappedLayerCommSeconds(double layers, double comm, double compute, double first,
                                  double overlap_slowdown);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_SHARDED_DATA_PARALLEL_H_
