// The kernels executor on real CPU kernels: every task kind, and the reported numbers
// checked for consistency against kernels/ itself and the nccl-tests formulas.
#include "worker/kernels_executor.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "kernels/collective_bench.h"
#include "kernels/step_runner.h"
#include "kernels/tensor.h"

namespace paratune::worker {
namespace {

DeviceInventory CpuSlots(int n) {
  std::vector<int> slots;
  for (int i = 0; i < n; ++i) slots.push_back(i);
  absl::StatusOr<DeviceInventory> inv = DiscoverDevices("cpu", slots, "");
  EXPECT_TRUE(inv.ok()) << inv.status();
  return *inv;
}

// A tiny GPT layer: h 64, 4 heads, f 256, s 32, b 2.
v1::ProfileTask LayerTask(int64_t tp, const std::string& recompute = "selective") {
  v1::ProfileTask task;
  task.set_id("layer");
  task.set_device_kind("cpu");
  v1::LayerProfileTask* t = task.mutable_layer();
  t->mutable_shape()->set_hidden_size(64);
  t->mutable_shape()->set_num_attention_heads(4);
  t->mutable_shape()->set_num_query_groups(4);
  t->mutable_shape()->set_ffn_hidden_size(256);
  t->mutable_shape()->set_activation("gelu");
  t->mutable_shape()->set_normalization("layernorm");
  t->set_tp(tp);
  t->set_sequence_parallel(tp > 1);
  t->set_cp(1);
  t->set_micro_batch_size(2);
  t->set_seq_length(32);
  t->set_recompute(recompute);
  t->set_dtype("fp32");
  t->set_warmup(1);
  t->set_iters(3);
  return task;
}

// The StepConfig the executor must build for LayerTask(tp) on `ranks` CPU slots.
kernels::StepConfig ExpectedStepConfig(int64_t tp, int64_t capacity) {
  kernels::StepConfig c;
  c.layer.shape.hidden_size = 64;
  c.layer.shape.num_attention_heads = 4;
  c.layer.shape.num_query_groups = 4;
  c.layer.shape.ffn_hidden_size = 256;
  c.layer.shape.vocab_size = 0;
  c.layer.tp = tp;
  c.layer.sequence_parallel = tp > 1;
  c.layer.micro_batch_size = 2;
  c.layer.seq_length = 32;
  c.layer.recompute = kernels::RecomputeMode::kSelective;
  c.warmup = 1;
  c.iters = 3;
  c.capacity_bytes_per_rank = capacity;
  return c;
}

// Skips when kernels/ does not implement the layer yet (UNSUPPORTED "UNIMPLEMENTED: ...").
#define SKIP_IF_LAYER_UNIMPLEMENTED(result)                                          \
  if ((result).outcome() == v1::TaskResult::OUTCOME_UNSUPPORTED &&                   \
      (result).message().starts_with("UNIMPLEMENTED")) {                             \
    GTEST_SKIP() << (result).message();                                              \
  }

TEST(KernelsExecutorTest, LayerProfileTimingsAndPeaksAreConsistent) {
  DeviceInventory inv = CpuSlots(4);
  auto executor = CreateKernelsExecutor(inv);
  CancelFlag cancel;
  v1::TaskResult r = executor->Execute(LayerTask(2), cancel);
  SKIP_IF_LAYER_UNIMPLEMENTED(r);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  std::map<std::string, v1::PhaseTiming> phases;
  for (const v1::PhaseTiming& p : r.layer().phases()) phases[p.phase()] = p;
  for (const char* name : {"forward", "backward", "recompute", "tp_comm", "total"}) {
    ASSERT_TRUE(phases.contains(name)) << name;
    const v1::PhaseTiming& p = phases[name];
    EXPECT_GT(p.min_s(), 0.0) << name;  // selective recompute and tp 2: every phase works
    EXPECT_LE(p.min_s(), p.median_s()) << name;
    EXPECT_LE(p.median_s(), p.max_s()) << name;
  }
  // total = forward + backward + recompute step by step, so it dominates each part.
  EXPECT_GE(phases["total"].median_s(), phases["forward"].median_s());
  EXPECT_GE(phases["total"].median_s(), phases["backward"].median_s());

  // Peak memory per rank is the tracking allocator's peak: the same as kernels/ reports
  // for the same configuration (allocation sizes are deterministic).
  const int64_t capacity = inv.memory_bytes / 2;  // two ranks share host memory
  absl::StatusOr<kernels::StepResult> direct =
      kernels::RunLayerStep(ExpectedStepConfig(2, capacity));
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_EQ(r.layer().peak_bytes_per_rank_size(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(r.layer().peak_bytes_per_rank(rank), 0);
    EXPECT_EQ(r.layer().peak_bytes_per_rank(rank), direct->peak_bytes_per_rank[rank]);
  }
  EXPECT_EQ(r.layer().activation_bytes(), direct->activation_bytes);
  EXPECT_EQ(r.layer().device_peak_bytes(), 0);  // CPU: no device allocator
}

TEST(KernelsExecutorTest, LastStageExtrasAddLogitsMemory) {
  DeviceInventory inv = CpuSlots(2);
  auto executor = CreateKernelsExecutor(inv);
  CancelFlag cancel;
  v1::ProfileTask plain = LayerTask(1, "none");
  v1::ProfileTask last = plain;
  last.mutable_layer()->mutable_shape()->set_vocab_size(1000);  // padded to 1024
  last.mutable_layer()->set_extras(v1::LayerProfileTask::STAGE_EXTRAS_LAST);
  v1::TaskResult a = executor->Execute(plain, cancel);
  SKIP_IF_LAYER_UNIMPLEMENTED(a);
  v1::TaskResult b = executor->Execute(last, cancel);
  ASSERT_EQ(a.outcome(), v1::TaskResult::OUTCOME_OK) << a.message();
  ASSERT_EQ(b.outcome(), v1::TaskResult::OUTCOME_OK) << b.message();
  // Logits of 2×32 tokens over 1024 words in fp32 are 256 KiB at least.
  EXPECT_GE(b.layer().peak_bytes_per_rank(0) - a.layer().peak_bytes_per_rank(0),
            int64_t{2} * 32 * 1024 * 4);
}

TEST(KernelsExecutorTest, OutOfMemoryIsAResultWithTheBytesRequested) {
  DeviceInventory inv = CpuSlots(2);
  constexpr int64_t kCapacity = 16 * 1024;
  auto executor = CreateKernelsExecutor(inv, {.capacity_bytes_per_rank = kCapacity});
  CancelFlag cancel;
  v1::TaskResult r = executor->Execute(LayerTask(2), cancel);
  SKIP_IF_LAYER_UNIMPLEMENTED(r);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OOM) << r.message();
  absl::StatusOr<kernels::StepResult> direct =
      kernels::RunLayerStep(ExpectedStepConfig(2, kCapacity));
  ASSERT_EQ(direct.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GT(r.oom_bytes_requested(), 0);
  EXPECT_EQ(r.oom_bytes_requested(), kernels::OomBytesRequested(direct.status()).value_or(-1));
}

TEST(KernelsExecutorTest, UnsupportedAndInvalidTasksSayWhy) {
  auto executor = CreateKernelsExecutor(CpuSlots(4));
  CancelFlag cancel;
  auto run = [&](const v1::ProfileTask& t) { return executor->Execute(t, cancel); };

  v1::ProfileTask too_wide = LayerTask(8);
  too_wide.mutable_layer()->mutable_shape()->set_num_attention_heads(8);
  v1::TaskResult r = run(too_wide);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "task needs 8 ranks (tp 8 x cp 1); this worker has 4");

  v1::ProfileTask cp = LayerTask(1);
  cp.mutable_layer()->set_cp(2);
  r = run(cp);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "context parallelism (cp 2) is not implemented by the kernels");

