// Inference jobs on the wire: every result field round-trips (binary and the proto JSON
// mapping), the proto JSON of a result is inference::ToJson of it (one JSON dialect), and
// specs take the training specs' path (resolved presets, errors naming the field).
#include "server/convert_inference.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "inference/spec_io.h"
#include "server/convert.h"

namespace paratune::server {
namespace {

using inference::InferencePlanResult;
using inference::InferenceRankedConfig;
using inference::QuantFormat;
using inference::ServingConfig;
using nlohmann::json;

constexpr QuantFormat kFormats[] = {QuantFormat::kBf16, QuantFormat::kFp16, QuantFormat::kFp8,
                                    QuantFormat::kInt8, QuantFormat::kInt4, QuantFormat::kFp4};

// Counts small enough that the layout's GPUs (tp * pp * ep * instances) fit the wire's int32.
ServingConfig RandomServingConfig(std::mt19937_64& rng) {
  auto count = [&rng] { return static_cast<int64_t>(rng() % 64); };
  ServingConfig c;
  c.tp = count();
  c.pp = count();
  c.ep = count();
  c.replicas = count();
  c.max_batch_size = static_cast<int64_t>(rng() % 4096);
  c.max_num_tokens = static_cast<int64_t>(rng() % 1000000);
  c.weight_precision = kFormats[rng() % 6];
  c.kv_cache_precision = kFormats[rng() % 6];
  c.disaggregated = rng() % 2 == 1;
  c.attention_dp = rng() % 2 == 1;
  c.prefill_replicas = count();
  c.decode_replicas = count();
  return c;
}

InferenceRankedConfig RandomRanked(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> real(0, 1e5);
  auto stats = [&] { return inference::LatencyStats{real(rng), real(rng), real(rng), real(rng)}; };
  auto step = [&] {
    inference::StepBreakdown s{real(rng), real(rng), real(rng), real(rng),
                               real(rng), real(rng), real(rng), "modelled"};
    if (rng() % 2 == 1) s.source = "measured";
    return s;
  };
  InferenceRankedConfig r;
  r.rank = static_cast<int64_t>(rng() % 100);
  r.config = RandomServingConfig(rng);
  r.output_tokens_per_sec_per_gpu = real(rng);
  r.output_tokens_per_sec = real(rng);
  r.tokens_per_sec_per_user = real(rng);
  r.requests_per_sec = real(rng);
  r.ttft_ms = stats();
  r.tpot_ms = stats();
  r.e2e_latency_ms = stats();
  r.memory = {real(rng), real(rng), real(rng), real(rng), real(rng), real(rng)};
  r.max_concurrency = static_cast<int64_t>(rng() % 100000);
  if (rng() % 2 == 1) r.cost_per_million_output_tokens = real(rng);
  r.meets_limits = rng() % 2 == 1;
  r.pareto_optimal = rng() % 2 == 1;
  r.prefill_step = step();
  r.decode_step = step();
  for (uint64_t i = rng() % 3; i > 0; --i) r.notes.push_back("note " + std::to_string(rng() % 9));
  if (rng() % 2 == 1) {
    inference::InferenceVerification& v = r.verification.emplace();
    v.status = rng() % 2 == 1 ? "verified" : "not verified: needs 4 ranks";
    v.measured_ttft_ms = stats();
    v.measured_tpot_ms = stats();
    v.measured_e2e_latency_ms = stats();
    v.measured_output_tokens_per_sec = real(rng);
    v.measured_requests = static_cast<int64_t>(rng() % 1000);
  }
  return r;
}

InferencePlanResult RandomPlan(std::mt19937_64& rng) {
  InferencePlanResult p;
  for (uint64_t i = rng() % 4; i > 0; --i) p.ranked.push_back(RandomRanked(rng));
  for (uint64_t i = rng() % 3; i > 0; --i) p.pareto_front.push_back(RandomRanked(rng));
  constexpr const char* kRules[] = {"memory", "ttft", "tpot", "tokens_per_user", "layout"};
  for (uint64_t i = rng() % 4; i > 0; --i) {
    const char* rule = kRules[rng() % 5];
    p.rejected.push_back({RandomServingConfig(rng), rule, std::string(rule) + " by 3 ms"});
  }
  p.candidates_considered = static_cast<int64_t>(rng() % 100000);
  p.feasible = static_cast<int64_t>(rng() % 1000);
  p.rejected_total = static_cast<int64_t>(p.rejected.size() + rng() % 1000);
  p.rejected_reasons = {{"memory", 7}, {"ttft", 2}};
  p.recommendation = "tp 2 x4 replicas: the most output tokens/s per GPU within TTFT p99";
  p.elapsed_ms = std::uniform_real_distribution<double>(0, 5000)(rng);
  return p;
}

TEST(ConvertInferenceTest, EveryResultFieldRoundTripsThroughTheWireAndItsJson) {
  std::mt19937_64 rng(22);
  for (int i = 0; i < 500; ++i) {
    const InferencePlanResult plan = RandomPlan(rng);
    const v1::InferencePlanResult wire = ToProto(plan);
    v1::InferencePlanResult parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
    v1::InferencePlanResult from_json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(WireJson(wire), &from_json).ok());
    for (const v1::InferencePlanResult* w : {&parsed, &from_json}) {
      absl::StatusOr<InferencePlanResult> back = InferencePlanResultFromProto(*w);
      ASSERT_TRUE(back.ok()) << back.status();
      // Equal wire forms: no field is lost either way (compared as messages: a map's
      // serialized order is unspecified).
      ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(ToProto(*back), wire));
      ASSERT_EQ(back->ranked.size(), plan.ranked.size());
      for (size_t k = 0; k < plan.ranked.size(); ++k) {
        const InferenceRankedConfig& a = back->ranked[k];
        const InferenceRankedConfig& b = plan.ranked[k];
        EXPECT_EQ(a.config, b.config);
        EXPECT_EQ(a.ttft_ms.p99, b.ttft_ms.p99);
        EXPECT_EQ(a.tpot_ms.p50, b.tpot_ms.p50);
        EXPECT_EQ(a.memory.kv_cache, b.memory.kv_cache);
        EXPECT_EQ(a.cost_per_million_output_tokens, b.cost_per_million_output_tokens);
        EXPECT_EQ(a.decode_step.kv_transfer, b.decode_step.kv_transfer);
        EXPECT_EQ(a.decode_step.source, b.decode_step.source);
        EXPECT_EQ(a.notes, b.notes);
        ASSERT_EQ(a.verification.has_value(), b.verification.has_value());
        if (a.verification) {
          EXPECT_EQ(a.verification->status, b.verification->status);
          EXPECT_EQ(a.verification->measured_tpot_ms.p90, b.verification->measured_tpot_ms.p90);
          EXPECT_EQ(a.verification->measured_output_tokens_per_sec,
                    b.verification->measured_output_tokens_per_sec);
          EXPECT_EQ(a.verification->measured_requests, b.verification->measured_requests);
        }
      }
      ASSERT_EQ(back->rejected.size(), plan.rejected.size());
      for (size_t k = 0; k < plan.rejected.size(); ++k) {
        EXPECT_EQ(back->rejected[k].config, plan.rejected[k].config);
        EXPECT_EQ(back->rejected[k].rule, plan.rejected[k].rule);
      }
      EXPECT_EQ(back->rejected_reasons, plan.rejected_reasons);
      EXPECT_EQ(back->recommendation, plan.recommendation);
    }
  }
}

