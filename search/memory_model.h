// Memory per GPU, derived op by op (Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", Section 4), plus weights, gradients,
// optimizer state, pipeline in-flight micro-batches and the explicit framework terms of
// DESIGN.md "Memory per GPU".
#ifndef PARATUNE_SEARCH_MEMORY_MODEL_H_
#define PARATUNE_SEARCH_MEMORY_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "search/device_catalog.h"
#include "search/parallel_config.h"
#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune {

/// The shape and sharding of one transformer layer's activations on one rank.
/// What a layer reruns in backward under selective recompute (TrainingSpec's
/// recompute_modules; the default is the attention core alone, Megatron-Core's).
struct SelectiveModules {
  bool core_attn = true, layernorm = false, mlp = false, moe_act = false, moe = false,
       shared_experts = false, mla_up_proj = false;
  static SelectiveModules Of(const TrainingSpec& training);
  /// As seen by an expert layer's dense part, whose MLP is its shared experts.
  SelectiveModules ForSharedExperts() const;
};

/// Whose inputs a layer keeps in host memory under activation offload (TrainingSpec's
/// offload_modules, on layouts with ParallelConfig::activation_offload and no full
/// recompute); none by default.
struct OffloadedInputs {
  bool attn_norm = false, qkv_linear = false, core_attn = false, attn_proj = false,
       mlp_norm = false, expert_fc1 = false, moe_act = false;
  static OffloadedInputs Of(const TrainingSpec& training, const ParallelConfig& config);
};

struct LayerActivationParams {
  int64_t seq_length = 0;  ///< s, the full sequence (before CP splits it).
  /// The layout; its micro_batch_size (b), tp (t), sequence_parallel (the non-TP regions
  /// split over t too), cp (every activation split over c along s) and recompute (kFull:
  /// only the layer input is kept) shape one layer's activations, its other fields do not.
  ParallelConfig parallel;
  bool flash_attention = false;    ///< No s x s scores stored.
  bool dropout = true;             ///< Dropout masks (1 byte per element) stored.
  double bytes_per_element = 2;    ///< Stored activations (2 = 16-bit).
  bool fp8_linear_inputs = false;  ///< FP8 training: linear-layer inputs kept in 1 byte.
  /// With parallel.recompute kSelective: the modules rerun (their tensors are not stored).
  SelectiveModules selective;
  /// Tensors offloaded to the host (not counted: they are not on the device). A tensor
  /// selective recompute already drops is not offloaded.
  OffloadedInputs offloaded;
  /// Fused norm kernels store their input; a norm of separate PyTorch ops stores the FP32
  /// copy of its input and its 16-bit normalised output (for the weight's multiply).
  bool fused_norm = true;
  /// FrameworkMemory's unfused_glu and attention_output_copied (the codebase's kernels).
  bool unfused_glu = false;
  bool attention_output_copied = false;
};

/// Bytes that ONE transformer layer stores for its backward pass on one rank, for one
/// micro-batch. The tensors counted (x = s*b*h elements, per rank; "TP" = divided by t,
/// "SP" = divided by t only with sequence parallelism, every term divided by c):
///   attention block
///     - LayerNorm/RMSNorm input            x                   (SP)
///     - QKV linear input (norm output)     x                   (SP)
///     - Q and K (inputs of Q K^T)          x + x*g/a           (TP)
///     - softmax output                     a*s*s*b             (TP)  no flash
///     - softmax dropout mask, 1 byte       a*s*s*b             (TP)  no flash, dropout
///     - dropout output (input of attn x V) a*s*s*b             (TP)  no flash, dropout
///     - V                                  x*g/a               (TP)
///     - flash: softmax statistics, fp32    4 bytes * a*s*b     (TP)  flash only
///     - output projection input            x                   (TP)
///     - attention dropout mask, 1 byte     x                   (SP)  dropout
///   MLP block
///     - LayerNorm/RMSNorm input            x                   (SP)
///     - FC1 input                          x                   (SP)
///     - activation input (GeLU: f; SwiGLU: 2f per token)       (TP)
///     - FC2 input                          s*b*f               (TP)
///     - MLP dropout mask, 1 byte           x                   (SP)  dropout
/// 16-bit tensors are counted at `bytes_per_element` each, masks at one byte, and with
/// `fp8_linear_inputs` the four linear-layer inputs at one byte. For GPT (f = 4h, MHA)
/// with dropout, no flash attention and 16-bit activations this is exactly Korthikanti's
/// s*b*h*(34 + 5*a*s/h) (no parallelism), s*b*h*(10 + 24/t + 5*a*s/(h*t)) (TP),
/// s*b*h/t*(34 + 5*a*s/h) (TP+SP). Selective recompute of the attention core drops its
/// tensors (softmax output, its dropout mask and output, flash statistics): 34*s*b*h/t
/// with TP+SP; of the norms, the QKV and FC1 inputs (the norms' outputs); of the MLP, the
/// activation and FC2 inputs (FC1's input is the checkpoint); of MLA's up-projections, Q,
/// K and V (the latents stay). Full recompute keeps only the layer input: 2*s*b*h (divided
/// by t with SP).
double LayerActivationBytes(const ModelSpec& model, const LayerActivationParams& params);

