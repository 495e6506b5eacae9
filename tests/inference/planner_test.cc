#include "inference/planner.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <utility>

#include "inference/spec_io.h"

namespace paratune::inference {
namespace {

using nlohmann::json;

json Spec() {
  return json::parse(R"({
    "kind": "inference",
    "model": {"preset": "llama3-70b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "serving": {"engine": "trtllm", "isl": 2048, "osl": 128, "concurrency": 64,
                "num_requests": 400, "ttft_ms": {"p99": 6000}, "tpot_ms": {"p99": 50}},
    "search": {"tp": [2, 4, 8], "pp": [1], "weight_precision": ["fp8"],
               "kv_cache_precision": ["fp8"], "max_batch_size": [64, 256],
               "max_num_tokens": [8192], "disaggregated": [false, true]}
  })");
}

// The estimate of the layout a spec pins.
absl::StatusOr<InferenceRankedConfig> EstimatePinned(const json& spec_json) {
  auto spec = InferenceJobSpecFromJson(spec_json);
  if (!spec.ok()) return spec.status();
  auto config = PinnedServingConfig(*spec);
  if (!config.ok()) return config.status();
  return EstimateInference(*spec, *config);
}

TEST(PlannerTest, RanksLayoutsMeetingTheLimitsFirst) {
  auto spec = InferenceJobSpecFromJson(Spec());
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = PlanInference(*spec);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(result->ranked.empty());
  EXPECT_TRUE(result->ranked[0].meets_limits);
  for (size_t i = 1; i < result->ranked.size(); ++i) {
    const auto& a = result->ranked[i - 1];
    const auto& b = result->ranked[i];
    if (a.meets_limits == b.meets_limits) {
      EXPECT_GE(a.output_tokens_per_sec_per_gpu, b.output_tokens_per_sec_per_gpu);
    } else {
      EXPECT_TRUE(a.meets_limits);
    }
  }
  EXPECT_FALSE(result->pareto_front.empty());
  EXPECT_FALSE(result->recommendation.empty());
}

TEST(PlannerTest, ParetoFrontKeepsOnlyUndominatedLayouts) {
  std::vector<InferenceRankedConfig> v(4);
  const double gpu[] = {100, 80, 60, 90}, user[] = {10, 20, 30, 5};
  for (int i = 0; i < 4; ++i) {
    v[i].config.tp = i + 1;
    v[i].output_tokens_per_sec_per_gpu = gpu[i];
    v[i].tokens_per_sec_per_user = user[i];
  }
  const auto front = ParetoFront(v);
  ASSERT_EQ(front.size(), 3u);  // (90, 5) is dominated by (100, 10).
  EXPECT_EQ(front[0].config.tp, 1);
  EXPECT_EQ(front[1].config.tp, 2);
  EXPECT_EQ(front[2].config.tp, 3);
  EXPECT_TRUE(front[0].pareto_optimal);
}

TEST(PlannerTest, TightTtftLimitRejectsWithTheMiss) {
  json j = Spec();
  j["serving"]["ttft_ms"] = {{"p99", 1.0}};
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok());
  auto result = PlanInference(*spec);
  ASSERT_TRUE(result.ok());
  ASSERT_FALSE(result->ranked.empty());
  EXPECT_FALSE(result->ranked[0].meets_limits);
  bool found = false;
  for (const auto& r : result->rejected) {
    if (r.rule == "ttft") {
      found = true;
      EXPECT_EQ(r.reason.rfind("misses TTFT p99 by ", 0), 0u) << r.reason;
    }
  }
  EXPECT_TRUE(found);
}

TEST(PlannerTest, ModelThatFitsNowhereSaysByHowMuch) {
  json j = Spec();
  j["model"] = {{"preset", "llama3.1-405b"}};
  j["cluster"]["num_gpus"] = 2;
  j["search"] = {{"tp", {1, 2}}, {"pp", {1}}, {"weight_precision", {"bf16"}}};
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = PlanInference(*spec);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("misses by"), std::string::npos)
      << result.status().message();
}

TEST(PlannerTest, DisaggregatedSearchSplitsTheBudgetBetweenThePools) {
  json j = Spec();
  j["search"]["tp"] = {2};
  j["search"]["disaggregated"] = {true};
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok());
  auto all = PlanInference(*spec);
  ASSERT_TRUE(all.ok());
  // Four TP2 instances: P1:D3, P2:D2 and P3:D1, each with one batch limit (64 clients put
  // at most 64 sequences on a decode engine, so the limit 256 is the same layout as 64).
  EXPECT_EQ(all->candidates_considered, 3);
  j["search"]["prefill_replicas"] = {1};
  spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok());
  auto pinned = PlanInference(*spec);
  ASSERT_TRUE(pinned.ok());
  ASSERT_FALSE(pinned->ranked.empty());
  for (const auto& r : pinned->ranked) {
    EXPECT_EQ(r.config.prefill_replicas, 1);
    EXPECT_EQ(r.config.decode_replicas, 3);
    EXPECT_EQ(r.config.num_gpus(), 8);
  }
}

