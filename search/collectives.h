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

/// The link of a ring collective (all-reduce, all-gather, reduce-scatter) over such a
/// group. Inside a node as GroupLink. Across nodes NCCL runs one ring per channel and
/// spreads the channels over the node's NICs (one per GPU on DGX/HGX nodes, "rails"), so
/// the r members of the group on one node drive r NICs: min(NVLink, r x the NIC's
/// bandwidth), r = gpus_per_node / stride members per node (1 when stride spans a node).
/// Point-to-point exchanges (pipeline send/recv, the context-parallel ring) keep
/// GroupLink: each pair crosses one NIC.
Link RingLink(const DeviceProfile& device, int64_t size, int64_t stride, int64_t gpus_per_node);

/// `bytes` is the full buffer (the all-reduced tensor, or the gathered output).
double AllReduceSeconds(double bytes, int64_t ranks, const Link& link);
double AllGatherSeconds(double bytes, int64_t ranks, const Link& link);
double ReduceScatterSeconds(double bytes, int64_t ranks, const Link& link);
double SendRecvSeconds(double bytes, const Link& link);

/// An all-to-all in which each of `ranks` ranks (`stride` ranks apart, Megatron order) sends
/// `bytes` in all, an equal share to every rank of the group. The share for ranks inside
/// the same NVLink domain of `nvlink_domain` GPUs crosses NVLink, the rest the NIC; both
/// run at once, so the slower sets the time: max(local share / NVLink, remote share / NIC)
/// plus the latency of the slowest link used. `remote_scale` scales the remote share (< 1
/// where a dispatcher sends a token once per remote domain instead of once per expert).
double AllToAllSeconds(double bytes, int64_t ranks, int64_t stride, const DeviceProfile& device,
                       int64_t nvlink_domain, double remote_scale = 1.0);
/// Ranks of such a group inside one NVLink domain.
int64_t RanksPerNvlinkDomain(int64_t ranks, int64_t stride, int64_t nvlink_domain);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_COLLECTIVES_H_
