// The continuous batcher's plans, worked out by hand, and the serving loop's invariants
// on a tiny model.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kernels/serving/continuous_batcher.h"
#include "kernels/serving/serve_loop.h"
#include "tests/kernels/serving_harness.h"

namespace paratune::kernels::serving {
namespace {

using testing::TinyServe;

struct Expected {
  int64_t seq, start, num_tokens;
  bool sample;
};

void ExpectPlan(const std::vector<SeqChunk>& plan, const std::vector<Expected>& want) {
  ASSERT_EQ(plan.size(), want.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].seq, want[i].seq) << i;
    EXPECT_EQ(plan[i].start, want[i].start) << i;
    EXPECT_EQ(plan[i].num_tokens, want[i].num_tokens) << i;
    EXPECT_EQ(plan[i].sample, want[i].sample) << i;
  }
}

TEST(ContinuousBatcher, DecodesFirstThenChunkedPrefillWithinTheLimits) {
  BatcherLimits limits;
  limits.max_batch_size = 2;
  limits.max_num_tokens = 8;
  limits.kv_block_size = 4;
  limits.num_kv_blocks = 16;
  ContinuousBatcher b(limits);
  for (int64_t id = 0; id < 3; ++id) ASSERT_TRUE(b.Add(id, 6, 2).ok());
  // Step 1: request 0 whole (6), request 1's first 2 tokens; the budget is spent.
  auto plan = b.Plan();
  ExpectPlan(plan, {{0, 0, 6, true}, {1, 0, 2, false}});
  auto events = b.Commit(plan);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].first);
  // Step 2: request 0 decodes at position 6, request 1 finishes its prompt; request 2
  // waits (two sequences run).
  plan = b.Plan();
  ExpectPlan(plan, {{0, 6, 1, true}, {1, 2, 4, true}});
  events = b.Commit(plan);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].finished);
  EXPECT_TRUE(events[1].first);
  // Step 3: request 0 left; request 1 decodes and request 2 is admitted whole.
  plan = b.Plan();
  ExpectPlan(plan, {{1, 6, 1, true}, {2, 0, 6, true}});
  b.Commit(plan);
  EXPECT_EQ(b.running(), 1);
  EXPECT_EQ(b.waiting(), 0);
}

TEST(ContinuousBatcher, WithoutChunkingAPromptWaitsForRoomAndKvBlocksGateAdmission) {
  BatcherLimits limits;
  limits.max_batch_size = 4;
  limits.max_num_tokens = 10;
  limits.chunked_prefill = false;
  limits.kv_block_size = 4;
  limits.num_kv_blocks = 4;  // 16 tokens
  ContinuousBatcher b(limits);
  ASSERT_TRUE(b.Add(0, 6, 3).ok());  // 8 tokens cached: 2 blocks
  ASSERT_TRUE(b.Add(1, 6, 3).ok());  // 2 blocks
  ASSERT_TRUE(b.Add(2, 2, 2).ok());  // 1 block
  auto plan = b.Plan();              // 6 + 6 > 10: request 1 waits, and request 2 may not overtake
  ExpectPlan(plan, {{0, 0, 6, true}});
  b.Commit(plan);
  plan = b.Plan();
  ExpectPlan(plan, {{0, 6, 1, true}, {1, 0, 6, true}});
  b.Commit(plan);
  EXPECT_EQ(b.free_blocks(), 0);
  plan = b.Plan();  // no block free for request 2
  ExpectPlan(plan, {{0, 7, 1, true}, {1, 6, 1, true}});
  b.Commit(plan);  // request 0 finishes, its 2 blocks return
  EXPECT_EQ(b.free_blocks(), 2);
  EXPECT_EQ(b.Add(3, 20, 1).message(),
            "request 3: isl + osl (21) needs 5 KV blocks, more than the cache holds (4)");
}

