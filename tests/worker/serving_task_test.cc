// Serving step tasks through the kernels executor on 2 CPU (Gloo) ranks: the reported
// bytes against hand-derived formulas, OOM as a result, and the refusals.
#include <gtest/gtest.h>

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

constexpr int64_t kH = 64, kHeads = 8, kGroups = 4, kFfn = 128, kD = kH / kHeads;

// h 64, 8 heads in 4 KV groups, SwiGLU FFN 128.
v1::ProfileTask StepTask(v1::ServingStepTask::Phase phase, int64_t tp) {
  v1::ProfileTask task;
  task.set_id("serving");
  task.set_device_kind("cpu");
  v1::ServingStepTask* t = task.mutable_serving_step();
  t->set_phase(phase);
  t->mutable_shape()->set_hidden_size(kH);
  t->mutable_shape()->set_num_attention_heads(kHeads);
  t->mutable_shape()->set_num_query_groups(kGroups);
  t->mutable_shape()->set_ffn_hidden_size(kFfn);
  t->mutable_shape()->set_activation("swiglu");
  t->mutable_shape()->set_normalization("rmsnorm");
  t->set_tp(tp);
  t->set_batch(3);
  t->set_seq_length(24);
  t->set_context_length(40);
  t->set_kv_block_size(16);
  t->set_num_layers(2);
  t->set_rope(true);
  t->set_warmup(1);
  t->set_iters(3);
  return task;
}

// fp32 bytes of one rank's layer weights: two norms, QKV, projection, SwiGLU FC1, FC2.
int64_t LayerWeightBytes(int64_t tp) {
  const int64_t qkv = (kHeads + 2 * kGroups) / tp * kD * kH, proj = kH * kHeads / tp * kD;
  const int64_t fc1 = 2 * kFfn / tp * kH, fc2 = kH * kFfn / tp;
  return 4 * (2 * kH + qkv + proj + fc1 + fc2);
}

void ExpectPhases(const v1::ServingStepProfile& p) {
  ASSERT_EQ(p.phases_size(), 6);
  const char* names[] = {"total", "gemm", "attention", "other", "tp_comm", "logits"};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(p.phases(i).phase(), names[i]);
    EXPECT_LE(p.phases(i).min_s(), p.phases(i).median_s());
    EXPECT_LE(p.phases(i).median_s(), p.phases(i).max_s());
  }
  for (int i : {0, 1, 2, 3}) EXPECT_GT(p.phases(i).median_s(), 0.0) << names[i];
  // Each part is inside the step's wall time.
  for (int i = 1; i < 6; ++i) EXPECT_LE(p.phases(i).min_s(), p.phases(0).max_s());
}

TEST(ServingStepTask, DecodeOnTwoRanksReportsItsCacheAndWeightsExactly) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  const v1::TaskResult r =
      executor->Execute(StepTask(v1::ServingStepTask::PHASE_DECODE, 2), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  const v1::ServingStepProfile& p = r.serving_step();
  ExpectPhases(p);
  EXPECT_GT(p.phases(4).median_s(), 0.0);  // two ranks all-reduce
  // 3 sequences × ceil(41/16) = 9 blocks of 16 tokens, K and V, 2 KV heads of 8, fp32, 2 layers.
  EXPECT_EQ(p.kv_cache_bytes(), 2 * 9 * 2 * 16 * (kGroups / 2) * kD * 4);
  // Layers, plus the minimal vocabulary (128·tp = 256 rows, 128 per rank) twice and the
  // final norm.
  EXPECT_EQ(p.weight_bytes(), 2 * LayerWeightBytes(2) + 2 * 128 * kH * 4 + kH * 4);
  // Decode: 3 tokens of h 64 fp32 per all-reduce; embedding + 2 per layer.
  EXPECT_EQ(p.tp_allreduce_bytes(), 3 * kH * 4);
  EXPECT_EQ(p.tp_allreduces_per_step(), 5);
  ASSERT_EQ(p.peak_bytes_per_rank_size(), 2);
  EXPECT_EQ(p.peak_bytes_per_rank(0), p.peak_bytes_per_rank(1));
  EXPECT_GT(p.peak_bytes_per_rank(0), p.weight_bytes() + p.kv_cache_bytes());
}

