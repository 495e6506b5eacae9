#include "server/convert_inference.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "inference/spec_io.h"
#include "search/model_math.h"

namespace paratune::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using nlohmann::json;

// The proto JSON mapping writes int64 as decimal strings; the spec reader gets numbers, as a
// spec file gives them.
void Int64AsNumbers(json& object, const Descriptor& descriptor) {
  if (!object.is_object()) return;
  auto to_number = [](json& v) {
    int64_t n = 0;
    if (v.is_string() && absl::SimpleAtoi(v.get<std::string>(), &n)) v = n;
  };
  for (auto it = object.begin(); it != object.end(); ++it) {
    const FieldDescriptor* field = descriptor.FindFieldByName(it.key());
    if (field == nullptr) continue;
    json& value = it.value();
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (value.is_array()) {
        for (json& e : value) Int64AsNumbers(e, *field->message_type());
      } else {
        Int64AsNumbers(value, *field->message_type());
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
      if (value.is_array()) {
        for (json& e : value) to_number(e);
      } else {
        to_number(value);
      }
    }
  }
}

// Drops the keys of the canonical spec JSON that the wire message has no field for, when they
// hold nothing (null, an empty list or object). A key with a value is an error.
absl::Status DropEmptyKeysTheWireLacks(json& object, const Descriptor& descriptor,
                                       const std::string& path) {
  if (!object.is_object()) return absl::OkStatus();
  for (auto it = object.begin(); it != object.end();) {
    const std::string field_path = path.empty() ? it.key() : absl::StrCat(path, ".", it.key());
    const FieldDescriptor* field = descriptor.FindFieldByName(it.key());
    if (field == nullptr) {
      if (!it.value().is_null() && !it.value().empty()) {
        return absl::InternalError(
            absl::StrCat("the wire form has no field ", field_path, " for ", it.value().dump()));
      }
      it = object.erase(it);
      continue;
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field->is_repeated() &&
        !field->is_map()) {
      if (auto s = DropEmptyKeysTheWireLacks(it.value(), *field->message_type(), field_path);
          !s.ok()) {
        return s;
      }
    }
    ++it;
  }
  return absl::OkStatus();
}

// Whether `v` is what the proto JSON mapping prints for a field left at its default.
bool IsWireDefault(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v == 0) ||
         (v.is_string() && (v.get<std::string>().empty() || v.get<std::string>() == "0")) ||
         ((v.is_array() || v.is_object()) && v.empty());
}

// The proto JSON of a job's spec (GET /v1/jobs/{id}) prints every field of the wire
// messages, those of training specs too (search.dp: [], ...). Such a key, outside the
// inference contract (the keys InferenceJobSpecToJson writes) and at its default, says
// nothing and is dropped, so that a job's spec can be submitted again; with a value it stays
// and the strict reader refuses it, naming it.
void DropWireDefaultsOutsideTheContract(json& spec) {
  static const json* const kContract =
      new json(inference::InferenceJobSpecToJson(inference::InferenceJobSpec{}));
  if (!spec.is_object()) return;
  const Descriptor& descriptor = *v1::JobSpec::descriptor();
  for (auto section = spec.begin(); section != spec.end(); ++section) {
    const FieldDescriptor* field = descriptor.FindFieldByName(section.key());
    if (field == nullptr || field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE ||
        !section.value().is_object()) {
      continue;
    }
    const json* known = kContract->contains(section.key()) ? &(*kContract)[section.key()] : nullptr;
    for (auto it = section.value().begin(); it != section.value().end();) {
      const bool outside = known == nullptr || !known->is_object() || !known->contains(it.key());
      if (outside && field->message_type()->FindFieldByName(it.key()) != nullptr &&
          IsWireDefault(it.value())) {
        it = section.value().erase(it);
      } else {
        ++it;
      }
    }
  }
  if (auto it = spec.find("training"); it != spec.end() && it->is_object() && it->empty()) {
    spec.erase(it);
  }
}

v1::LatencyStats ToProto(const inference::LatencyStats& s) {
  v1::LatencyStats out;
  out.set_mean(s.mean);
  out.set_p50(s.p50);
  out.set_p90(s.p90);
  out.set_p99(s.p99);
  return out;
}

inference::LatencyStats FromProto(const v1::LatencyStats& s) {
  return {s.mean(), s.p50(), s.p90(), s.p99()};
}

