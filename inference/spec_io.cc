#include "inference/spec_io.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "inference/engine_profile.h"
#include "search/spec_fields.h"
#include "search/spec_io.h"

namespace paratune::inference {
namespace {

using nlohmann::json;

absl::Status Object(const json& v, const std::string& path) {
  if (v.is_object()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be an object (mapping)"));
}

template <typename T>
absl::Status ReadOptional(const json& obj, const std::string& sec, const std::string& key,
                          absl::StatusOr<T> (*as)(const json&, const std::string&),
                          std::optional<T>* out) {
  T value{};
  bool given = false;
  if (auto s = ReadSpecField(obj, sec, key, as, &value, &given); !s.ok()) return s;
  if (given) *out = value;
  return absl::OkStatus();
}

absl::StatusOr<QuantFormat> AsFormat(const json& v, const std::string& path) {
  return SpecEnum(v, path, &ParseQuantFormat);
}

absl::Status ReadLimits(const json& obj, const std::string& sec, const std::string& key,
                        LatencyLimits* out) {
  const json* v = FindSpecField(obj, key);
  if (v == nullptr) return absl::OkStatus();
  const std::string path = SpecFieldPath(sec, key);
  if (auto s = Object(*v, path); !s.ok()) return s;
  if (auto s = CheckSpecKeys(*v, path, {"p50", "p90", "p99"}); !s.ok()) return s;
  if (auto s = ReadOptional(*v, path, "p50", &SpecDouble, &out->p50); !s.ok()) return s;
  if (auto s = ReadOptional(*v, path, "p90", &SpecDouble, &out->p90); !s.ok()) return s;
  return ReadOptional(*v, path, "p99", &SpecDouble, &out->p99);
}

absl::Status ReadServing(const json& obj, ServingSpec* s) {
  const std::string sec = "serving";
  if (auto st = Object(obj, sec); !st.ok()) return st;
  if (auto st = CheckSpecKeys(
          obj, sec,
          {"engine", "isl", "isl_stddev", "osl", "osl_stddev", "concurrency", "request_rate",
           "num_requests", "batching", "batch_size", "ttft_ms", "tpot_ms",
           "min_tokens_per_sec_per_user", "price_per_gpu_hour", "kv_cache_fraction"});
      !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecEnum(obj, sec, "engine", &ParseServingEngine, &s->engine); !st.ok()) {
    return st;
  }
  bool isl = false, osl = false;
  if (auto st = ReadSpecField(obj, sec, "isl", &SpecInt, &s->isl, &isl); !st.ok()) return st;
  if (auto st = ReadSpecField(obj, sec, "osl", &SpecInt, &s->osl, &osl); !st.ok()) return st;
  if (auto st = ReadSpecField(obj, sec, "isl_stddev", &SpecDouble, &s->isl_stddev); !st.ok())
    return st;
  if (auto st = ReadSpecField(obj, sec, "osl_stddev", &SpecDouble, &s->osl_stddev); !st.ok())
    return st;
  if (auto st = ReadOptional(obj, sec, "concurrency", &SpecInt, &s->concurrency); !st.ok()) {
    return st;
  }
  if (auto st = ReadOptional(obj, sec, "request_rate", &SpecDouble, &s->request_rate); !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecField(obj, sec, "num_requests", &SpecInt, &s->num_requests); !st.ok())
    return st;
  if (auto st = ReadSpecEnum(obj, sec, "batching", &ParseBatching, &s->batching); !st.ok()) {
    return st;
  }
  if (auto st = ReadOptional(obj, sec, "batch_size", &SpecInt, &s->batch_size); !st.ok()) {
    return st;
  }
  if (auto st = ReadLimits(obj, sec, "ttft_ms", &s->ttft_ms); !st.ok()) return st;
  if (auto st = ReadLimits(obj, sec, "tpot_ms", &s->tpot_ms); !st.ok()) return st;
  if (auto st = ReadOptional(obj, sec, "min_tokens_per_sec_per_user", &SpecDouble,
                             &s->min_tokens_per_sec_per_user);
      !st.ok()) {
    return st;
  }
  if (auto st = ReadOptional(obj, sec, "price_per_gpu_hour", &SpecDouble, &s->price_per_gpu_hour);
      !st.ok()) {
    return st;
  }
  if (auto st = ReadOptional(obj, sec, "kv_cache_fraction", &SpecDouble, &s->kv_cache_fraction);
      !st.ok()) {
    return st;
  }
  if (!isl) return absl::InvalidArgumentError("serving.isl is required (input tokens per request)");
  if (!osl) {
    return absl::InvalidArgumentError("serving.osl is required (output tokens per request)");
  }
  return absl::OkStatus();
}

absl::Status ReadSearch(const json& obj, ServingSearchOptions* o) {
  const std::string sec = "search";
  if (auto st = Object(obj, sec); !st.ok()) return st;
  if (auto st = CheckSpecKeys(
          obj, sec,
          {"tp", "pp", "ep", "replicas", "max_batch_size", "max_num_tokens", "weight_precision",
           "kv_cache_precision", "disaggregated", "attention_dp", "prefill_replicas",
           "decode_replicas", "objective", "top_k", "mode", "verify_top_k"});
      !st.ok()) {
    return st;
  }
  const std::pair<const char*, std::vector<int64_t>*> ints[] = {
      {"tp", &o->tp},
      {"pp", &o->pp},
      {"ep", &o->ep},
      {"replicas", &o->replicas},
      {"max_batch_size", &o->max_batch_size},
      {"max_num_tokens", &o->max_num_tokens},
      {"prefill_replicas", &o->prefill_replicas},
      {"decode_replicas", &o->decode_replicas}};
  for (const auto& [key, out] : ints) {
    if (auto st = ReadSpecList(obj, sec, key, &SpecInt, out); !st.ok()) return st;
  }
  if (auto st = ReadSpecList(obj, sec, "weight_precision", &AsFormat, &o->weight_precision);
      !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecList(obj, sec, "kv_cache_precision", &AsFormat, &o->kv_cache_precision);
      !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecList(obj, sec, "disaggregated", &SpecBool, &o->disaggregated); !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecList(obj, sec, "attention_dp", &SpecBool, &o->attention_dp); !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecEnum(obj, sec, "objective", &ParseServingObjective, &o->objective);
      !st.ok()) {
    return st;
  }
  if (auto st = ReadSpecField(obj, sec, "top_k", &SpecInt, &o->top_k); !st.ok()) return st;
  if (o->top_k == 0) o->top_k = 10;
  if (auto st = ReadSpecEnum(obj, sec, "mode", &ParseSearchMode, &o->mode); !st.ok()) return st;
  return ReadSpecField(obj, sec, "verify_top_k", &SpecInt, &o->verify_top_k);
}

json Limits(const LatencyLimits& l) {
  json j = json::object();
  if (l.p50) j["p50"] = *l.p50;
  if (l.p90) j["p90"] = *l.p90;
  if (l.p99) j["p99"] = *l.p99;
  return j;
}

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json Formats(const std::vector<QuantFormat>& v) {
  json j = json::array();
  for (QuantFormat f : v) j.push_back(std::string(ToString(f)));
  return j;
}

json Stats(const LatencyStats& s) {
  return {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}};
}

json Step(const StepBreakdown& b) {
  return {{"compute_ms", b.compute}, {"memory_ms", b.memory},     {"tp_comm_ms", b.tp_comm},
          {"pp_comm_ms", b.pp_comm}, {"overhead_ms", b.overhead}, {"kv_transfer_ms", b.kv_transfer},
          {"total_ms", b.total},     {"source", b.source}};
}

json Verification(const InferenceVerification& v) {
  return {{"status", v.status},
          {"measured_ttft_ms", Stats(v.measured_ttft_ms)},
          {"measured_tpot_ms", Stats(v.measured_tpot_ms)},
          {"measured_e2e_latency_ms", Stats(v.measured_e2e_latency_ms)},
          {"measured_output_tokens_per_sec", v.measured_output_tokens_per_sec},
          {"measured_requests", v.measured_requests}};
}

}  // namespace

absl::StatusOr<JobKind> JobKindOf(const json& spec) {
  if (!spec.is_object()) return JobKind::kTraining;
  const json* v = FindSpecField(spec, "kind");
  if (v == nullptr) return JobKind::kTraining;
  auto s = SpecString(*v, "kind");
  if (!s.ok()) return s.status();
  if (*s == "training" || s->empty()) return JobKind::kTraining;
  if (*s == "inference") return JobKind::kInference;
  return absl::InvalidArgumentError(
      absl::StrCat("kind ('", *s, "') must be training or inference"));
}

absl::StatusOr<InferenceJobSpec> InferenceJobSpecFromJson(const json& j) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        "an inference spec must be an object with kind, model, cluster, serving and search");
  }
  if (auto s = CheckSpecKeys(j, "", {"kind", "name", "model", "cluster", "serving", "search"});
      !s.ok()) {
    return s;
  }
  auto kind = JobKindOf(j);
  if (!kind.ok()) return kind.status();
  if (*kind != JobKind::kInference) {
    return absl::InvalidArgumentError("kind must be inference for an inference spec");
  }
  InferenceJobSpec spec;
  if (const json* v = FindSpecField(j, "name")) {
    auto s = SpecString(*v, "name");
    if (!s.ok()) return s.status();
    spec.name = *s;
  }
  for (const char* section : {"model", "cluster", "serving"}) {
    if (FindSpecField(j, section) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("section '", section, "' is required"));
    }
  }
  auto model = ModelSpecFromJson(j.at("model"));
  if (!model.ok()) return model.status();
  spec.model = *model;
  auto cluster = ClusterSpecFromJson(j.at("cluster"));
  if (!cluster.ok()) return cluster.status();
  spec.cluster = *cluster;
  if (auto s = ReadServing(j.at("serving"), &spec.serving); !s.ok()) return s;
  if (const json* search = FindSpecField(j, "search")) {
    if (auto s = ReadSearch(*search, &spec.search); !s.ok()) return s;
  }
  if (spec.name.empty()) spec.name = spec.model.name;
  if (auto s = spec.Validate(); !s.ok()) return s;
  return spec;
}