// Layer 0 of 2 attends to a 16-token window: its 3 sequences of 41 tokens hold the blocks
// of positions 25-40 (2 of 16 tokens each) where layer 1 holds all 3, so the pool is
// ceil((9 + 6) / 2) = 8 blocks per layer (16 shared) where whole contexts take 9.
TEST(ServingStepTask, WindowedDecodeHoldsTheWindowsBlocks) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task = StepTask(v1::ServingStepTask::PHASE_DECODE, 2);
  task.mutable_serving_step()->set_attention_window(16);
  task.mutable_serving_step()->set_window_attn_skip_freq(2);
  const v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  ExpectPhases(r.serving_step());
  EXPECT_EQ(r.serving_step().kv_cache_bytes(), 2 * 8 * 2 * 16 * (kGroups / 2) * kD * 4);
}

TEST(ServingStepTask, Int8PrefillWithBf16CacheStoresOneByteWeightsAndTwoByteKv) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task = StepTask(v1::ServingStepTask::PHASE_PREFILL, 1);
  task.mutable_serving_step()->set_weight_precision("int8");
  task.mutable_serving_step()->set_kv_precision("bf16");
  const v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  const v1::ServingStepProfile& p = r.serving_step();
  ExpectPhases(p);
  // 3 prompts × ceil(24/16) = 6 blocks, bf16.
  EXPECT_EQ(p.kv_cache_bytes(), 2 * 6 * 2 * 16 * kGroups * kD * 2);
  // Linear weights one byte each plus an fp32 scale per output row; norms fp32.
  const int64_t qkv_rows = (kHeads + 2 * kGroups) * kD, fc1_rows = 2 * kFfn;
  const int64_t layer = 4 * 2 * kH + (qkv_rows * kH + 4 * qkv_rows) + (kH * kH + 4 * kH) +
                        (fc1_rows * kH + 4 * fc1_rows) + (kH * kFfn + 4 * kH);
  EXPECT_EQ(p.weight_bytes(), 2 * layer + 2 * 128 * kH * 4 + kH * 4);
  EXPECT_EQ(p.tp_allreduce_bytes(), 3 * 24 * kH * 4);  // prefill: 3 prompts of 24 tokens
}

TEST(ServingStepTask, OutOfMemoryIsAResult) {
  KernelsExecutorOptions options;
  options.capacity_bytes_per_rank = 32 << 10;
  auto executor = CreateKernelsExecutor(CpuSlots(2), options);
  CancelFlag cancel;
  const v1::TaskResult r =
      executor->Execute(StepTask(v1::ServingStepTask::PHASE_DECODE, 2), cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OOM) << r.message();
  EXPECT_GT(r.oom_bytes_requested(), 0);
}

TEST(ServingStepTask, RefusalsSayWhy) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task = StepTask(v1::ServingStepTask::PHASE_DECODE, 4);
  v1::TaskResult r = executor->Execute(task, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "task needs 4 ranks (tp 4); this worker has 2");
  task = StepTask(v1::ServingStepTask::PHASE_DECODE, 1);
  task.mutable_serving_step()->set_weight_precision("fp8");
  r = executor->Execute(task, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "weight_precision fp8 is not run by the CPU serving kernels");
  task = StepTask(v1::ServingStepTask::PHASE_UNSPECIFIED, 1);
  r = executor->Execute(task, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_FAILED);
  EXPECT_EQ(r.message(), "invalid task: serving step phase is unspecified");
  task = StepTask(v1::ServingStepTask::PHASE_DECODE, 1);
  task.mutable_serving_step()->set_context_length(0);
  r = executor->Execute(task, cancel);
  EXPECT_EQ(r.message(), "invalid task: context_length (0) must be positive for a decode step");
}

