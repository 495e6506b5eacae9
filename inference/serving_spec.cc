// Names and validation rules of an inference job specification (see serving_spec.h).
#include "inference/serving_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/device_catalog.h"
#include "search/model_math.h"

namespace paratune::inference {
namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 24;  // max_num_tokens
// isl and osl: 1M tokens each, beyond any served model's context; it bounds a simulation.
constexpr int64_t kMaxSequenceTokens = int64_t{1} << 20;
constexpr int64_t kMaxRequests = int64_t{1} << 22;  // num_requests, concurrency
constexpr int64_t kMaxBatch = int64_t{1} << 20;     // batch sizes
constexpr int64_t kMaxParallel = int64_t{1} << 16;  // tp, pp, ep, replicas
constexpr int64_t kMaxTopK = 100000;
constexpr size_t kMaxListEntries = 64;

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

constexpr Named<ServingEngine> kEngines[] = {{ServingEngine::kTrtllm, "trtllm"},
                                             {ServingEngine::kVllm, "vllm"},
                                             {ServingEngine::kSglang, "sglang"}};
constexpr Named<Batching> kBatchings[] = {{Batching::kInflight, "inflight"},
                                          {Batching::kStatic, "static"}};
constexpr Named<QuantFormat> kFormats[] = {
    {QuantFormat::kBf16, "bf16"}, {QuantFormat::kFp16, "fp16"}, {QuantFormat::kFp8, "fp8"},
    {QuantFormat::kInt8, "int8"}, {QuantFormat::kInt4, "int4"}, {QuantFormat::kFp4, "fp4"}};
constexpr Named<ServingObjective> kObjectives[] = {{ServingObjective::kThroughput, "throughput"},
                                                   {ServingObjective::kLatency, "latency"},
                                                   {ServingObjective::kCost, "cost"}};

template <typename E, size_t N>
std::string_view NameOf(const Named<E> (&table)[N], E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return "unknown";
}

template <typename E, size_t N>
absl::StatusOr<E> Parse(const Named<E> (&table)[N], std::string_view s, const char* what) {
  std::vector<std::string> names;
  for (const auto& e : table) {
    if (e.name == s) return e.value;
    names.emplace_back(e.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown ", what, " '", std::string(s), "'; expected one of ", absl::StrJoin(names, ", ")));
}

absl::Status Positive(const std::string& field, int64_t v, int64_t max) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be > 0"));
  if (v > max) {
    return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be at most ", max));
  }
  return absl::OkStatus();
}

absl::Status NonNegativeFinite(const std::string& field, double v) {
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " (", v, ") must be a finite number >= 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckLimits(const std::string& field, const LatencyLimits& l) {
  const std::pair<const char*, const std::optional<double>*> parts[] = {
      {"p50", &l.p50}, {"p90", &l.p90}, {"p99", &l.p99}};
  for (const auto& [name, v] : parts) {
    if (!v->has_value()) continue;
    if (!std::isfinite(**v) || **v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".", name, " (", **v, ") must be > 0 milliseconds"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckList(const std::string& field, const std::vector<int64_t>& v, int64_t max) {
  if (v.size() > kMaxListEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", v.size(), " entries; at most ", kMaxListEntries));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (auto s = Positive(absl::StrCat(field, "[", i, "]"), v[i], max); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckExpertParallel(const ModelSpec& model, int64_t tp, int64_t ep,
                                 const std::string& field) {
  if (ep == 1) return absl::OkStatus();
  if (ep <= 0) return absl::InvalidArgumentError(absl::StrCat(field, " (", ep, ") must be > 0"));
  if (!IsMoe(model)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " (", ep, ") must be 1 for a dense model (model.num_experts ", model.num_experts,
        "): expert parallelism splits the routed experts of a mixture-of-experts "
        "model"));
  }
  if (model.num_experts % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " (", ep, ") must divide model.num_experts (", model.num_experts,
                     "): each of the ep groups holds num_experts / ep whole experts"));
  }
  if (tp > 0 && tp % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " (", ep, ") must divide tp (", tp,
                     "): the experts split over ep groups of tp / ep ranks (TensorRT-LLM "
                     "moe_tp_size x moe_ep_size = tp_size)"));
  }
  return absl::OkStatus();
}