// With a window of 8 over half the layers (one whole-context and one windowed group),
// blocks of 4, prompt chunks of at most 4 tokens: a request of 16 + 9 tokens holds 6
// blocks in the whole-context group and at most ceil((8 - 1 + 4) / 4) + 1 = 4 in the
// windowed one, so a pool of 20 admits two where whole contexts (12 each) admit one.
TEST(ContinuousBatcher, WindowedGroupsCountTheWindowsBlocks) {
  BatcherLimits limits;
  limits.max_batch_size = 4;
  limits.max_num_tokens = 4;
  limits.kv_block_size = 4;
  limits.num_kv_blocks = 20;
  limits.kv_full_groups = 1;
  limits.kv_windowed_groups = 1;
  limits.kv_window = 8;
  ASSERT_TRUE(limits.Validate().ok());
  ContinuousBatcher windowed(limits);
  limits.kv_window = 0;
  ContinuousBatcher whole(limits);
  for (int64_t id = 0; id < 3; ++id) {
    ASSERT_TRUE(windowed.Add(id, 16, 9).ok());
    ASSERT_TRUE(whole.Add(id, 16, 9).ok());
  }
  windowed.Plan();
  whole.Plan();
  // The first prompt takes the 4-token budget for 4 steps; the next is admitted beside its
  // first decode, if it fits.
  for (int i = 0; i < 5; ++i) {
    windowed.Commit(windowed.Plan());
    whole.Commit(whole.Plan());
  }
  EXPECT_EQ(windowed.running(), 2);
  EXPECT_EQ(windowed.free_blocks(), 0);
  EXPECT_EQ(whole.running(), 1);
  EXPECT_EQ(whole.free_blocks(), 8);
  limits.kv_windowed_groups = -1;
  EXPECT_FALSE(limits.Validate().ok());
}