/// Bytes per element of stored activations and the FP8 flag for a training precision.
LayerActivationParams ActivationParamsFor(const ModelSpec& model,
                                          const TrainingSpec& training,
                                          const ParallelConfig& config);

/// Parameters held by the most loaded pipeline rank (per TP/CP rank): its layers plus
/// the embeddings on the first stage and the output layer on the last (with tied
/// embeddings both stages hold a copy). Returns the maximum over stages.
double MaxParamsPerGpu(const ModelSpec& model, const ParallelConfig& config);
/// Parameters held by one TP rank of pipeline stage `stage` (padded vocabulary).
double StageParamsPerGpu(const ModelSpec& model, const ParallelConfig& config, int64_t stage);

// ---- Mixture of experts ----

/// One GPU's parameters on a pipeline stage, by the group the distributed optimizer
/// shards them over: `dense` (attention, norms, dense MLPs, shared experts, embeddings and
/// output layer: split over tp, the router replicated; sharded over dp*cp) and `expert`
/// (the routed experts: split over ep*etp; sharded over the expert data-parallel group).
struct StageParams {
  double dense = 0;
  double expert = 0;
  double Total() const { return dense + expert; }
  /// Of them, the linear layers' (attention, dense MLPs, shared and routed experts in the
  /// decoder layers; not the embeddings, the output layer, norms, routers or MTP modules).
  double linear = 0;
};
/// StageParamsPerGpu split as above; the last stage holds the MTP modules.
StageParams StageParamsSplit(const ModelSpec& model, const ParallelConfig& config, int64_t stage);
/// The same with the stage's expert layers given (ExpertLayersPerStage's entry).
StageParams StageParamsSplit(const ModelSpec& model, const ParallelConfig& config, int64_t stage,
                             int64_t expert_layers_on_stage);
/// Expert layers on each pipeline stage.
std::vector<int64_t> ExpertLayersPerStage(const ModelSpec& model, const ParallelConfig& config);
/// Expert layers in each model chunk, indexed stage * vp + chunk (interleaved as Megatron
/// does: chunk j of stage r holds the layers of virtual stage j*pp + r).
std::vector<int64_t> ExpertLayersPerChunk(const ModelSpec& model, const ParallelConfig& config);
/// Expert layers on pipeline stage `stage` (its model chunks).
int64_t ExpertLayersOnStage(const ModelSpec& model, const ParallelConfig& config, int64_t stage);
/// Routed tokens the busiest EP rank receives, relative to a balanced router: 1 for
/// training.moe_routing balanced; dropless: the most loaded of ep ranks,
/// 1 + sqrt(2 ln(ep) (sigma^2 ep / num_experts + 1 / mean)), with sigma = 1.15 the
/// coefficient of variation of one expert's share of the tokens and mean the routed tokens
/// per rank; capacity: that, capped at moe_capacity_factor.
double ExpertLoadFactor(const JobSpec& spec, const ParallelConfig& config);
/// Bytes ONE expert layer stores for its backward on one rank, one micro-batch: the
/// attention block and norms as LayerActivationBytes, the shared experts as a dense MLP of
/// width num_shared_experts x their FFN, and per routed token copy (tokens/(c*t) x top-k x
/// `load`): the permuted FC1 input (h x etp, gathered over ETP), FC1's output
/// (fc1_width / etp x etp), FC2's input (f), the expert output kept for the combine (h);
/// the router's FP32 logits and probabilities and its routing map (9 bytes x experts per
/// token). Full recompute keeps only the layer input.
double ExpertLayerActivationBytes(const ModelSpec& model, const LayerActivationParams& params,
                                  double load);