absl::Status CheckAttentionDp(const ModelSpec& model, int64_t tp, int64_t ep,
                              const std::string& field) {
  if (!IsMoe(model)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " (true) needs a mixture-of-experts model (model.num_experts ", model.num_experts,
        "): with attention data parallelism every dense layer is replicated on each rank, so a "
        "dense model gains nothing over replicas"));
  }
  if (tp <= 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, " (true) needs tp > 1 (tp is ", tp,
                                                   "): the attention data-parallel size is tp"));
  }
  if (ep > 0 && ep != tp) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep (", ep, ") must equal tp (", tp, ") when ", field,
                     " is true: the routed experts split over every attention rank"));
  }
  return absl::OkStatus();
}

std::string_view ToString(ServingEngine v) { return NameOf(kEngines, v); }
std::string_view ToString(Batching v) { return NameOf(kBatchings, v); }
std::string_view ToString(QuantFormat v) { return NameOf(kFormats, v); }
std::string_view ToString(ServingObjective v) { return NameOf(kObjectives, v); }
absl::StatusOr<ServingEngine> ParseServingEngine(std::string_view s) {
  return Parse(kEngines, s, "engine");
}
absl::StatusOr<Batching> ParseBatching(std::string_view s) {
  return Parse(kBatchings, s, "batching");
}
absl::StatusOr<QuantFormat> ParseQuantFormat(std::string_view s) {
  return Parse(kFormats, s, "precision");
}
absl::StatusOr<ServingObjective> ParseServingObjective(std::string_view s) {
  return Parse(kObjectives, s, "objective");
}

double BytesPerElement(QuantFormat f) {
  switch (f) {
    case QuantFormat::kBf16:
    case QuantFormat::kFp16:
      return 2;
    case QuantFormat::kFp8:
    case QuantFormat::kInt8:
      return 1;
    case QuantFormat::kInt4:
    case QuantFormat::kFp4:
      return 0.5;
  }
  return 2;
}

