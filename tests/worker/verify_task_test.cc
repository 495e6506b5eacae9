// A layout's way from the coordinator's ranking to the worker's trainer: MakeVerifyTask
// (server/verify_plan.h) writes the VerifyTask, TrainConfigFromVerifyTask and the kernels
// executor (worker/kernels_executor.h) read it, both through server/convert_layout.h.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/training/training.h"
#include "server/convert_layout.h"
#include "server/verify_plan.h"
#include "worker/kernels_executor.h"

namespace paratune::worker {
namespace {

namespace kt = kernels::training;

// A tiny GPT: L 4, h 64, a 4, f 256, V 200 (padded to 128·tp), s 32, global batch 8.
JobSpec TinySpec(int64_t num_layers = 4) {
  JobSpec s;
  s.model.num_layers = num_layers;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.vocab_size = 200;
  s.training.seq_length = 32;
  s.training.global_batch_size = 8;
  s.training.precision = Precision::kFp32;
  s.cluster.gpu = "cpu";
  return s;
}

v1::RankedConfig Ranked(const ParallelConfig& layout) {
  v1::RankedConfig r;
  r.set_rank(1);
  *r.mutable_config() = server::ToProto(layout);
  return r;
}

// The whole layout as one part (in-process rendezvous).
v1::ProfileTask TaskFor(const JobSpec& spec, const ParallelConfig& layout) {
  server::VerifyRunOptions options;
  options.steps = 2;
  absl::StatusOr<v1::VerifyTask> verify =
      server::MakeVerifyTask(spec, Ranked(layout), {0, layout.world_size()}, options, "unused");
  EXPECT_TRUE(verify.ok()) << verify.status();
  v1::ProfileTask task;
  task.set_id("verify");
  task.set_device_kind("cpu");
  if (verify.ok()) *task.mutable_verify() = *verify;
  return task;
}

DeviceInventory CpuSlots(int n) {
  std::vector<int> slots;
  for (int i = 0; i < n; ++i) slots.push_back(i);
  absl::StatusOr<DeviceInventory> inv = DiscoverDevices("cpu", slots, "");
  EXPECT_TRUE(inv.ok()) << inv.status();
  return *inv;
}

// Every field of the layout, each away from its default.
ParallelConfig EveryFieldSet() {
  ParallelConfig c;
  c.tp = 2;
  c.pp = 4;
  c.dp = 3;
  c.cp = 2;
  c.vp = 2;
  c.micro_batch_size = 2;
  c.sequence_parallel = true;
  c.recompute = Recompute::kFull;
  c.recompute_num_layers = 1;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.split_counts_embedding_and_loss = true;
  c.overlap_grad_reduce = false;
  c.tp_comm_overlap = true;
  c.overlap_p2p_comm = false;
  return c;
}

TEST(VerifyTaskLayout, EveryFieldReachesTheTrainer) {
  // One change per field, from a base with every field changed: a field the task drops
  // comes back as the base's value and breaks the equality of its case.
  const ParallelConfig base = EveryFieldSet();
  const std::vector<std::function<void(ParallelConfig&)>> changes = {
      [](ParallelConfig&) {},
      [](ParallelConfig& c) { c.tp = 4; },
      [](ParallelConfig& c) { c.pp = 2; },
      [](ParallelConfig& c) { c.dp = 1; },
      [](ParallelConfig& c) { c.cp = 1; },
      [](ParallelConfig& c) { c.vp = 1; },
      [](ParallelConfig& c) { c.micro_batch_size = 1; },
      [](ParallelConfig& c) { c.sequence_parallel = false; },
      [](ParallelConfig& c) { c.recompute = Recompute::kSelective; },
      [](ParallelConfig& c) { c.recompute_num_layers = 2; },
      [](ParallelConfig& c) { c.data_parallel_sharding = DataParallelSharding::kNone; },
      [](ParallelConfig& c) { c.split_counts_embedding_and_loss = false; },
      [](ParallelConfig& c) { c.overlap_grad_reduce = true; },
      [](ParallelConfig& c) { c.tp_comm_overlap = false; },
      [](ParallelConfig& c) { c.overlap_p2p_comm = true; },
  };
  JobSpec spec = TinySpec(8);
  spec.training.global_batch_size = 48;
  spec.training.dropout = true;
  spec.training.flash_attention = true;
  spec.model.tie_embeddings = true;
  spec.model.position_embedding = PositionEmbedding::kLearned;
  spec.model.max_position_embeddings = 64;
  for (size_t i = 0; i < changes.size(); ++i) {
    ParallelConfig layout = base;
    changes[i](layout);
    EXPECT_EQ(layout == base, i == 0) << "case " << i;
    const v1::ProfileTask task = TaskFor(spec, layout);
    absl::StatusOr<kt::TrainConfig> c = TrainConfigFromVerifyTask(task.verify());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->parallel, layout)
        << "case " << i << ": sent " << layout.ToString() << ", trained " << c->parallel.ToString();
    EXPECT_EQ(task.verify().world_size(), layout.world_size());
    // The rest of the task: the model, the batch and the run.
    EXPECT_EQ(c->num_layers, 8);
    EXPECT_EQ(c->seq_length, 32);
    EXPECT_EQ(c->num_micro_batches, 48 / (layout.micro_batch_size * layout.dp));
    EXPECT_EQ(c->shape.hidden_size, 64);
    EXPECT_EQ(c->shape.num_attention_heads, 4);
    EXPECT_EQ(c->shape.num_query_groups, 4);
    EXPECT_EQ(c->shape.ffn_hidden_size, 256);
    EXPECT_EQ(c->shape.vocab_size % (128 * layout.tp), 0);
    EXPECT_TRUE(c->dropout);
    EXPECT_TRUE(c->flash_attention);
    EXPECT_TRUE(c->tie_embeddings);
    EXPECT_EQ(c->position_rows, 64);
    EXPECT_EQ(c->steps, 2);
  }
}

TEST(VerifyTaskLayout, ANormalLayoutTrainsAsSent) {
  ParallelConfig layout;
  layout.pp = 2;
  layout.dp = 2;
  layout.micro_batch_size = 2;
  layout.recompute = Recompute::kSelective;
  layout.data_parallel_sharding = DataParallelSharding::kOptimizer;
  const v1::ProfileTask task = TaskFor(TinySpec(), layout);
  absl::StatusOr<kt::TrainConfig> c = TrainConfigFromVerifyTask(task.verify());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->parallel, layout);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
  CancelFlag cancel;
  const v1::TaskResult r = CreateKernelsExecutor(CpuSlots(4))->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.verify().losses_size(), 2);
  EXPECT_EQ(r.verify().peak_bytes_per_rank_size(), 4);
}