v1::StepBreakdown ToProto(const inference::StepBreakdown& s) {
  v1::StepBreakdown out;
  out.set_compute_ms(s.compute);
  out.set_memory_ms(s.memory);
  out.set_tp_comm_ms(s.tp_comm);
  out.set_pp_comm_ms(s.pp_comm);
  out.set_overhead_ms(s.overhead);
  out.set_kv_transfer_ms(s.kv_transfer);
  out.set_total_ms(s.total);
  out.set_source(s.source);
  return out;
}

inference::StepBreakdown FromProto(const v1::StepBreakdown& s) {
  inference::StepBreakdown out;
  out.compute = s.compute_ms();
  out.memory = s.memory_ms();
  out.tp_comm = s.tp_comm_ms();
  out.pp_comm = s.pp_comm_ms();
  out.overhead = s.overhead_ms();
  out.kv_transfer = s.kv_transfer_ms();
  out.total = s.total_ms();
  out.source = s.source();
  return out;
}

absl::StatusOr<inference::QuantFormat> FormatFromProto(const std::string& text, const char* field) {
  absl::StatusOr<inference::QuantFormat> f = inference::ParseQuantFormat(text);
  if (!f.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.", field, ": ", f.status().message()));
  }
  return f;
}

}  // namespace

bool IsInferenceSpec(const v1::JobSpec& spec) { return spec.kind() == "inference"; }

absl::StatusOr<inference::InferenceJobSpec> InferenceSpecFromProto(const v1::JobSpec& spec) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = false;
  if (!google::protobuf::util::MessageToJsonString(spec, &text, options).ok()) {
    return absl::InternalError("cannot print the job spec as JSON");
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError("cannot re-read the job spec JSON");
  Int64AsNumbers(j, *v1::JobSpec::descriptor());
  return inference::InferenceJobSpecFromJson(j);
}

absl::StatusOr<v1::JobSpec> InferenceSpecToProto(const inference::InferenceJobSpec& spec) {
  v1::JobSpec out;
  json canonical = inference::InferenceJobSpecToJson(spec);
  if (absl::Status s = DropEmptyKeysTheWireLacks(canonical, *v1::JobSpec::descriptor(), "");
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("canonical inference spec does not fit the wire form: ", s.message()));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(canonical.dump(), &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("canonical inference spec does not fit the wire form: ", status.ToString()));
  }
  return out;
}

absl::StatusOr<v1::JobSpec> InferenceSpecProtoFromJson(const json& j) {
  json cleaned = j;
  DropWireDefaultsOutsideTheContract(cleaned);
  absl::StatusOr<inference::InferenceJobSpec> spec = inference::InferenceJobSpecFromJson(cleaned);
  if (!spec.ok()) return spec.status();
  return InferenceSpecToProto(*spec);
}

v1::ServingConfig ToProto(const inference::ServingConfig& c) {
  v1::ServingConfig out;
  out.set_tp(static_cast<int32_t>(c.tp));
  out.set_pp(static_cast<int32_t>(c.pp));
  out.set_ep(static_cast<int32_t>(c.ep));
  out.set_replicas(static_cast<int32_t>(c.replicas));
  out.set_max_batch_size(static_cast<int32_t>(c.max_batch_size));
  out.set_max_num_tokens(static_cast<int32_t>(c.max_num_tokens));
  out.set_weight_precision(std::string(inference::ToString(c.weight_precision)));
  out.set_kv_cache_precision(std::string(inference::ToString(c.kv_cache_precision)));
  out.set_disaggregated(c.disaggregated);
  out.set_prefill_replicas(static_cast<int32_t>(c.prefill_replicas));
  out.set_decode_replicas(static_cast<int32_t>(c.decode_replicas));
  out.set_num_gpus(static_cast<int32_t>(c.num_gpus()));
  out.set_attention_dp(c.attention_dp);
  return out;
}

absl::StatusOr<inference::ServingConfig> ServingConfigFromProto(const v1::ServingConfig& c) {
  inference::ServingConfig out;
  out.tp = c.tp();
  out.pp = c.pp();
  out.ep = c.ep();
  out.attention_dp = c.attention_dp();
  out.replicas = c.replicas();
  out.max_batch_size = c.max_batch_size();
  out.max_num_tokens = c.max_num_tokens();
  absl::StatusOr<inference::QuantFormat> w =
      FormatFromProto(c.weight_precision(), "weight_precision");
  if (!w.ok()) return w.status();
  absl::StatusOr<inference::QuantFormat> kv =
      FormatFromProto(c.kv_cache_precision(), "kv_cache_precision");
  if (!kv.ok()) return kv.status();
  out.weight_precision = *w;
  out.kv_cache_precision = *kv;
  out.disaggregated = c.disaggregated();
  out.prefill_replicas = c.prefill_replicas();
  out.decode_replicas = c.decode_replicas();
  return out;
}

