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
  /// Expert layers: dispatch, combine and ETP collectives not hidden (0 in dense layers).
  double forward_ep_comm = 0;
  double backward_ep_comm = 0;
  double recompute_ep_comm = 0;  ///< Full recompute's dispatch and combine.
  /// Activation offload: the copy of the offloaded inputs to the host (forward) and back
  /// (backward, prefetched during the next layer's) that the compute does not cover.
  double forward_offload = 0;
  double backward_offload = 0;
  double Forward() const {
    return forward_compute + forward_tp_comm + forward_cp_comm + forward_ep_comm +
           forward_offload;
  }
  /// Backward including the recompute forward.
  double Backward() const {
    return backward_compute + backward_tp_comm + backward_cp_comm + backward_ep_comm + recompute +
           recompute_tp_comm + recompute_ep_comm + backward_offload;
  }
  /// The recompute forward and its communication.
  double Recompute() const { return recompute + recompute_tp_comm + recompute_ep_comm; }
};

/// `recompute` is taken from `config` (kFull: the whole forward again, kSelective: the
/// attention core).
LayerTime EstimateLayerTime(const ModelSpec& model, const TrainingSpec& training,
                            const ParallelConfig& config, const DeviceProfile& device,
                            int64_t gpus_per_node);

/// One expert layer (MoE), one micro-batch, on the busiest rank: the attention, norms and
/// shared experts as EstimateLayerTime, plus the routed experts' grouped GEMMs (efficiency
/// at the per-expert row count, which shrinks as EP grows), the router, the permutation
/// (memory-bound; fused in the flex dispatcher), the dispatch and combine (all-to-all over
/// NVLink inside cluster.nvlink_domain and the NIC beyond, the slower of the two; all-gather
/// and reduce-scatter with the allgather dispatcher; flex sends a token once per remote
/// domain and hides the backward's transfers behind the expert weight-gradient GEMMs), the
/// ETP gathers, and the load of the busiest rank under training.moe_routing.
LayerTime EstimateExpertLayerTime(const JobSpec& spec, const ParallelConfig& config,
                                  const DeviceProfile& device);

/// What one rank sends in one expert layer's dispatch (the combine returns as much), one
/// micro-batch: top-k copies of its tokens' hidden states (tokens = b*s / (cp * tp with
/// SP)) at the busiest rank's routing load, bytes; the shares over NVLink and over the NIC
/// (0 for the allgather dispatcher, which moves every token instead).
struct DispatchBytes {
  double total = 0;
  double over_nvlink = 0;
  double over_nic = 0;
  double nic_scale = 1;  ///< Remote copies sent per remote copy needed (flex: < 1).
};
DispatchBytes ExpertDispatchBytes(const JobSpec& spec, const ParallelConfig& config);

/// The NVLink domains an expert layout's EP group spans (RanksPerNvlinkDomain of its ranks
/// in each) and how many of them one token's k routed experts fall in (DomainsPerToken).
struct DomainReach {
  int64_t ranks_per_domain = 1;
  int64_t domains = 1;
  double per_token = 1;
};
DomainReach ExpertDomainReach(const JobSpec& spec, const ParallelConfig& config);

/// Expected NVLink domains a token's k routed experts fall in, of `domains` domains that
/// hold equal consecutive blocks of the experts: N(1 - (1 - 1/N)^k) when the experts are
/// chosen freely; under group-limited routing (k experts inside `chosen` of `groups`
/// consecutive groups) those domains holding one of the chosen groups (N dividing groups) or
/// the chosen groups' share of the domains (groups dividing N).
double DomainsPerToken(double k, int64_t domains, int64_t groups, int64_t chosen);

/// Bytes the low-precision casts of one expert layer's grouped GEMMs move on the busiest
/// rank, one micro-batch, as Transformer Engine casts a dense layer's linear inputs: the
/// forward reads each GEMM input (16-bit) and writes it in 1 byte; the backward casts and
/// transposes the output gradients (two 1-byte copies) and transposes the saved inputs.
/// 0 outside FP8/MXFP8/NVFP4 or on a device without FP8.
struct ExpertCasts {
  double forward = 0, backward = 0;
};
ExpertCasts ExpertCastBytes(const JobSpec& spec, const ParallelConfig& config,
                            const DeviceProfile& device);

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
/// (optional) replaces the optimizer and data-parallel collective terms. For an MoE model
/// `expert_layer` is EstimateExpertLayerTime's (required: InvalidArgument without it); the
/// MTP modules run as expert layers with their own logits on the last stage.
absl::StatusOr<IterationEstimate> EstimateIteration(
    const JobSpec& spec, const ParallelConfig& config, const DeviceProfile& device,
    const LayerTime& layer, const EdgeTime& edge, PipelineMode mode,
    const MeasuredTerms* measured = nullptr, const LayerTime* expert_layer = nullptr);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_TIME_MODEL_H_