/// The all-to-all send and receive buffers of one expert layer (2 x top-k x tokens x h).
/// Bytes one layer (an expert layer when `expert_layer`) of one micro-batch keeps in host
/// memory under the layout's activation offload: its stored tensors with offload_modules
/// on the device less those without. 0 without activation offload.
double LayerOffloadedBytes(const JobSpec& spec, const ParallelConfig& config, bool expert_layer);
/// The same for a dense layer of `model`.
double DenseLayerOffloadedBytes(const ModelSpec& model, const TrainingSpec& training,
                                const ParallelConfig& config);

double DispatchBufferBytes(const ModelSpec& model, const LayerActivationParams& params,
                           double load);

/// Optimizer-state bytes per parameter (before distributed-optimizer sharding): Adam's
/// FP32 m and v (8), plus the FP32 master weights in 16-bit and FP8 training (12 in all).
/// FP32 training keeps no master copy: 8.
double OptimizerBytesPerParam(Precision precision);
/// Bytes of one Adam moment in `dtype` (training.optimizer_state_dtype): 4, 2 or 1.
double OptimizerMomentBytes(Precision dtype);
/// The main weights Megatron-Core's precision-aware optimizer keeps per parameter: 2 over
/// BF16 parameters (the 16 bits the BF16 value lacks of the FP32 one), 4 over FP16 or FP8
/// parameters (training.fp8_param_gather).
double PrecisionAwareMainWeightBytes(const TrainingSpec& training);
/// Optimizer-state bytes per parameter under training.optimizer_state_dtype: the main
/// weights and the two moments (BF16 training with BF16 moments: 2 + 2 + 2 = 6, against the
/// standard optimizer's 12).
double PrecisionAwareOptimizerBytes(const TrainingSpec& training);

/// Fixed per-GPU bytes outside the model (CUDA context ~0.5 GiB, NCCL buffers and cuBLAS
/// workspaces): one documented constant, not per model.
inline constexpr double kFrameworkWorkspaceBytes = 2.5 * (1ull << 30);

/// The training framework's storage conventions. The defaults are Megatron-LM's (FP32
/// main gradients, optimizer sharded only with the distributed optimizer); another
/// codebase is described by changing these explicit terms, never per layout.
/// FP32 gradients per parameter the host keeps for its Adam step under offload.
inline constexpr double kHostGradientBytesPerParam = 4;