json InferenceJobSpecToJson(const InferenceJobSpec& spec) {
  const ServingSpec& s = spec.serving;
  const ServingSearchOptions& o = spec.search;
  return json{
      {"kind", "inference"},
      {"name", spec.name},
      {"model", ModelSpecToJson(spec.model)},
      {"cluster", ClusterSpecToJson(spec.cluster)},
      {"serving",
       {{"engine", std::string(ToString(s.engine))},
        {"isl", s.isl},
        {"isl_stddev", s.isl_stddev},
        {"osl", s.osl},
        {"osl_stddev", s.osl_stddev},
        {"concurrency", Opt(s.concurrency)},
        {"request_rate", Opt(s.request_rate)},
        {"num_requests", s.num_requests},
        {"batching", std::string(ToString(s.batching))},
        {"batch_size", Opt(s.batch_size)},
        {"ttft_ms", Limits(s.ttft_ms)},
        {"tpot_ms", Limits(s.tpot_ms)},
        {"min_tokens_per_sec_per_user", Opt(s.min_tokens_per_sec_per_user)},
        {"price_per_gpu_hour", Opt(s.price_per_gpu_hour)},
        {"kv_cache_fraction", Opt(s.kv_cache_fraction)}}},
      {"search",
       {{"tp", o.tp},
        {"pp", o.pp},
        {"ep", o.ep},
        {"replicas", o.replicas},
        {"max_batch_size", o.max_batch_size},
        {"max_num_tokens", o.max_num_tokens},
        {"weight_precision", Formats(o.weight_precision)},
        {"kv_cache_precision", Formats(o.kv_cache_precision)},
        {"disaggregated", json(std::vector<bool>(o.disaggregated.begin(), o.disaggregated.end()))},
        {"attention_dp", json(std::vector<bool>(o.attention_dp.begin(), o.attention_dp.end()))},
        {"prefill_replicas", o.prefill_replicas},
        {"decode_replicas", o.decode_replicas},
        {"objective", std::string(ToString(o.objective))},
        {"top_k", o.top_k},
        {"mode", std::string(ToString(o.mode))},
        {"verify_top_k", o.verify_top_k}}}};
}

