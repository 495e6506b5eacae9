#include "search/compose.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/time_model.h"

namespace paratune {
namespace {

double Ms(double s) { return s * 1e3; }

}  // namespace

bool LayerMeasurement::SetPhase(std::string_view phase, double seconds) {
  for (auto [name, field] : std::initializer_list<std::pair<std::string_view, double*>>{
           {"forward", &forward_s},
           {"backward", &backward_s},
           {"recompute", &recompute_s},
           {"tp_comm", &tp_comm_s},
           {"grad_sync", &grad_sync_s},
           {"extras_forward", &extras_forward_s},
           {"extras_backward", &extras_backward_s}}) {
    if (phase == name) {
      *field = seconds;
      return true;
    }
  }
  return false;
}

bool MoeMeasurement::SetPhase(std::string_view phase, double seconds) {
  for (auto [name, field] : std::initializer_list<std::pair<std::string_view, double*>>{
           {"forward", &forward_s},
           {"backward", &backward_s},
           {"dispatch_combine_forward", &dispatch_combine_forward_s},
           {"dispatch_combine_backward", &dispatch_combine_backward_s}}) {
    if (phase == name) {
      *field = seconds;
      return true;
    }
  }
  return false;
}

double CommMeasurement::LargestBusBandwidth() const {
  const Sample* largest = nullptr;
  for (const Sample& s : samples) {
    if (largest == nullptr || s.size_bytes > largest->size_bytes) largest = &s;
  }
  return largest == nullptr ? 0.0 : largest->bus_bandwidth;
}

namespace {

// Seconds of a collective of `bytes` from a sweep: piecewise-linear in size through the
// measured samples (time = latency + bytes / bandwidth between two sizes), extended past
// the smallest and the largest size along the nearest segment; never below zero. One
// sample: that sample's bus bandwidth scaled to `bytes` (a pure bandwidth term).
double SweepSeconds(const CommMeasurement& m, double bytes) {
  std::vector<CommMeasurement::Sample> v = m.samples;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.size_bytes < b.size_bytes;
  });
  if (v.empty()) return 0.0;
  if (v.size() == 1) {
    return v[0].size_bytes > 0 ? v[0].time_s * bytes / static_cast<double>(v[0].size_bytes)
                               : v[0].time_s;
  }
  size_t i = 1;
  while (i + 1 < v.size() && static_cast<double>(v[i].size_bytes) < bytes) ++i;
  const double x0 = static_cast<double>(v[i - 1].size_bytes);
  const double x1 = static_cast<double>(v[i].size_bytes);
  const double slope = x1 > x0 ? (v[i].time_s - v[i - 1].time_s) / (x1 - x0) : 0.0;
  return std::max(0.0, v[i - 1].time_s + slope * (bytes - x0));
}

const CommMeasurement* FindSweep(const Measurements& measurements, CollectiveSweepSpec spec,
                                 CollectiveOp op) {
  spec.op = op;
  auto it = measurements.collectives.find(spec.Key());
  if (it == measurements.collectives.end() || !it->second.ok || it->second.samples.empty()) {
    return nullptr;
  }
  return &it->second;
}

// A measured layer task as the time model's per-layer split. The step runner reports TP
// communication for the whole step; it is split over forward, backward and recompute in
// proportion to their times (only their sums enter the iteration).
LayerTime ToLayerTime(const LayerMeasurement& main, const LayerMeasurement* plain,
                      const LayerTime& modelled) {
  LayerTime t;
  const double total = main.LayerSeconds();
  const double comm_share = total > 0 ? std::min(1.0, main.tp_comm_s / total) : 0.0;
  // Partial full recompute: the recomputed layers' recompute from the full-recompute task,
  // forward and backward from the plain one.
  const LayerMeasurement& fb = plain != nullptr ? *plain : main;
  const double fb_total = fb.LayerSeconds();
  const double fb_share = fb_total > 0 ? std::min(1.0, fb.tp_comm_s / fb_total) : 0.0;
  t.forward_compute = fb.forward_s * (1.0 - fb_share);
  t.forward_tp_comm = fb.forward_s * fb_share;
  t.backward_compute = fb.backward_s * (1.0 - fb_share);
  t.backward_tp_comm = fb.backward_s * fb_share;
  t.recompute = main.recompute_s * (1.0 - comm_share);
  t.recompute_tp_comm = main.recompute_s * comm_share;
  t.grad_sync_tp_comm = fb.grad_sync_s;
  // Context parallelism is not part of the layer task: its exposed ring exchange stays
  // modelled.
  t.forward_cp_comm = modelled.forward_cp_comm;
  t.backward_cp_comm = modelled.backward_cp_comm;
  t.attention_forward = modelled.attention_forward;
  return t;
}