// The TP all-reduces of a decode step are latency-bound: batch·h·4 bytes (3·64·4 = 768 B
// here, 8 KiB for 32 sequences of h 64). A CollectiveSweepTask measures them with
// nccl-tests' conventions: algbw = bytes/time, busbw = algbw·2(n−1)/n (= algbw for 2 ranks).
TEST(ServingStepTask, SmallMessageAllReduceSweepFollowsNcclTestsConventions) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task;
  task.set_id("allreduce");
  v1::CollectiveSweepTask* t = task.mutable_collective();
  t->set_op(v1::CollectiveSweepTask::OP_ALL_REDUCE);
  t->set_group_size(2);
  for (int64_t bytes : {768, 2048, 8192}) t->add_sizes_bytes(bytes);
  t->set_dtype("fp32");
  t->set_warmup(2);
  t->set_iters(5);
  const v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  ASSERT_EQ(r.comm().samples_size(), 3);
  for (const v1::CommSample& s : r.comm().samples()) {
    EXPECT_EQ(s.wrong(), 0);
    EXPECT_NEAR(s.algbw_gbps(), s.size_bytes() / s.time_s() / 1e9, 1e-9 * s.algbw_gbps());
    EXPECT_NEAR(s.busbw_gbps(), s.algbw_gbps(), 1e-9 * s.busbw_gbps());
  }
}

// A serving layout run end to end (the verify stage of an inference job): every request of
// the trace completes with its osl tokens; the latencies are ordered; output tokens/s is
// the trace's tokens over the run.
v1::ProfileTask ServingVerify(int64_t tp) {
  v1::ProfileTask task;
  task.set_id("serving-verify");
  task.set_device_kind("cpu");
  v1::ServingVerifyTask* t = task.mutable_serving_verify();
  *t->mutable_shape() = StepTask(v1::ServingStepTask::PHASE_DECODE, tp).serving_step().shape();
  t->mutable_shape()->set_vocab_size(256);
  t->set_num_layers(2);
  t->set_rope(true);
  t->set_tp(tp);
  t->set_max_batch_size(4);
  t->set_max_num_tokens(64);
  t->set_weight_precision("int8");
  t->set_kv_precision("bf16");
  t->set_kv_block_size(16);
  t->set_num_kv_blocks(8);
  t->set_isl(12);
  t->set_osl(5);
  t->set_concurrency(3);
  t->set_num_requests(7);
  t->set_seed(1);
  t->set_layout_rank(2);
  return task;
}

TEST(ServingVerifyTask, RunsTheTraceThroughTheServingLoop) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  for (int64_t tp : {1, 2}) {
    const v1::TaskResult r = executor->Execute(ServingVerify(tp), cancel);
    ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
    const v1::ServingVerifyResult& v = r.serving_verify();
    EXPECT_EQ(v.requests(), 7);
    EXPECT_EQ(v.wrong(), 0);
    for (const v1::LatencyStats* s : {&v.ttft_ms(), &v.tpot_ms(), &v.e2e_latency_ms()}) {
      EXPECT_GT(s->p50(), 0.0);
      EXPECT_LE(s->p50(), s->p90());
      EXPECT_LE(s->p90(), s->p99());
    }
    EXPECT_LE(v.ttft_ms().p99(), v.e2e_latency_ms().p99());
    // 35 tokens over a run no longer than the 7 requests' e2e latencies back to back (a
    // closed loop always has a request in flight).
    EXPECT_GE(v.output_tokens_per_sec(), 35.0 / (7 * v.e2e_latency_ms().mean() * 1e-3) * 0.999);
  }
}

// Two pipeline stages of tp 1 on a worker of 2 slots run the trace; pp 2 at tp 2 needs 4
// ranks and is refused naming them.
TEST(ServingVerifyTask, PipelineStagesRunOnTheirRanks) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task = ServingVerify(1);
  task.mutable_serving_verify()->set_pp(2);
  v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.serving_verify().requests(), 7);
  EXPECT_EQ(r.serving_verify().wrong(), 0);
  task = ServingVerify(2);
  task.mutable_serving_verify()->set_pp(2);
  r = executor->Execute(task, cancel);
  EXPECT_NE(r.outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_NE(r.message().find("(pp 2 x tp 2)"), std::string::npos) << r.message();
}

