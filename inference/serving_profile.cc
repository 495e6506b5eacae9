#include "inference/serving_profile.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "inference/engine_profile.h"
#include "inference/layout_eval.h"
#include "inference/planner.h"
#include "search/model_math.h"

namespace paratune::inference {
namespace {

// 1, 2, 4, ... below `top`, then `top`.
std::vector<int64_t> Doublings(int64_t top) {
  std::vector<int64_t> out;
  for (int64_t b = 1; b < top; b *= 2) out.push_back(b);
  out.push_back(std::max<int64_t>(top, 1));
  return out;
}

// Sequences one engine of `c` decodes at once at most: its batch limit, capped by the
// clients the workload has.
int64_t LargestBatch(const InferenceJobSpec& spec, const ServingConfig& c) {
  // With attention data parallelism the instance schedules every rank's limit.
  int64_t b = c.max_batch_size * c.attention_dp_size();
  const ServingSpec& s = spec.serving;
  if (s.concurrency) b = std::min(b, *s.concurrency);
  if (!s.concurrency && !s.request_rate) b = std::min(b, s.num_requests);
  return std::max<int64_t>(b, 1);
}

}  // namespace

StepShape ShapeOf(const ModelSpec& model, const ServingConfig& c) {
  StepShape shape{c.tp, c.weight_precision, c.kv_cache_precision, c.ep, c.attention_dp};
  if (c.pp > 1) shape.layers = (model.num_layers + c.pp - 1) / c.pp;
  return shape;
}

std::string ServingKernelsUnsupportedReason(const ModelSpec& model) {
  if (EffectiveAttention(model) == AttentionType::kMla) {
    return "the serving kernels run multi-head or grouped-query attention (model.attention mla)";
  }
  return "";
}

std::string StepShape::ToString() const {
  return absl::StrCat("tp", tp, ep > 1 ? absl::StrCat(" ep", ep) : "", attention_dp ? " adp" : "",
                      layers > 0 ? absl::StrCat(" L", layers) : "",
                      " w:", std::string(inference::ToString(weight_precision)),
                      " kv:", std::string(inference::ToString(kv_cache_precision)));
}

std::string ServingStepTaskSpec::Key() const {
  return absl::StrCat(
      "serving_step h=", model.hidden_size, " a=", model.num_attention_heads,
      " g=", QueryGroups(model), " f=", model.ffn_hidden_size, " V=", model.vocab_size,
      " act=", paratune::ToString(model.activation),
      " norm=", paratune::ToString(model.normalization),
      " pos=", paratune::ToString(model.position_embedding), " L=", model.num_layers,
      WindowedLayers(model) > 0
          ? absl::StrCat(" win=", model.sliding_window, "/", model.window_attn_skip_freq)
          : "",
      IsMoe(model)
          ? absl::StrCat(" moe=", model.num_experts, "x", model.moe_ffn_hidden_size,
                         " k=", model.moe_router_topk, " shared=", model.num_shared_experts, "x",
                         model.num_shared_experts > 0 ? SharedExpertFfn(model) : 0,
                         " dense0=", model.first_k_dense_layers, " freq=", model.moe_layer_freq)
          : "",
      " tp=", shape.tp, shape.ep > 1 ? absl::StrCat(" ep=", shape.ep) : "",
      shape.attention_dp ? " adp=1" : "",
      " w=", std::string(inference::ToString(shape.weight_precision)),
      " kv=", std::string(inference::ToString(shape.kv_cache_precision)), " blk=", kv_block_size,
      phase == ServingStepPhase::kPrefill ? " prefill" : " decode", " b=", batch, " len=", length,
      " logits=1 w=", warmup, " i=", iters);
}

absl::StatusOr<ServingProfilePlan> PlanServingProfiles(const InferenceJobSpec& spec,
                                                       const InferencePlanResult& plan,
                                                       const ServingProfileOptions& options) {
  if (auto s = spec.Validate(); !s.ok()) return s;
  const ServingSpec& s = spec.serving;
  const EngineProfile& engine = EngineProfileFor(s.engine);
  // Per shape: the largest decode batch and step token budget of its layouts.
  std::map<StepShape, std::pair<int64_t, int64_t>> shapes;
  ServingProfilePlan out;
  if (!ServingKernelsUnsupportedReason(spec.model).empty()) return out;  // All modelled.
  for (const InferenceRankedConfig& r : plan.ranked) {
    const ServingConfig& c = r.config;
    auto& [batch, tokens] = shapes[ShapeOf(spec.model, c)];
    batch = std::max(batch, std::min(LargestBatch(spec, c), options.max_grid_batch));
    tokens = std::max(tokens, c.max_num_tokens * c.attention_dp_size());
  }
  std::set<std::string> keys;
  std::set<int64_t> sweep_rows;
  for (const auto& [shape, limits] : shapes) {
    const auto [max_batch, max_tokens] = limits;
    ServingStepTaskSpec t;
    t.model = spec.model;
    if (shape.layers > 0) t.model.num_layers = shape.layers;
    t.shape = shape;
    t.kv_block_size = engine.kv_block_tokens;
    t.warmup = options.warmup;
    t.iters = options.iters;
    t.device_kind = spec.cluster.gpu;
    const auto add = [&](ServingStepPhase phase, int64_t batch, int64_t length) {
      t.phase = phase;
      t.batch = batch;
      t.length = length;
      if (keys.insert(t.Key()).second) out.steps.push_back(t);
      sweep_rows.insert(phase == ServingStepPhase::kPrefill ? batch * length : batch);
    };
    const int64_t prompt = std::max<int64_t>(1, std::min(s.isl, max_tokens));
    for (int64_t b : Doublings(std::max<int64_t>(1, max_tokens / prompt))) {
      add(ServingStepPhase::kPrefill, b, prompt);
    }
    for (int64_t b : Doublings(max_batch)) {
      add(ServingStepPhase::kDecode, b, s.isl);
      add(ServingStepPhase::kDecode, b, s.isl + s.osl);
    }
  }
  std::set<int64_t> tps;
  for (const auto& [shape, limits] : shapes) {
    if (shape.tp > 1 && !shape.attention_dp) tps.insert(shape.tp);
  }
  for (int64_t tp : tps) {
    CollectiveSweepSpec sweep;
    sweep.op = CollectiveOp::kAllReduce;
    sweep.group_size = tp;
    sweep.dtype = Precision::kFp32;  // The CPU serving kernels reduce fp32 activations.
    for (int64_t rows : sweep_rows) sweep.sizes_bytes.push_back(rows * spec.model.hidden_size * 4);
    sweep.warmup = options.warmup;
    sweep.iters = options.iters;
    out.sweeps.push_back(sweep);
  }
  return out;
}

absl::StatusOr<InferencePlanResult> ComposeInference(const InferenceJobSpec& spec,
                                                     const InferencePlanResult& modelled,
                                                     const ServingMeasurements& measured) {
  auto context = LayoutContext::Create(spec);
  if (!context.ok()) return context.status();
  LayoutContext& ctx = *context;
  std::map<StepShape, std::shared_ptr<const MeasuredStepTable>> tables;
  std::map<StepShape, std::string> unusable = measured.failures;
  for (const auto& [shape, samples] : measured.steps) {
    if (unusable.count(shape) > 0) continue;
    absl::StatusOr<MeasuredStepTable> table =
        MeasuredStepTable::Create(samples, AttentionSpan(spec.model));
    if (!table.ok()) {
      unusable[shape] = std::string(table.status().message());
      continue;
    }
    tables[shape] = std::make_shared<const MeasuredStepTable>(*std::move(table));
  }
  InferencePlanResult out = modelled;
  out.ranked.clear();
  const std::string kernels_unsupported = ServingKernelsUnsupportedReason(spec.model);
  for (const InferenceRankedConfig& m : modelled.ranked) {
    const ServingConfig& c = m.config;
    const StepShape shape = ShapeOf(spec.model, c);
    auto table = tables.find(shape);
    if (!kernels_unsupported.empty() || table == tables.end()) {
      InferenceRankedConfig r = m;
      std::string why = !kernels_unsupported.empty() ? kernels_unsupported : "no measurements";
      if (auto f = unusable.find(shape); kernels_unsupported.empty() && f != unusable.end()) {
        why = f->second;
      }
      r.notes.insert(r.notes.begin(), absl::StrCat("modelled steps: ", why));
      out.ranked.push_back(std::move(r));
      continue;
    }
    absl::StatusOr<std::shared_ptr<const StepModel>> base = ctx.Model(c);
    if (!base.ok()) return base.status();
    StepModel model = **base;
    model.UseMeasured(table->second);
    absl::StatusOr<InferenceRankedConfig> r =
        ctx.Evaluate(c, model, LayoutContext::kSearchRequests);
    if (!r.ok()) return r.status();
    r->pareto_optimal = m.pareto_optimal;
    r->notes.insert(
        r->notes.begin(),
        absl::StrFormat("measured steps (%d serving_step tasks on %s): TPOT p50 %.3f ms, TTFT "
                        "p50 %.3f ms, %.1f output tokens/s per GPU; modelled steps: TPOT p50 "
                        "%.3f ms, TTFT p50 %.3f ms, %.1f output tokens/s per GPU",
                        table->second->samples(), spec.cluster.gpu, r->tpot_ms.p50, r->ttft_ms.p50,
                        r->output_tokens_per_sec_per_gpu, m.tpot_ms.p50, m.ttft_ms.p50,
                        m.output_tokens_per_sec_per_gpu));
    if (auto ar = measured.allreduce.find(c.tp);
        !c.attention_dp && ar != measured.allreduce.end() && !ar->second.empty()) {
      const auto& [bytes, seconds] = ar->second.front();
      r->notes.push_back(absl::StrFormat("TP all-reduce of %d bytes measured %.1f us (sweep)",
                                         bytes, seconds * 1e6));
    }
    out.ranked.push_back(*std::move(r));
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [&](const auto& a, const auto& b) {
    return RanksBefore(a, b, spec.search.objective);
  });
  for (size_t i = 0; i < out.ranked.size(); ++i) out.ranked[i].rank = static_cast<int64_t>(i) + 1;
  if (!out.ranked.empty()) {
    const InferenceRankedConfig& best = out.ranked.front();
    out.recommendation = Recommendation(best, spec.search.objective,
                                        absl::StrCat(best.decode_step.source, " steps"));
  }
  return out;
}

}  // namespace paratune::inference