TEST(PlannerTest, EstimateMatchesThePinnedLayout) {
  json j = Spec();
  j["search"] = {{"tp", 8}, {"pp", 1}, {"weight_precision", "fp8"}, {"kv_cache_precision", "fp8"}};
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok());
  auto config = PinnedServingConfig(*spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->replicas, 1);
  EXPECT_EQ(config->max_batch_size, 2048);
  auto r = EstimateInference(*spec, *config);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->output_tokens_per_sec_per_gpu, 0);
  EXPECT_DOUBLE_EQ(r->output_tokens_per_sec, r->output_tokens_per_sec_per_gpu * 8);
  EXPECT_LE(r->ttft_ms.p50, r->ttft_ms.p99);
}

// Mixtral 8x7B on 8 H100: by default every layout holds all eight experts per rank (sliced
// by tp).
TEST(PlannerTest, MixtureOfExpertsModelsRankWithExpertsShardedByTp) {
  json j = Spec();
  j["model"] = {{"preset", "mixtral-8x7b"}};
  j["search"]["tp"] = {1, 2, 4, 8};
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = PlanInference(*spec);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(result->ranked.empty());
  EXPECT_GT(result->ranked[0].output_tokens_per_sec_per_gpu, 0);
  for (const auto& r : result->ranked) EXPECT_EQ(r.config.ep, 1) << r.config.ToString();
}

// search.ep lists expert-parallel groups: each (tp, ep) pair with ep dividing tp is a
// layout of tp x pp GPUs per instance, and the pinned estimate carries its ep.
TEST(PlannerTest, ExpertParallelLayoutsSplitTheTpRanks) {
  json j = Spec();
  j["model"] = {{"preset", "mixtral-8x7b"}};
  j["search"]["tp"] = {2, 4};
  j["search"]["ep"] = {1, 2, 4};
  j["search"]["disaggregated"] = {false};
  j["search"]["top_k"] = 100;
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = PlanInference(*spec);
  ASSERT_TRUE(result.ok()) << result.status();
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const auto& r : result->ranked) {
    EXPECT_EQ(r.config.tp % r.config.ep, 0) << r.config.ToString();
    EXPECT_EQ(r.config.num_gpus(), r.config.tp * r.config.pp * r.config.replicas);
    shapes.insert({r.config.tp, r.config.ep});
  }
  EXPECT_EQ(shapes,
            (std::set<std::pair<int64_t, int64_t>>{{2, 1}, {2, 2}, {4, 1}, {4, 2}, {4, 4}}));
  // A pinned ep: the estimate is that layout; an ep that does not divide tp names the rule.
  ServingConfig c;
  c.tp = 4;
  c.ep = 4;
  c.replicas = 2;
  c.weight_precision = c.kv_cache_precision = QuantFormat::kFp8;
  auto r = EstimateInference(*spec, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.ep, 4);
  EXPECT_DOUBLE_EQ(r->output_tokens_per_sec, r->output_tokens_per_sec_per_gpu * 8);
  c.tp = 2;
  c.replicas = 4;
  auto refused = EstimateInference(*spec, c);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "ep (4) must divide tp (2): the experts split over ep groups of tp / ep ranks "
            "(TensorRT-LLM moe_tp_size x moe_ep_size = tp_size)");
}