// Disaggregated: one prefill and one decode instance of tp 1 on a worker of 2 slots runs
// the trace; 2 of each need 4 ranks and are refused naming them; one kind alone is refused.
TEST(ServingVerifyTask, DisaggregatedInstancesRunOnTheirRanks) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask task = ServingVerify(1);
  task.mutable_serving_verify()->set_prefill_instances(1);
  task.mutable_serving_verify()->set_decode_instances(1);
  v1::TaskResult r = executor->Execute(task, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.serving_verify().requests(), 7);
  EXPECT_EQ(r.serving_verify().wrong(), 0);
  EXPECT_LE(r.serving_verify().ttft_ms().p99(), r.serving_verify().e2e_latency_ms().p99());
  task.mutable_serving_verify()->set_prefill_instances(2);
  task.mutable_serving_verify()->set_decode_instances(2);
  r = executor->Execute(task, cancel);
  EXPECT_NE(r.outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_NE(r.message().find("(prefill_instances 2 + decode_instances 2) x tp 1"),
            std::string::npos)
      << r.message();
  task.mutable_serving_verify()->set_prefill_instances(1);
  task.mutable_serving_verify()->set_decode_instances(0);
  r = executor->Execute(task, cancel);
  EXPECT_NE(r.message().find("must both be >= 1"), std::string::npos) << r.message();
}

// Layer 1 of 2 is an expert layer: 4 SwiGLU experts of 32, top-2, each split over the 2
// ranks (then, at ep 2, two whole experts per rank). A decode step's weights per rank are layer
// 0's, layer 1's attention and norms, the full router [4, 64] and the experts' shards fc1 [4, 32,
// 64] and fc2 [4, 64, 16], fp32; the serving loop runs a trace through it.
void SetExperts(v1::MoeLayerTask* moe) {
  moe->set_hidden_size(kH);
  moe->set_num_experts(4);
  moe->set_moe_router_topk(2);
  moe->set_moe_ffn_hidden_size(32);
  moe->set_routing("dropless");
}

