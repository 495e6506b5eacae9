// All-to-all on the Gloo and one-rank communicators: every element lands at the rank and
// offset the definition gives, with equal and variable (including empty) chunks.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kernels/collective_bench.h"
#include "kernels/communicator.h"

namespace paratune::kernels {
namespace {

// Value rank `from` sends to rank `to` as its element i: distinct for every triple.
double Tag(int from, int to, int64_t i) { return 1000.0 * from + 100.0 * to + i; }

// Runs `body(rank, comm)` on k Gloo ranks (threads) and returns each rank's failure count.
template <typename F>
std::vector<int> OnGlooRanks(int k, const std::string& prefix, F body) {
  auto rendezvous = MakeInProcessRendezvous();
  std::vector<int> failures(k, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r]() {
      auto comm = MakeGlooCommunicator(rendezvous, prefix, r, k);
      if (!comm.ok()) {
        ADD_FAILURE() << comm.status();
        ++failures[r];
        return;
      }
      failures[r] += body(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

TEST(AllToAllTest, EqualChunksReachEveryRankInRankOrder) {
  for (int k : {2, 3, 4}) {
    constexpr int64_t kCount = 5;
    auto failures = OnGlooRanks(k, "eq", [k](int r, Communicator& c) {
      std::vector<double> in(k * kCount), out(k * kCount, -1.0);
      for (int q = 0; q < k; ++q) {
        for (int64_t i = 0; i < kCount; ++i) in[q * kCount + i] = Tag(r, q, i);
      }
      if (!c.AllToAll(in.data(), out.data(), kCount, DType::kF64).ok()) return 1;
      int bad = 0;
      for (int q = 0; q < k; ++q) {
        for (int64_t i = 0; i < kCount; ++i) bad += out[q * kCount + i] != Tag(q, r, i);
      }
      return bad;
    });
    EXPECT_EQ(failures, std::vector<int>(k, 0)) << "k=" << k;
  }
}

TEST(AllToAllTest, VariableChunksIncludingEmptyOnes) {
  constexpr int k = 3;
  // Rank `from` sends (from + 2·to) % 4 elements to rank `to`: 0 for some pairs, including
  // rank 0 to itself, so empty chunks are exercised.
  auto n = [](int from, int to) -> int64_t { return (from + 2 * to) % 4; };
  auto failures = OnGlooRanks(k, "v", [&](int r, Communicator& c) {
    std::vector<int64_t> send(k), recv(k);
    std::vector<float> in;
    for (int q = 0; q < k; ++q) {
      send[q] = n(r, q);
      recv[q] = n(q, r);
      for (int64_t i = 0; i < send[q]; ++i) in.push_back(static_cast<float>(Tag(r, q, i)));
    }
    int64_t total = 0;
    for (int64_t v : recv) total += v;
    std::vector<float> out(total, -1.0f);
    if (!c.AllToAllV(in.data(), send, out.data(), recv, DType::kF32).ok()) return 1;
    int bad = 0;
    int64_t at = 0;
    for (int q = 0; q < k; ++q) {
      for (int64_t i = 0; i < recv[q]; ++i) bad += out[at++] != static_cast<float>(Tag(q, r, i));
    }
    return bad;
  });
  EXPECT_EQ(failures, std::vector<int>(k, 0));
}

TEST(AllToAllTest, RankThatSendsAndReceivesNothing) {
  constexpr int k = 2;
  auto failures = OnGlooRanks(k, "z", [](int r, Communicator& c) {
    // Rank 0 sends 3 elements to rank 1 and nothing else moves.
    std::vector<int64_t> send = r == 0 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{0, 0};
    std::vector<int64_t> recv = r == 1 ? std::vector<int64_t>{3, 0} : std::vector<int64_t>{0, 0};
    std::vector<double> in = {1, 2, 3}, out(3, 0);
    if (!c.AllToAllV(r == 0 ? in.data() : nullptr, send, r == 1 ? out.data() : nullptr, recv,
                     DType::kF64)
             .ok()) {
      return 1;
    }
    return r == 1 && out != in ? 1 : 0;
  });
  EXPECT_EQ(failures, std::vector<int>(k, 0));
}

TEST(AllToAllTest, SelfGroupCopiesAndChecksCounts) {
  auto self = MakeSelfCommunicator();
  std::vector<float> in = {1, 2, 3}, out(3, 0);
  ASSERT_TRUE(self->AllToAll(in.data(), out.data(), 3, DType::kF32).ok());
  EXPECT_EQ(out, in);
  std::vector<float> out2(2, 0);
  ASSERT_TRUE(self->AllToAllV(in.data(), {2}, out2.data(), {2}, DType::kF32).ok());
  EXPECT_EQ(out2, (std::vector<float>{1, 2}));
  EXPECT_EQ(self->AllToAllV(in.data(), {2}, out2.data(), {3}, DType::kF32).message(),
            "recv_counts[0] (3) must equal send_counts[0] (2) in a one-rank group");
}

TEST(AllToAllTest, CountsAreChecked) {
  EXPECT_EQ(CheckAllToAllCounts({1, 2}, {1, 2, 3}, 2).message(),
            "recv_counts has 3 entries; must have one per rank (2)");
  EXPECT_EQ(CheckAllToAllCounts({1}, {1, 2}, 2).message(),
            "send_counts has 1 entries; must have one per rank (2)");
  EXPECT_EQ(CheckAllToAllCounts({1, -1}, {1, 2}, 2).message(),
            "send_counts[1] (-1) and recv_counts[1] (2) must be >= 0");
  EXPECT_TRUE(CheckAllToAllCounts({0, 4}, {4, 0}, 2).ok());
}

// The sweep checks every received element (#wrong) and scales algbw by nccl-tests'
// all-to-all factor (k−1)/k.
TEST(AllToAllTest, SweepChecksOutWithNcclTestsBusBandwidth) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kAllToAll, 4), 0.75);
  CollectiveSweepConfig config;
  config.op = CollectiveOp::kAllToAll;
  config.group_size = 4;
  config.sizes_bytes = {64, 8192};
  config.warmup = 1;
  config.iters = 2;
  auto samples = RunCollectiveSweep(config);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  for (const CollectiveSample& s : *samples) {
    EXPECT_EQ(s.wrong, 0) << s.size_bytes;
    EXPECT_DOUBLE_EQ(s.algbw_gbps, static_cast<double>(s.size_bytes) / s.time_s / 1e9);
    EXPECT_DOUBLE_EQ(s.busbw_gbps, s.algbw_gbps * 0.75);
  }
}

}  // namespace
}  // namespace paratune::kernels
