#include "inference/spec_io.h"

#include <gtest/gtest.h>

namespace paratune::inference {
namespace {

using nlohmann::json;

json Spec() {
  return json::parse(R"({
    "kind": "inference",
    "model": {"preset": "llama3-70b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "serving": {"isl": 2048, "osl": 128, "concurrency": 64, "tpot_ms": {"p99": 50}},
    "search": {"tp": [1, 2, 4, 8], "weight_precision": ["bf16", "fp8"]}
  })");
}

std::string Error(const json& j) {
  auto s = InferenceJobSpecFromJson(j);
  return s.ok() ? "" : std::string(s.status().message());
}

TEST(SpecIoTest, ReadsAndRoundTrips) {
  auto spec = InferenceJobSpecFromJson(Spec());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_layers, 80);
  EXPECT_EQ(spec->serving.engine, ServingEngine::kTrtllm);
  EXPECT_EQ(spec->serving.tpot_ms.p99, 50);
  EXPECT_EQ(spec->search.tp, (std::vector<int64_t>{1, 2, 4, 8}));
  auto again = InferenceJobSpecFromJson(InferenceJobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(InferenceJobSpecToJson(*again), InferenceJobSpecToJson(*spec));
}

TEST(SpecIoTest, ErrorsNameTheField) {
  json j = Spec();
  j["serving"]["osl"] = 0;
  EXPECT_EQ(Error(j), "serving.osl (0) must be > 0");
  j = Spec();
  j["search"]["tp"] = {3};
  EXPECT_EQ(Error(j), "tp (3) must divide model.num_attention_heads (64)");
  j = Spec();
  j["serving"]["osll"] = 5;
  EXPECT_EQ(Error(j).rfind("unknown field 'serving.osll' (did you mean 'serving.osl'?)", 0), 0u);
  j = Spec();
  j["search"]["weight_precision"] = {"fp7"};
  EXPECT_EQ(Error(j).rfind("search.weight_precision[0]: unknown precision 'fp7'", 0), 0u)
      << Error(j);
  j = Spec();
  j["serving"]["ttft_ms"] = {{"p95", 100}};
  EXPECT_EQ(Error(j).rfind("unknown field 'serving.ttft_ms.p95'", 0), 0u) << Error(j);
  j = Spec();
  j["search"]["tp"] = {8};
  j["search"]["pp"] = {2};
  EXPECT_EQ(Error(j), "tp (8) x pp (2) = 16 GPUs per instance exceeds cluster.num_gpus (8)");
  j = Spec();
  j["cluster"]["gpu"] = "a100-80gb";
  j["search"]["weight_precision"] = {"fp8"};
  EXPECT_EQ(Error(j).rfind("search.weight_precision[0] fp8 is not supported by cluster.gpu "
                           "a100-80gb",
                           0),
            0u)
      << Error(j);
  j = Spec();
  j["serving"]["concurrency"] = 8;
  j["serving"]["request_rate"] = 2.0;
  EXPECT_EQ(Error(j).rfind("serving.concurrency and serving.request_rate are mutually "
                           "exclusive",
                           0),
            0u);
  j = Spec();
  j["model"]["num_experts"] = 8;
  EXPECT_EQ(Error(j),
            "model.moe_router_topk (0) must be in [1, model.num_experts (8)] for a "
            "mixture-of-experts model");
  j = Spec();
  j["kind"] = "serving";
  EXPECT_EQ(Error(j), "kind ('serving') must be training or inference");
}

TEST(SpecIoTest, ExpertParallelRulesNameTheField) {
  json j = Spec();
  j["search"]["ep"] = {2};
  EXPECT_EQ(Error(j),
            "search.ep[0] (2) must be 1 for a dense model (model.num_experts 1): expert "
            "parallelism splits the routed experts of a mixture-of-experts model");
  j = Spec();
  j["model"] = {{"preset", "mixtral-8x7b"}};
  j["search"]["ep"] = {1, 3};
  EXPECT_EQ(Error(j),
            "search.ep[1] (3) must divide model.num_experts (8): each of the ep groups holds "
            "num_experts / ep whole experts");
  j["search"]["tp"] = {2};
  j["search"]["ep"] = {1, 4};
  EXPECT_EQ(Error(j),
            "search.ep[1] (4) must divide search.tp (2): the experts split over ep groups of "
            "tp / ep ranks (TensorRT-LLM moe_tp_size x moe_ep_size = tp_size)");
  j["search"]["tp"] = {1, 2};
  EXPECT_EQ(Error(j).rfind("search.ep[1] (4) must divide one of search.tp (1, 2): ", 0), 0u)
      << Error(j);
  j["search"]["tp"] = {1, 2, 4};
  EXPECT_EQ(Error(j), "");
  j["search"].erase("tp");
  j["search"]["ep"] = {0};
  EXPECT_EQ(Error(j), "search.ep[0] (0) must be > 0");
  j["search"]["ep"] = {8};
  j["cluster"]["num_gpus"] = 4;
  EXPECT_EQ(Error(j), "search.ep[0] (8) must be at most cluster.num_gpus (4): ep divides tp");
}

TEST(SpecIoTest, ExpertParallelListsRoundTrip) {
  json j = Spec();
  j["model"] = {{"preset", "mixtral-8x7b"}};
  j["search"]["tp"] = {2, 4, 8};
  j["search"]["ep"] = {1, 2, 8};
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->search.ep, (std::vector<int64_t>{1, 2, 8}));
  const json written = InferenceJobSpecToJson(*spec);
  EXPECT_EQ(written["search"]["ep"], json({1, 2, 8}));
  auto again = InferenceJobSpecFromJson(written);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->search.ep, spec->search.ep);
  EXPECT_EQ(InferenceJobSpecToJson(*again), written);
  // A pinned layout takes one ep.
  j["search"] = {
      {"tp", 4}, {"pp", 1}, {"ep", 2}, {"weight_precision", "fp8"}, {"kv_cache_precision", "fp8"}};
  auto pinned = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  auto config = PinnedServingConfig(*pinned);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ep, 2);
  EXPECT_EQ(config->replicas, 2);  // 8 GPUs / (tp 4 x pp 1): ep adds no GPUs.
  j["search"]["ep"] = {1, 2};
  EXPECT_EQ(PinnedServingConfig(*InferenceJobSpecFromJson(j)).status().message(),
            "search.ep needs exactly one value to name one layout (it has 2)");
}

TEST(SpecIoTest, KindDefaultsToTraining) {
  EXPECT_EQ(*JobKindOf(json::object()), JobKind::kTraining);
  EXPECT_EQ(*JobKindOf(Spec()), JobKind::kInference);
}

TEST(SpecIoTest, ResultUsesTheContractFieldNames) {
  InferenceRankedConfig r;
  r.config.tp = 4;
  r.config.replicas = 2;
  r.output_tokens_per_sec_per_gpu = 1000;
  r.ttft_ms = {1, 2, 3, 4};
  const json j = ToJson(r);
  for (const char* key :
       {"config", "output_tokens_per_sec_per_gpu", "output_tokens_per_sec",
        "tokens_per_sec_per_user", "requests_per_sec", "ttft_ms", "tpot_ms", "e2e_latency_ms",
        "memory", "max_concurrency", "cost_per_million_output_tokens", "meets_limits", "notes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["ttft_ms"]["p90"], 3);
  EXPECT_EQ(j["config"]["num_gpus"], 8);
  EXPECT_TRUE(j["cost_per_million_output_tokens"].is_null());
  auto c = ServingConfigFromJson(j["config"]);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, r.config);
}

}  // namespace
}  // namespace paratune::inference
