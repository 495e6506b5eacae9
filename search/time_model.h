// Time of one training iteration: per-op costs of a transformer layer on one rank from a
// DeviceProfile (GEMMs by shape, memory-bound kernels by bytes, TP/CP communication with
// Megatron's overlaps), stage costs with the embedding and logits, the pipeline schedule
// simulated, the data-parallel gradient reduce overlapped with the last backward (all but
// one bucket), tied-embedding sync, and the memory-bound optimizer step.
#ifndef PARATUNE_SEARCH_TIME_MODEL_H_
#define PARATUNE_SEARCH_TIME_MODEL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "search/device_catalog.h"
#include "search/parallel_config.h"
#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune {

/// One transformer layer, one micro-batch, one rank; seconds.
struct LayerTime {
  double forward_compute = 0;   ///< GEMMs, attention core, memory-bound kernels.
  double forward_tp_comm = 0;   ///< TP collectives (serial in the forward pass).
  double forward_cp_comm = 0;   ///< CP ring exchange not hidden behind attention.
  double backward_compute = 0;  ///< Data- and weight-gradient GEMMs, kernels' backward.
  double backward_tp_comm = 0;  ///< What the weight-gradient/data-gradient GEMMs don't hide.
  double backward_cp_comm = 0;
  double recompute = 0;          ///< Forward work re-run before the backward.
  double recompute_tp_comm = 0;  ///< Its TP collectives (full recompute).
  double attention_forward = 0;  ///< The attention core's forward (part of forward_compute).
  /// Once per step, not per micro-batch: the TP all-reduce of the gradients of the
  /// parameters sequence parallelism replicates (the norms), after the last backward
  /// (Megatron's finalize_model_grads). 0 without SP.
  double grad_sync_tp_comm = 0;
  double Forward() const { return forward_compute + forward_tp_comm + forward_cp_comm; }
  /// Backward including the recompute forward.
  double Backward() const {
    return backward_compute + backward_tp_comm + backward_cp_comm + recompute +
           recompute_tp_comm;
  }
};

/// `recompute` is taken from `config` (kFull: the whole forward again, kSelective: the
/// attention core).
LayerTime EstimateLayerTime(const ModelSpec& model, const TrainingSpec& training,
                            const ParallelConfig& config, const DeviceProfile& device,
                            int64_t gpus_per_node);

/// Embedding (first stage) and logits + cross entropy (last stage), one micro-batch.
struct EdgeTime {
  double embedding_forward = 0, embedding_backward = 0;
  double logits_forward = 0, logits_backward = 0;
};
EdgeTime EstimateEdgeTime(const ModelSpec& model, const TrainingSpec& training,
                          const ParallelConfig& config, const DeviceProfile& device,
                          int64_t gpus_per_node);

enum class PipelineMode {
  kClosedForm,  ///< Fast screen (PipelineClosedForm).
  kSimulated,   ///< Event simulation of the schedule.
};

struct IterationEstimate {
  double iteration_time_s = 0;
  TimeBreakdown time;
  std::vector<std::string> notes;
};

/// Measured replacements for modelled terms of the iteration (profile composition,
/// search/compose.h). An unset term stays modelled.
struct MeasuredTerms {
  /// Seconds of the optimizer step per parameter the rank updates (after sharding): the
  /// gradient-buffer zeroing, the gradient scaling and AdamW. 0 = modelled (memory-bound,
  /// kOptimizerBytesPerParam).
  double optimizer_seconds_per_param = 0;
  /// Seconds to reduce `bytes` of gradients over the DP group: an all-reduce, or the
  /// reduce-scatter with the distributed optimizer. Empty = modelled.
  std::function<double(double bytes)> dp_reduce_seconds;
  /// Seconds to all-gather `bytes` of updated weights over the DP group (distributed
  /// optimizer). Empty = modelled.
  std::function<double(double bytes)> dp_gather_seconds;
};

/// The whole iteration for `config`, using a precomputed layer and edge time (they depend
/// only on tp, sp, cp, micro-batch and recompute, so the planner shares them). `measured`
/// (optional) replaces the optimizer and data-parallel collective terms.
absl::StatusOr<IterationEstimate> EstimateIteration(const JobSpec& spec,
                                                    const ParallelConfig& config,
                                                    const DeviceProfile& device,
                                                    const LayerTime& layer, const EdgeTime& edge,
                                                    PipelineMode mode,
                                                    const MeasuredTerms* measured = nullptr);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_TIME_MODEL_H_