// `j` without its null members, at every depth.
json WithoutNulls(const json& j) {
  if (j.is_array()) {
    json out = json::array();
    for (const json& e : j) out.push_back(WithoutNulls(e));
    return out;
  }
  if (!j.is_object()) return j;
  json out = json::object();
  for (const auto& [key, value] : j.items()) {
    if (!value.is_null()) out[key] = WithoutNulls(value);
  }
  return out;
}

TEST(ConvertInferenceTest, TheWireJsonOfAResultIsTheInferenceJsonContract) {
  // One JSON dialect: REST and `results --json` print WireJson, `paratune plan --json`
  // prints inference::ToJson; for the same result they are the same JSON value, except that
  // an unset optional (cost_per_million_output_tokens without a price) is null in ToJson
  // and absent in the proto JSON mapping.
  std::mt19937_64 rng(2026);
  int unset_costs = 0;
  for (int i = 0; i < 300; ++i) {
    const InferencePlanResult plan = RandomPlan(rng);
    ASSERT_EQ(json::parse(WireJson(ToProto(plan))), WithoutNulls(inference::ToJson(plan))) << i;
    for (const InferenceRankedConfig& r : plan.ranked) {
      ASSERT_EQ(json::parse(WireJson(ToProto(r))), WithoutNulls(inference::ToJson(r)));
      ASSERT_EQ(json::parse(WireJson(ToProto(r.config))), inference::ToJson(r.config));
      unset_costs += !r.cost_per_million_output_tokens.has_value();
    }
  }
  EXPECT_GT(unset_costs, 50);
}