struct FrameworkMemory {
  double gradient_bytes_per_param = 4;  ///< 4: FP32 main grads; 2: 16-bit grads.
  double workspace_bytes = kFrameworkWorkspaceBytes;  ///< Fixed per-GPU overhead.
  /// Caching-allocator fragmentation: activation-sized blocks of varying shapes are freed
  /// and reused every micro-batch, and PyTorch's allocator reserves ~10% more than it hands
  /// out for them (torch.cuda.memory_reserved vs memory_allocated in Megatron runs).
  double fragmentation_fraction = 0.10;
  /// Bytes per (token x vocabulary entry) of the loss buffers on the last stage: Megatron
  /// keeps FP32 logits plus the 16-bit output (4 + 2).
  double logits_bytes_per_element = 6;
  /// Megatron's cross entropy is vocab-parallel (each TP rank holds V/t); a codebase that
  /// gathers the full vocabulary holds all of it on every rank.
  bool vocab_parallel_loss = true;
  /// FSDP mixed precision (torchtitan, llm-foundry): in 16-bit and FP8 training the
  /// parameters are FP32 (4 bytes, sharded as the weights are) and are Adam's master copy
  /// (optimizer state 8 bytes, not 12); gathered layers are 16-bit, and with
  /// optimizer_grads the gathered 16-bit parameters stay from forward to backward beside
  /// the FP32 shard.
  bool fp32_parameters = false;
  /// The parameters, gradients and Adam's two states all in the 16-bit training dtype
  /// (2 + 2 + 4 bytes per parameter; NeMo AutoModel's BF16 models).
  bool optimizer_in_training_dtype = false;
  /// Host memory per GPU the offloaded state may use (the device kind's usual server).
  double host_memory_bytes = 0;
  /// The gated activation runs as separate PyTorch ops (`silu(x) * gate`): besides its
  /// inputs (2f per token) and the product (FC2's input, f) it stores the activation's
  /// output for the multiply's backward (f more). Megatron's fused kernel does not.
  bool unfused_glu = false;
  /// The attention core's output is rearranged into a new tensor for the output
  /// projection, so the flash kernel's saved output and the projection's saved input are
  /// two copies (a*d more per token). Megatron passes one tensor to both.
  bool attention_output_copied = false;
  /// Every stage but the last keeps each in-flight micro-batch's output (one 16-bit
  /// [s, b, h] tensor, divided by t under SP) until that micro-batch's backward
  /// (FrameworkProfile::pipeline_keeps_outputs).
  bool pipeline_keeps_outputs = false;
  /// Bytes per linear-layer parameter of the FP8 weight copies kept through a step in FP8
  /// training (FrameworkProfile::fp8_weight_cache): FP8 per-tensor 2 on Hopper (the weight
  /// and the transpose its GEMMs need), 1 on Blackwell (any layout); MXFP8 2 + 2/32 (row-
  /// and column-wise data with their E8M0 scales per 32); NVFP4 2 x (1/2 + 1/16). 0 without
  /// FP8 GEMMs and with FP8 parameters (the weight is the FP8 copy).
  double fp8_weight_cache_bytes = 0;
};

/// The framework terms of a job's codebase on a device: gradient bytes, FP32 parameters and
/// the vocab-parallel loss from `framework`'s profile (search/framework_profile.h); the
/// fixed workspace and fragmentation above for GPUs; none of the fixed workspace and no
/// fragmentation for a host-memory device (DeviceProfile::host_memory, the "cpu" kind),
/// whose ranks allocate through ParaTune's tracking allocator (no CUDA context, cuBLAS/NCCL
/// workspaces or caching allocator: what the tracking allocator counts is all there is).
FrameworkMemory FrameworkMemoryFor(const DeviceProfile& device, Framework framework);
/// The same for `training`'s framework, with its grad_reduce_in_fp32 when set (gradient
/// buffers of 4 or 2 bytes per parameter).
FrameworkMemory FrameworkMemoryFor(const DeviceProfile& device, const TrainingSpec& training);

/// What kernels/training's tracking allocator counts of a modelled peak `m` (bytes, modelled
/// with `framework`), for comparing a verify run's measured peak on the same footing: `m`
/// less the fixed workspace (CUDA context, NCCL and cuBLAS buffers: outside any allocator)
/// and the caching allocator's fragmentation (the tracking allocator counts exact bytes),
/// with the gradients at the trainer's bytes per parameter (TrainerGradientBytesPerParam)
/// and the loss buffers at the trainer's bytes per logit (TrainerLogitsBytesPerElement).
/// other = transient + workspace + fragmentation·(activations + transient), so
/// transient = (other − workspace − fragmentation·activations) / (1 + fragmentation).
double TrackedPeakBytes(const MemoryBreakdown& m, const FrameworkMemory& framework,
                        Precision precision);

/// Gradient bytes per parameter in kernels/training: its gradients are in the training
/// dtype (4 in FP32, 2 in 16-bit training), where Megatron-LM keeps FP32 main grads.
double TrainerGradientBytesPerParam(Precision precision);

