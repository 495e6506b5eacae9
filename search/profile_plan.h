// Profile planning (DESIGN.md step 3): the surviving top candidates of an analytical plan
// become a de-duplicated set of measurement tasks. One transformer-layer measurement at a
// given (shape, tp, sp, cp, micro-batch, seq, recompute, dtype, flash, dropout) serves
// every candidate that runs layers at that shape, whatever its pp, vp or dp; one
// all-reduce sweep per data-parallel group size serves every layout with that dp. Each
// layout's plain layer task is also run with the first stage's embedding and with the last
// stage's logits and loss (search/compose.h measures the pipeline edges from them), layouts
// with the distributed optimizer get reduce-scatter and all-gather sweeps instead of the
// all-reduce, and CPU jobs get one optimizer-step task (seconds per parameter). A
// mixture-of-experts job (CPU device kind) also gets one MoE layer task per distinct expert
// layout (ep, etp, tokens per EP rank, routing, dtype): router, all-to-all dispatch and
// combine, routed and shared experts, forward and backward (kernels/moe_step.h).
#ifndef PARATUNE_SEARCH_PROFILE_PLAN_H_
#define PARATUNE_SEARCH_PROFILE_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/enums.h"
#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune {

/// One transformer layer at one parallel shape, timed over `iters` steps after `warmup`.
struct LayerProfileSpec {
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t kv_channels = 0;  ///< Head dimension; 0 = hidden_size / num_attention_heads.
  int64_t num_query_groups = 0;
  int64_t ffn_hidden_size = 0;
  int64_t vocab_size = 0;
  Activation activation = Activation::kGelu;
  Normalization normalization = Normalization::kLayerNorm;
  int64_t tp = 1;                  ///< Ranks the layer is split over (ColumnParallel/RowParallel).
  bool sequence_parallel = false;
  int64_t cp = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_length = 0;          ///< Full sequence; CP splits it.
  Recompute recompute = Recompute::kNone;  ///< kFull: every layer of the task recomputed.
  Precision dtype = Precision::kBf16;
  bool flash_attention = true;
  bool dropout = false;
  int64_t warmup = 2;
  int64_t iters = 5;
  /// Work run around the layer: the first stage's embedding lookup before it, or the last
  /// stage's final norm, vocab-parallel logits and cross entropy after (core/enums.h).
  StageExtras extras = StageExtras::kNone;
  /// The layer with its MLP block the identity: the attention part of an expert layer.
  bool attention_only = false;
  /// Sliding-window attention (model.sliding_window, for the model's windowed layers): keys
  /// per query, itself included; 0 = every earlier key.
  int64_t attention_window = 0;

  /// Canonical text of the work: equal specs have equal keys, different ones differ. A task
  /// with stage extras ends in " ex=first" or " ex=last", an attention-only one in
  /// " mlp=0"; a plain one has neither suffix. A windowed layer's has " win=<window>" after
  /// its head dimension.
  std::string Key() const;
};

/// An nccl-tests-style sweep of one collective over `group_size` ranks.
struct CollectiveSweepSpec {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int64_t group_size = 2;
  std::vector<int64_t> sizes_bytes;  ///< Ascending.
  Precision dtype = Precision::kFp32;
  int64_t warmup = 2;
  int64_t iters = 5;

  std::string Key() const;
};

/// The optimizer step of a rank holding `params` fp32 parameters, as kernels/training runs
/// it: zero the gradient buffer, scale the gradients, AdamW. The worker runs one copy per
/// rank it has at once (a job's ranks share memory bandwidth) and reports the slowest copy's
/// fastest step divided by `params`.
struct OptimizerProfileSpec {
  int64_t params = 0;
  int64_t warmup = 1;
  int64_t iters = 3;

  std::string Key() const;
};

/// One mixture-of-experts layer at one expert layout (kernels/moe_step.h on ep·etp CPU
/// ranks of one worker): router (softmax scores, top-k), permutation, all-to-all dispatch
/// and combine over the EP group, the routed experts' SwiGLU MLPs split over ETP and the
/// shared experts, forward and backward, timed over `iters` steps after `warmup`.
struct MoeProfileSpec {
  int64_t hidden_size = 0;
  int64_t num_experts = 0;
  int64_t moe_router_topk = 0;
  int64_t moe_ffn_hidden_size = 0;  ///< One routed expert's FFN width.
  int64_t num_shared_experts = 0;
  int64_t shared_expert_ffn_hidden_size = 0;   ///< One shared expert's FFN width (resolved).
  MoeRouting routing = MoeRouting::kBalanced;  ///< training.moe_routing.
  double capacity_factor = 0;                  ///< training.moe_capacity_factor (capacity).
  int64_t ep = 1;
  int64_t etp = 1;
  /// Tokens one EP rank routes per micro-batch: micro_batch_size · seq_length / cp, and / tp
  /// with sequence parallelism (as the time model's ExpertDispatchBytes counts them).
  int64_t tokens = 0;
  Precision dtype = Precision::kFp32;
  int64_t warmup = 2;
  int64_t iters = 5;
  uint64_t seed = 1;  ///< Weights and inputs.

  /// Canonical text of the work: every field, so that equal keys mean equal tasks.
  std::string Key() const;
};

