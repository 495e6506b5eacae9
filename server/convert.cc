#include "server/convert.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "inference/spec_io.h"
#include "search/spec_io.h"
#include "server/convert_inference.h"

namespace paratune::server {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool IsWordChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Fills rejected_reasons from per-rule counts: most frequent first, then by rule.
void SetReasons(const std::map<std::string, int64_t>& counts, v1::PlanResult& out) {
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  out.clear_rejected_reasons();
  for (auto& [rule, n] : sorted) {
    v1::RejectedReason* r = out.add_rejected_reasons();
    r->set_reason(rule);
    r->set_count(n);
  }
}

}  // namespace

std::string RejectionRule(const std::string& reason) {
  // Drop parenthesised groups (nested ones included).
  std::string text;
  int depth = 0;
  for (char c : reason) {
    if (c == '(') {
      ++depth;
    } else if (c == ')' && depth > 0) {
      --depth;
    } else if (depth == 0) {
      text.push_back(c);
    }
  }
  // Numbers that stand alone (not part of a name such as "a100" or "tp2") become "N".
  std::string numbered;
  for (size_t i = 0; i < text.size();) {
    const bool starts = text[i] >= '0' && text[i] <= '9' && (i == 0 || !IsWordChar(text[i - 1]));
    if (starts) {
      size_t j = i;
      while (j < text.size() && ((text[j] >= '0' && text[j] <= '9') || text[j] == '.')) ++j;
      if (j == text.size() || !IsWordChar(text[j])) {
        numbered += 'N';
        i = j;
        continue;
      }
    }
    numbered.push_back(text[i++]);
  }
  // Collapse whitespace, and none before punctuation left by a dropped group.
  std::string out;
  for (char c : numbered) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
      continue;
    }
    if ((c == ',' || c == ';' || c == ':' || c == '.') && !out.empty() && out.back() == ' ') {
      out.pop_back();
    }
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

absl::StatusOr<JobSpec> SpecFromProto(const v1::JobSpec& spec) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = false;
  if (!google::protobuf::util::MessageToJsonString(spec, &text, options).ok()) {
    return absl::InternalError("cannot print the job spec as JSON");
  }
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InternalError("cannot re-read the job spec JSON");
  return JobSpecFromJson(json);
}

absl::StatusOr<v1::JobSpec> SpecToProto(const JobSpec& spec) {
  v1::JobSpec out;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      JobSpecToJson(spec).dump(), &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("canonical spec does not fit the wire form: ", status.ToString()));
  }
  return out;
}

absl::StatusOr<v1::JobSpec> SpecProtoFromJson(const nlohmann::json& json) {
  absl::StatusOr<inference::JobKind> kind = inference::JobKindOf(json);
  if (!kind.ok()) return kind.status();
  if (*kind == inference::JobKind::kInference) return InferenceSpecProtoFromJson(json);
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json);
  if (!spec.ok()) return spec.status();
  return SpecToProto(*spec);
}

v1::RankedConfig ToProto(const RankedConfig& r) {
  v1::RankedConfig out;
  out.set_rank(r.rank);
  *out.mutable_config() = ToProto(r.config);
  out.set_iteration_time_s(r.iteration_time_s);
  out.set_tokens_per_sec_per_gpu(r.tokens_per_sec_per_gpu);
  out.set_model_tflops_per_gpu(r.model_tflops_per_gpu);
  out.set_hardware_tflops_per_gpu(r.hardware_tflops_per_gpu);
  out.set_mfu(r.mfu);
  v1::MemoryBreakdown* m = out.mutable_memory();
  m->set_peak_gib(r.memory.Peak() / kGiB);
  m->set_weights(r.memory.weights / kGiB);
  m->set_gradients(r.memory.gradients / kGiB);
  m->set_optimizer(r.memory.optimizer / kGiB);
  m->set_activations(r.memory.activations / kGiB);
  m->set_other(r.memory.other / kGiB);
  m->set_loss_buffers(r.memory.loss_buffers / kGiB);
  m->set_capacity_gib(r.memory.capacity / kGiB);
  m->set_host_gib(r.memory.host / kGiB);
  m->set_host_capacity_gib(r.memory.host_capacity / kGiB);
  out.set_fits(r.fits);
  out.set_source(r.source == ResultSource::kMeasured ? "measured" : "modelled");
  v1::TimeBreakdown* t = out.mutable_time();
  t->set_compute(r.time.compute);
  t->set_tp_comm(r.time.tp_comm);
  t->set_cp_comm(r.time.cp_comm);
  t->set_pp_bubble(r.time.pp_bubble);
  t->set_pp_p2p(r.time.pp_p2p);
  t->set_dp_comm(r.time.dp_comm);
  t->set_optimizer(r.time.optimizer);
  t->set_ep_comm(r.time.ep_comm);
  t->set_offload(r.time.offload);
  out.set_time_to_train_days(r.time_to_train_days);
  for (const std::string& note : r.notes) out.add_notes(note);
  return out;
}

