#include "search/compose.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "search/device_catalog.h"

namespace paratune {
namespace {

double Ms(double s) { return s * 1e3; }

}  // namespace

double CommMeasurement::LargestBusBandwidth() const {
  const Sample* largest = nullptr;
  for (const Sample& s : samples) {
    if (largest == nullptr || s.size_bytes > largest->size_bytes) largest = &s;
  }
  return largest == nullptr ? 0.0 : largest->bus_bandwidth;
}

double NonLayerComputeShare(const JobSpec& spec, const ParallelConfig& config,
                            int64_t layers_per_stage) {
  const ModelSpec& m = spec.model;
  const double h = static_cast<double>(m.hidden_size);
  const double a = static_cast<double>(m.num_attention_heads);
  const double g = static_cast<double>(m.num_query_groups > 0 ? m.num_query_groups
                                                              : m.num_attention_heads);
  const double f = static_cast<double>(m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * h);
  const double s = static_cast<double>(spec.training.seq_length);
  const double b = static_cast<double>(config.micro_batch_size);
  // Matmul parameters of one layer: QKV (with GQA), output projection, MLP (SwiGLU has
  // three matrices, GeLU two).
  const double qkv = h * (h + 2.0 * h * g / a);
  const double mlp = (m.activation == Activation::kSwiglu ? 3.0 : 2.0) * h * f;
  const double layer = 2.0 * b * s * (qkv + h * h + mlp) + 4.0 * b * s * s * h;
  const double logits = 2.0 * b * s * h * static_cast<double>(m.vocab_size);
  const double layers = static_cast<double>(std::max<int64_t>(layers_per_stage, 1)) * layer;
  return logits / (logits + layers);
}

absl::StatusOr<RankedConfig> ComposeCandidate(const JobSpec& spec, const RankedConfig& modelled,
                                              const ProfilePlanOptions& options,
                                              const Measurements& measurements) {
  const ParallelConfig& c = modelled.config;
  const std::vector<LayerProfileSpec> tasks = LayerTasksFor(spec, c, options);
  std::vector<const LayerMeasurement*> found;
  for (const LayerProfileSpec& t : tasks) {
    auto it = measurements.layers.find(t.Key());
    if (it == measurements.layers.end()) {
      return absl::NotFoundError(absl::StrCat("no measurement for task ", t.Key()));
    }
    found.push_back(&it->second);
  }
  RankedConfig out = modelled;
  out.source = ResultSource::kMeasured;
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
  const int64_t pp = std::max<int64_t>(c.pp, 1);
  const int64_t vp = std::max<int64_t>(c.vp, 1);
  const int64_t layers_per_stage = spec.model.num_layers / pp;
  // Per micro-batch, one stage: fully recomputed layers (first task) and the rest.
  int64_t recomputed = layers_per_stage;
  if (found.size() == 2) recomputed = c.recompute_num_layers;
  const double stage_s = recomputed * found[0]->LayerSeconds() +
                         (found.size() == 2 ? (layers_per_stage - recomputed) *
                                                  found[1]->LayerSeconds()
                                            : 0.0);
  const double stage_comm_s =
      recomputed * found[0]->tp_comm_s +
      (found.size() == 2 ? (layers_per_stage - recomputed) * found[1]->tp_comm_s : 0.0);
  const double m = static_cast<double>(c.NumMicroBatches(spec.training));
  const double share = NonLayerComputeShare(spec, c, layers_per_stage);

  TimeBreakdown t = modelled.time;
  const double replaced = t.compute + t.tp_comm + t.pp_bubble + t.dp_comm;
  const double non_layer = share * t.compute;
  t.compute = m * (stage_s - stage_comm_s) + non_layer;
  t.tp_comm = m * stage_comm_s;
  t.pp_bubble = static_cast<double>(pp - 1) / static_cast<double>(vp) * stage_s;
  std::string dp_note;
  if (std::optional<CollectiveSweepSpec> sweep = DpSweepFor(spec, c, options)) {
    auto it = measurements.collectives.find(sweep->Key());
    absl::StatusOr<DeviceProfile> device = DeviceForCluster(spec.cluster);
    const double measured_bw =
        it != measurements.collectives.end() && it->second.ok
            ? it->second.LargestBusBandwidth()
            : 0.0;
    // Megatron orders ranks tp, cp, dp: a DP group spans tp * cp * dp consecutive ranks.
    const bool across_nodes = c.tp * c.cp * c.dp > spec.cluster.gpus_per_node;
    const double modelled_bw =
        !device.ok() ? 0.0
                     : (across_nodes ? device->network_bandwidth : device->nvlink_bandwidth);
    if (measured_bw > 0 && modelled_bw > 0) {
      t.dp_comm *= modelled_bw / measured_bw;
      dp_note = absl::StrFormat("; dp all-reduce busbw %.2f GB/s measured vs %.2f modelled",
                                measured_bw / 1e9, modelled_bw / 1e9);
    } else {
      dp_note = "; dp all-reduce not measured, modelled";
    }
  }
  out.time = t;
  out.iteration_time_s = modelled.iteration_time_s - replaced + t.compute + t.tp_comm +
                         t.pp_bubble + t.dp_comm;
  if (out.iteration_time_s > 0 && modelled.iteration_time_s > 0) {
    const double speedup = modelled.iteration_time_s / out.iteration_time_s;
    out.tokens_per_sec_per_gpu = modelled.tokens_per_sec_per_gpu * speedup;
    out.model_tflops_per_gpu = modelled.model_tflops_per_gpu * speedup;
    out.hardware_tflops_per_gpu = modelled.hardware_tflops_per_gpu * speedup;
    out.mfu = modelled.mfu * speedup;
    out.time_to_train_days = modelled.time_to_train_days / speedup;
  }
  const LayerMeasurement& first = *found[0];
  out.notes.push_back(absl::StrFormat(
      "measured on %s: layer fwd %.3f ms, bwd %.3f ms, recompute %.3f ms, tp comm %.3f ms "
      "per micro-batch%s; modelled iteration %.4f s, composed %.4f s",
      spec.cluster.gpu, Ms(first.forward_s), Ms(first.backward_s), Ms(first.recompute_s),
      Ms(first.tp_comm_s), dp_note, modelled.iteration_time_s, out.iteration_time_s));
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