// The per-micro-batch terms of a layer that scale with its work (CP exchange and the
// attention core's forward are the attention's alone and stay as they are).
constexpr double LayerTime::*kScaledTerms[] = {
    &LayerTime::forward_compute,   &LayerTime::forward_tp_comm, &LayerTime::backward_compute,
    &LayerTime::backward_tp_comm,  &LayerTime::recompute,       &LayerTime::recompute_tp_comm,
    &LayerTime::grad_sync_tp_comm, &LayerTime::forward_ep_comm, &LayerTime::backward_ep_comm,
    &LayerTime::recompute_ep_comm};

// `measured` with each term scaled by part / whole of the same term (at most 1): the
// measured dense layer cut down to the part the model attributes to `part`. A term the
// model leaves at 0 has no split to apply and is kept as measured.
LayerTime ScaleByShare(const LayerTime& measured, const LayerTime& part, const LayerTime& whole) {
  LayerTime t = measured;
  for (double LayerTime::*f : kScaledTerms) {
    if (whole.*f > 0) t.*f = measured.*f * std::clamp(part.*f / whole.*f, 0.0, 1.0);
  }
  return t;
}

// The weighted sum of layer times, term by term (each kind of layer by its share).
LayerTime Blend(const std::vector<std::pair<LayerTime, double>>& parts) {
  constexpr double LayerTime::*kAll[] = {
      &LayerTime::forward_compute,   &LayerTime::forward_tp_comm,   &LayerTime::forward_cp_comm,
      &LayerTime::backward_compute,  &LayerTime::backward_tp_comm,  &LayerTime::backward_cp_comm,
      &LayerTime::recompute,         &LayerTime::recompute_tp_comm, &LayerTime::attention_forward,
      &LayerTime::grad_sync_tp_comm, &LayerTime::forward_ep_comm,   &LayerTime::backward_ep_comm,
      &LayerTime::recompute_ep_comm, &LayerTime::forward_offload,   &LayerTime::backward_offload};
  static_assert(sizeof(LayerTime) == sizeof(kAll) / sizeof(kAll[0]) * sizeof(double),
                "Blend must weigh every term of LayerTime");
  LayerTime t;
  for (const auto& [layer, share] : parts) {
    for (double LayerTime::*f : kAll) t.*f += share * layer.*f;
  }
  return t;
}

// The measurement under `key` when the task ran to its end (not out of memory, not failed).
const LayerMeasurement* FindOk(const std::map<std::string, LayerMeasurement>& measured,
                               const std::string& key) {
  auto it = measured.find(key);
  return it != measured.end() && it->second.outcome == LayerMeasurement::Outcome::kOk ? &it->second
                                                                                      : nullptr;
}

// Adds a - b, term by term (never below zero), to `out`.
void AddDifference(LayerTime& out, const LayerTime& a, const LayerTime& b) {
  for (double LayerTime::*f : kScaledTerms) out.*f += std::max(0.0, a.*f - b.*f);
}