v1::InferenceRankedConfig ToProto(const inference::InferenceRankedConfig& r) {
  v1::InferenceRankedConfig out;
  out.set_rank(static_cast<int32_t>(r.rank));
  *out.mutable_config() = ToProto(r.config);
  out.set_output_tokens_per_sec_per_gpu(r.output_tokens_per_sec_per_gpu);
  out.set_output_tokens_per_sec(r.output_tokens_per_sec);
  out.set_tokens_per_sec_per_user(r.tokens_per_sec_per_user);
  out.set_requests_per_sec(r.requests_per_sec);
  *out.mutable_ttft_ms() = ToProto(r.ttft_ms);
  *out.mutable_tpot_ms() = ToProto(r.tpot_ms);
  *out.mutable_e2e_latency_ms() = ToProto(r.e2e_latency_ms);
  v1::ServingMemory* m = out.mutable_memory();
  m->set_weights(r.memory.weights);
  m->set_kv_cache(r.memory.kv_cache);
  m->set_activations(r.memory.activations);
  m->set_reserve(r.memory.reserve);
  m->set_peak(r.memory.peak);
  m->set_capacity(r.memory.capacity);
  out.set_max_concurrency(static_cast<int32_t>(r.max_concurrency));
  if (r.cost_per_million_output_tokens) {
    out.set_cost_per_million_output_tokens(*r.cost_per_million_output_tokens);
  }
  out.set_meets_limits(r.meets_limits);
  out.set_pareto_optimal(r.pareto_optimal);
  *out.mutable_prefill_step() = ToProto(r.prefill_step);
  *out.mutable_decode_step() = ToProto(r.decode_step);
  for (const std::string& note : r.notes) out.add_notes(note);
  if (r.verification) {
    const inference::InferenceVerification& v = *r.verification;
    v1::InferenceVerification* w = out.mutable_verification();
    w->set_status(v.status);
    *w->mutable_measured_ttft_ms() = ToProto(v.measured_ttft_ms);
    *w->mutable_measured_tpot_ms() = ToProto(v.measured_tpot_ms);
    *w->mutable_measured_e2e_latency_ms() = ToProto(v.measured_e2e_latency_ms);
    w->set_measured_output_tokens_per_sec(v.measured_output_tokens_per_sec);
    w->set_measured_requests(static_cast<int32_t>(v.measured_requests));
  }
  return out;
}

absl::StatusOr<inference::InferenceRankedConfig> InferenceRankedConfigFromProto(
    const v1::InferenceRankedConfig& r) {
  inference::InferenceRankedConfig out;
  out.rank = r.rank();
  absl::StatusOr<inference::ServingConfig> c = ServingConfigFromProto(r.config());
  if (!c.ok()) return c.status();
  out.config = *c;
  out.output_tokens_per_sec_per_gpu = r.output_tokens_per_sec_per_gpu();
  out.output_tokens_per_sec = r.output_tokens_per_sec();
  out.tokens_per_sec_per_user = r.tokens_per_sec_per_user();
  out.requests_per_sec = r.requests_per_sec();
  out.ttft_ms = FromProto(r.ttft_ms());
  out.tpot_ms = FromProto(r.tpot_ms());
  out.e2e_latency_ms = FromProto(r.e2e_latency_ms());
  const v1::ServingMemory& m = r.memory();
  out.memory = {m.weights(), m.kv_cache(), m.activations(), m.reserve(), m.peak(), m.capacity()};
  out.max_concurrency = r.max_concurrency();
  if (r.has_cost_per_million_output_tokens()) {
    out.cost_per_million_output_tokens = r.cost_per_million_output_tokens();
  }
  out.meets_limits = r.meets_limits();
  out.pareto_optimal = r.pareto_optimal();
  out.prefill_step = FromProto(r.prefill_step());
  out.decode_step = FromProto(r.decode_step());
  out.notes.assign(r.notes().begin(), r.notes().end());
  if (r.has_verification()) {
    const v1::InferenceVerification& w = r.verification();
    inference::InferenceVerification& v = out.verification.emplace();
    v.status = w.status();
    v.measured_ttft_ms = FromProto(w.measured_ttft_ms());
    v.measured_tpot_ms = FromProto(w.measured_tpot_ms());
    v.measured_e2e_latency_ms = FromProto(w.measured_e2e_latency_ms());
    v.measured_output_tokens_per_sec = w.measured_output_tokens_per_sec();
    v.measured_requests = w.measured_requests();
  }
  return out;
}