absl::Status ServingSpec::Validate() const {
  if (auto s = Positive("serving.isl", isl, kMaxSequenceTokens); !s.ok()) return s;
  if (auto s = Positive("serving.osl", osl, kMaxSequenceTokens); !s.ok()) return s;
  if (auto s = NonNegativeFinite("serving.isl_stddev", isl_stddev); !s.ok()) return s;
  if (auto s = NonNegativeFinite("serving.osl_stddev", osl_stddev); !s.ok()) return s;
  if (concurrency && request_rate) {
    return absl::InvalidArgumentError(
        "serving.concurrency and serving.request_rate are mutually exclusive: closed-loop "
        "clients or Poisson arrivals, not both");
  }
  if (concurrency) {
    if (auto s = Positive("serving.concurrency", *concurrency, kMaxRequests); !s.ok()) return s;
  }
  if (request_rate && (!std::isfinite(*request_rate) || *request_rate <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serving.request_rate (", *request_rate, ") must be > 0 requests/s"));
  }
  if (auto s = Positive("serving.num_requests", num_requests, kMaxRequests); !s.ok()) return s;
  if (batch_size) {
    if (batching != Batching::kStatic) {
      return absl::InvalidArgumentError(
          "serving.batch_size applies to batching: static only (inflight batching is limited "
          "by search.max_batch_size)");
    }
    if (auto s = Positive("serving.batch_size", *batch_size, kMaxBatch); !s.ok()) return s;
  }
  if (auto s = CheckLimits("serving.ttft_ms", ttft_ms); !s.ok()) return s;
  if (auto s = CheckLimits("serving.tpot_ms", tpot_ms); !s.ok()) return s;
  if (min_tokens_per_sec_per_user &&
      (!std::isfinite(*min_tokens_per_sec_per_user) || *min_tokens_per_sec_per_user <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("serving.min_tokens_per_sec_per_user (",
                                                   *min_tokens_per_sec_per_user, ") must be > 0"));
  }
  if (price_per_gpu_hour) {
    if (!std::isfinite(*price_per_gpu_hour) || *price_per_gpu_hour <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("serving.price_per_gpu_hour (", *price_per_gpu_hour, ") must be > 0"));
    }
  }
  if (kv_cache_fraction &&
      (!std::isfinite(*kv_cache_fraction) || *kv_cache_fraction <= 0 || *kv_cache_fraction > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serving.kv_cache_fraction (", *kv_cache_fraction, ") must be in (0, 1]"));
  }
  return absl::OkStatus();
}

absl::Status ServingSearchOptions::Validate() const {
  const std::pair<const char*, const std::vector<int64_t>*> lists[] = {
      {"search.tp", &tp},
      {"search.pp", &pp},
      {"search.ep", &ep},
      {"search.replicas", &replicas},
      {"search.prefill_replicas", &prefill_replicas},
      {"search.decode_replicas", &decode_replicas}};
  for (const auto& [name, v] : lists) {
    if (auto s = CheckList(name, *v, kMaxParallel); !s.ok()) return s;
  }
  if (auto s = CheckList("search.max_batch_size", max_batch_size, kMaxBatch); !s.ok()) return s;
  if (auto s = CheckList("search.max_num_tokens", max_num_tokens, kMaxTokens); !s.ok()) return s;
  if (weight_precision.size() > kMaxListEntries || kv_cache_precision.size() > kMaxListEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("search precision lists have at most ", kMaxListEntries, " entries"));
  }
  for (size_t i = 0; i < kv_cache_precision.size(); ++i) {
    const QuantFormat f = kv_cache_precision[i];
    if (f == QuantFormat::kInt4 || f == QuantFormat::kFp4) {
      return absl::InvalidArgumentError(
          absl::StrCat("search.kv_cache_precision[", i, "] (", std::string(ToString(f)),
                       ") is not a KV-cache format the engines offer: bf16, fp16, fp8 or int8"));
    }
  }
  if (top_k <= 0 || top_k > kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("search.top_k (", top_k, ") must be in [1, ", kMaxTopK, "]"));
  }
  if (verify_top_k < 0 || verify_top_k > top_k) {
    return absl::InvalidArgumentError(absl::StrCat("search.verify_top_k (", verify_top_k,
                                                   ") must be in [0, search.top_k (", top_k, ")]"));
  }
  return absl::OkStatus();
}

