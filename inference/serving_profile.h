// Profiled serving (search.mode: profile for `kind: inference`): the measurements a ranked
// serving plan needs, and the plan composed from them.
//
// Planning: for each instance shape (tp, weight precision, KV-cache precision; with pp > 1
// the busiest stage's ceil(L / pp) layers) of the ranked layouts, a grid of serving_step
// tasks over the shape's layers on tp ranks: prefill steps of 1, 2, 4, ...
// prompts of min(isl, max_num_tokens) tokens while they fit the largest max_num_tokens, and decode
// steps of 1, 2, 4, ... up to the largest batch a layout reaches (max_batch_size, capped by the
// clients) at the context lengths isl and isl + osl; plus, per tp > 1, a sweep of the small
// all-reduces a step makes (tokens x hidden x 4 bytes at the grid's row counts). Tasks are
// de-duplicated by key.
//
// Composing: each such layout is simulated again with its step model's times taken from
// the measured grid (inference/measured_steps.h) and the engine's overheads (with pp > 1,
// an engine steps every pp stage steps, plus pp − 1 modelled hand-offs);
// layouts without measurements (a task that failed or was unsupported) keep the modelled
// figures with a note saying why. Both figures are kept: a composed layout's notes give the
// modelled TPOT, TTFT and tokens/s next to the measured-step ones. Then the layouts rank
// again under the objective and the limits.
#ifndef PARATUNE_INFERENCE_SERVING_PROFILE_H_
#define PARATUNE_INFERENCE_SERVING_PROFILE_H_

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/measured_steps.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "search/profile_plan.h"
#include "search/specs.h"

namespace paratune::inference {

/// The instance shape one grid of step measurements belongs to.
struct StepShape {
  int64_t tp = 1;
  QuantFormat weight_precision = QuantFormat::kBf16;
  QuantFormat kv_cache_precision = QuantFormat::kBf16;
  /// Expert-parallel groups inside the tp ranks (a mixture-of-experts model; divides tp).
  int64_t ep = 1;
  /// Attention data parallelism (ep = tp): the tasks' batch is the instance's, each rank
  /// running its share.
  bool attention_dp = false;
  /// Layers the tasks run: 0 the whole model; n > 0 one pipeline stage of n layers (the
  /// model's first n, with its embedding and output layer).
  int64_t layers = 0;
  auto operator<=>(const StepShape&) const = default;
  /// "tp2 w:int8 kv:bf16" ("tp4 ep2 w:..." with ep > 1, "tp4 ep4 adp w:..." with attention
  /// data parallelism, "tp2 L3 w:..." for a stage of 3 layers).
  std::string ToString() const;
};

/// The shape whose steps a layout's are: its tp, precisions, ep and attention DP; with
/// pp > 1 one stage of ceil(L / pp) layers (the busiest).
StepShape ShapeOf(const ModelSpec& model, const ServingConfig& c);

/// One serving_step task (task.proto ServingStepTask) in domain form.
struct ServingStepTaskSpec {
  ModelSpec model;  ///< Shape and num_layers (the whole instance, or shape.layers).
  StepShape shape;
  ServingStepPhase phase = ServingStepPhase::kDecode;
  int64_t batch = 1;
  int64_t length = 0;  ///< Prefill: prompt tokens per sequence; decode: cached tokens.
  int64_t kv_block_size = 16;
  int64_t warmup = 2;
  int64_t iters = 5;
  std::string device_kind;

  /// Canonical text of the work: equal specs have equal keys, different ones differ.
  std::string Key() const;
};

struct ServingProfileOptions {
  int64_t warmup = 2;            ///< Untimed steps per task.
  int64_t iters = 5;             ///< Timed steps per task (medians are used).
  int64_t max_grid_batch = 256;  ///< Decode grid's largest batch.
};

struct ServingProfilePlan {
  std::vector<ServingStepTaskSpec> steps;  ///< De-duplicated, grid by grid.
  /// Small-message TP all-reduce sweeps (fp32), one per tp > 1, de-duplicated.
  std::vector<CollectiveSweepSpec> sweeps;
};

/// Why the serving kernels (kernels/serving: dense and expert layers, multi-head or
/// grouped-query attention, over the whole context or a sliding window) cannot run `model`'s
/// layers, naming the field; "" when they can. Such a model's layouts stay modelled in profile mode
/// and are not verified.
std::string ServingKernelsUnsupportedReason(const ModelSpec& model);

/// The tasks `plan`'s ranked layouts need (see the file comment). InvalidArgument for a
/// spec that does not validate.
absl::StatusOr<ServingProfilePlan> PlanServingProfiles(const InferenceJobSpec& spec,
                                                       const InferencePlanResult& plan,
                                                       const ServingProfileOptions& options);

/// What the workers measured, by instance shape.
struct ServingMeasurements {
  std::map<StepShape, std::vector<StepSample>> steps;
  /// Why a shape has no usable grid (a task failed or was unsupported): the first reason.
  std::map<StepShape, std::string> failures;
  /// Measured small all-reduces by tp: (bytes, seconds), ascending.
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> allreduce;
};

/// `modelled` with its ranked layouts composed from `measured` and ranked again.
absl::StatusOr<InferencePlanResult> ComposeInference(const InferenceJobSpec& spec,
                                                     const InferencePlanResult& modelled,
                                                     const ServingMeasurements& measured);

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_SERVING_PROFILE_H_
