#include "search/profile_plan.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/memory_model.h"
#include "search/model_math.h"

namespace paratune {

std::string LayerProfileSpec::Key() const {
  return absl::StrCat("layer h=", hidden_size, " a=", num_attention_heads,
                      kv_channels > 0 ? absl::StrCat(" d=", kv_channels) : "",
                      attention_window > 0 ? absl::StrCat(" win=", attention_window) : "",
                      " g=", num_query_groups, " f=", ffn_hidden_size, " V=", vocab_size,
                      " act=", ToString(activation), " norm=", ToString(normalization), " tp=", tp,
                      " sp=", sequence_parallel ? 1 : 0, " cp=", cp, " mb=", micro_batch_size,
                      " s=", seq_length, " rc=", ToString(recompute), " dt=", ToString(dtype),
                      " fa=", flash_attention ? 1 : 0, " do=", dropout ? 1 : 0, " w=", warmup,
                      " i=", iters,
                      extras == StageExtras::kNone ? "" : absl::StrCat(" ex=", ToString(extras)),
                      attention_only ? " mlp=0" : "");
}

std::string OptimizerProfileSpec::Key() const {
  return absl::StrCat("optimizer params=", params, " dt=fp32 w=", warmup, " i=", iters);
}

std::string CollectiveSweepSpec::Key() const {
  return absl::StrCat("collective op=", ToString(op), " n=", group_size, " sizes=",
                      absl::StrJoin(sizes_bytes, ","), " dt=", ToString(dtype), " w=", warmup,
                      " i=", iters);
}

std::string MoeProfileSpec::Key() const {
  return absl::StrCat("moe h=", hidden_size, " E=", num_experts, " k=", moe_router_topk,
                      " f=", moe_ffn_hidden_size, " shared=", num_shared_experts,
                      " sf=", shared_expert_ffn_hidden_size, " route=", ToString(routing),
                      " cf=", capacity_factor, " ep=", ep, " etp=", etp, " tokens=", tokens,
                      " dt=", ToString(dtype), " w=", warmup, " i=", iters, " seed=", seed);
}

std::optional<MoeProfileSpec> MoeTaskFor(const JobSpec& spec, const ParallelConfig& config,
                                         const ProfilePlanOptions& options, std::string* why) {
  const ModelSpec& m = spec.model;
  const auto none = [why](std::string reason) -> std::optional<MoeProfileSpec> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  if (!IsMoe(m)) return none("the model has no experts");
  if (config.moe_token_dispatcher != MoeTokenDispatcher::kAllToAll) {
    return none(
        absl::StrCat("the MoE layer task dispatches with all-to-all; this layout's "
                     "token dispatcher is ",
                     ToString(config.moe_token_dispatcher)));
  }
  MoeProfileSpec moe;
  moe.hidden_size = m.hidden_size;
  moe.num_experts = m.num_experts;
  moe.moe_router_topk = m.moe_router_topk;
  moe.moe_ffn_hidden_size = m.moe_ffn_hidden_size;
  moe.num_shared_experts = m.num_shared_experts;
  moe.shared_expert_ffn_hidden_size = m.num_shared_experts > 0 ? SharedExpertFfn(m) : 0;
  moe.routing = spec.training.moe_routing;
  moe.capacity_factor =
      spec.training.moe_routing == MoeRouting::kCapacity ? spec.training.moe_capacity_factor : 0;
  moe.ep = config.ep;
  moe.etp = config.etp;
  const int64_t split = config.cp * (config.sequence_parallel ? config.tp : 1);
  moe.tokens = config.micro_batch_size * spec.training.seq_length / std::max<int64_t>(1, split);
  moe.dtype = spec.training.precision;
  moe.warmup = options.warmup;
  moe.iters = options.iters;
  return moe;
}

std::optional<CollectiveSweepSpec> DpSweepFor(const JobSpec& spec, const ParallelConfig& config,
                                              const ProfilePlanOptions& options) {
  if (config.dp <= 1) return std::nullopt;
  constexpr int64_t kMiB = 1 << 20;
  CollectiveSweepSpec sweep;
  sweep.op = CollectiveOp::kAllReduce;
  sweep.group_size = config.dp;
  sweep.sizes_bytes = spec.cluster.gpu == "cpu"
                          ? std::vector<int64_t>{kMiB, 4 * kMiB, 16 * kMiB}
                          : std::vector<int64_t>{kMiB, 16 * kMiB, 256 * kMiB};
  sweep.dtype = Precision::kFp32;
  sweep.warmup = options.warmup;
  sweep.iters = options.iters;
  return sweep;
}

std::vector<LayerKind> LayerKinds(const ModelSpec& model, int64_t seq_length) {
  const int64_t windowed = WindowedLayers(model);
  if (windowed == 0 || model.sliding_window >= seq_length) return {LayerKind{0, 1.0}};
  if (windowed >= model.num_layers) return {LayerKind{model.sliding_window, 1.0}};
  const double share = static_cast<double>(windowed) / static_cast<double>(model.num_layers);
  return {LayerKind{model.sliding_window, share}, LayerKind{0, 1.0 - share}};
}

std::vector<LayerProfileSpec> LayerTasksFor(const JobSpec& spec, const ParallelConfig& config,
                                            const ProfilePlanOptions& options,
                                            std::optional<int64_t> attention_window) {
  LayerProfileSpec base;
  const ModelSpec& m = spec.model;
  base.attention_window =
      attention_window.value_or(LayerKinds(m, spec.training.seq_length).front().attention_window);
  base.hidden_size = m.hidden_size;
  base.num_attention_heads = m.num_attention_heads;
  base.kv_channels = m.kv_channels;
  base.num_query_groups = m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads;
  base.ffn_hidden_size = m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * m.hidden_size;
  base.vocab_size = m.vocab_size;
  base.activation = m.activation;
  base.normalization = m.normalization;
  base.tp = config.tp;
  base.sequence_parallel = config.sequence_parallel;
  base.cp = config.cp;
  base.micro_batch_size = config.micro_batch_size;
  base.seq_length = spec.training.seq_length;
  base.dtype = spec.training.precision;
  base.flash_attention = spec.training.flash_attention;
  base.dropout = spec.training.dropout;
  base.warmup = options.warmup;
  base.iters = options.iters;

  std::vector<LayerProfileSpec> out;
  base.recompute = config.recompute;
  out.push_back(base);
  const int64_t layers_per_stage = config.pp > 0 ? m.num_layers / config.pp : m.num_layers;
  if (config.recompute == Recompute::kFull && config.recompute_num_layers > 0 &&
      config.recompute_num_layers < layers_per_stage) {
    // The stage's other layers run without recompute.
    base.recompute = Recompute::kNone;
    out.push_back(base);
  }
  return out;
}

std::vector<LayerProfileSpec> StageExtrasTasksFor(const JobSpec& spec,
                                                  const ParallelConfig& config,
                                                  const ProfilePlanOptions& options) {
  LayerProfileSpec plain = LayerTasksFor(spec, config, options).back();
  std::vector<LayerProfileSpec> out;
  for (StageExtras e : {StageExtras::kFirst, StageExtras::kLast}) {
    plain.extras = e;
    out.push_back(plain);
  }
  return out;
}

std::vector<LayerProfileSpec> AttentionTasksFor(const JobSpec& spec, const ParallelConfig& config,
                                                const ProfilePlanOptions& options,
                                                std::optional<int64_t> attention_window) {
  if (!IsMoe(spec.model)) return {};
  std::vector<LayerProfileSpec> out = LayerTasksFor(spec, config, options, attention_window);
  for (LayerProfileSpec& layer : out) layer.attention_only = true;
  return out;
}

std::vector<CollectiveSweepSpec> DpSweepsFor(const JobSpec& spec, const ParallelConfig& config,
                                             const ProfilePlanOptions& options) {
  std::optional<CollectiveSweepSpec> sweep = DpSweepFor(spec, config, options);
  if (!sweep) return {};
  if (!config.distributed_optimizer()) return {*sweep};
  std::vector<CollectiveSweepSpec> out;
  for (CollectiveOp op : {CollectiveOp::kReduceScatter, CollectiveOp::kAllGather}) {
    sweep->op = op;
    out.push_back(*sweep);
  }
  return out;
}

absl::StatusOr<ProfilePlan> PlanProfiles(const JobSpec& spec, const PlanResult& plan,
                                         const ProfilePlanOptions& options) {
  if (options.max_candidates < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile max_candidates (", options.max_candidates, ") must be >= 0"));
  }
  if (options.warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile warmup (", options.warmup, ") must be >= 0"));
  }
  if (options.iters < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile iters (", options.iters, ") must be >= 1"));
  }
  ProfilePlan out;
  const std::vector<LayerKind> kinds = LayerKinds(spec.model, spec.training.seq_length);
  std::set<std::string> seen;
  auto add_layer = [&](LayerProfileSpec layer) {
    ProfileTaskSpec task;
    task.device_kind = spec.cluster.gpu;
    task.key = layer.Key();
    if (!seen.insert(task.key).second) return;
    task.layer = std::move(layer);
    out.tasks.push_back(std::move(task));
  };
  for (size_t i = 0; i < plan.ranked.size(); ++i) {
    if (options.max_candidates > 0 &&
        static_cast<int64_t>(out.candidates.size()) >= options.max_candidates) {
      break;
    }
    const RankedConfig& candidate = plan.ranked[i];
    if (!candidate.fits) continue;
    out.candidates.push_back(static_cast<int64_t>(i));
    for (const LayerKind& kind : kinds) {
      for (LayerProfileSpec& layer :
           LayerTasksFor(spec, candidate.config, options, kind.attention_window)) {
        add_layer(std::move(layer));
      }
    }
  }
  // Stage-extras variants after the plain layers, in the candidates' order.
  for (int64_t index : out.candidates) {
    for (LayerProfileSpec& layer : StageExtrasTasksFor(spec, plan.ranked[index].config, options)) {
      add_layer(std::move(layer));
    }
  }
  // The attention parts of expert layers, then the MoE layer tasks, in the candidates' order.
  for (int64_t index : out.candidates) {
    for (const LayerKind& kind : kinds) {
      for (LayerProfileSpec& layer :
           AttentionTasksFor(spec, plan.ranked[index].config, options, kind.attention_window)) {
        add_layer(std::move(layer));
      }
    }
  }
  for (int64_t index : out.candidates) {
    std::optional<MoeProfileSpec> moe = MoeTaskFor(spec, plan.ranked[index].config, options);
    if (!moe) continue;
    ProfileTaskSpec task;
    task.kind = ProfileTaskSpec::Kind::kMoeLayer;
    task.device_kind = spec.cluster.gpu;
    task.key = moe->Key();
    if (!seen.insert(task.key).second) continue;
    task.moe = *std::move(moe);
    out.tasks.push_back(std::move(task));
  }
  // Collective sweeps after the layers, in the candidates' order.
  double max_params = 0;
  for (int64_t index : out.candidates) {
    const ParallelConfig& config = plan.ranked[index].config;
    max_params = std::max(max_params, MaxParamsPerGpu(spec.model, config));
    for (CollectiveSweepSpec& sweep : DpSweepsFor(spec, config, options)) {
      ProfileTaskSpec task;
      task.kind = ProfileTaskSpec::Kind::kCollective;
      task.device_kind = spec.cluster.gpu;
      task.key = sweep.Key();
      if (!seen.insert(task.key).second) continue;
      task.collective = std::move(sweep);
      out.tasks.push_back(std::move(task));
    }
  }
  if (spec.cluster.gpu == "cpu" && max_params >= 1) {
    ProfileTaskSpec task;
    task.kind = ProfileTaskSpec::Kind::kOptimizer;
    task.device_kind = spec.cluster.gpu;
    task.optimizer.params =
        std::min(kMaxOptimizerTaskParams, static_cast<int64_t>(std::llround(max_params)));
    task.optimizer.warmup = std::max<int64_t>(1, options.warmup);
    task.optimizer.iters = options.iters;
    task.key = task.optimizer.Key();
    out.tasks.push_back(std::move(task));
  }
  return out;
}

}  // namespace paratune
