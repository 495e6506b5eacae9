// What each training codebase (training.framework) can run and how it holds a layout: its
// communication overlaps and their defaults, the data-parallel sharding stages it has, the
// parallelisms it lacks, the gradient and parameter dtypes, the loss buffers and its export
// format. One entry per framework (a table of kinds); the planner, the memory and time
// models, the validity rules and the CLI's export read it. Each entry cites its sources in
// framework_profile.cc.
#ifndef PARATUNE_SEARCH_FRAMEWORK_PROFILE_H_
#define PARATUNE_SEARCH_FRAMEWORK_PROFILE_H_

#include <vector>

#include "absl/status/status.h"
#include "core/enums.h"
#include "search/device_catalog.h"
#include "search/parallel_config.h"

namespace paratune {

struct SearchOptions;

/// How a codebase splits the transformer layers over the pp·vp pipeline chunks.
enum class PipelineSplit {
  /// Megatron-Core: p·v divides the layers, or (where it does not) the layers + 2 with the
  /// embedding and the loss counted as one layer each.
  kDivides,
  /// DeepSpeed's PipelineModule (`type:transformer`): the layers alone, the first
  /// L mod p·v chunks one layer more.
  kLayersUneven,
  /// torch.distributed.pipelining as torchtitan splits: the layers + 2 slots always, the
  /// first (L + 2) mod p·v virtual stages one more, the first and last one layer lighter.
  kSlotsUneven,
};

/// One communication overlap of a framework: whether the codebase has it, and its value
/// when `search` does not list one.
struct OverlapFact {
  bool exists = true;
  bool default_on = false;
};

struct FrameworkProfile {
  Framework framework = Framework::kMegatronCore;
  /// Transformer Engine's TP communication overlap (Megatron-Core's --tp-comm-overlap) or
  /// torchtitan's async TP.
  OverlapFact tp_comm_overlap;
  /// Data-parallel gradient reduction in buckets during the backward.
  OverlapFact overlap_grad_reduce;
  /// With full sharding the gradient overlap is on unless a search lists it (DeepSpeed
  /// turns overlap_comm on for ZeRO-3 only).
  bool overlap_grad_reduce_on_with_full_sharding = false;
  /// Asynchronous pipeline sends and receives of the interleaved schedule.
  OverlapFact overlap_p2p_comm;
  /// The sharded optimizer's (optimizer, optimizer_grads) parameter all-gather behind the
  /// next forward.
  OverlapFact overlap_param_gather;
  /// Data-parallel sharding stages the codebase runs.
  std::vector<DataParallelSharding> sharding;
  /// Stages tried besides none when `search.data_parallel_sharding` is empty (where
  /// dp*cp > 1).
  std::vector<DataParallelSharding> open_sharding;
  bool pipeline_parallel = true;     ///< pp > 1 exists.
  bool interleaved_pipeline = true;  ///< vp > 1 exists.
  PipelineSplit pipeline_split = PipelineSplit::kDivides;
  /// The split need not divide the layers (the first virtual stages take one more).
  bool UnevenPipelineSplit() const { return pipeline_split != PipelineSplit::kDivides; }
  bool context_parallel = true;      ///< Ring context parallelism (cp > 1).
  /// Expert tensor parallelism (etp > 1) in expert layers.
  bool expert_tensor_parallel = true;
  /// The token dispatchers its expert layers run (where EP·ETP > 1 dispatches anything).
  std::vector<MoeTokenDispatcher> dispatchers = {
      MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather, MoeTokenDispatcher::kFlex};
  /// Whether `d` is one of `dispatchers`.
  bool HasDispatcher(MoeTokenDispatcher d) const;
  /// Whether a layout with `pp` stages and data parallelism can shard by `s` as the
  /// codebase's FSDP2 keeps its layers (pipeline_defers_fsdp_sync): with pp > 1 only the
  /// optimizer stage; without a pipeline, optimizer only with
  /// fsdp_defers_sync_without_pipeline. Other codebases: true.
  bool KeepsFsdpSharding(DataParallelSharding s, int64_t pp) const;
  bool sequence_parallel = true;     ///< Megatron's sequence parallelism with TP.
  /// ZeRO-2/3 (optimizer_grads, full) beside pp > 1.
  bool grad_sharding_with_pipeline = true;
  /// Fine-grained activation offload (Megatron-Core's --fine-grained-activation-offloading;
  /// DeepSpeed's and PyTorch's CPU checkpointing offload full-recompute checkpoints only).
  bool activation_offload = true;
  /// Bytes per parameter of the gradients kept in 16-bit and FP8 training (FP32 training:
  /// 4 everywhere).
  double gradient_bytes_per_param = 4;
  /// Gradients reduced across data parallelism in FP32 (else in the 16-bit training dtype).
  bool reduce_gradients_in_fp32 = true;
  /// FSDP mixed precision: the parameters are FP32 (sharded like the weights) and are
  /// Adam's master copy (no separate 12-byte state: 8); layers are gathered in 16-bit.
  bool fp32_parameters = false;
  /// The parameters stay in the 16-bit training dtype and the optimizer updates them in
  /// place with its states in that dtype (torch.optim.Adam over BF16 parameters: no FP32
  /// master copy): 2 bytes of parameter, 2 of gradient and 4 of Adam state per parameter.
  bool optimizer_in_training_dtype = false;
  /// Pipelined (pp > 1) FSDP2 as torch.distributed.pipelining runs it
  /// (PipelineStage.backward_maybe_with_nosync): every layer's gathered parameters stay,
  /// the gradients accumulate unsharded and the whole stage reduce-scatters after its last
  /// backward. Only the optimizer stage describes it, without the gradient-reduce overlap.
  bool pipeline_defers_fsdp_sync = false;
  /// Without a pipeline too, FSDP2 can keep the gathered parameters and defer the gradient
  /// sync to the last micro-batch (NeMo AutoModel's defer_fsdp_grad_sync); else the
  /// optimizer stage of a pipeline_defers_fsdp_sync framework needs pp > 1.
  bool fsdp_defers_sync_without_pipeline = false;
  /// The pipeline keeps each in-flight micro-batch's stage output (the activation sent to
  /// the next stage) until that micro-batch's backward; Megatron frees its data once sent.
  bool pipeline_keeps_outputs = false;
  /// Bytes moved per parameter and micro-batch to add each micro-batch's gradients into
  /// the accumulated ones outside the weight-gradient GEMMs, with BF16 (FP8 too) and with
  /// FP16 training (Megatron-Core accumulates inside the GEMM: 0).
  double grad_accumulation_bytes_bf16 = 0;
  double grad_accumulation_bytes_fp16 = 0;
  /// FP8 training keeps each linear layer's FP8 weight (and, where the GEMM needs it, its
  /// transpose) from the step's first micro-batch to its last beside the 16-bit weight
  /// (Transformer Engine's weight workspace, which Megatron-Core's is_first_microbatch
  /// keeps across micro-batches).
  bool fp8_weight_cache = false;
  /// Megatron-Core's DistributedDataParallel and Transformer Engine numerics knobs exist
  /// (training.grad_reduce_in_fp32, training.fp8_param_gather).
  bool megatron_numerics = false;
  /// FP8 (per-tensor) runs hold FP8 parameters unless the spec says otherwise (NeMo's
  /// bf16_with_fp8_mixed plugin sets fp8_param_gather).
  bool fp8_param_gather_by_default = false;
  /// The pipeline sends a stage's whole output from every TP rank (without sequence
  /// parallelism each holds a copy); Megatron's schedules send 1/t of it per rank
  /// (scatter-gather optimisation, or sequence parallelism).
  bool pipeline_sends_replicated_activation = false;
  /// The cross entropy runs on the vocabulary split over TP (else every TP rank holds the
  /// full vocabulary's logits).
  bool vocab_parallel_loss = true;
  /// The attention kernel the codebase runs on Hopper and later when the spec names none
  /// (training.attention_kernel and training.flash_attention both absent); FlashAttention-2
  /// before Hopper.
  AttentionKernel hopper_attention_kernel = AttentionKernel::kFlash2;
  /// The export format that renders a layout for this codebase (exporters.h), or nullptr.
  const char* export_format = nullptr;
};

/// The profile of `framework`.
const FrameworkProfile& ProfileOf(Framework framework);

/// Bytes per parameter and micro-batch that accumulating the gradients moves beside the
/// GEMMs (FrameworkProfile::grad_accumulation_bytes_*; 0 in FP32).
double GradAccumulationBytesPerParam(Framework framework, Precision precision);

/// The attention kernel `framework` runs on `device` when the spec names none.
AttentionKernel DefaultAttentionKernel(Framework framework, const DeviceProfile& device);

/// The overlap flag values a layout takes when `search` lists none.
/// Off where a pipelined FSDP2 stage reduces its gradients after its last backward
/// (pipeline_defers_fsdp_sync with pp > 1).
bool DefaultOverlapGradReduce(Framework framework, DataParallelSharding sharding, int64_t pp = 1);
/// On where the stage has no post-step all-gather (none, full): the flag then changes
/// nothing.
bool DefaultOverlapParamGather(Framework framework, DataParallelSharding sharding);

/// Bytes per gradient element of the data-parallel reduction under `precision`.
double GradientReduceBytes(Framework framework, Precision precision);

/// The layout rules of the framework (pp, vp, cp, SP, the sharding stage and the overlaps
/// it has); InvalidArgument naming the field and training.framework.
absl::Status CheckLayoutForFramework(const ParallelConfig& config, Framework framework);

/// The explicit `search` values the framework cannot run (an overlap set true that it lacks,
/// a sharding stage it does not have); InvalidArgument naming the field and the rule.
absl::Status CheckSearchForFramework(const SearchOptions& search, Framework framework);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_FRAMEWORK_PROFILE_H_