absl::Status InferenceJobSpec::Validate() const {
  if (auto s = model.Validate(); !s.ok()) return s;
  if (auto s = cluster.Validate(); !s.ok()) return s;
  if (auto s = serving.Validate(); !s.ok()) return s;
  if (auto s = search.Validate(); !s.ok()) return s;
  auto device = DeviceForCluster(cluster);
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.gpu: ", device.status().message()));
  }
  const int64_t heads = model.num_attention_heads;
  for (int64_t t : search.tp) {
    if (heads % t != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp (", t, ") must divide model.num_attention_heads (", heads, ")"));
    }
    if (t > cluster.num_gpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp (", t, ") must be at most cluster.num_gpus (", cluster.num_gpus, ")"));
    }
  }
  for (size_t i = 0; i < search.ep.size(); ++i) {
    const int64_t e = search.ep[i];
    const std::string field = absl::StrCat("search.ep[", i, "]");
    if (auto s = CheckExpertParallel(model, 0, e, field); !s.ok()) return s;
    if (search.tp.empty()) {
      if (e > cluster.num_gpus) {
        return absl::InvalidArgumentError(absl::StrCat(field, " (", e,
                                                       ") must be at most cluster.num_gpus (",
                                                       cluster.num_gpus, "): ep divides tp"));
      }
      continue;
    }
    if (std::none_of(search.tp.begin(), search.tp.end(), [e](int64_t t) { return t % e == 0; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " (", e, ") must divide ", search.tp.size() == 1 ? "" : "one of ", "search.tp (",
          absl::StrJoin(search.tp, ", "),
          "): the experts split over ep groups of tp / ep ranks (TensorRT-LLM moe_tp_size x "
          "moe_ep_size = tp_size)"));
    }
  }
  if (std::count(search.attention_dp.begin(), search.attention_dp.end(), true) > 0) {
    const bool only =
        std::count(search.attention_dp.begin(), search.attention_dp.end(), false) == 0;
    if (!IsMoe(model)) {
      return CheckAttentionDp(model, 2, 0, "search.attention_dp");
    }
    if (only) {
      // Pinned on: some tp > 1 must be open, and a pinned ep must equal one of them.
      std::vector<int64_t> tps = search.tp;
      if (tps.empty()) {
        for (int64_t t = 2; t <= std::min(cluster.num_gpus, cluster.gpus_per_node); t *= 2) {
          if (model.num_attention_heads % t == 0) tps.push_back(t);
        }
      }
      std::erase_if(tps, [](int64_t t) { return t <= 1; });
      if (tps.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "search.attention_dp (true) needs tp > 1 (search.tp is ",
            search.tp.empty() ? "open" : absl::StrJoin(search.tp, ", "), ", cluster.num_gpus ",
            cluster.num_gpus, "): the attention data-parallel size is tp"));
      }
      for (size_t i = 0; i < search.ep.size(); ++i) {
        const int64_t e = search.ep[i];
        if (std::count(tps.begin(), tps.end(), e) == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "search.ep[", i, "] (", e, ") must equal tp (", absl::StrJoin(tps, ", "),
              ") when search.attention_dp is true: the routed experts split over every "
              "attention rank (leave search.ep null to set ep = tp)"));
        }
      }
    }
  }
  for (int64_t p : search.pp) {
    if (p > model.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("pp (", p, ") must be at most model.num_layers (", model.num_layers, ")"));
    }
    if (p > cluster.num_gpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("pp (", p, ") must be at most cluster.num_gpus (", cluster.num_gpus, ")"));
    }
  }
  if (!search.tp.empty() && !search.pp.empty()) {
    const int64_t tp = *std::min_element(search.tp.begin(), search.tp.end());
    const int64_t pp = *std::min_element(search.pp.begin(), search.pp.end());
    if (tp * pp > cluster.num_gpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp (", tp, ") x pp (", pp, ") = ", tp * pp,
                       " GPUs per instance exceeds cluster.num_gpus (", cluster.num_gpus, ")"));
    }
  }
  const auto needs_fp8 = [&](QuantFormat f) {
    return f == QuantFormat::kFp8 && device->peak_fp8_tflops <= 0;
  };
  for (size_t i = 0; i < search.weight_precision.size(); ++i) {
    if (needs_fp8(search.weight_precision[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("search.weight_precision[", i, "] fp8 is not supported by cluster.gpu ",
                       device->name, ": the device has no FP8 tensor cores"));
    }
  }
  for (size_t i = 0; i < search.kv_cache_precision.size(); ++i) {
    if (needs_fp8(search.kv_cache_precision[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("search.kv_cache_precision[", i, "] fp8 is not supported by cluster.gpu ",
                       device->name, ": the device has no FP8 tensor cores"));
    }
  }
  if (serving.batching == Batching::kStatic && !serving.batch_size) {
    return absl::InvalidArgumentError(
        "serving.batch_size is required with serving.batching: static");
  }
  for (bool d : search.disaggregated) {
    if (d && serving.batching == Batching::kStatic) {
      return absl::InvalidArgumentError(
          "search.disaggregated: true needs serving.batching: inflight (static batching runs "
          "prefill and decode of one batch together)");
    }
  }
  return absl::OkStatus();
}

}  // namespace paratune::inference