v1::PlanResult ToProto(const PlanResult& result, int64_t max_rejected) {
  v1::PlanResult out;
  for (const RankedConfig& r : result.ranked) *out.add_ranked() = ToProto(r);
  out.set_candidates_considered(result.candidates_considered);
  out.set_feasible(result.feasible);
  out.set_elapsed_ms(result.elapsed_ms);
  std::map<std::string, int64_t> counts;
  for (const RejectedConfig& r : result.rejected) {
    ++counts[RejectionRule(r.reason)];
    if (out.rejected_size() >= max_rejected) continue;
    v1::RejectedConfig* rej = out.add_rejected();
    *rej->mutable_config() = ToProto(r.config);
    rej->set_reason(r.reason);
  }
  out.set_rejected_total(
      std::max<int64_t>(result.rejected_total, static_cast<int64_t>(result.rejected.size())));
  if (result.rejected_reasons.empty()) {
    SetReasons(counts, out);
  } else {
    // A ranking read back from a capped one: its counts are of every rejected layout.
    for (const auto& [rule, n] : result.rejected_reasons) {
      v1::RejectedReason* r = out.add_rejected_reasons();
      r->set_reason(rule);
      r->set_count(n);
    }
  }
  return out;
}

void CapRejected(v1::PlanResult& result, int64_t max_rejected) {
  if (result.rejected_total() == 0 && result.rejected_size() > 0) {
    std::map<std::string, int64_t> counts;
    for (const v1::RejectedConfig& r : result.rejected()) ++counts[RejectionRule(r.reason())];
    result.set_rejected_total(result.rejected_size());
    SetReasons(counts, result);
  }
  if (result.rejected_size() > max_rejected) {
    result.mutable_rejected()->DeleteSubrange(
        static_cast<int>(max_rejected), result.rejected_size() - static_cast<int>(max_rejected));
  }
}

MemoryBreakdown MemoryFromProto(const v1::MemoryBreakdown& memory) {
  MemoryBreakdown m;
  m.weights = memory.weights() * kGiB;
  m.gradients = memory.gradients() * kGiB;
  m.optimizer = memory.optimizer() * kGiB;
  m.activations = memory.activations() * kGiB;
  m.other = memory.other() * kGiB;
  m.loss_buffers = memory.loss_buffers() * kGiB;
  m.capacity = memory.capacity_gib() * kGiB;
  m.host = memory.host_gib() * kGiB;
  m.host_capacity = memory.host_capacity_gib() * kGiB;
  return m;
}

absl::StatusOr<RankedConfig> RankedConfigFromProto(const v1::RankedConfig& r) {
  RankedConfig d;
  d.rank = r.rank();
  absl::StatusOr<ParallelConfig> c = ParallelConfigFromProto(r.config());
  if (!c.ok()) return c.status();
  d.config = *c;
  d.iteration_time_s = r.iteration_time_s();
  d.tokens_per_sec_per_gpu = r.tokens_per_sec_per_gpu();
  d.model_tflops_per_gpu = r.model_tflops_per_gpu();
  d.hardware_tflops_per_gpu = r.hardware_tflops_per_gpu();
  d.mfu = r.mfu();
  d.memory = MemoryFromProto(r.memory());
  d.fits = r.fits();
  d.source = r.source() == "measured" ? ResultSource::kMeasured : ResultSource::kModelled;
  d.time = {r.time().compute(), r.time().tp_comm(), r.time().cp_comm(),   r.time().pp_bubble(),
            r.time().pp_p2p(),  r.time().dp_comm(), r.time().optimizer(), r.time().ep_comm(),
            r.time().offload()};
  d.time_to_train_days = r.time_to_train_days();
  d.notes.assign(r.notes().begin(), r.notes().end());
  return d;
}

