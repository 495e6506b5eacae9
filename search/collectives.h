// Collective and point-to-point communication times: ring formulas with bus-bandwidth
// factors (nccl-tests' PERFORMANCE.md: all-reduce moves 2(k-1)/k of the buffer per rank,
// all-gather and reduce-scatter (k-1)/k), plus a latency per ring step.
#ifndef PARATUNE_SEARCH_COLLECTIVES_H_
#define PARATUNE_SEARCH_COLLECTIVES_H_

#include <cstdint>

#include "search/device_catalog.h"

namespace paratune {

/// The link a group of ranks communicates over.
struct Link {
  double bandwidth = 0;  ///< Bus bandwidth per GPU, bytes/s.
  double latency_s = 0;  ///< Per ring step.
};

/// A group of `size` ranks whose members are `stride` ranks apart (Megatron order: TP is
/// innermost, then CP, DP, PP): NVLink when every such group lies inside one node of
/// `gpus_per_node` GPUs (size * stride divides gpus_per_node), the NIC otherwise.
Link GroupLink(const DeviceProfile& device, int64_t size, int64_t stride,
               int64_t gpus_per_node);

/// `bytes` is the full buffer (the all-reduced tensor, or the gathered output).
double AllReduceSeconds(double bytes, int64_t ranks, const Link& link);
double AllGatherSeconds(double bytes, int64_t ranks, const Link& link);
double ReduceScatterSeconds(double bytes, int64_t ranks, const Link& link);
double SendRecvSeconds(double bytes, const Link& link);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_COLLECTIVES_H_