v1::InferencePlanResult ToProto(const inference::InferencePlanResult& result,
                                int64_t max_rejected) {
  v1::InferencePlanResult out;
  for (const auto& r : result.ranked) *out.add_ranked() = ToProto(r);
  for (const auto& r : result.pareto_front) *out.add_pareto_front() = ToProto(r);
  for (const inference::InferenceRejected& r : result.rejected) {
    if (out.rejected_size() >= max_rejected) break;
    v1::InferenceRejectedConfig* rej = out.add_rejected();
    *rej->mutable_config() = ToProto(r.config);
    rej->set_rule(r.rule);
    rej->set_reason(r.reason);
  }
  out.set_candidates_considered(static_cast<int32_t>(result.candidates_considered));
  out.set_feasible(static_cast<int32_t>(result.feasible));
  out.set_rejected_total(static_cast<int32_t>(
      std::max<int64_t>(result.rejected_total, static_cast<int64_t>(result.rejected.size()))));
  for (const auto& [rule, count] : result.rejected_reasons) {
    (*out.mutable_rejected_reasons())[rule] += static_cast<int32_t>(count);
  }
  out.set_recommendation(result.recommendation);
  out.set_elapsed_ms(result.elapsed_ms);
  return out;
}

absl::StatusOr<inference::InferencePlanResult> InferencePlanResultFromProto(
    const v1::InferencePlanResult& result) {
  inference::InferencePlanResult out;
  for (const auto& r : result.ranked()) {
    absl::StatusOr<inference::InferenceRankedConfig> d = InferenceRankedConfigFromProto(r);
    if (!d.ok()) return d.status();
    out.ranked.push_back(*std::move(d));
  }
  for (const auto& r : result.pareto_front()) {
    absl::StatusOr<inference::InferenceRankedConfig> d = InferenceRankedConfigFromProto(r);
    if (!d.ok()) return d.status();
    out.pareto_front.push_back(*std::move(d));
  }
  for (const v1::InferenceRejectedConfig& r : result.rejected()) {
    absl::StatusOr<inference::ServingConfig> c = ServingConfigFromProto(r.config());
    if (!c.ok()) return c.status();
    out.rejected.push_back({*c, r.rule(), r.reason()});
  }
  out.candidates_considered = result.candidates_considered();
  out.feasible = result.feasible();
  out.rejected_total = result.rejected_total();
  for (const auto& [rule, count] : result.rejected_reasons()) {
    out.rejected_reasons.emplace_back(rule, count);
  }
  // Most frequent first, then by rule (the wire map has no order).
  std::sort(out.rejected_reasons.begin(), out.rejected_reasons.end(),
            [](const auto& a, const auto& b) {
              return a.second != b.second ? a.second > b.second : a.first < b.first;
            });
  out.recommendation = result.recommendation();
  out.elapsed_ms = result.elapsed_ms();
  return out;
}

namespace {
template <typename ServingTask>
void SetExperts(const ModelSpec& m, ServingTask* t) {
  if (!IsMoe(m)) return;
  v1::MoeLayerTask* moe = t->mutable_moe();
  moe->set_hidden_size(m.hidden_size);
  moe->set_num_experts(m.num_experts);
  moe->set_moe_router_topk(m.moe_router_topk);
  moe->set_moe_ffn_hidden_size(m.moe_ffn_hidden_size);
  moe->set_num_shared_experts(m.num_shared_experts);
  moe->set_shared_expert_ffn_hidden_size(m.num_shared_experts > 0 ? SharedExpertFfn(m) : 0);
  moe->set_routing("dropless");
  t->set_first_k_dense_layers(m.first_k_dense_layers);
  t->set_moe_layer_freq(m.moe_layer_freq);
}
}  // namespace