// Llama 3.1 405B's 126 layers over pp 8 · vp 8 in small: 6 layers over pp 2 · vp 2, which
// the planner splits counting the embedding and the loss (1, 2 | 2, 1 layers per chunk).
// The trainer trains that split as sent, and its loss matches the same model on one rank.
TEST(VerifyTaskLayout, AnEmbeddingAwareSplitTrainsAsSent) {
  ParallelConfig layout;
  layout.pp = 2;
  layout.vp = 2;
  layout.split_counts_embedding_and_loss = true;
  ASSERT_EQ(layout.LayersInChunk(6, 0, 0), 1);
  ASSERT_EQ(layout.LayersInChunk(6, 0, 1), 2);
  ASSERT_EQ(layout.LayersInChunk(6, 1, 1), 1);
  const v1::ProfileTask task = TaskFor(TinySpec(6), layout);
  EXPECT_TRUE(task.verify().parallel().split_counts_embedding_and_loss());
  CancelFlag cancel;
  const v1::TaskResult r = CreateKernelsExecutor(CpuSlots(2))->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  const v1::TaskResult one =
      CreateKernelsExecutor(CpuSlots(1))->Execute(TaskFor(TinySpec(6), ParallelConfig{}), cancel);
  ASSERT_EQ(one.outcome(), v1::TaskResult::OUTCOME_OK) << one.message();
  ASSERT_EQ(r.verify().losses_size(), one.verify().losses_size());
  for (int i = 0; i < r.verify().losses_size(); ++i) {
    EXPECT_NEAR(r.verify().losses(i), one.verify().losses(i), 1e-5 * one.verify().losses(i));
  }
}

// The layout fields the trainer does not run are refused, naming the field.
TEST(VerifyTaskLayout, FieldsTheTrainerDoesNotRunAreRefusedNamingThem) {
  CancelFlag cancel;
  ParallelConfig partial;
  partial.pp = 2;
  partial.recompute = Recompute::kFull;
  partial.recompute_num_layers = 1;
  EXPECT_EQ(
      CreateKernelsExecutor(CpuSlots(2))->Execute(TaskFor(TinySpec(), partial), cancel).message(),
      "kernels/training cannot run this layout: recompute_num_layers (1) must be 0: "
      "kernels/training recomputes every layer or none");
  ParallelConfig context;
  context.cp = 2;
  const v1::TaskResult cp =
      CreateKernelsExecutor(CpuSlots(2))->Execute(TaskFor(TinySpec(), context), cancel);
  EXPECT_EQ(cp.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(cp.message(),
            "kernels/training cannot run this layout: context parallelism (cp 2) is not "
            "implemented by kernels/training");
}

TEST(VerifyTaskLayout, AnUnknownRecomputeModeIsAnInvalidTask) {
  v1::ProfileTask task = TaskFor(TinySpec(), ParallelConfig{});
  task.mutable_verify()->mutable_parallel()->set_recompute("sometimes");
  CancelFlag cancel;
  const v1::TaskResult r = CreateKernelsExecutor(CpuSlots(1))->Execute(task, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_FAILED);
  EXPECT_EQ(r.message(),
            "invalid task: recompute: unknown recompute 'sometimes' (expected none, selective, "
            "full)");
}

}  // namespace
}  // namespace paratune::worker