/// A profiling task for one device kind (the cache key is (device_kind, key)).
struct ProfileTaskSpec {
  enum class Kind { kLayer, kCollective, kOptimizer, kMoeLayer };
  Kind kind = Kind::kLayer;
  std::string device_kind;
  std::string key;                ///< layer.Key(), collective.Key() or optimizer.Key().
  LayerProfileSpec layer;         ///< kLayer.
  CollectiveSweepSpec collective; ///< kCollective.
  OptimizerProfileSpec optimizer; ///< kOptimizer.
  MoeProfileSpec moe;             ///< kMoeLayer.
};

struct ProfilePlanOptions {
  /// Profile at most this many of the best fitting candidates (0 = all ranked that fit).
  int64_t max_candidates = 0;
  int64_t warmup = 2;  ///< Untimed steps per task.
  int64_t iters = 5;   ///< Timed steps per task (the median is used).
};

struct ProfilePlan {
  std::vector<ProfileTaskSpec> tasks;  ///< De-duplicated, in first-use order.
  /// Indices into PlanResult::ranked of the candidates the tasks serve.
  std::vector<int64_t> candidates;
};

/// The kinds of a model's layers by attention span, with their share of the layers: layers
/// attending to the whole sequence (attention_window 0) and those attending to the sliding
/// window (model.sliding_window; every layer but each window_attn_skip_freq-th). One kind,
/// share 1, for a model without a window, with every layer windowed, or whose window is at
/// least `seq_length` (it attends to every earlier key); windowed first.
struct LayerKind {
  int64_t attention_window = 0;
  double share = 1;
};
std::vector<LayerKind> LayerKinds(const ModelSpec& model, int64_t seq_length);

/// The layer tasks one layout needs for its layers of one kind (`attention_window`, one of
/// LayerKinds; none given: the first kind): one at its recompute mode, two (full and none)
/// when only recompute_num_layers of a stage's layers are fully recomputed.
std::vector<LayerProfileSpec> LayerTasksFor(const JobSpec& spec, const ParallelConfig& config,
                                            const ProfilePlanOptions& options,
                                            std::optional<int64_t> attention_window = {});

/// The data-parallel gradient all-reduce sweep a layout needs (gradients reduced in fp32,
/// Megatron's default), or nothing when dp is 1. Sizes: 1, 4, 16 MiB on the CPU device
/// kind, 1, 16, 256 MiB on GPUs (where bus bandwidth keeps rising past 16 MiB).
std::optional<CollectiveSweepSpec> DpSweepFor(const JobSpec& spec, const ParallelConfig& config,
                                              const ProfilePlanOptions& options);

/// The first- and last-stage variants of the layout's plain layer task (the last of
/// LayerTasksFor), where search/compose.h looks for them (Measurements::first_stage /
/// last_stage, by the plain task's key). Every layout gets both: with pp = 1 the single
/// stage runs the embedding and the logits.
std::vector<LayerProfileSpec> StageExtrasTasksFor(const JobSpec& spec,
                                                  const ParallelConfig& config,
                                                  const ProfilePlanOptions& options);

/// The attention parts of a mixture-of-experts layout's layer tasks: each of LayerTasksFor
/// with attention_only set, where search/compose.h looks for them
/// (Measurements::attention_parts, by the layer task's key). Empty for a dense model.
std::vector<LayerProfileSpec> AttentionTasksFor(const JobSpec& spec, const ParallelConfig& config,
                                                const ProfilePlanOptions& options,
                                                std::optional<int64_t> attention_window = {});

/// The DP sweeps a layout's composition uses: DpSweepFor's all-reduce, or with the
/// distributed optimizer the same sizes as reduce-scatter and all-gather. Empty when dp is 1.
std::vector<CollectiveSweepSpec> DpSweepsFor(const JobSpec& spec, const ParallelConfig& config,
                                             const ProfilePlanOptions& options);

/// The MoE layer task a layout's expert layers compose from, or nothing (with the reason in
/// `why`, when given): the model has no experts, or the layout's token dispatcher is not
/// alltoall (the task dispatches with all-to-all). The task's dtype is the spec's
/// precision; a worker whose backend does not run it answers UNSUPPORTED.
std::optional<MoeProfileSpec> MoeTaskFor(const JobSpec& spec, const ParallelConfig& config,
                                         const ProfilePlanOptions& options,
                                         std::string* why = nullptr);

/// Parameters per rank of an optimizer task: at most this many (the per-parameter time of
/// a streaming update does not change past the caches; 1 GiB of fp32 buffers in all).
inline constexpr int64_t kMaxOptimizerTaskParams = int64_t{1} << 26;

/// De-duplicated tasks for the best fitting candidates of `plan`: layers, stage-extras
/// variants, attention parts (AttentionTasksFor), MoE layers (MoeTaskFor), collective sweeps, then
/// (CPU jobs only: the workers' optimizer task runs on the CPU backend) one optimizer task at the
/// candidates' largest parameter count per rank, capped at kMaxOptimizerTaskParams. InvalidArgument
/// when the options are out of range.
absl::StatusOr<ProfilePlan> PlanProfiles(const JobSpec& spec, const PlanResult& plan,
                                         const ProfilePlanOptions& options);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PROFILE_PLAN_H_