void SetServingExperts(const ModelSpec& model, v1::ServingStepTask* task) {
  SetExperts(model, task);
}
void SetServingExperts(const ModelSpec& model, v1::ServingVerifyTask* task) {
  SetExperts(model, task);
}

v1::ProfileTask ToProto(const inference::ServingStepTaskSpec& task) {
  v1::ProfileTask out;
  out.set_device_kind(task.device_kind);
  out.set_key(task.Key());
  v1::ServingStepTask* t = out.mutable_serving_step();
  t->set_phase(task.phase == inference::ServingStepPhase::kPrefill
                   ? v1::ServingStepTask::PHASE_PREFILL
                   : v1::ServingStepTask::PHASE_DECODE);
  v1::LayerShape* shape = t->mutable_shape();
  shape->set_hidden_size(task.model.hidden_size);
  shape->set_num_attention_heads(task.model.num_attention_heads);
  shape->set_kv_channels(task.model.kv_channels);
  shape->set_num_query_groups(QueryGroups(task.model));
  shape->set_ffn_hidden_size(task.model.ffn_hidden_size);
  shape->set_vocab_size(task.model.vocab_size);
  shape->set_activation(ToString(task.model.activation));
  shape->set_normalization(ToString(task.model.normalization));
  t->set_tp(task.shape.tp);
  t->set_batch(task.batch);
  if (task.phase == inference::ServingStepPhase::kPrefill) {
    t->set_seq_length(task.length);
  } else {
    t->set_context_length(task.length);
  }
  t->set_weight_precision(std::string(inference::ToString(task.shape.weight_precision)));
  t->set_kv_precision(std::string(inference::ToString(task.shape.kv_cache_precision)));
  t->set_kv_block_size(task.kv_block_size);
  t->set_num_layers(task.model.num_layers);
  t->set_logits(true);
  t->set_rope(task.model.position_embedding == PositionEmbedding::kRope);
  t->set_attention_window(task.model.sliding_window);
  t->set_window_attn_skip_freq(task.model.window_attn_skip_freq);
  SetServingExperts(task.model, t);
  if (task.shape.ep > 1) t->mutable_moe()->set_ep(task.shape.ep);
  t->set_attention_dp(task.shape.attention_dp);
  t->set_warmup(task.warmup);
  t->set_iters(task.iters);
  return out;
}

absl::StatusOr<inference::StepShape> StepShapeFromTask(const v1::ServingStepTask& task,
                                                       int64_t model_layers) {
  inference::StepShape shape;
  if (task.num_layers() > 0 && task.num_layers() != model_layers) shape.layers = task.num_layers();
  shape.tp = std::max<int64_t>(1, task.tp());
  absl::StatusOr<inference::QuantFormat> w = inference::ParseQuantFormat(task.weight_precision());
  if (!w.ok()) return w.status();
  absl::StatusOr<inference::QuantFormat> kv = inference::ParseQuantFormat(task.kv_precision());
  if (!kv.ok()) return kv.status();
  shape.weight_precision = *w;
  shape.kv_cache_precision = *kv;
  shape.ep = task.has_moe() ? std::max<int64_t>(1, task.moe().ep()) : 1;
  shape.attention_dp = task.attention_dp();
  return shape;
}

absl::StatusOr<inference::StepSample> StepSampleFromResult(const v1::ServingStepTask& task,
                                                           const v1::TaskResult& result) {
  if (!result.has_serving_step()) {
    return absl::InvalidArgumentError("the result carries no serving_step profile");
  }
  inference::StepSample s;
  const bool prefill = task.phase() == v1::ServingStepTask::PHASE_PREFILL;
  s.phase = prefill ? inference::ServingStepPhase::kPrefill : inference::ServingStepPhase::kDecode;
  s.batch = task.batch();
  s.length = prefill ? task.seq_length() : task.context_length();
  bool total = false;
  for (const v1::PhaseTiming& p : result.serving_step().phases()) {
    if (p.phase() == "total") {
      s.total_s = p.median_s();
      total = true;
    } else if (p.phase() == "gemm") {
      s.gemm_s = p.median_s();
    } else if (p.phase() == "attention") {
      s.attention_s = p.median_s();
    } else if (p.phase() == "tp_comm") {
      s.tp_comm_s = p.median_s();
    } else if (p.phase() == "logits") {
      s.logits_s = p.median_s();
    }
  }
  if (!total) return absl::InvalidArgumentError("the serving_step profile has no total phase");
  return s;
}

}  // namespace paratune::server
