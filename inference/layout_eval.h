// Scoring one serving layout of a spec: its memory per rank, a steady-state screening
// estimate from the step model (microseconds), and the scheduler simulation (the figures a
// result reports). Shared by PlanInference and EstimateInference.
#ifndef PARATUNE_INFERENCE_LAYOUT_EVAL_H_
#define PARATUNE_INFERENCE_LAYOUT_EVAL_H_

#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "inference/engine_profile.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "inference/simulator.h"
#include "inference/step_model.h"
#include "search/device_catalog.h"

namespace paratune::inference {

/// A layout with its screening estimate (figures from the steady-state formulas).
struct ScreenedLayout {
  InferenceRankedConfig estimate;
  std::shared_ptr<const StepModel> model;
};

/// The spec's device, engine and workload; step models cached per (tp, pp, ep, precisions).
/// Not thread-safe (the cache).
class LayoutContext {
 public:
  /// How many requests a simulation runs.
  enum RequestCount {
    kAllRequests,     ///< serving.num_requests.
    kSearchRequests,  ///< At most kSearchRequestCap, at least 8x the layout's concurrency.
  };
  static constexpr int64_t kSearchRequestCap = 2000;
  /// Output tokens one simulation generates at most (num_requests x osl): beyond it the
  /// simulation runs fewer requests, and says so in the notes.
  static constexpr double kMaxSimulatedOutputTokens = 2e7;

  static absl::StatusOr<LayoutContext> Create(const InferenceJobSpec& spec);

  const DeviceProfile& device() const { return device_; }
  const EngineProfile& engine() const { return *engine_; }
  /// The KV-cache fraction in force (the spec's, else the engine's default).
  double kv_fraction() const;

  /// InvalidArgument naming the rule a pinned layout breaks (budget, heads, batch limits).
  absl::Status CheckConfig(const ServingConfig& c) const;
  /// The step model of c's instance shape (cached).
  absl::StatusOr<std::shared_ptr<const StepModel>> Model(const ServingConfig& c);

  /// Steady-state estimate; ResourceExhausted "does not fit by N GiB" when one request's
  /// KV cache does not fit beside the weights.
  absl::StatusOr<ScreenedLayout> Screen(const ServingConfig& c,
                                        std::shared_ptr<const StepModel> model) const;
  /// GiB per GPU missing for one request's KV cache (<= 0: it fits).
  double MemoryDeficitGib(const ServingConfig& c, const StepModel& model) const;
  /// The simulated figures.
  absl::StatusOr<InferenceRankedConfig> Evaluate(const ServingConfig& c, const StepModel& model,
                                                 RequestCount count) const;

 private:
  LayoutContext() = default;
  /// Memory of c's rank, ResourceExhausted when one request does not fit.
  absl::StatusOr<RankMemory> FitMemory(const ServingConfig& c, const StepModel& model) const;
  ServingMemory MemoryGib(const RankMemory& m) const;
  /// Seconds to move one request's KV cache from a prefill to a decode instance.
  double KvTransferSeconds(const ServingConfig& c, const StepModel& model, int64_t isl) const;
  /// Fills cost, limits (meets_limits and "misses ..." notes).
  void ApplyLimits(InferenceRankedConfig* r) const;

  InferenceJobSpec spec_;
  DeviceProfile device_;
  const EngineProfile* engine_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, QuantFormat, QuantFormat>,
           std::shared_ptr<const StepModel>>
      models_;
};

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_LAYOUT_EVAL_H_