TEST(ConvertInferenceTest, TheRankedConfigJsonHasTheContractsNames) {
  std::mt19937_64 rng(5);
  InferenceRankedConfig r = RandomRanked(rng);
  r.cost_per_million_output_tokens = 0.42;
  const json j = json::parse(WireJson(ToProto(r)));
  for (const char* key :
       {"config", "output_tokens_per_sec_per_gpu", "output_tokens_per_sec",
        "tokens_per_sec_per_user", "requests_per_sec", "ttft_ms", "tpot_ms", "e2e_latency_ms",
        "memory", "max_concurrency", "cost_per_million_output_tokens", "meets_limits", "notes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  std::set<std::string> config_keys;
  for (const auto& [key, value] : j["config"].items()) config_keys.insert(key);
  EXPECT_EQ(config_keys, (std::set<std::string>{
                             "tp", "pp", "ep", "attention_dp", "replicas", "max_batch_size",
                             "max_num_tokens", "weight_precision", "kv_cache_precision",
                             "disaggregated", "prefill_replicas", "decode_replicas", "num_gpus"}));
  for (const char* stat : {"ttft_ms", "tpot_ms", "e2e_latency_ms"}) {
    EXPECT_EQ(j[stat].size(), 4u) << stat;
    EXPECT_EQ(j[stat]["p99"].get<double>(), stat == std::string("ttft_ms") ? r.ttft_ms.p99
                                            : stat == std::string("tpot_ms")
                                                ? r.tpot_ms.p99
                                                : r.e2e_latency_ms.p99);
  }
  for (const char* part : {"weights", "kv_cache", "activations", "reserve", "peak", "capacity"}) {
    EXPECT_TRUE(j["memory"].contains(part)) << part;
  }
  // Counts are JSON numbers, as the contract writes them (int64 would be strings).
  EXPECT_TRUE(j["config"]["tp"].is_number_integer());
  EXPECT_TRUE(j["max_concurrency"].is_number_integer());
  EXPECT_EQ(j["config"]["weight_precision"],
            std::string(inference::ToString(r.config.weight_precision)));
  EXPECT_EQ(j["config"]["num_gpus"].get<int64_t>(), r.config.num_gpus());
  for (const char* part : {"compute_ms", "memory_ms", "tp_comm_ms", "pp_comm_ms", "overhead_ms",
                           "kv_transfer_ms", "total_ms", "source"}) {
    EXPECT_TRUE(j["decode_step"].contains(part)) << part;
  }
}

TEST(ConvertInferenceTest, TheRejectedListIsCappedAndEveryRejectionCounted) {
  InferencePlanResult plan;
  for (int i = 0; i < 250; ++i) plan.rejected.push_back({ServingConfig{}, "memory", "oom"});
  plan.rejected_total = 250;
  const v1::InferencePlanResult wire = ToProto(plan, /*max_rejected=*/200);
  EXPECT_EQ(wire.rejected_size(), 200);
  EXPECT_EQ(wire.rejected_total(), 250);
  plan.rejected_total = 0;  // A planner that lists all: the total is the list's length.
  EXPECT_EQ(ToProto(plan, 10).rejected_total(), 250);
}

TEST(ConvertInferenceTest, AnUnknownPrecisionOnTheWireNamesTheField) {
  v1::ServingConfig c;
  c.set_weight_precision("fp8");
  c.set_kv_cache_precision("fp7");
  absl::StatusOr<ServingConfig> back = ServingConfigFromProto(c);
  ASSERT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(back.status().message()).rfind("config.kv_cache_precision: ", 0), 0u)
      << back.status();
}

constexpr char kLlama8bOn8H100[] = R"({
  "kind": "inference",
  "model": {"preset": "llama3.1-8b"},
  "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
  "serving": {"engine": "trtllm", "isl": 2048, "osl": 128, "concurrency": 64,
              "num_requests": 200, "ttft_ms": {"p99": 2000}, "tpot_ms": {"p99": 50}},
  "search": {"tp": [1, 2, 4, 8], "pp": [1], "weight_precision": ["bf16", "fp8"],
             "kv_cache_precision": ["bf16", "fp8"], "disaggregated": [false],
             "objective": "throughput", "top_k": 5}})";