// One expert layer from the measured dense layer `dense` (the modelled dense layer
// `modelled_dense` at the same layout): its attention part, measured (`attention`, the
// layer tasks run with the MLP block the identity) or else the dense layer scaled by the
// model's attention share (`attention_why` says why, when it does), plus the MoE layer
// task's expert block, or the modelled expert block when there is no usable measurement.
// `note` says which.
LayerTime ComposeExpertLayer(const JobSpec& spec, const ParallelConfig& c,
                             const DeviceProfile& device, const LayerTime& dense,
                             const LayerTime& modelled_dense, const LayerTime* attention,
                             std::string_view attention_why, const ProfilePlanOptions& options,
                             const Measurements& measurements, bool* moe_measured,
                             std::string* note) {
  ModelSpec attention_only = spec.model;
  attention_only.ffn_hidden_size = 0;
  const LayerTime modelled_attention =
      EstimateLayerTime(attention_only, spec.training, c, device, spec.cluster.gpus_per_node);
  LayerTime expert =
      attention != nullptr ? *attention : ScaleByShare(dense, modelled_attention, modelled_dense);
  const auto fb = [](const LayerTime& t) { return t.Forward() + t.Backward(); };
  const std::string attention_note =
      attention != nullptr
          ? absl::StrFormat("attention part measured (%.3f of the dense layer's %.3f ms)",
                            Ms(fb(*attention)), Ms(fb(dense)))
          : absl::StrFormat(
                "attention part the measured dense layer times the model's share "
                "(%.2f%s%s)",
                fb(modelled_dense) > 0 ? fb(modelled_attention) / fb(modelled_dense) : 0.0,
                attention_why.empty() ? "" : "; ", attention_why);

  std::string why;
  const std::optional<MoeProfileSpec> task = MoeTaskFor(spec, c, options, &why);
  const MoeMeasurement* m = nullptr;
  if (task) {
    auto it = measurements.moe_layers.find(task->Key());
    if (it == measurements.moe_layers.end()) {
      why = "no MoE layer measurement";
    } else if (!it->second.ok) {
      why = absl::StrCat("the MoE layer task did not run: ", it->second.message);
    } else {
      m = &it->second;
    }
  }
  *moe_measured = m != nullptr;
  if (m == nullptr) {
    AddDifference(expert, EstimateExpertLayerTime(spec, c, device), modelled_attention);
    *note = absl::StrFormat("; expert layers: %s, expert block modelled (%s)", attention_note, why);
    return expert;
  }
  const double fwd_comm = std::min(m->dispatch_combine_forward_s, m->forward_s);
  const double bwd_comm = std::min(m->dispatch_combine_backward_s, m->backward_s);
  expert.forward_compute += m->forward_s - fwd_comm;
  expert.forward_ep_comm += fwd_comm;
  expert.backward_compute += m->backward_s - bwd_comm;
  expert.backward_ep_comm += bwd_comm;
  if (c.recompute == Recompute::kFull) {
    // Full recompute re-runs the whole layer's forward, the expert block included.
    expert.recompute += m->forward_s - fwd_comm;
    expert.recompute_ep_comm += fwd_comm;
  }
  *note = absl::StrFormat(
      "; expert layers: %s, MoE layer measured (ep %d, etp %d, %d tokens): fwd %.3f ms "
      "(dispatch+combine %.3f ms), bwd %.3f ms (dispatch+combine %.3f ms)",
      attention_note, c.ep, c.etp, task->tokens, Ms(m->forward_s), Ms(fwd_comm), Ms(m->backward_s),
      Ms(bwd_comm));
  return expert;
}

}  // namespace