/// Loss-buffer bytes per (token × vocabulary entry) in kernels/training: the logits and
/// their gradient, both in the training dtype (8 in FP32, 4 in 16-bit training), where
/// Megatron-LM keeps an FP32 copy of 16-bit logits (FrameworkMemory's 6).
double TrainerLogitsBytesPerElement(Precision precision);

// ---- Sharded data parallelism (ZeRO / FSDP) ----

/// Megatron's gradient bucket (at least 40M parameters; DeepSpeed's reduce_bucket_size and
/// Megatron-FSDP's buckets are of the same order): the unit reduce-scattered at once.
inline constexpr double kReduceBucketParams = 40e6;
/// Unsharded layers FSDP holds at once with full sharding: the layer computing and the next
/// one, prefetched (FSDP2's and Megatron-FSDP's default prefetch depth of 1; DeepSpeed
/// ZeRO-3 prefetches by bytes, about one layer of a large model).
inline constexpr double kFullShardUnshardedLayers = 2;

/// Per-rank model-state bytes of one pipeline stage's `params` parameters (per TP rank)
/// under `config`'s data-parallel sharding, with its shard group of N = config.ShardRanks()
/// ranks. Per parameter Ψ, with W weight bytes, G gradient bytes and K optimizer bytes (the
/// ZeRO paper's 2Ψ + 2Ψ + KΨ with W = G = 2, K = 12):
///   none            W Ψ       + G Ψ       + K Ψ
///   optimizer       W Ψ       + G Ψ       + K Ψ / N   (ZeRO-1, distributed optimizer)
///   optimizer_grads W Ψ       + G Ψ / N   + K Ψ / N   (ZeRO-2)
///   full            W Ψ / N   + G Ψ / N   + K Ψ / N   (ZeRO-3 / FSDP)
/// plus the buffers the sharded stages need: full sharding holds kFullShardUnshardedLayers
/// layers' gathered weights (W each) and two layers' unsharded gradients before their
/// reduce-scatter (G each); ZeRO-2 two gradient buckets of kReduceBucketParams (G each),
/// the one filling and the one being reduce-scattered.
struct ShardedModelState {
  double weights = 0, gradients = 0, optimizer = 0;
  double gathered_weights = 0;  ///< Unsharded layers in flight (full).
  double reduce_buffers = 0;    ///< Unsharded gradients awaiting reduce-scatter.
};
ShardedModelState ShardedModelStateBytes(const ParallelConfig& config, double params,
                                         double layer_params, double weight_bytes,
                                         double gradient_bytes, double optimizer_bytes);

/// Memory on the most loaded GPU (the max over the first and the last pipeline stage; over
/// every stage for an MoE model), by
/// cause. Documented terms:
///   weights 2 bytes/param (4 for FP32; FP8 keeps 2, its copies are transient),
///   gradients FrameworkMemory::gradient_bytes_per_param (Megatron: 4, FP32 main grads),
///   optimizer OptimizerBytesPerParam (12: FP32 master copy, Adam m and v; 8 in FP32
///   training, which has no master copy); weights, gradients and optimizer sharded over
///   the shard group as ShardedModelStateBytes says (the routed experts over the expert
///   data-parallel group edp; the gathered layers count as weights, the reduce-scatter
///   buffers as gradients); parameters per stage include the embedding on the first and the
///   output layer (or the tied copy) on the last;
///   activations: LayerActivationBytes times the stage's layers times its in-flight
///   micro-batches (1F1B: min(p - r, m) on stage r; interleaved: the warm-up chunks, i.e.
///   p + (p-1)/v stages' worth on the first stage), plus the embedding's dropout mask;
///   other: one layer's backward working set, the loss buffers of one micro-batch on the
///   last stage, the fixed workspace, and fragmentation (a fraction of the activation-sized
///   buffers). See FrameworkMemory for the codebase-specific terms.
MemoryBreakdown EstimateMemory(const JobSpec& spec, const ParallelConfig& config,
                               double capacity_bytes,
                               const FrameworkMemory& framework = FrameworkMemory());

}  // namespace paratune

#endif  // PARATUNE_SEARCH_MEMORY_MODEL_H_
