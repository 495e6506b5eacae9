#include "search/collectives.h"

#include <gtest/gtest.h>

namespace paratune {
namespace {

TEST(CollectivesTest, RingFormulas) {
  const Link link{100e9, 2e-6};
  // All-reduce: 2(k-1)/k of the buffer per rank plus 2(k-1) steps.
  EXPECT_DOUBLE_EQ(AllReduceSeconds(1e9, 8, link), 2.0 * 7 / 8 * 1e9 / 100e9 + 14 * 2e-6);
  EXPECT_DOUBLE_EQ(AllGatherSeconds(1e9, 8, link), 7.0 / 8 * 1e9 / 100e9 + 7 * 2e-6);
  EXPECT_DOUBLE_EQ(ReduceScatterSeconds(1e9, 8, link), AllGatherSeconds(1e9, 8, link));
  EXPECT_EQ(AllReduceSeconds(1e9, 1, link), 0);
  EXPECT_DOUBLE_EQ(SendRecvSeconds(1e6, link), 1e6 / 100e9 + 2e-6);
}

TEST(CollectivesTest, GroupsInsideANodeUseNvlink) {
  const DeviceProfile a100 = *FindDevice("a100-80gb");
  EXPECT_EQ(GroupLink(a100, 8, 1, 8).bandwidth, a100.nvlink_bandwidth);
  EXPECT_EQ(GroupLink(a100, 2, 4, 8).bandwidth, a100.nvlink_bandwidth);
  // DP group with stride 8 spans nodes; a group of 6 does not tile an 8-GPU node.
  EXPECT_EQ(GroupLink(a100, 4, 8, 8).bandwidth, a100.network_bandwidth);
  EXPECT_EQ(GroupLink(a100, 6, 1, 8).bandwidth, a100.network_bandwidth);
}

TEST(CollectivesTest, RingsAcrossNodesUseOneNicPerMemberOnANode) {
  const DeviceProfile a100 = *FindDevice("a100-80gb");  // NVLink 230 GB/s, NIC 22 GB/s.
  // Inside a node: NVLink, as GroupLink.
  EXPECT_EQ(RingLink(a100, 8, 1, 8).bandwidth, a100.nvlink_bandwidth);
  // A data-parallel group 8 apart (tp 8): one member per node, one NIC.
  EXPECT_EQ(RingLink(a100, 4, 8, 8).bandwidth, a100.network_bandwidth);
  EXPECT_EQ(RingLink(a100, 4, 8, 8).latency_s, a100.network_latency_s);
  // tp 2: four members per node drive four NICs (88 GB/s).
  EXPECT_DOUBLE_EQ(RingLink(a100, 16, 2, 8).bandwidth, 4 * a100.network_bandwidth);
  // tp 1 over 64 GPUs: eight NICs would carry 176 GB/s, under NVLink's 230.
  EXPECT_DOUBLE_EQ(RingLink(a100, 64, 1, 8).bandwidth, 8 * a100.network_bandwidth);
  // Sixteen GPUs per node: 16 x 22 GB/s is capped by NVLink.
  EXPECT_DOUBLE_EQ(RingLink(a100, 64, 1, 16).bandwidth, a100.nvlink_bandwidth);
  // A group of 2 over nodes 8 apart still has one member per node.
  EXPECT_EQ(RingLink(a100, 2, 8, 8).bandwidth, a100.network_bandwidth);
}

}  // namespace
}  // namespace paratune