TEST(ConvertInferenceTest, AnInferenceSpecResolvesItsPresetAndReadsBackToTheSameSpec) {
  absl::StatusOr<v1::JobSpec> wire = SpecProtoFromJson(json::parse(kLlama8bOn8H100));
  ASSERT_TRUE(wire.ok()) << wire.status();
  EXPECT_TRUE(IsInferenceSpec(*wire));
  EXPECT_EQ(wire->model().preset(), "");
  EXPECT_EQ(wire->model().num_layers(), 32);
  EXPECT_EQ(wire->model().hidden_size(), 4096);
  EXPECT_EQ(wire->model().num_query_groups(), 8);
  EXPECT_EQ(wire->serving().isl(), 2048);
  EXPECT_EQ(wire->serving().osl(), 128);
  EXPECT_EQ(wire->serving().concurrency(), 64);
  EXPECT_FALSE(wire->serving().has_request_rate());
  EXPECT_EQ(wire->serving().ttft_ms().p99(), 2000);
  EXPECT_FALSE(wire->serving().ttft_ms().has_p50());
  EXPECT_EQ(wire->search().weight_precision_size(), 2);
  EXPECT_EQ(wire->search().objective(), "throughput");
  EXPECT_FALSE(wire->has_training());

  // The wire form reads back to the spec it came from, through binary and through JSON.
  absl::StatusOr<inference::InferenceJobSpec> direct =
      inference::InferenceJobSpecFromJson(json::parse(kLlama8bOn8H100));
  ASSERT_TRUE(direct.ok()) << direct.status();
  v1::JobSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire->SerializeAsString()));
  absl::StatusOr<inference::InferenceJobSpec> back = InferenceSpecFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(inference::InferenceJobSpecToJson(*back), inference::InferenceJobSpecToJson(*direct));
}

TEST(ConvertInferenceTest, AnExpertParallelListCrossesTheWire) {
  json j = {{"kind", "inference"},
            {"model", {{"preset", "mixtral-8x7b"}}},
            {"serving", {{"isl", 1024}, {"osl", 128}, {"concurrency", 32}}},
            {"cluster", {{"gpu", "h100-sxm-80gb"}, {"num_gpus", 8}}},
            {"search", {{"tp", {2, 4}}, {"ep", {1, 2}}}}};
  absl::StatusOr<v1::JobSpec> wire = SpecProtoFromJson(j);
  ASSERT_TRUE(wire.ok()) << wire.status();
  ASSERT_EQ(wire->search().ep_size(), 2);
  EXPECT_EQ(wire->search().ep(1), 2);
  absl::StatusOr<inference::InferenceJobSpec> back = InferenceSpecFromProto(*wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->search.ep, (std::vector<int64_t>{1, 2}));
}