json ToJson(const ServingConfig& c) {
  return {{"tp", c.tp},
          {"pp", c.pp},
          {"ep", c.ep},
          {"attention_dp", c.attention_dp},
          {"replicas", c.replicas},
          {"max_batch_size", c.max_batch_size},
          {"max_num_tokens", c.max_num_tokens},
          {"weight_precision", std::string(ToString(c.weight_precision))},
          {"kv_cache_precision", std::string(ToString(c.kv_cache_precision))},
          {"disaggregated", c.disaggregated},
          {"prefill_replicas", c.prefill_replicas},
          {"decode_replicas", c.decode_replicas},
          {"num_gpus", c.num_gpus()}};
}

absl::StatusOr<ServingConfig> ServingConfigFromJson(const json& j) {
  const std::string sec = "config";
  if (auto s = Object(j, sec); !s.ok()) return s;
  if (auto s = CheckSpecKeys(j, sec,
                             {"tp", "pp", "ep", "attention_dp", "replicas", "max_batch_size",
                              "max_num_tokens", "weight_precision", "kv_cache_precision",
                              "disaggregated", "prefill_replicas", "decode_replicas", "num_gpus"});
      !s.ok()) {
    return s;
  }
  ServingConfig c;
  const std::pair<const char*, int64_t*> ints[] = {{"tp", &c.tp},
                                                   {"pp", &c.pp},
                                                   {"ep", &c.ep},
                                                   {"replicas", &c.replicas},
                                                   {"max_batch_size", &c.max_batch_size},
                                                   {"max_num_tokens", &c.max_num_tokens},
                                                   {"prefill_replicas", &c.prefill_replicas},
                                                   {"decode_replicas", &c.decode_replicas}};
  for (const auto& [key, out] : ints) {
    if (auto s = ReadSpecField(j, sec, key, &SpecInt, out); !s.ok()) return s;
  }
  if (auto s = ReadSpecField(j, sec, "weight_precision", &AsFormat, &c.weight_precision); !s.ok()) {
    return s;
  }
  if (auto s = ReadSpecField(j, sec, "kv_cache_precision", &AsFormat, &c.kv_cache_precision);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadSpecField(j, sec, "disaggregated", &SpecBool, &c.disaggregated); !s.ok())
    return s;
  if (auto s = ReadSpecField(j, sec, "attention_dp", &SpecBool, &c.attention_dp); !s.ok()) return s;
  int64_t gpus = 0;
  bool gpus_given = false;
  if (auto s = ReadSpecField(j, sec, "num_gpus", &SpecInt, &gpus, &gpus_given); !s.ok()) return s;
  if (gpus_given && gpus != c.num_gpus()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.num_gpus (", gpus, ") must equal the layout's GPUs (", c.num_gpus(), ")"));
  }
  return c;
}