TEST(ServingStepTask, ExpertLayersRunWithEachExpertSplitOverTheRanks) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask step = StepTask(v1::ServingStepTask::PHASE_DECODE, 2);
  SetExperts(step.mutable_serving_step()->mutable_moe());
  step.mutable_serving_step()->set_first_k_dense_layers(1);
  v1::TaskResult r = executor->Execute(step, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  ExpectPhases(r.serving_step());
  const int64_t dense_ffn = 4 * (2 * kFfn / 2 * kH + kH * kFfn / 2);
  const int64_t experts = 4 * (4 * kH + 4 * 32 * kH + 4 * kH * 16);
  EXPECT_EQ(r.serving_step().weight_bytes(),
            2 * LayerWeightBytes(2) - dense_ffn + experts + 2 * 128 * kH * 4 + kH * 4);

  v1::ProfileTask verify = ServingVerify(2);
  SetExperts(verify.mutable_serving_verify()->mutable_moe());
  verify.mutable_serving_verify()->set_first_k_dense_layers(1);
  r = executor->Execute(verify, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.serving_verify().requests(), 7);
  EXPECT_EQ(r.serving_verify().wrong(), 0);
  // ep 2: each rank holds 2 experts whole (fc1 [2, 64, 64], fc2 [2, 64, 32]): the same
  // bytes per rank; the trace runs through it as well.
  step.mutable_serving_step()->mutable_moe()->set_ep(2);
  r = executor->Execute(step, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.serving_step().weight_bytes(),
            2 * LayerWeightBytes(2) - dense_ffn + experts + 2 * 128 * kH * 4 + kH * 4);
  verify.mutable_serving_verify()->mutable_moe()->set_ep(2);
  r = executor->Execute(verify, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.serving_verify().requests(), 7);
  EXPECT_EQ(r.serving_verify().wrong(), 0);
  // int8 at ep 2: every linear one byte per weight and an fp32 scale per output row, the
  // experts' too (2 local experts: fc1 [64, 64], fc2 [64, 32]); the router stays fp32.
  step.mutable_serving_step()->set_weight_precision("int8");
  r = executor->Execute(step, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  const auto int8 = [](int64_t rows, int64_t in) { return rows * in + 4 * rows; };
  const int64_t qkv_rows = (kHeads + 2 * kGroups) / 2 * kD;
  const int64_t attention = 4 * 2 * kH + int8(qkv_rows, kH) + int8(kH, kHeads / 2 * kD);
  const int64_t dense = attention + int8(kFfn, kH) + int8(kH, kFfn / 2);
  const int64_t expert = attention + 4 * 4 * kH + 2 * (int8(64, kH) + int8(kH, 32));
  EXPECT_EQ(r.serving_step().weight_bytes(), dense + expert + 2 * 128 * kH * 4 + kH * 4);
  step.mutable_serving_step()->clear_weight_precision();
  verify.mutable_serving_verify()->mutable_moe()->set_ep(3);
  r = executor->Execute(verify, cancel);
  EXPECT_NE(r.outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_EQ(r.message(), "invalid task: ep (3) must divide tp (2)");
  verify.mutable_serving_verify()->mutable_moe()->set_ep(1);
  // An expert FFN the ranks cannot split is refused naming the field.
  verify.mutable_serving_verify()->mutable_moe()->set_moe_ffn_hidden_size(33);
  r = executor->Execute(verify, cancel);
  EXPECT_NE(r.outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_NE(r.message().find("ffn"), std::string::npos) << r.message();
}

// Attention data parallelism over 2 ranks (layer 1 of 2 an expert layer, ep 2): each rank
// holds attention, the dense layer and the minimal vocabulary (256 rows) whole and 2 of the
// 4 experts whole; rank 0 runs 2 of the 3 sequences (its own cache, every KV head) and no
// TP all-reduce happens.
TEST(ServingStepTask, AttentionDataParallelRanksHoldWholeAttentionAndTheirShareOfExperts) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::ProfileTask step = StepTask(v1::ServingStepTask::PHASE_DECODE, 2);
  SetExperts(step.mutable_serving_step()->mutable_moe());
  step.mutable_serving_step()->mutable_moe()->set_ep(2);
  step.mutable_serving_step()->set_first_k_dense_layers(1);
  step.mutable_serving_step()->set_attention_dp(true);
  v1::TaskResult r = executor->Execute(step, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  const v1::ServingStepProfile& p = r.serving_step();
  ExpectPhases(p);
  // 2 sequences × ceil(41/16) = 6 blocks of 16 tokens, K and V, 4 KV heads of 8, 2 layers.
  EXPECT_EQ(p.kv_cache_bytes(), 2 * 6 * 2 * 16 * kGroups * kD * 4);
  const int64_t dense_ffn = 4 * (2 * kFfn * kH + kH * kFfn);
  const int64_t experts = 4 * (4 * kH + 2 * (64 * kH + kH * 32));
  EXPECT_EQ(p.weight_bytes(),
            2 * LayerWeightBytes(1) - dense_ffn + experts + 2 * 256 * kH * 4 + kH * 4);
  EXPECT_EQ(p.tp_allreduce_bytes(), 0);
  EXPECT_EQ(p.tp_allreduces_per_step(), 0);
  // The serving loop runs the layout: each rank its own requests, every one completed.
  v1::ProfileTask verify = ServingVerify(2);
  SetExperts(verify.mutable_serving_verify()->mutable_moe());
  verify.mutable_serving_verify()->mutable_moe()->set_ep(2);
  verify.mutable_serving_verify()->set_first_k_dense_layers(1);
  verify.mutable_serving_verify()->set_attention_dp(true);
  r = executor->Execute(verify, cancel);
  ASSERT_EQ(r.outcome(), v1::TaskResult::OUTCOME_OK) << r.message();
  EXPECT_EQ(r.serving_verify().requests(), 7);
  EXPECT_EQ(r.serving_verify().wrong(), 0);
  // Without ep = tp the layout is refused naming the rule.
  step.mutable_serving_step()->mutable_moe()->set_ep(1);
  r = executor->Execute(step, cancel);
  EXPECT_NE(r.outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_EQ(r.message(), "invalid task: attention_dp needs experts and ep (1) = tp (2)");
}

TEST(ServingVerifyTask, RefusalsSayWhy) {
  auto executor = CreateKernelsExecutor(CpuSlots(2));
  CancelFlag cancel;
  v1::TaskResult r = executor->Execute(ServingVerify(4), cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "task needs 4 ranks (tp 4); this worker has 2");
  v1::ProfileTask task = ServingVerify(1);
  task.mutable_serving_verify()->set_kv_precision("fp16");
  r = executor->Execute(task, cancel);
  EXPECT_EQ(r.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(r.message(), "kv_precision fp16 is not run by the CPU serving kernels");
}

}  // namespace
}  // namespace paratune::worker
