#include "inference/simulator.h"

#include <gtest/gtest.h>

#include "search/device_catalog.h"
#include "search/presets.h"

namespace paratune::inference {
namespace {

StepModel Llama8bOnH100() {
  ServingConfig c;
  c.weight_precision = QuantFormat::kFp8;
  c.kv_cache_precision = QuantFormat::kFp8;
  auto s = StepModel::Create(*FindPreset("llama3-8b"), *FindDevice("h100-sxm-80gb"),
                             EngineProfileFor(ServingEngine::kTrtllm), c, 8);
  EXPECT_TRUE(s.ok());
  return *s;
}

SimEngine Engine(const StepModel* m) {
  SimEngine e;
  e.model = m;
  e.kv_token_capacity = 400000;
  e.kv_block_tokens = 64;
  e.max_batch_size = 256;
  e.max_num_tokens = 8192;
  return e;
}

TEST(SimulatorTest, OneRequestsTtftIsItsPrefillStep) {
  const StepModel m = Llama8bOnH100();
  SimWorkload w;
  w.isl = 2048;
  w.osl = 64;
  w.num_requests = 1;
  const SimulationResult r = Simulate({Engine(&m)}, w);
  StepWork prefill;
  prefill.prefill_tokens = 2048;
  prefill.prefill_attention_pairs = 2048.0 * 1024;
  prefill.sampled_sequences = 1;
  // (Step times are cached in single precision.)
  EXPECT_NEAR(r.ttft_ms.p50, m.StepSeconds(prefill) * 1e3, 1e-5);
  // Then 63 decode steps of one sequence: TPOT is their mean.
  EXPECT_EQ(r.completed, 1);
  EXPECT_EQ(r.steps, 64);
}

TEST(SimulatorTest, LittlesLawHoldsInClosedLoop) {
  const StepModel m = Llama8bOnH100();
  SimWorkload w;
  w.isl = 512;
  w.osl = 128;
  w.concurrency = 32;
  w.num_requests = 2000;
  const SimulationResult r = Simulate({Engine(&m)}, w);
  ASSERT_EQ(r.completed, 2000);
  // L = lambda * W: 32 clients always have a request in flight (no think time); the ramp
  // at the start and the drain at the end cost a few percent.
  EXPECT_NEAR(r.requests_per_sec * r.e2e_latency_ms.mean / 1e3, 32.0, 32 * 0.05);
}

TEST(SimulatorTest, ChunkedPrefillSplitsLongPrompts) {
  const StepModel m = Llama8bOnH100();
  SimEngine e = Engine(&m);
  e.max_num_tokens = 1024;
  SimWorkload w;
  w.isl = 4096;
  w.osl = 2;
  w.num_requests = 1;
  const SimulationResult r = Simulate({e}, w);
  // Four 1024-token chunks, then one decode step.
  EXPECT_EQ(r.steps, 5);
}

TEST(SimulatorTest, FullCachePreemptsWhenBlocksAreAllocatedAsSequencesGrow) {
  const StepModel m = Llama8bOnH100();
  SimEngine e = Engine(&m);
  e.reserves_whole_sequence = false;
  e.kv_block_tokens = 16;
  e.kv_token_capacity = 8 * 300;  // Eight prompts fit, their outputs do not.
  SimWorkload w;
  w.isl = 256;
  w.osl = 200;
  w.num_requests = 8;
  const SimulationResult r = Simulate({e}, w);
  EXPECT_EQ(r.completed, 8);
  EXPECT_GT(r.preemptions, 0);
}

TEST(SimulatorTest, StaticBatchRunsToCompletion) {
  const StepModel m = Llama8bOnH100();
  SimWorkload w;
  w.isl = 128;
  w.osl = 16;
  w.num_requests = 64;
  w.batching = Batching::kStatic;
  w.static_batch_size = 32;
  const SimulationResult r = Simulate({Engine(&m)}, w);
  EXPECT_EQ(r.completed, 64);
  // Two batches of one prefill step and 15 decode steps each.
  EXPECT_EQ(r.steps, 32);
}

TEST(SimulatorTest, DisaggregatedFirstTokenIncludesTheKvTransfer) {
  const StepModel m = Llama8bOnH100();
  SimEngine prefill = Engine(&m), decode = Engine(&m);
  prefill.role = EngineRole::kPrefill;
  decode.role = EngineRole::kDecode;
  SimWorkload w;
  w.isl = 1024;
  w.osl = 33;
  w.num_requests = 1;
  const SimulationResult r = Simulate({prefill, decode}, w, [](int64_t isl) { return isl * 1e-6; });
  ASSERT_EQ(r.completed, 1);
  StepWork p;
  p.prefill_tokens = 1024;
  p.prefill_attention_pairs = 1024.0 * 512;
  p.sampled_sequences = 1;
  // The prefill engine produces the first token; 32 decode steps follow on the decode
  // engine after the 1.024 ms transfer.
  EXPECT_NEAR(r.ttft_ms.p50, m.StepSeconds(p) * 1e3, 1e-5);
  StepWork d;
  d.decode_sequences = 1;
  d.sampled_sequences = 1;
  double decode_s = 0;
  for (int i = 1; i <= 32; ++i) {
    d.decode_context_tokens = 1024 + i;
    decode_s += m.StepSeconds(d);
  }
  EXPECT_NEAR(r.e2e_latency_ms.p50, (m.StepSeconds(p) + 1.024e-3 + decode_s) * 1e3, 1e-3);
}

TEST(SimulatorTest, PoissonArrivalsBelowCapacityAreServedAtTheirRate) {
  const StepModel m = Llama8bOnH100();
  SimWorkload w;
  w.isl = 256;
  w.osl = 64;
  w.request_rate = 5;
  w.num_requests = 2000;
  const SimulationResult r = Simulate({Engine(&m)}, w);
  ASSERT_EQ(r.completed, 2000);
  EXPECT_NEAR(r.requests_per_sec, 5.0, 0.3);
  EXPECT_NEAR(r.output_tokens_per_sec, 5.0 * 64, 20);
}

// Latencies count from each request's own arrival: requests that arrive minutes apart are
// each served alone, so every one's TTFT is the lone request's prefill step and its
// end-to-end latency the lone request's (OneRequestsTtftIsItsPrefillStep), however late
// it arrives.
TEST(SimulatorTest, PoissonArrivalsCountLatencyFromTheirOwnArrival) {
  const StepModel m = Llama8bOnH100();
  SimWorkload w;
  w.isl = 2048;
  w.osl = 64;
  w.num_requests = 1;
  const SimulationResult alone = Simulate({Engine(&m)}, w);
  w.request_rate = 0.001;  // a mean gap of 1000 s against well under a second per request
  w.num_requests = 20;
  const SimulationResult r = Simulate({Engine(&m)}, w);
  ASSERT_EQ(r.completed, 20);
  EXPECT_NEAR(r.ttft_ms.p99, alone.ttft_ms.p50, 1e-3);
  EXPECT_NEAR(r.ttft_ms.p50, alone.ttft_ms.p50, 1e-3);
  EXPECT_NEAR(r.e2e_latency_ms.p99, alone.e2e_latency_ms.p50, 1e-3);
}

TEST(SimulatorTest, PercentilesAreNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const LatencyStats s = Percentiles(v);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p90, 90);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
}

}  // namespace
}  // namespace paratune::inference