json ToJson(const InferenceRankedConfig& r) {
  return {{"rank", r.rank},
          {"config", ToJson(r.config)},
          {"output_tokens_per_sec_per_gpu", r.output_tokens_per_sec_per_gpu},
          {"output_tokens_per_sec", r.output_tokens_per_sec},
          {"tokens_per_sec_per_user", r.tokens_per_sec_per_user},
          {"requests_per_sec", r.requests_per_sec},
          {"ttft_ms", Stats(r.ttft_ms)},
          {"tpot_ms", Stats(r.tpot_ms)},
          {"e2e_latency_ms", Stats(r.e2e_latency_ms)},
          {"memory",
           {{"weights", r.memory.weights},
            {"kv_cache", r.memory.kv_cache},
            {"activations", r.memory.activations},
            {"reserve", r.memory.reserve},
            {"peak", r.memory.peak},
            {"capacity", r.memory.capacity}}},
          {"max_concurrency", r.max_concurrency},
          {"cost_per_million_output_tokens", Opt(r.cost_per_million_output_tokens)},
          {"meets_limits", r.meets_limits},
          {"pareto_optimal", r.pareto_optimal},
          {"prefill_step", Step(r.prefill_step)},
          {"decode_step", Step(r.decode_step)},
          {"notes", r.notes},
          {"verification", r.verification ? Verification(*r.verification) : json(nullptr)}};
}