// A request prefilled elsewhere (disaggregated serving's decode side): admitted under the
// same batch and block limits, it decodes from position isl (its first token came with
// it) and finishes after osl - 1 decodes; a request of one output token is refused.
TEST(ContinuousBatcher, APrefilledRequestDecodesFromItsPromptsEnd) {
  BatcherLimits limits;
  limits.max_batch_size = 2;
  limits.max_num_tokens = 8;
  limits.kv_block_size = 4;
  limits.num_kv_blocks = 6;
  ContinuousBatcher b(limits);
  ASSERT_TRUE(b.AddPrefilled(0, 10, 3).ok());  // 12 tokens: 3 blocks
  ASSERT_TRUE(b.AddPrefilled(1, 9, 4).ok());   // 12 tokens: 3 blocks
  ASSERT_TRUE(b.AddPrefilled(2, 2, 2).ok());   // waits: no blocks left
  EXPECT_EQ(b.AddPrefilled(3, 4, 1).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SeqChunk> plan = b.Plan();
  ExpectPlan(plan, {{0, 10, 1, true}, {1, 9, 1, true}});
  EXPECT_EQ(b.free_blocks(), 0);
  std::vector<TokenEvent> ev = b.Commit(plan);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_FALSE(ev[0].first);
  EXPECT_FALSE(ev[0].finished);
  plan = b.Plan();
  ExpectPlan(plan, {{0, 11, 1, true}, {1, 10, 1, true}});
  ev = b.Commit(plan);
  EXPECT_TRUE(ev[0].finished);  // request 0's third token
  EXPECT_FALSE(ev[1].finished);
  plan = b.Plan();  // request 2 takes request 0's blocks
  ExpectPlan(plan, {{1, 11, 1, true}, {2, 2, 1, true}});
  ev = b.Commit(plan);
  EXPECT_TRUE(ev[0].finished);
  EXPECT_TRUE(ev[1].finished);
  EXPECT_TRUE(b.Plan().empty());
}

void CheckInvariants(const ServeOptions& o, const ServeResult& r) {
  ASSERT_EQ(static_cast<int64_t>(r.requests.size()), o.trace.num_requests);
  int64_t isl = 0, osl = 0;
  for (const RequestRecord& q : r.requests) {
    EXPECT_EQ(q.output_tokens, q.osl) << q.id;
    EXPECT_GT(q.ttft_s(), 0.0) << q.id;
    EXPECT_LE(q.ttft_s(), q.e2e_s()) << q.id;
    if (q.osl > 1) {
      EXPECT_LT(q.first_token_s, q.finish_s) << q.id;
    }
    isl += q.isl;
    osl += q.osl;
  }
  EXPECT_EQ(r.output_tokens(), osl);
  EXPECT_EQ(r.steps.prefill_tokens, isl);
  EXPECT_EQ(r.steps.decode_tokens, osl - o.trace.num_requests);
  EXPECT_LE(r.steps.max_step_sequences, o.max_batch_size);
  EXPECT_LE(r.steps.max_step_tokens, o.max_num_tokens);
  EXPECT_GT(r.output_tokens_per_s(), 0.0);
  EXPECT_GT(r.peak_bytes, r.weight_bytes + r.kv_cache_bytes);
}

TEST(ServeLoop, OfflineTraceCompletesEveryRequestWithItsOutputTokens) {
  const ServeOptions o = TinyServe(1);
  auto r1 = RunServeLoop(o);
  ASSERT_TRUE(r1.ok()) << r1.status();
  CheckInvariants(o, *r1);
  // The schedule depends on lengths and limits only: TP 2 runs the same steps.
  const ServeOptions o2 = TinyServe(2);
  auto r2 = RunServeLoop(o2);
  ASSERT_TRUE(r2.ok()) << r2.status();
  CheckInvariants(o2, *r2);
  EXPECT_EQ(r2->steps.steps, r1->steps.steps);
  EXPECT_EQ(r2->steps.max_step_tokens, r1->steps.max_step_tokens);
}

TEST(ServeLoop, ClosedLoopNeverExceedsItsConcurrency) {
  ServeOptions o = TinyServe(2);
  o.trace.concurrency = 2;
  auto r = RunServeLoop(o);
  ASSERT_TRUE(r.ok()) << r.status();
  CheckInvariants(o, *r);
  EXPECT_LE(r->steps.max_step_sequences, 2);
}

// TinyServe at TP 1 with every request `isl` + `osl` tokens long (no jitter).
ServeOptions FixedLengths(int64_t requests, int64_t isl, int64_t osl) {
  ServeOptions o = TinyServe(1);
  o.trace.num_requests = requests;
  o.trace.isl = isl;
  o.trace.osl = osl;
  o.trace.isl_jitter = 0;
  o.trace.osl_jitter = 0;
  return o;
}

// One of two layers with a 4-token window, blocks of 4, a pool of 24 blocks per layer (48
// shared): a request of 4 + 28 tokens holds 8 + 8 blocks with whole contexts (3 run at
// once) and 8 + ceil((4 - 1 + 4) / 4) + 1 = 11 with the window (4 run at once); every
// request completes (the batcher's count holds: no step runs out of blocks).
TEST(ServeLoop, SlidingWindowRunsMoreSequencesInTheSamePool) {
  ServeOptions o = FixedLengths(8, 4, 28);
  o.model.kv_block_size = 4;
  o.model.num_kv_blocks = 24;
  o.max_batch_size = 8;
  auto whole = RunServeLoop(o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  CheckInvariants(o, *whole);
  o.model.attention_window = 4;
  o.model.window_attn_skip_freq = 2;
  auto windowed = RunServeLoop(o);
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  CheckInvariants(o, *windowed);
  EXPECT_EQ(windowed->kv_cache_bytes, whole->kv_cache_bytes);
  EXPECT_EQ(whole->steps.max_step_sequences, 3);
  EXPECT_EQ(windowed->steps.max_step_sequences, 4);
}

// Closed loop, 2 clients, 3 requests of 4 + 2 tokens, 5 tokens per step: A's prompt and 1
// token of B's (step 1); A's decode and the rest of B's (2; A finishes, C is issued); B's
// decode (3: C reaches the engine while it runs); C's prompt (4); C's decode (5). Were C
// queued before step 3 was planned it would run beside B's decode and the trace end in 4.
TEST(ServeLoop, AClosedLoopRequestJoinsTheStepAfterTheOneRunningWhenItIsIssued) {
  ServeOptions o = FixedLengths(3, 4, 2);
  o.trace.concurrency = 2;
  o.max_batch_size = 2;
  o.max_num_tokens = 5;
  o.warmup_steps = 0;
  auto r = RunServeLoop(o);
  ASSERT_TRUE(r.ok()) << r.status();
  CheckInvariants(o, *r);
  EXPECT_EQ(r->steps.steps, 5);
}

// Attention data parallelism over 2 ranks (every layer 4 experts, ep 2): each rank serves
// its own requests, dealt round-robin (rank 0: ids 0, 2, 4, 6) with its share of the
// clients, and the ranks step together until all are done. Every request completes with
// its tokens; rank 0 prefilled exactly its requests' prompts and never ran more sequences
// than its clients. Offline and Poisson arrivals (idle ranks step a dummy sequence, all
// ranks idle until the next arrival) complete too.
TEST(ServeLoop, AttentionDataParallelRanksServeTheirOwnRequests) {
  ServeOptions o = TinyServe(2);
  o.model = testing::SmallExpertModel(2, 2);
  o.model.kv_block_size = 8;
  o.model.num_kv_blocks = 32;
  o.model.attention_dp = true;
  for (int mode = 0; mode < 3; ++mode) {
    o.trace.concurrency = mode == 0 ? 3 : 0;
    o.trace.request_rate = mode == 2 ? 400.0 : 0.0;
    auto r = RunServeLoop(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(static_cast<int64_t>(r->requests.size()), o.trace.num_requests) << mode;
    int64_t rank0_isl = 0;
    for (const RequestRecord& q : r->requests) {
      EXPECT_EQ(q.output_tokens, q.osl) << mode << " request " << q.id;
      EXPECT_LE(q.ttft_s(), q.e2e_s()) << mode << " request " << q.id;
      if (q.id % 2 == 0) rank0_isl += q.isl;
    }
    EXPECT_EQ(r->steps.prefill_tokens, rank0_isl) << mode;
    if (mode == 0) {
      EXPECT_LE(r->steps.max_step_sequences, 2);  // rank 0's 2 of 3 clients
    }
    EXPECT_GT(r->output_tokens_per_s(), 0.0) << mode;
  }
}

// Disaggregated serving: prefill instances compute the prompts and first tokens, their KV
// caches move to decode instances. Every request of the aggregated run's trace gets the
// same tokens (greedy sampling over the same weights: the moved cache is the one the
// prompt wrote), at TP 1 and TP 2, with 1 and 2 instances of each kind, offline, in a
// closed loop and under Poisson arrivals; the prefill side computes every prompt token,
// the decode side every other token, and no step exceeds the limits.
TEST(ServeLoop, DisaggregatedInstancesGiveTheAggregatedTokens) {
  for (int64_t tp : {1, 2}) {
    ServeOptions o = TinyServe(tp);
    o.keep_tokens = true;
    auto aggregated = RunServeLoop(o);
    ASSERT_TRUE(aggregated.ok()) << aggregated.status();
    for (auto [prefill, decode, mode] : {std::tuple{1, 1, 0}, {1, 2, 1}, {2, 1, 2}, {2, 2, 0}}) {
      ServeOptions d = o;
      d.prefill_instances = prefill;
      d.decode_instances = decode;
      d.trace.concurrency = mode == 1 ? 3 : 0;
      d.trace.request_rate = mode == 2 ? 400.0 : 0.0;
      auto r = RunServeLoop(d);
      const std::string what = absl::StrCat("tp ", tp, " p", prefill, " d", decode, " mode ", mode);
      ASSERT_TRUE(r.ok()) << what << ": " << r.status();
      CheckInvariants(d, *r);
      ASSERT_EQ(r->requests.size(), aggregated->requests.size()) << what;
      for (size_t i = 0; i < r->requests.size(); ++i) {
        EXPECT_EQ(r->requests[i].tokens, aggregated->requests[i].tokens)
            << what << " request " << i;
      }
    }
  }
}

// Pipeline parallelism: pp stages of tp ranks with pp micro-batch engines in flight (each
// its own scheduler and 1/pp of the KV pool). Every request gets the aggregated run's
// tokens (3 layers as stages of 2 + 1 and 1 + 1 + 1, at tp 1 and 2, offline, closed loop
// and Poisson; a mixture-of-experts model at tp 2 ep 2, pipelined and disaggregated),
// every prompt token and every other token is computed once, and the engines' steps
// together never exceed the limits.
TEST(ServeLoop, PipelineStagesGiveTheAggregatedTokens) {
  for (int64_t tp : {1, 2}) {
    ServeOptions o = TinyServe(tp);
    o.model.num_layers = 3;
    o.keep_tokens = true;
    auto aggregated = RunServeLoop(o);
    ASSERT_TRUE(aggregated.ok()) << aggregated.status();
    for (auto [pp, mode] : {std::pair{2, 0}, {2, 1}, {3, 2}, {3, 0}}) {
      ServeOptions p = o;
      p.model.parallel.pp = pp;
      p.trace.concurrency = mode == 1 ? 3 : 0;
      p.trace.request_rate = mode == 2 ? 400.0 : 0.0;
      auto r = RunServeLoop(p);
      const std::string what = absl::StrCat("tp ", tp, " pp ", pp, " mode ", mode);
      ASSERT_TRUE(r.ok()) << what << ": " << r.status();
      CheckInvariants(p, *r);
      ASSERT_EQ(r->requests.size(), aggregated->requests.size()) << what;
      for (size_t i = 0; i < r->requests.size(); ++i) {
        EXPECT_EQ(r->requests[i].tokens, aggregated->requests[i].tokens)
            << what << " request " << i;
      }
    }
  }
  // Expert layers (4 experts, 2 expert-parallel ranks inside tp 2) split over the stages
  // and disaggregated instances alike.
  ServeOptions moe = TinyServe(2);
  moe.model = testing::SmallExpertModel(2, 2);
  moe.model.kv_block_size = 8;
  moe.model.num_kv_blocks = 32;
  moe.keep_tokens = true;
  auto moe_aggregated = RunServeLoop(moe);
  ASSERT_TRUE(moe_aggregated.ok()) << moe_aggregated.status();
  for (bool pipelined : {true, false}) {
    ServeOptions m = moe;
    if (pipelined) {
      m.model.parallel.pp = 2;
    } else {
      m.prefill_instances = m.decode_instances = 1;
    }
    auto r = RunServeLoop(m);
    ASSERT_TRUE(r.ok()) << pipelined << ": " << r.status();
    CheckInvariants(m, *r);
    for (size_t i = 0; i < r->requests.size(); ++i) {
      EXPECT_EQ(r->requests[i].tokens, moe_aggregated->requests[i].tokens)
          << pipelined << " request " << i;
    }
  }
  ServeOptions bad = TinyServe(1);
  bad.model.parallel.pp = 2;
  bad.prefill_instances = bad.decode_instances = 1;
  EXPECT_NE(RunServeLoop(bad).status().message().find("pp > 1"), std::string::npos);
}

TEST(ServeLoop, DisaggregatedOptionsAreChecked) {
  ServeOptions o = TinyServe(1);
  o.prefill_instances = 1;
  EXPECT_NE(RunServeLoop(o).status().message().find("decode_instances (0)"), std::string::npos);
  o.decode_instances = 1;
  o.model = testing::SmallExpertModel(2, 2);
  o.model.attention_dp = true;
  EXPECT_NE(RunServeLoop(o).status().message().find("attention_dp"), std::string::npos);
}

TEST(ServeLoop, TooSmallMemoryIsResourceExhausted) {
  ServeOptions o = TinyServe(1);
  o.capacity_bytes = 64 << 10;  // the weights alone take more
  auto r = RunServeLoop(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  // Pipeline stages and disaggregated instances end the same way, every rank returning.
  ServeOptions p = o;
  p.model.parallel.pp = 2;
  EXPECT_EQ(RunServeLoop(p).status().code(), absl::StatusCode::kResourceExhausted);
  ServeOptions d = o;
  d.prefill_instances = d.decode_instances = 1;
  EXPECT_EQ(RunServeLoop(d).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace paratune::kernels::serving