  v1::ProfileTask bf16 = LayerTask(1);
  bf16.mutable_layer()->set_dtype("bf16");
  r = run(bf16);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "dtype bf16 needs the CUDA backend; this worker is CPU-only");

  v1::ProfileTask fp8 = LayerTask(1);
  fp8.mutable_layer()->set_dtype("fp8");
  EXPECT_EQ(run(fp8).message(), "dtype fp8 is not implemented by the kernels");

  v1::ProfileTask bad_tp = LayerTask(3);
  r = run(bad_tp);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_FAILED);
  EXPECT_EQ(r.message(), "invalid task: tp (3) must divide num_attention_heads (4)");

  v1::ProfileTask bad_act = LayerTask(1);
  bad_act.mutable_layer()->mutable_shape()->set_activation("relu");
  EXPECT_EQ(run(bad_act).message(), "invalid task: activation (relu) must be gelu or swiglu");

  v1::ProfileTask wide_comm;
  wide_comm.mutable_collective()->set_op(v1::CollectiveSweepTask::OP_ALL_REDUCE);
  wide_comm.mutable_collective()->set_group_size(8);
  wide_comm.mutable_collective()->add_sizes_bytes(1024);
  r = run(wide_comm);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "task needs 8 ranks (group_size); this worker has 4");

  v1::ProfileTask no_op = wide_comm;
  no_op.mutable_collective()->set_op(v1::CollectiveSweepTask::OP_UNSPECIFIED);
  EXPECT_EQ(run(no_op).message(), "invalid task: collective op is unspecified");
}

