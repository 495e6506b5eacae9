#include "search/collectives.h"

#include <algorithm>

namespace paratune {

Link GroupLink(const DeviceProfile& device, int64_t size, int64_t stride,
               int64_t gpus_per_node) {
  // Consecutive blocks of size*stride ranks stay inside a node only if they tile it.
  const int64_t span = size * stride;
  if (span <= gpus_per_node && gpus_per_node % span == 0) {
    return {device.nvlink_bandwidth, device.nvlink_latency_s};
  }
  return {device.network_bandwidth, device.network_latency_s};
}

Link RingLink(const DeviceProfile& device, int64_t size, int64_t stride, int64_t gpus_per_node) {
  const int64_t span = size * stride;
  if (span <= gpus_per_node && gpus_per_node % span == 0) {
    return GroupLink(device, size, stride, gpus_per_node);
  }
  const int64_t per_node = std::clamp<int64_t>(gpus_per_node / std::max<int64_t>(stride, 1), 1,
                                               std::max<int64_t>(size, 1));
  const double rails = static_cast<double>(per_node) * device.network_bandwidth;
  return {std::max(device.network_bandwidth, std::min(device.nvlink_bandwidth, rails)),
          device.network_latency_s};
}

double AllReduceSeconds(double bytes, int64_t ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double k = static_cast<double>(ranks);
  return 2.0 * (k - 1.0) / k * bytes / link.bandwidth + 2.0 * (k - 1.0) * link.latency_s;
}

double AllGatherSeconds(double bytes, int64_t ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double k = static_cast<double>(ranks);
  return (k - 1.0) / k * bytes / link.bandwidth + (k - 1.0) * link.latency_s;
}

double ReduceScatterSeconds(double bytes, int64_t ranks, const Link& link) {
  return AllGatherSeconds(bytes, ranks, link);
}

double SendRecvSeconds(double bytes, const Link& link) {
  if (bytes <= 0) return 0;
  return bytes / link.bandwidth + link.latency_s;
}

int64_t RanksPerNvlinkDomain(int64_t ranks, int64_t stride, int64_t nvlink_domain) {
  if (ranks * stride <= nvlink_domain) return ranks;
  return std::max<int64_t>(1, nvlink_domain / std::max<int64_t>(stride, 1));
}

double AllToAllSeconds(double bytes, int64_t ranks, int64_t stride, const DeviceProfile& device,
                       int64_t nvlink_domain, double remote_scale) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double k = static_cast<double>(ranks);
  const double local = static_cast<double>(RanksPerNvlinkDomain(ranks, stride, nvlink_domain));
  const double nvlink = bytes * (local - 1.0) / k / device.nvlink_bandwidth;
  const double nic = bytes * (k - local) / k * remote_scale / device.network_bandwidth;
  const double latency = local < k ? device.network_latency_s : device.nvlink_latency_s;
  return std::max(nvlink, nic) + latency;
}

}  // namespace paratune