// DeepSeek-V3 on 8 H200 at high concurrency: with tensor-parallel attention every rank
// keeps every sequence's MLA latent, so the KV pool caps the batch; attention DP keeps each
// sequence on one rank (8 x the tokens) and runs the unsharded attention on an eighth of
// the batch, and the planner ranks it first.
TEST(PlannerTest, DeepSeekV3OnEightH200PrefersAttentionDataParallelismAtHighConcurrency) {
  json j = json::parse(R"({
    "kind": "inference",
    "model": {"preset": "deepseek-v3"},
    "cluster": {"gpu": "h200-141gb", "num_gpus": 8, "gpus_per_node": 8},
    "serving": {"engine": "trtllm", "isl": 1024, "osl": 1024, "concurrency": 1024,
                "num_requests": 2048},
    "search": {"tp": [8], "pp": [1], "weight_precision": ["fp8"],
               "kv_cache_precision": ["fp8"], "max_batch_size": [128, 1024],
               "max_num_tokens": [8192], "disaggregated": [false],
               "attention_dp": [false, true]}
  })");
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto result = PlanInference(*spec);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(result->ranked.size(), 2u);
  const InferenceRankedConfig& best = result->ranked[0];
  EXPECT_TRUE(best.config.attention_dp) << best.config.ToString();
  EXPECT_EQ(best.config.ep, 8);
  const InferenceRankedConfig* tp_attention = nullptr;
  for (const auto& r : result->ranked) {
    if (!r.config.attention_dp && tp_attention == nullptr) tp_attention = &r;
  }
  ASSERT_NE(tp_attention, nullptr);
  EXPECT_GT(best.max_concurrency, tp_attention->max_concurrency);
  std::cout << "# DeepSeek-V3 8 x H200, concurrency 1024, 1k/1k: " << best.config.ToString() << " "
            << best.output_tokens_per_sec_per_gpu << " tok/s/GPU (max concurrency "
            << best.max_concurrency << ", TPOT p50 " << best.tpot_ms.p50 << " ms) vs "
            << tp_attention->config.ToString() << " " << tp_attention->output_tokens_per_sec_per_gpu
            << " tok/s/GPU (max concurrency " << tp_attention->max_concurrency << ", TPOT p50 "
            << tp_attention->tpot_ms.p50 << " ms)\n";
}

// Refusals name the field and the rule.
// A model whose layers alternate between a 128-token window and the whole context holds
// about half the KV cache per long sequence, so the same pool admits about twice the
// sequences; the estimate says so in a note.
TEST(PlannerTest, SlidingWindowLayersKeepOnlyTheWindowsKvCache) {
  json j = json::parse(R"({
    "kind": "inference",
    "model": {"preset": "gpt-oss-120b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 2, "gpus_per_node": 8},
    "serving": {"engine": "vllm", "isl": 16000, "osl": 1000, "num_requests": 200},
    "search": {"tp": 2, "pp": 1, "weight_precision": "fp8", "kv_cache_precision": "fp8",
               "max_batch_size": 512, "max_num_tokens": 8192}
  })");
  const absl::StatusOr<InferenceRankedConfig> w = EstimatePinned(j);
  ASSERT_TRUE(w.ok()) << w.status();
  const InferenceRankedConfig& windowed = *w;
  j["model"]["sliding_window"] = 0;
  const absl::StatusOr<InferenceRankedConfig> f = EstimatePinned(j);
  ASSERT_TRUE(f.ok()) << f.status();
  const InferenceRankedConfig& full = *f;
  EXPECT_DOUBLE_EQ(windowed.memory.kv_cache, full.memory.kv_cache);
  // 17,000 tokens: 17,008 in 16-token blocks, 144 in a windowed layer.
  const double ratio = 17008.0 / (0.5 * 17008 + 0.5 * 144);
  EXPECT_NEAR(static_cast<double>(windowed.max_concurrency) / full.max_concurrency, ratio, 0.05);
  EXPECT_GT(windowed.output_tokens_per_sec_per_gpu, full.output_tokens_per_sec_per_gpu);
  bool noted = false;
  for (const std::string& n : windowed.notes) {
    noted = noted || n.find("18 of 36 layers attend to a 128-token window") != std::string::npos;
  }
  EXPECT_TRUE(noted);
}

TEST(PlannerTest, AttentionDataParallelRefusalsNameTheField) {
  json dense = Spec();
  dense["search"]["attention_dp"] = {true};
  auto d = InferenceJobSpecFromJson(dense);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(std::string(d.status().message())
                .rfind("search.attention_dp (true) needs a "
                       "mixture-of-experts model",
                       0),
            0u)
      << d.status();
  json moe = Spec();
  moe["model"] = {{"preset", "mixtral-8x7b"}};
  moe["search"]["attention_dp"] = {true};
  moe["search"]["tp"] = {1};
  auto t = InferenceJobSpecFromJson(moe);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(std::string(t.status().message()).rfind("search.attention_dp (true) needs tp > 1", 0),
            0u)
      << t.status();
  moe["search"]["tp"] = {8};
  moe["search"]["ep"] = {4};
  auto e = InferenceJobSpecFromJson(moe);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(std::string(e.status().message())
                .rfind("search.ep[0] (4) must equal tp (8) when "
                       "search.attention_dp is true",
                       0),
            0u)
      << e.status();
  // A pinned estimate with attention DP and no ep sets ep = tp.
  moe["search"].erase("ep");
  moe["search"]["max_batch_size"] = {64};
  moe["search"]["disaggregated"] = {false};
  moe["search"]["max_num_tokens"] = {8192};
  auto r = EstimatePinned(moe);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->config.attention_dp);
  EXPECT_EQ(r->config.ep, 8);
}

}  // namespace
}  // namespace paratune::inference