TEST(KernelsExecutorTest, CancelledBeforeStartRunsNothing) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  cancel.Cancel();
  EXPECT_EQ(executor->Execute(LayerTask(1), cancel).outcome(),
            v1::TaskResult::OUTCOME_CANCELLED);
}

struct SweepCase {
  v1::CollectiveSweepTask::Op op;
  int64_t k;
  double factor;  // nccl-tests bus-bandwidth factor
};

TEST(KernelsExecutorTest, CollectiveSweepsReportNcclTestsBandwidths) {
  auto executor = CreateKernelsExecutor(CpuSlots(4));
  CancelFlag cancel;
  for (const SweepCase& c : {SweepCase{v1::CollectiveSweepTask::OP_ALL_REDUCE, 4, 2.0 * 3 / 4},
                             SweepCase{v1::CollectiveSweepTask::OP_ALL_GATHER, 4, 3.0 / 4},
                             SweepCase{v1::CollectiveSweepTask::OP_REDUCE_SCATTER, 4, 3.0 / 4},
                             SweepCase{v1::CollectiveSweepTask::OP_ALL_REDUCE, 2, 1.0},
                             SweepCase{v1::CollectiveSweepTask::OP_SEND_RECV, 2, 1.0}}) {
    SCOPED_TRACE(v1::CollectiveSweepTask::Op_Name(c.op) + " k=" + std::to_string(c.k));
    v1::ProfileTask task;
    task.set_id("comm");
    v1::CollectiveSweepTask* t = task.mutable_collective();
    t->set_op(c.op);
    t->set_group_size(c.k);
    t->add_sizes_bytes(4096);
    t->add_sizes_bytes(65536);
    t->set_dtype("fp32");
    t->set_warmup(1);
    t->set_iters(3);
    v1::TaskResult r = executor->Execute(task, cancel);
    ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
    ASSERT_EQ(r.comm().samples_size(), 2);
    for (int i = 0; i < 2; ++i) {
      const v1::CommSample& s = r.comm().samples(i);
      EXPECT_EQ(s.size_bytes(), t->sizes_bytes(i));
      EXPECT_GT(s.time_s(), 0.0);
      EXPECT_EQ(s.wrong(), 0);
      EXPECT_NEAR(s.algbw_gbps(), s.size_bytes() / s.time_s() / 1e9, 1e-9 * s.algbw_gbps());
      EXPECT_NEAR(s.busbw_gbps(), s.algbw_gbps() * c.factor, 1e-9 * s.busbw_gbps());
    }
  }
}

}  // namespace
}  // namespace paratune::worker
