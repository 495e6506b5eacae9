// The kernels executor's mixture-of-experts task kinds on CPU ranks through Gloo: the MoE
// layer profile (hand-derived counts and stored activation bytes, out of memory as an
// OOM result) and the all-to-all sweep (nccl-tests bandwidths, every element checked).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "worker/kernels_executor.h"

namespace paratune::worker {
namespace {

DeviceInventory CpuSlots(int n) {
  std::vector<int> slots;
  for (int i = 0; i < n; ++i) slots.push_back(i);
  absl::StatusOr<DeviceInventory> inv = DiscoverDevices("cpu", slots, "");
  EXPECT_TRUE(inv.ok()) << inv.status();
  return *inv;
}

// h 16, 4 experts of f 8, top-2, one shared expert of 8, 8 tokens per EP rank, balanced.
v1::ProfileTask MoeTask(int64_t ep, int64_t etp) {
  v1::ProfileTask task;
  task.set_id("moe");
  task.set_device_kind("cpu");
  v1::MoeLayerTask* t = task.mutable_moe_layer();
  t->set_hidden_size(16);
  t->set_num_experts(4);
  t->set_moe_router_topk(2);
  t->set_moe_ffn_hidden_size(8);
  t->set_num_shared_experts(1);
  t->set_shared_expert_ffn_hidden_size(8);
  t->set_routing("balanced");
  t->set_aux_loss_coeff(0.01);
  t->set_ep(ep);
  t->set_etp(etp);
  t->set_tokens(8);
  t->set_dtype("fp32");
  t->set_warmup(1);
  t->set_iters(2);
  return task;
}

TEST(KernelsExecutorMoeTest, MoeLayerOnTwoEpRanks) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  const v1::TaskResult r = executor->Execute(MoeTask(2, 1), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  const v1::MoeLayerProfile& p = r.moe_layer();
  // 2 ranks · 8 tokens · top-2 over 4 experts: 8 rows each.
  EXPECT_EQ(std::vector<int64_t>(p.tokens_per_expert().begin(), p.tokens_per_expert().end()),
            std::vector<int64_t>(4, 8));
  // kernels/moe_step_test derives 5184 bytes for this shape at ep 2.
  EXPECT_EQ(p.activation_bytes(), 5184);
  EXPECT_EQ(p.peak_bytes_per_rank_size(), 2);
  EXPECT_NEAR(p.aux_loss(), 0.01, 1e-9);
  std::map<std::string, double> median;
  for (const v1::PhaseTiming& ph : p.phases()) median[ph.phase()] = ph.median_s();
  ASSERT_EQ(median.size(), 7u);
  EXPECT_GT(median["forward"], 0.0);
  EXPECT_GE(median["forward"], median["dispatch_combine_forward"]);
  EXPECT_GE(median["backward"], median["experts_backward"]);
}

TEST(KernelsExecutorMoeTest, MoeLayerWithExpertTensorParallelOnFourRanks) {
  auto executor = CreateKernelsExecutor(CpuSlots(4));
  CancelFlag cancel;
  const v1::TaskResult r = executor->Execute(MoeTask(2, 2), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.moe_layer().peak_bytes_per_rank_size(), 4);
  // ETP halves the stored fc1 and SwiGLU outputs of the routed and shared experts:
  // 5184 − (256 + 128 + 128 + 64)·4 / 2 = 4032.
  EXPECT_EQ(r.moe_layer().activation_bytes(), 4032);
}

TEST(KernelsExecutorMoeTest, MoeLayerOutOfMemoryIsAnOomResult) {
  KernelsExecutorOptions options;
  options.capacity_bytes_per_rank = 4096;
  auto executor = CreateKernelsExecutor(CpuSlots(2), options);
  CancelFlag cancel;
  const v1::TaskResult r = executor->Execute(MoeTask(2, 1), cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OOM) << r.message();
  EXPECT_GT(r.oom_bytes_requested(), 0);
}

// Capacity routing at factor 0.5: each expert takes at most ⌈8·2/4 · 0.5⌉ = 2 of a rank's
// 16 assignments, so at most 2 ranks · 2 = 4 rows per expert.
TEST(KernelsExecutorMoeTest, MoeLayerCapacityRoutingCapsEveryExpert) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task = MoeTask(2, 1);
  task.mutable_moe_layer()->set_routing("capacity");
  task.mutable_moe_layer()->set_capacity_factor(0.5);
  const v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  for (int64_t rows : r.moe_layer().tokens_per_expert()) EXPECT_LE(rows, 4);
  task.mutable_moe_layer()->set_capacity_factor(0);
  EXPECT_EQ(executor->Execute(task, cancel).message(),
            "invalid task: capacity_factor (0) must be > 0 with capacity routing");
}

TEST(KernelsExecutorMoeTest, MoeLayerRefusals) {
  CancelFlag cancel;
  auto two = CreateKernelsExecutor(CpuSlots(2));
  v1::TaskResult r = two->Execute(MoeTask(2, 2), cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "task needs 4 ranks (ep 2 x etp 2); this worker has 2");
  v1::ProfileTask bad = MoeTask(2, 1);
  bad.mutable_moe_layer()->set_routing("random");
  r = two->Execute(bad, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_FAILED);
  EXPECT_EQ(r.message(), "invalid task: routing (random) must be balanced, dropless or capacity");
  bad = MoeTask(2, 1);
  bad.mutable_moe_layer()->set_num_experts(3);
  r = two->Execute(bad, cancel);
  EXPECT_EQ(r.message(), "invalid task: ep (2) must divide num_experts (3)");
}

TEST(KernelsExecutorMoeTest, AllToAllSweepOnTwoRanks) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task;
  task.set_id("a2a");
  v1::CollectiveSweepTask* t = task.mutable_collective();
  t->set_op(v1::CollectiveSweepTask::OP_ALL_TO_ALL);
  t->set_group_size(2);
  t->add_sizes_bytes(1024);
  t->add_sizes_bytes(1 << 16);
  t->set_dtype("fp32");
  t->set_warmup(1);
  t->set_iters(3);
  const v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  ASSERT_EQ(r.comm().samples_size(), 2);
  for (const v1::CommSample& s : r.comm().samples()) {
    EXPECT_EQ(s.wrong(), 0);
    EXPECT_DOUBLE_EQ(s.algbw_gbps(), static_cast<double>(s.size_bytes()) / s.time_s() / 1e9);
    // nccl-tests' all-to-all factor (k − 1)/k at k = 2.
    EXPECT_DOUBLE_EQ(s.busbw_gbps(), s.algbw_gbps() * 0.5);
  }
}

}  // namespace
}  // namespace paratune::worker
