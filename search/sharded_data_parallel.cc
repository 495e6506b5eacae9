#include "search/sharded_data_parallel.h"

#include <algorithm>

namespace paratune {

ShardedTraffic ShardedTrafficPerStep(const ParallelConfig& c, double params, int64_t micro_batches,
                                     double weight_bytes, double gradient_bytes) {
  ShardedTraffic out;
  const int64_t group = c.dp * c.cp;
  if (group <= 1) return out;
  const double m = static_cast<double>(micro_batches);
  const double grads = params * gradient_bytes;
  double reduce_calls = 0;  // Reduce-scatters of the whole stage's gradients.
  switch (c.data_parallel_sharding) {
    case DataParallelSharding::kNone:
      out.all_reduce = grads;
      return out;
    case DataParallelSharding::kOptimizer:
      reduce_calls = 1;
      out.all_gather = params * weight_bytes;
      break;
    case DataParallelSharding::kOptimizerGrads:
      reduce_calls = m;
      out.all_gather = params * weight_bytes;
      break;
    case DataParallelSharding::kFull:
      reduce_calls = m;
      out.all_gather = 2.0 * m * params * weight_bytes;
      break;
  }
  out.reduce_scatter = reduce_calls * grads;
  const int64_t n = c.ShardRanks();
  if (n < group) out.all_reduce = reduce_calls * grads / static_cast<double>(n);
  return out;
}

ParallelConfig ExpertDataParallelGroup(const ParallelConfig& c) {
  ParallelConfig g = c;
  g.tp = c.ep * c.etp;
  g.dp = std::max<int64_t>(c.edp(), 1);
  g.cp = 1;
  g.shard_group_size = 0;
  return g;
}

ShardedLinks ShardedDataParallelLinks(const ParallelConfig& c, const DeviceProfile& device,
                                      int64_t gpus_per_node) {
  ShardedLinks out;
  const int64_t group = std::max<int64_t>(c.dp * c.cp, 1);
  out.shard_ranks =
      c.data_parallel_sharding == DataParallelSharding::kNone ? group : c.ShardRanks();
  out.replica_ranks = group / std::max<int64_t>(out.shard_ranks, 1);
  out.shard = RingLink(device, out.shard_ranks, c.tp, gpus_per_node);
  out.replica = RingLink(device, out.replica_ranks, c.tp * out.shard_ranks, gpus_per_node);
  return out;
}

double HostTransferSeconds(double bytes, const DeviceProfile& device) {
  if (bytes <= 0) return 0;
  return bytes / (device.host_link_bandwidth * kHostLinkEfficiency);
}

double HostAdamSeconds(double params, const DeviceProfile& device) {
  if (params <= 0) return 0;
  return params * kHostAdamBytesPerParam / (device.host_memory_bandwidth * kHostMemoryEfficiency);
}

ShardedLayerComm ShardedLayerCommSeconds(const ParallelConfig& c, double layer_params,
                                         double weight_bytes, double gradient_bytes,
                                         const DeviceProfile& device, int64_t gpus_per_node) {
  ShardedLayerComm out;
  if (c.dp * c.cp <= 1) return out;
  const bool full = c.data_parallel_sharding == DataParallelSharding::kFull;
  if (!full && c.data_parallel_sharding != DataParallelSharding::kOptimizerGrads) return out;
  const ShardedLinks links = ShardedDataParallelLinks(c, device, gpus_per_node);
  const double grads = layer_params * gradient_bytes;
  out.backward_reduce = ReduceScatterSeconds(grads, links.shard_ranks, links.shard);
  if (links.replica_ranks > 1) {
    out.backward_reduce += AllReduceSeconds(grads / static_cast<double>(links.shard_ranks),
                                            links.replica_ranks, links.replica);
  }
  if (full) {
    out.forward_gather =
        AllGatherSeconds(layer_params * weight_bytes, links.shard_ranks, links.shard);
    out.backward_gather = out.forward_gather;
  }
  if (c.offload == Offload::kOptimizerAndParams && full) {
    // The layer's parameter shard comes from the host before each gather, its gradient
    // shard goes back after the reduce-scatter.
    const double shard = layer_params / static_cast<double>(links.shard_ranks);
    out.forward_gather += HostTransferSeconds(shard * weight_bytes, device);
    out.backward_gather += HostTransferSeconds(shard * weight_bytes, device);
    out.backward_reduce += HostTransferSeconds(shard * gradient_bytes, device);
  }
  return out;
}

double OverlappedLayerCommSeconds(double layers, double comm, double compute, double first,
                                  double overlap_slowdown) {
  if (layers <= 0 || comm <= 0) return 0;
  return first +
         layers * (std::max(0.0, comm - compute) + overlap_slowdown * std::min(comm, compute));
}

}  // namespace paratune