absl::StatusOr<RankedConfig> ComposeCandidate(const JobSpec& spec, const RankedConfig& modelled,
                                              const ProfilePlanOptions& options,
                                              const Measurements& measurements) {
  const ParallelConfig& c = modelled.config;
  // The layer tasks of each kind of layer (whole-context and sliding-window attention).
  const std::vector<LayerKind> kinds = LayerKinds(spec.model, spec.training.seq_length);
  std::vector<std::vector<LayerProfileSpec>> kind_tasks;
  std::vector<std::vector<const LayerMeasurement*>> kind_found;
  RankedConfig out = modelled;
  out.source = ResultSource::kMeasured;
  for (const LayerKind& kind : kinds) {
    kind_tasks.push_back(LayerTasksFor(spec, c, options, kind.attention_window));
    std::vector<const LayerMeasurement*>& found = kind_found.emplace_back();
    for (const LayerProfileSpec& t : kind_tasks.back()) {
      auto it = measurements.layers.find(t.Key());
      if (it == measurements.layers.end()) {
        return absl::NotFoundError(absl::StrCat("no measurement for task ", t.Key()));
      }
      found.push_back(&it->second);
    }
    for (const LayerMeasurement* m : found) {
      if (m->outcome == LayerMeasurement::Outcome::kOom) {
        out.fits = false;
        out.notes.push_back(absl::StrCat("measured: a layer ran out of memory on ",
                                         spec.cluster.gpu, " (", m->message, ")"));
        return out;
      }
      if (m->outcome == LayerMeasurement::Outcome::kFailed) {
        return absl::FailedPreconditionError(absl::StrCat("profile task failed: ", m->message));
      }
    }
  }
  const std::vector<LayerProfileSpec>& tasks = kind_tasks.front();
  const std::vector<const LayerMeasurement*>& found = kind_found.front();
  absl::StatusOr<DeviceProfile> device = DeviceForCluster(spec.cluster);
  if (!device.ok()) return device.status();
  const int64_t n = spec.cluster.gpus_per_node;
  const LayerTime modelled_layer = EstimateLayerTime(spec.model, spec.training, c, *device, n);
  const EdgeTime modelled_edge = EstimateEdgeTime(spec.model, spec.training, c, *device, n);
  // The mean layer: each kind's measured layer by its share of the layers.
  std::vector<std::pair<LayerTime, double>> kind_layers;
  double measured_layer_s = 0;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const std::vector<const LayerMeasurement*>& f = kind_found[k];
    kind_layers.emplace_back(ToLayerTime(*f[0], f.size() == 2 ? f[1] : nullptr, modelled_layer),
                             kinds[k].share);
    measured_layer_s += kinds[k].share * f[0]->LayerSeconds();
  }
  const LayerTime layer = Blend(kind_layers);
  std::vector<std::string> measured_parts = {"layers"};

  // Embedding and logits: the extras' own timed part of the layer task re-run with the
  // first (last) stage's extra work; else the modelled edge scaled by measured / modelled
  // layer time (the device's speed relative to its catalog entry carries over to the same
  // kind of kernels; on a well-calibrated catalog entry the ratio is ~1).
  const std::string key = tasks.back().Key();
  const double modelled_layer_s = modelled_layer.Forward() + modelled_layer.Backward();
  const double ratio = modelled_layer_s > 0 ? measured_layer_s / modelled_layer_s : 1.0;
  EdgeTime edge;
  edge.embedding_forward = modelled_edge.embedding_forward * ratio;
  edge.embedding_backward = modelled_edge.embedding_backward * ratio;
  edge.logits_forward = modelled_edge.logits_forward * ratio;
  edge.logits_backward = modelled_edge.logits_backward * ratio;
  if (const LayerMeasurement* first = FindOk(measurements.first_stage, key)) {
    edge.embedding_forward = first->extras_forward_s;
    edge.embedding_backward = first->extras_backward_s;
    measured_parts.push_back("embedding");
  }
  if (const LayerMeasurement* last = FindOk(measurements.last_stage, key)) {
    edge.logits_forward = last->extras_forward_s;
    edge.logits_backward = last->extras_backward_s;
    measured_parts.push_back("logits");
  }

  MeasuredTerms terms;
  if (measurements.optimizer_seconds_per_param > 0) {
    terms.optimizer_seconds_per_param = measurements.optimizer_seconds_per_param;
    measured_parts.push_back("optimizer");
  }
  std::string dp_note;
  if (std::optional<CollectiveSweepSpec> sweep = DpSweepFor(spec, c, options)) {
    const CommMeasurement* ar = FindSweep(measurements, *sweep, CollectiveOp::kAllReduce);
    const CommMeasurement* rs = FindSweep(measurements, *sweep, CollectiveOp::kReduceScatter);
    const CommMeasurement* ag = FindSweep(measurements, *sweep, CollectiveOp::kAllGather);
    if (!c.distributed_optimizer() && ar != nullptr) {
      terms.dp_reduce_seconds = [ar](double bytes) { return SweepSeconds(*ar, bytes); };
      dp_note = absl::StrFormat("; dp all-reduce measured (busbw %.2f GB/s at the largest size)",
                                ar->LargestBusBandwidth() / 1e9);
    } else if (c.distributed_optimizer() && (rs != nullptr || ar != nullptr)) {
      // A ring all-reduce is a reduce-scatter then an all-gather of the same bytes, each
      // (k-1)/k of them per rank: without their own sweeps each is half the all-reduce.
      terms.dp_reduce_seconds = [rs, ar](double bytes) {
        return rs != nullptr ? SweepSeconds(*rs, bytes) : 0.5 * SweepSeconds(*ar, bytes);
      };
      terms.dp_gather_seconds = [ag, ar, rs](double bytes) {
        if (ag != nullptr) return SweepSeconds(*ag, bytes);
        return ar != nullptr ? 0.5 * SweepSeconds(*ar, bytes) : SweepSeconds(*rs, bytes);
      };
      dp_note = absl::StrFormat("; dp reduce-scatter %s, all-gather %s",
                                rs != nullptr ? "measured" : "half the measured all-reduce",
                                ag != nullptr ? "measured"
                                : ar != nullptr ? "half the measured all-reduce"
                                                : "as the measured reduce-scatter");
    } else {
      dp_note = "; dp reduce not measured, modelled";
    }
  }

  std::string moe_note;
  LayerTime expert_layer;
  if (IsMoe(spec.model)) {
    // The attention part of the expert layers: every layer task's attention-only twin, of
    // every kind of layer.
    std::vector<std::pair<LayerTime, double>> kind_attention;
    for (size_t k = 0; k < kinds.size(); ++k) {
      std::vector<const LayerMeasurement*> parts;
      for (const LayerProfileSpec& t : kind_tasks[k]) {
        if (const LayerMeasurement* m = FindOk(measurements.attention_parts, t.Key())) {
          parts.push_back(m);
        }
      }
      if (parts.size() != kind_tasks[k].size()) break;
      kind_attention.emplace_back(
          ToLayerTime(*parts[0], parts.size() == 2 ? parts[1] : nullptr, modelled_layer),
          kinds[k].share);
    }
    std::optional<LayerTime> attention;
    std::string attention_why;
    if (kind_attention.size() == kinds.size()) {
      attention = Blend(kind_attention);
      // The layer less its MLP block cannot take longer than the layer (a worker that does
      // not know attention_only runs the whole layer).
      const double part = attention->Forward() + attention->Backward();
      const double whole = layer.Forward() + layer.Backward();
      if (part >= whole) {
        attention_why = absl::StrFormat(
            "the attention-only task measured %.3f ms, not less than the dense layer's %.3f ms",
            Ms(part), Ms(whole));
        attention.reset();
      } else {
        measured_parts.push_back("attention");
      }
    }
    bool moe_measured = false;
    expert_layer = ComposeExpertLayer(spec, c, *device, layer, modelled_layer,
                                      attention ? &*attention : nullptr, attention_why, options,
                                      measurements, &moe_measured, &moe_note);
    if (moe_measured) measured_parts.push_back("moe");
  }
  absl::StatusOr<IterationEstimate> it =
      EstimateIteration(spec, c, *device, layer, edge, PipelineMode::kSimulated, &terms,
                        IsMoe(spec.model) ? &expert_layer : nullptr);
  if (!it.ok()) return it.status();
  out.time = it->time;
  out.iteration_time_s = it->iteration_time_s;
  if (out.iteration_time_s > 0 && modelled.iteration_time_s > 0) {
    const double speedup = modelled.iteration_time_s / out.iteration_time_s;
    out.tokens_per_sec_per_gpu = modelled.tokens_per_sec_per_gpu * speedup;
    out.model_tflops_per_gpu = modelled.model_tflops_per_gpu * speedup;
    out.hardware_tflops_per_gpu = modelled.hardware_tflops_per_gpu * speedup;
    out.mfu = modelled.mfu * speedup;
    out.time_to_train_days = modelled.time_to_train_days / speedup;
  }
  const LayerMeasurement& first = *found[0];
  if (kinds.size() == 2) {
    const LayerMeasurement& full = *kind_found[1][0];
    out.notes.push_back(absl::StrFormat(
        "%d of %d layers attend to a %d-token window: measured fwd %.3f ms, bwd %.3f ms; the "
        "others fwd %.3f ms, bwd %.3f ms; the stages' layers take the mean by count",
        WindowedLayers(spec.model), spec.model.num_layers, spec.model.sliding_window,
        Ms(first.forward_s), Ms(first.backward_s), Ms(full.forward_s), Ms(full.backward_s)));
  }
  out.notes.push_back(absl::StrFormat(
      "measured on %s: layer fwd %.3f ms, bwd %.3f ms, recompute %.3f ms, tp comm %.3f ms "
      "per micro-batch%s%s; measured parts: %s (the rest modelled, edges scaled by %.2f); "
      "modelled iteration %.4f s, composed %.4f s",
      spec.cluster.gpu, Ms(first.forward_s), Ms(first.backward_s), Ms(first.recompute_s),
      Ms(first.tp_comm_s), dp_note, moe_note, absl::StrJoin(measured_parts, ", "), ratio,
      modelled.iteration_time_s, out.iteration_time_s));
  return out;
}