absl::StatusOr<PlanResult> PlanResultFromProto(const v1::PlanResult& result) {
  PlanResult out;
  for (const v1::RankedConfig& r : result.ranked()) {
    absl::StatusOr<RankedConfig> d = RankedConfigFromProto(r);
    if (!d.ok()) return d.status();
    out.ranked.push_back(*std::move(d));
  }
  out.candidates_considered = result.candidates_considered();
  out.feasible = result.feasible();
  out.elapsed_ms = result.elapsed_ms();
  for (const v1::RejectedConfig& r : result.rejected()) {
    absl::StatusOr<ParallelConfig> c = ParallelConfigFromProto(r.config());
    if (!c.ok()) return c.status();
    out.rejected.push_back({*c, r.reason()});
  }
  out.rejected_total = result.rejected_total();
  for (const v1::RejectedReason& r : result.rejected_reasons()) {
    out.rejected_reasons.emplace_back(r.reason(), r.count());
  }
  return out;
}

v1::MoeLayerTask ToProto(const MoeProfileSpec& m) {
  v1::MoeLayerTask moe;
  moe.set_hidden_size(m.hidden_size);
  moe.set_num_experts(m.num_experts);
  moe.set_moe_router_topk(m.moe_router_topk);
  moe.set_moe_ffn_hidden_size(m.moe_ffn_hidden_size);
  moe.set_num_shared_experts(m.num_shared_experts);
  moe.set_shared_expert_ffn_hidden_size(m.shared_expert_ffn_hidden_size);
  moe.set_routing(ToString(m.routing));
  moe.set_capacity_factor(m.capacity_factor);
  moe.set_ep(m.ep);
  moe.set_etp(m.etp);
  moe.set_tokens(m.tokens);
  moe.set_dtype(ToString(m.dtype));
  moe.set_warmup(m.warmup);
  moe.set_iters(m.iters);
  moe.set_seed(m.seed);
  return moe;
}

v1::ProfileTask ToProto(const ProfileTaskSpec& task) {
  v1::ProfileTask out;
  out.set_device_kind(task.device_kind);
  out.set_key(task.key);
  if (task.kind == ProfileTaskSpec::Kind::kCollective) {
    const CollectiveSweepSpec& c = task.collective;
    v1::CollectiveSweepTask* sweep = out.mutable_collective();
    switch (c.op) {
      case CollectiveOp::kAllReduce:
        sweep->set_op(v1::CollectiveSweepTask::OP_ALL_REDUCE);
        break;
      case CollectiveOp::kAllGather:
        sweep->set_op(v1::CollectiveSweepTask::OP_ALL_GATHER);
        break;
      case CollectiveOp::kReduceScatter:
        sweep->set_op(v1::CollectiveSweepTask::OP_REDUCE_SCATTER);
        break;
      case CollectiveOp::kSendRecv:
        sweep->set_op(v1::CollectiveSweepTask::OP_SEND_RECV);
        break;
      case CollectiveOp::kAllToAll:
        sweep->set_op(v1::CollectiveSweepTask::OP_ALL_TO_ALL);
        break;
    }
    sweep->set_group_size(c.group_size);
    for (int64_t size : c.sizes_bytes) sweep->add_sizes_bytes(size);
    sweep->set_dtype(ToString(c.dtype));
    sweep->set_warmup(c.warmup);
    sweep->set_iters(c.iters);
    return out;
  }
  if (task.kind == ProfileTaskSpec::Kind::kOptimizer) {
    v1::OptimizerTask* opt = out.mutable_optimizer();
    opt->set_params(task.optimizer.params);
    opt->set_warmup(task.optimizer.warmup);
    opt->set_iters(task.optimizer.iters);
    return out;
  }
  if (task.kind == ProfileTaskSpec::Kind::kMoeLayer) {
    *out.mutable_moe_layer() = ToProto(task.moe);
    return out;
  }
  const LayerProfileSpec& l = task.layer;
  v1::LayerProfileTask* layer = out.mutable_layer();
  v1::LayerShape* shape = layer->mutable_shape();
  shape->set_hidden_size(l.hidden_size);
  shape->set_num_attention_heads(l.num_attention_heads);
  shape->set_kv_channels(l.kv_channels);
  shape->set_num_query_groups(l.num_query_groups);
  shape->set_ffn_hidden_size(l.ffn_hidden_size);
  shape->set_vocab_size(l.vocab_size);
  shape->set_activation(ToString(l.activation));
  shape->set_normalization(ToString(l.normalization));
  layer->set_tp(l.tp);
  layer->set_sequence_parallel(l.sequence_parallel);
  layer->set_cp(l.cp);
  layer->set_micro_batch_size(l.micro_batch_size);
  layer->set_seq_length(l.seq_length);
  layer->set_recompute(ToString(l.recompute));
  layer->set_dtype(ToString(l.dtype));
  layer->set_flash_attention(l.flash_attention);
  layer->set_dropout(l.dropout);
  layer->set_warmup(l.warmup);
  layer->set_iters(l.iters);
  layer->set_extras(l.extras == StageExtras::kFirst  ? v1::LayerProfileTask::STAGE_EXTRAS_FIRST
                    : l.extras == StageExtras::kLast ? v1::LayerProfileTask::STAGE_EXTRAS_LAST
                                                     : v1::LayerProfileTask::STAGE_EXTRAS_NONE);
  layer->set_attention_only(l.attention_only);
  layer->set_attention_window(l.attention_window);
  return out;
}

