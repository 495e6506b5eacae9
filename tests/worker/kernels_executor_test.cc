// The kernels executor on real CPU kernels: every task kind, and the reported numbers
// checked for consistency against kernels/ itself and the nccl-tests formulas.
#include "worker/kernels_executor.h"

#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "kernels/collective_bench.h"
#include "kernels/step_runner.h"
#include "kernels/tensor.h"
#include "kernels/training/training.h"
#include "server/convert_layout.h"

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
  c.layer.parallel.tp = tp;
  c.layer.parallel.sequence_parallel = tp > 1;
  c.layer.parallel.micro_batch_size = 2;
  c.layer.seq_length = 32;
  c.layer.parallel.recompute = Recompute::kSelective;
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
  EXPECT_EQ(run(bad_act).message(),
            "invalid task: unknown activation 'relu' (expected gelu, swiglu, geglu, "
            "squared_relu)");

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

v1::ProfileTask OptimizerTask(int64_t params) {
  v1::ProfileTask task;
  task.set_id("optimizer");
  task.set_device_kind("cpu");
  task.mutable_optimizer()->set_params(params);
  task.mutable_optimizer()->set_warmup(1);
  task.mutable_optimizer()->set_iters(2);
  return task;
}

TEST(KernelsExecutorTest, OptimizerTaskTimesOneStepPerRankAndPerParameter) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  constexpr int64_t kParams = int64_t{1} << 20;
  v1::TaskResult r = executor->Execute(OptimizerTask(kParams), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  ASSERT_TRUE(r.has_optimizer());
  EXPECT_EQ(r.optimizer().copies(), 2);  // one per slot
  EXPECT_DOUBLE_EQ(r.optimizer().seconds_per_param(), r.optimizer().step_s() / kParams);
  // AdamW reads and writes 4 fp32 arrays of 4 MiB (and the gradient is zeroed and scaled
  // first): over 16 MiB of traffic, more than 10 us even at 1.6 TB/s; a CPU core streams
  // it in well under a second.
  EXPECT_GT(r.optimizer().step_s(), 1e-5);
  EXPECT_LT(r.optimizer().step_s(), 1.0);

  // Four fp32 buffers of 4 MiB per rank do not fit in 1 MiB: the first one is refused.
  auto small = CreateKernelsExecutor(CpuSlots(2), {.capacity_bytes_per_rank = 1 << 20});
  r = small->Execute(OptimizerTask(kParams), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OOM) << r.message();
  EXPECT_EQ(r.oom_bytes_requested(), 4 * kParams);

  r = executor->Execute(OptimizerTask(0), cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_FAILED);
  EXPECT_EQ(r.message(), "invalid task: params (0) must be >= 1");
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

// --- Verify tasks (kernels/training) ----------------------------------------------------

// A tiny GPT (L 4, h 64, a 4, V 256, s 32) under tp1 pp2 dp1, b 1, 4 micro-batches, 3 steps.
v1::ProfileTask VerifyTask(int64_t first_rank, int64_t rank_count) {
  v1::ProfileTask task;
  task.set_id("verify");
  task.set_device_kind("cpu");
  v1::VerifyTask* t = task.mutable_verify();
  t->mutable_shape()->set_hidden_size(64);
  t->mutable_shape()->set_num_attention_heads(4);
  t->mutable_shape()->set_num_query_groups(4);
  t->mutable_shape()->set_ffn_hidden_size(256);
  t->mutable_shape()->set_vocab_size(256);
  t->mutable_shape()->set_activation("gelu");
  t->mutable_shape()->set_normalization("layernorm");
  ParallelConfig layout;
  layout.pp = 2;
  *t->mutable_parallel() = server::ToProto(layout);
  t->set_num_micro_batches(4);
  t->set_seq_length(32);
  t->set_num_layers(4);
  t->set_steps(3);
  t->set_seed(77);
  t->set_first_rank(first_rank);
  t->set_rank_count(rank_count);
  t->set_world_size(2);
  t->set_rendezvous_timeout_ms(300);
  return task;
}

// Executes verify `task` and checks its losses against RunTrainingInProcess(config);
// returns its first loss (NaN if it has none).
double ExpectLossesOfLocalRun(TaskExecutor& executor, const v1::ProfileTask& task,
                              const kernels::training::TrainConfig& config) {
  CancelFlag cancel;
  const v1::TaskResult r = executor.Execute(task, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  absl::StatusOr<kernels::training::TrainResult> local =
      kernels::training::RunTrainingInProcess(config);
  EXPECT_TRUE(local.ok()) << local.status();
  if (!local.ok()) return std::nan("");
  EXPECT_EQ(r.verify().losses_size(), static_cast<int>(local->losses.size()));
  for (int i = 0; i < r.verify().losses_size() && i < static_cast<int>(local->losses.size()); ++i) {
    EXPECT_NEAR(r.verify().losses(i), local->losses[i], 1e-6 * local->losses[i]) << "step " << i;
  }
  return r.verify().losses_size() > 0 ? r.verify().losses(0) : std::nan("");
}

TEST(KernelsExecutorVerify, AWholeLayoutTrainsLikeRunTrainingInProcess) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::TaskResult r = executor->Execute(VerifyTask(0, 2), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  kernels::training::TrainConfig c;
  c.shape.hidden_size = 64;
  c.shape.num_attention_heads = 4;
  c.shape.num_query_groups = 4;
  c.shape.ffn_hidden_size = 256;
  c.shape.vocab_size = 256;
  c.num_layers = 4;
  c.seq_length = 32;
  c.parallel.micro_batch_size = 1;
  c.num_micro_batches = 4;
  c.parallel.pp = 2;
  c.steps = 3;
  c.seed = 77;
  absl::StatusOr<kernels::training::TrainResult> local =
      kernels::training::RunTrainingInProcess(c);
  ASSERT_TRUE(local.ok()) << local.status();
  const v1::VerifyResult& v = r.verify();
  ASSERT_EQ(v.losses_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(v.losses(i), local->losses[i], 1e-6 * local->losses[i]);
  ASSERT_EQ(v.peak_bytes_per_rank_size(), 2);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(v.peak_bytes_per_rank(i), local->ranks[i].peak_bytes);
  EXPECT_EQ(v.first_rank(), 0);
  ASSERT_EQ(v.step_seconds_size(), 3);
  // The median of steps 2 and 3.
  EXPECT_DOUBLE_EQ(v.median_iteration_s(), 0.5 * (v.step_seconds(1) + v.step_seconds(2)));

  // The spec's dropout reaches the trainer: the same losses as a local run with dropout,
  // which differ from the run without.
  v1::ProfileTask with_dropout = VerifyTask(0, 2);
  with_dropout.mutable_verify()->set_dropout(true);
  c.dropout = true;
  const double dropout_first = ExpectLossesOfLocalRun(*executor, with_dropout, c);
  EXPECT_GT(std::abs(dropout_first - v.losses(0)), 1e-4);

  // So do the model's tie_embeddings (over pp 2: the last stage's copy and the embedding
  // group's all-reduce) and its learned positions.
  v1::ProfileTask tied = with_dropout;
  tied.mutable_verify()->set_tie_embeddings(true);
  tied.mutable_verify()->set_position_rows(48);  // and a learned position table
  c.tie_embeddings = true;
  c.position_rows = 48;
  EXPECT_GT(std::abs(ExpectLossesOfLocalRun(*executor, tied, c) - dropout_first), 1e-4);
}

// A store whose Get times out at once, as the coordinator's does when peers never come.
class AbsentPeers final : public kernels::GlooRendezvous {
 public:
  void Set(const std::string&, const std::vector<char>&) override {}
  std::vector<char> Get(const std::string& key) override {
    throw std::runtime_error("key '" + key + "' was not set within 300 ms");
  }
};

TEST(KernelsExecutorVerify, GangPartsNeedARendezvousAndFailWhenPeersNeverCome) {
  CancelFlag cancel;
  // No rendezvous: a part of a multi-worker run cannot run here at all.
  v1::TaskResult r = CreateKernelsExecutor(CpuSlots(2))->Execute(VerifyTask(1, 1), cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "this worker has no coordinator rendezvous for multi-worker verify runs");

  KernelsExecutorOptions options;
  std::string asked_ns;
  int64_t asked_timeout = 0;
  options.rendezvous = [&](const std::string& ns, int64_t timeout_ms) {
    asked_ns = ns;
    asked_timeout = timeout_ms;
    return std::make_shared<AbsentPeers>();
  };
  v1::ProfileTask part = VerifyTask(1, 1);
  part.mutable_verify()->set_rendezvous_namespace("job-1/v1/g-2");
  r = CreateKernelsExecutor(CpuSlots(2), options)->Execute(part, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_FAILED) << r.message();
  EXPECT_NE(r.message().find("was not set within 300 ms"), std::string::npos) << r.message();
  EXPECT_EQ(asked_ns, "job-1/v1/g-2");
  EXPECT_EQ(asked_timeout, 300);

  // More ranks than slots; a layout the trainer rejects (5 stages for 4 layers).
  r = CreateKernelsExecutor(CpuSlots(1))->Execute(VerifyTask(0, 2), cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "task needs 2 ranks; this worker has 1");
  v1::ProfileTask bad = VerifyTask(0, 5);
  bad.mutable_verify()->mutable_parallel()->set_pp(5);
  bad.mutable_verify()->set_world_size(5);
  r = CreateKernelsExecutor(CpuSlots(5))->Execute(bad, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(),
            "kernels/training cannot run this layout: pp·vp (5) must be at most num_layers, 4");
  // A 16-bit spec is trained on CUDA workers only; fp8 by none.
  v1::ProfileTask half = VerifyTask(0, 2);
  half.mutable_verify()->set_dtype("bf16");
  r = CreateKernelsExecutor(CpuSlots(2))->Execute(half, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "dtype bf16 needs the CUDA backend; this worker is CPU-only");
  half.mutable_verify()->set_dtype("fp8");
  r = CreateKernelsExecutor(CpuSlots(2))->Execute(half, cancel);
  EXPECT_EQ(r.message(), "dtype fp8 is not implemented by the kernels");
}

}  // namespace
}  // namespace paratune::worker