PlanResult ComposePlan(const JobSpec& spec, const PlanResult& modelled,
                       const ProfilePlan& profile, const ProfilePlanOptions& options,
                       const Measurements& measurements) {
  PlanResult out = modelled;
  for (int64_t index : profile.candidates) {
    if (index < 0 || index >= static_cast<int64_t>(out.ranked.size())) continue;
    RankedConfig& entry = out.ranked[index];
    absl::StatusOr<RankedConfig> composed =
        ComposeCandidate(spec, modelled.ranked[index], options, measurements);
    if (composed.ok()) {
      entry = *std::move(composed);
    } else {
      entry.notes.push_back(
          absl::StrCat("not measured, modelled figures kept: ", composed.status().message()));
    }
  }
  const bool min_memory = spec.search.objective == Objective::kMinMemory;
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [min_memory](const RankedConfig& x, const RankedConfig& y) {
                     if (x.fits != y.fits) return x.fits;
                     if (min_memory && x.memory.Peak() != y.memory.Peak()) {
                       return x.memory.Peak() < y.memory.Peak();
                     }
                     return x.iteration_time_s < y.iteration_time_s;
                   });
  for (size_t i = 0; i < out.ranked.size(); ++i) out.ranked[i].rank = static_cast<int64_t>(i) + 1;
  return out;
}

}  // namespace paratune