LayerMeasurement MeasurementFromResult(const v1::TaskResult& result) {
  LayerMeasurement m;
  switch (result.outcome()) {
    case v1::TaskResult::OUTCOME_OK:
      m.outcome = LayerMeasurement::Outcome::kOk;
      break;
    case v1::TaskResult::OUTCOME_OOM:
      m.outcome = LayerMeasurement::Outcome::kOom;
      m.message = absl::StrCat("out of memory, ", result.oom_bytes_requested(),
                               " bytes requested");
      return m;
    default:
      m.outcome = LayerMeasurement::Outcome::kFailed;
      m.message = result.message().empty()
                      ? v1::TaskResult::Outcome_Name(result.outcome())
                      : result.message();
      return m;
  }
  for (const v1::PhaseTiming& p : result.layer().phases()) {
    m.SetPhase(p.phase(), p.median_s());
  }
  for (int64_t bytes : result.layer().peak_bytes_per_rank()) {
    m.peak_bytes = std::max(m.peak_bytes, static_cast<double>(bytes));
  }
  if (m.LayerSeconds() <= 0) {
    m.outcome = LayerMeasurement::Outcome::kFailed;
    m.message = "the result has no forward/backward timings";
  }
  return m;
}

MoeMeasurement MoeMeasurementFromResult(const v1::TaskResult& result) {
  MoeMeasurement m;
  if (result.outcome() != v1::TaskResult::OUTCOME_OK) {
    m.ok = false;
    m.message =
        result.outcome() == v1::TaskResult::OUTCOME_OOM
            ? absl::StrCat("out of memory, ", result.oom_bytes_requested(), " bytes requested")
        : result.message().empty() ? v1::TaskResult::Outcome_Name(result.outcome())
                                   : result.message();
    return m;
  }
  for (const v1::PhaseTiming& p : result.moe_layer().phases()) m.SetPhase(p.phase(), p.median_s());
  if (m.forward_s <= 0 || m.backward_s <= 0) {
    m.ok = false;
    m.message = "the result has no forward/backward timings";
  }
  return m;
}

CommMeasurement CommMeasurementFromResult(const v1::TaskResult& result) {
  CommMeasurement m;
  if (result.outcome() != v1::TaskResult::OUTCOME_OK) {
    m.ok = false;
    m.message = result.message().empty() ? v1::TaskResult::Outcome_Name(result.outcome())
                                         : result.message();
    return m;
  }
  for (const v1::CommSample& s : result.comm().samples()) {
    if (s.wrong() != 0) {
      m.ok = false;
      m.message = absl::StrCat(s.wrong(), " wrong elements at ", s.size_bytes(), " bytes");
      return m;
    }
    m.samples.push_back({s.size_bytes(), s.time_s(), s.busbw_gbps() * 1e9});
  }
  if (m.samples.empty()) {
    m.ok = false;
    m.message = "the result has no samples";
  }
  return m;
}

std::string WireJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = pretty;
  std::string out;
  // Fails only for messages with Any fields naming unknown types; paratune.v1 has none.
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  // protobuf ends the indented form with a newline and the compact one without; neither
  // does here, so that callers end a line the same way for both.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

const v1::JobSpec& RenderedSpec(const v1::Job& job) {
  return job.has_resolved_spec() ? job.resolved_spec() : job.spec();
}

std::string JobStateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  if (name.rfind(kPrefix, 0) == 0) name = name.substr(kPrefix.size());
  return name;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace paratune::server
