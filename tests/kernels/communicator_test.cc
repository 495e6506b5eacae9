#include "kernels/communicator.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/collective_bench.h"

namespace paratune::kernels {
namespace {

TEST(GlooCommunicatorTest, CollectivesOverThreeThreadRanks) {
  constexpr int k = 3;
  auto rendezvous = MakeInProcessRendezvous();
  std::vector<std::thread> threads;
  std::vector<int> failures(k, 0);
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r]() {
      auto comm = MakeGlooCommunicator(rendezvous, "t", r, k);
      ASSERT_TRUE(comm.ok()) << comm.status();
      Communicator& c = **comm;
      std::vector<float> buf = {1.0f * r, 2.0f, 3.0f + r};
      ASSERT_TRUE(c.AllReduce(buf.data(), 3, DType::kF32).ok());
      if (buf != std::vector<float>{3, 6, 12}) ++failures[r];
      std::vector<double> in = {10.0 * r, 10.0 * r + 1}, out(6);
      ASSERT_TRUE(c.AllGather(in.data(), out.data(), 2, DType::kF64).ok());
      if (out != std::vector<double>{0, 1, 10, 11, 20, 21}) ++failures[r];
      // Reduce-scatter: chunk q of rank r holds r + q; rank r gets sum over ranks = 3 + 3r.
      std::vector<float> rs_in(6), rs_out(2);
      for (int i = 0; i < 6; ++i) rs_in[i] = static_cast<float>(r + i / 2);
      ASSERT_TRUE(c.ReduceScatter(rs_in.data(), rs_out.data(), 2, DType::kF32).ok());
      if (rs_out != std::vector<float>{3.0f + 3 * r, 3.0f + 3 * r}) ++failures[r];
      // In place, as the distributed optimizer uses them: reduce-scatter into this rank's
      // chunk of its input, all-gather from this rank's chunk of the output. The other
      // chunks of the gathered buffer start as garbage that must be overwritten.
      std::vector<float> inplace = rs_in;
      float* mine = inplace.data() + 2 * r;
      ASSERT_TRUE(c.ReduceScatter(inplace.data(), mine, 2, DType::kF32).ok());
      if (mine[0] != 3.0f + 3 * r || mine[1] != 3.0f + 3 * r) ++failures[r];
      for (int q = 0; q < 3; ++q) {
        if (q != r) inplace[2 * q] = inplace[2 * q + 1] = -1.0f;
      }
      ASSERT_TRUE(c.AllGather(mine, inplace.data(), 2, DType::kF32).ok());
      if (inplace != std::vector<float>{3, 3, 6, 6, 9, 9}) ++failures[r];
      float msg = 42.0f + r;
      if (r == 0) {
        ASSERT_TRUE(c.Send(&msg, 1, DType::kF32, 2).ok());
      }
      if (r == 2) {
        ASSERT_TRUE(c.Recv(&msg, 1, DType::kF32, 0).ok());
        if (msg != 42.0f) ++failures[r];
      }
      ASSERT_TRUE(c.Barrier().ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(k, 0));
}

// Ranks that are processes rendezvous through files; here each rank opens its own
// FileStore on the shared directory, exactly as a separate process would.
// The one-rank group copies through the copy it was given (a CUDA backend's device copy),
// and not at all when the collective is in place.
TEST(SelfCommunicatorTest, CopiesThroughItsCopyFunctionUnlessInPlace) {
  int64_t copied = 0;
  auto comm = MakeSelfCommunicator([&copied](void* dst, const void* src, int64_t bytes) {
    std::memcpy(dst, src, bytes);
    copied += bytes;
    return absl::OkStatus();
  });
  std::vector<float> in = {1, 2, 3}, out(3, 0);
  ASSERT_TRUE(comm->AllGather(in.data(), out.data(), 3, DType::kF32).ok());
  EXPECT_EQ(out, in);
  EXPECT_EQ(copied, 12);
  ASSERT_TRUE(comm->ReduceScatter(in.data(), in.data(), 3, DType::kF32).ok());
  EXPECT_EQ(copied, 12);
  ASSERT_TRUE(comm->ReduceScatter(in.data(), out.data(), 2, DType::kF64).ok());
  EXPECT_EQ(copied, 28);
  // The backend overload copies with the backend (host memory on CPU).
  std::unique_ptr<Backend> cpu = MakeCpuBackend(0, 1);
  auto self = MakeSelfCommunicator(*cpu);
  std::vector<float> x = {7, 8}, y(2, 0);
  ASSERT_TRUE(self->AllGather(x.data(), y.data(), 2, DType::kF32).ok());
  EXPECT_EQ(y, x);
}

TEST(CpuBackendTest, ScaleAndCastFp32Fp64) {
  std::unique_ptr<Backend> be = MakeCpuBackend(0, 1);
  std::vector<float> f = {1.5f, -3.0f, 0.1f};
  std::vector<double> d(3, 0);
  ASSERT_TRUE(be->Scale(DType::kF32, f.data(), 2.0f, 3).ok());
  ASSERT_TRUE(be->Cast(DType::kF64, d.data(), DType::kF32, f.data(), 3).ok());
  EXPECT_EQ(d, (std::vector<double>{3.0, -6.0, static_cast<double>(0.1f * 2.0f)}));
  const absl::Status bad = be->Cast(DType::kBF16, f.data(), DType::kF32, f.data(), 3);
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(be->Scale(DType::kBF16, f.data(), 2.0f, 3).ok());
}

TEST(GlooCommunicatorTest, FileStoreRendezvous) {
  char dir[] = "/tmp/paratune_gloo_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::vector<std::thread> threads;
  std::vector<float> sums(2, 0.0f);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r]() {
      auto comm = MakeGlooCommunicator(MakeFileRendezvous(dir), "f", r, 2);
      ASSERT_TRUE(comm.ok()) << comm.status();
      float v = 1.5f + r;
      ASSERT_TRUE((*comm)->AllReduce(&v, 1, DType::kF32).ok());
      sums[r] = v;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums, (std::vector<float>{4.0f, 4.0f}));
  std::filesystem::remove_all(dir);
}

TEST(CollectiveSweepTest, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveOp::kSendRecv, 8), 1.0);
}

TEST(CollectiveSweepTest, EveryOpChecksOutWithZeroWrong) {
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                          CollectiveOp::kReduceScatter, CollectiveOp::kSendRecv}) {
    CollectiveSweepConfig config;
    config.op = op;
    config.group_size = 2;
    config.sizes_bytes = {64, 4096};
    config.warmup = 1;
    config.iters = 2;
    auto samples = RunCollectiveSweep(config);
    ASSERT_TRUE(samples.ok()) << samples.status();
    ASSERT_EQ(samples->size(), 2u);
    EXPECT_EQ((*samples)[1].count, 1024);
    EXPECT_EQ((*samples)[0].wrong + (*samples)[1].wrong, 0) << ToString(op);
    EXPECT_NEAR((*samples)[1].busbw_gbps,
                (*samples)[1].algbw_gbps * BusBandwidthFactor(op, 2), 1e-9);
  }
}

TEST(CollectiveSweepTest, RejectsSizeNotMultipleOfGroup) {
  CollectiveSweepConfig config;
  config.group_size = 4;
  config.sizes_bytes = {24};
  EXPECT_TRUE(absl::IsInvalidArgument(RunCollectiveSweep(config).status()));
}

}  // namespace
}  // namespace paratune::kernels