json ToJson(const InferencePlanResult& r) {
  json ranked = json::array(), front = json::array(), rejected = json::array();
  for (const auto& x : r.ranked) ranked.push_back(ToJson(x));
  for (const auto& x : r.pareto_front) front.push_back(ToJson(x));
  for (const auto& x : r.rejected) {
    rejected.push_back({{"config", ToJson(x.config)}, {"rule", x.rule}, {"reason", x.reason}});
  }
  json reasons = json::object();
  for (const auto& [rule, n] : r.rejected_reasons) reasons[rule] = n;
  return {{"ranked", ranked},
          {"pareto_front", front},
          {"rejected", rejected},
          {"candidates_considered", r.candidates_considered},
          {"feasible", r.feasible},
          {"rejected_total", r.rejected_total},
          {"rejected_reasons", reasons},
          {"recommendation", r.recommendation},
          {"elapsed_ms", r.elapsed_ms}};
}

absl::StatusOr<ServingConfig> PinnedServingConfig(const InferenceJobSpec& spec) {
  const ServingSearchOptions& o = spec.search;
  const auto one = [](const char* name, size_t n) -> absl::Status {
    if (n == 1) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "search.", name, " needs exactly one value to name one layout (it has ", n, ")"));
  };
  if (auto s = one("tp", o.tp.size()); !s.ok()) return s;
  if (auto s = one("pp", o.pp.size()); !s.ok()) return s;
  if (auto s = one("weight_precision", o.weight_precision.size()); !s.ok()) return s;
  if (auto s = one("kv_cache_precision", o.kv_cache_precision.size()); !s.ok()) return s;
  const EngineProfile& engine = EngineProfileFor(spec.serving.engine);
  ServingConfig c;
  c.tp = o.tp[0];
  c.pp = o.pp[0];
  if (o.ep.size() > 1) return one("ep", o.ep.size());
  if (o.attention_dp.size() > 1) return one("attention_dp", o.attention_dp.size());
  c.attention_dp = !o.attention_dp.empty() && o.attention_dp[0];
  // Attention data parallelism splits the experts over every rank: ep = tp unless given.
  c.ep = !o.ep.empty() ? o.ep[0] : c.attention_dp ? c.tp : 1;
  c.weight_precision = o.weight_precision[0];
  c.kv_cache_precision = o.kv_cache_precision[0];
  if (o.max_batch_size.size() > 1) return one("max_batch_size", o.max_batch_size.size());
  if (o.max_num_tokens.size() > 1) return one("max_num_tokens", o.max_num_tokens.size());
  c.max_batch_size = !o.max_batch_size.empty() ? o.max_batch_size[0]
                     : spec.serving.batch_size ? *spec.serving.batch_size
                                               : engine.default_max_batch_size;
  c.max_num_tokens = o.max_num_tokens.empty() ? engine.default_max_num_tokens : o.max_num_tokens[0];
  if (o.disaggregated.size() > 1) return one("disaggregated", o.disaggregated.size());
  c.disaggregated = !o.disaggregated.empty() && o.disaggregated[0];
  if (c.disaggregated) {
    if (auto s = one("prefill_replicas", o.prefill_replicas.size()); !s.ok()) return s;
    if (auto s = one("decode_replicas", o.decode_replicas.size()); !s.ok()) return s;
    c.prefill_replicas = o.prefill_replicas[0];
    c.decode_replicas = o.decode_replicas[0];
    c.replicas = c.prefill_replicas + c.decode_replicas;
  } else {
    if (o.replicas.size() > 1) return one("replicas", o.replicas.size());
    c.replicas = o.replicas.empty()
                     ? std::max<int64_t>(1, spec.cluster.num_gpus / c.gpus_per_instance())
                     : o.replicas[0];
  }
  return c;
}

}  // namespace paratune::inference