TEST(ConvertInferenceTest, AnAttentionDataParallelListCrossesTheWire) {
  json j = {{"kind", "inference"},
            {"model", {{"preset", "mixtral-8x7b"}}},
            {"serving", {{"isl", 1024}, {"osl", 128}, {"concurrency", 32}}},
            {"cluster", {{"gpu", "h100-sxm-80gb"}, {"num_gpus", 8}}},
            {"search", {{"tp", {2, 8}}, {"attention_dp", {false, true}}}}};
  absl::StatusOr<v1::JobSpec> wire = SpecProtoFromJson(j);
  ASSERT_TRUE(wire.ok()) << wire.status();
  ASSERT_EQ(wire->search().attention_dp_size(), 2);
  EXPECT_TRUE(wire->search().attention_dp(1));
  v1::JobSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire->SerializeAsString()));
  absl::StatusOr<inference::InferenceJobSpec> back = InferenceSpecFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->search.attention_dp, (std::vector<bool>{false, true}));

  // A layout with attention DP keeps the flag through the wire.
  ServingConfig c;
  c.tp = 8;
  c.ep = 8;
  c.attention_dp = true;
  c.weight_precision = QuantFormat::kFp8;
  absl::StatusOr<ServingConfig> config = ServingConfigFromProto(ToProto(c));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, c);
}

// A serving_step task of an expert-parallel shape carries ep in its expert block and
// reads back as the same shape.
TEST(ConvertInferenceTest, ServingStepTaskCarriesItsExpertParallelShape) {
  inference::ServingStepTaskSpec spec;
  spec.model.num_layers = 2;
  spec.model.hidden_size = 128;
  spec.model.num_attention_heads = 4;
  spec.model.ffn_hidden_size = 256;
  spec.model.vocab_size = 512;
  spec.model.num_experts = 4;
  spec.model.moe_router_topk = 2;
  spec.model.moe_ffn_hidden_size = 128;
  spec.shape = {2, inference::QuantFormat::kInt8, inference::QuantFormat::kBf16, 2};
  const v1::ProfileTask task = ToProto(spec);
  EXPECT_EQ(task.serving_step().moe().ep(), 2);
  absl::StatusOr<inference::StepShape> back =
      StepShapeFromTask(task.serving_step(), spec.model.num_layers);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec.shape);
  spec.shape.ep = 1;
  back = StepShapeFromTask(ToProto(spec).serving_step(), spec.model.num_layers);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec.shape);
  spec.shape = {2, inference::QuantFormat::kInt8, inference::QuantFormat::kBf16, 2, true};
  EXPECT_TRUE(ToProto(spec).serving_step().attention_dp());
  back = StepShapeFromTask(ToProto(spec).serving_step(), spec.model.num_layers);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec.shape);
  // A pipeline stage's task runs fewer layers than the model: its shape says how many.
  const int64_t model_layers = spec.model.num_layers;
  spec.shape = {2, inference::QuantFormat::kInt8, inference::QuantFormat::kBf16, 1, false, 1};
  spec.model.num_layers = 1;
  EXPECT_EQ(ToProto(spec).serving_step().num_layers(), 1);
  back = StepShapeFromTask(ToProto(spec).serving_step(), model_layers);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layers, 1);
  EXPECT_EQ(*back, spec.shape);
}

TEST(ConvertInferenceTest, BadInferenceFieldsAreRejectedNamingTheField) {
  json bad = json::parse(kLlama8bOn8H100);
  bad["serving"]["osl"] = 0;
  absl::StatusOr<v1::JobSpec> wire = SpecProtoFromJson(bad);
  ASSERT_EQ(wire.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wire.status().message().find("serving.osl"), std::string::npos) << wire.status();

  bad = json::parse(kLlama8bOn8H100);
  bad["kind"] = "serving";
  wire = SpecProtoFromJson(bad);
  ASSERT_EQ(wire.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wire.status().message().find("kind"), std::string::npos) << wire.status();

  // A wire message whose serving section names an unknown engine: the same rule.
  absl::StatusOr<v1::JobSpec> good = SpecProtoFromJson(json::parse(kLlama8bOn8H100));
  ASSERT_TRUE(good.ok()) << good.status();
  v1::JobSpec engine = *good;
  engine.mutable_serving()->set_engine("tgi");
  absl::StatusOr<inference::InferenceJobSpec> spec = InferenceSpecFromProto(engine);
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("serving.engine"), std::string::npos) << spec.status();
}

}  // namespace
}  // namespace paratune::server
