// The enums every layer of ParaTune shares (Megatron's transformer/enums.py): spec files,
// the planner, the wire conversions, the worker and the kernels all use these, so a value
// has one spelling everywhere ("swiglu", "selective", "all_reduce", ...).
#ifndef PARATUNE_CORE_ENUMS_H_
#define PARATUNE_CORE_ENUMS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paratune {

/// The MLP's activation: GELU (GPT) or SwiGLU (Llama; three matrices instead of two).
enum class Activation { kGelu, kSwiglu, kGeglu, kSquaredRelu };
/// Gated MLPs (SwiGLU, GeGLU): FC1 computes the gate and the value, 2f wide, and the MLP has
/// three matrices. GeLU and squared ReLU (Nemotron-4) are one f-wide FC1 and two matrices.
bool IsGated(Activation a);
/// The pre-attention / pre-MLP / final norm: LayerNorm (GPT) or RMSNorm (Llama).
enum class Normalization { kLayerNorm, kRmsNorm };
/// Learned absolute position table (GPT) or rotary embeddings (Llama; no parameters).
enum class PositionEmbedding { kLearned, kRope };
/// Storage type of weights, activations and gradients.
enum class Precision { kFp32, kBf16, kFp16, kFp8, kMxfp8, kNvfp4 };
/// True for the Transformer Engine recipes whose linear-layer GEMMs run in an 8- or 4-bit
/// format on top of BF16 mixed precision: fp8 (per-tensor scales), mxfp8 (E4M3 with one
/// E8M0 scale per 32 elements) and nvfp4 (E2M1 with one FP8 scale per 16 elements). Their
/// linear inputs are cast, and stored for backward, in the low-precision format; attention
/// and the other GEMMs run in BF16.
bool IsLowPrecisionGemm(Precision p);
/// Activation recomputation: none stores everything; selective recomputes the attention
/// core (scores, softmax, dropout, P·V) in backward; full keeps only a layer's input and
/// reruns its whole forward in backward.
enum class Recompute { kNone, kSelective, kFull };
/// What selective recompute reruns in backward (Megatron-Core's --recompute-modules; its
/// default is the attention core alone): the attention core; the norms before attention
/// and MLP (their outputs are not stored); the dense MLP; the routed experts' activation
/// function; the whole expert block (router, dispatch, experts, combine); the shared
/// experts; MLA's query and key/value up-projections.
enum class RecomputeModule {
  kCoreAttn,
  kLayernorm,
  kMlp,
  kMoeAct,
  kMoe,
  kSharedExperts,
  kMlaUpProj
};
/// Whose input fine-grained activation offload keeps in host memory between the forward
/// and the backward (Megatron-Core's --offload-modules): the attention norm's, the QKV
/// linear's, the attention core's (Q, K, V), the output projection's, the MLP norm's, the
/// routed experts' FC1 (the permuted rows) and their activation function's.
enum class OffloadModule {
  kAttnNorm,
  kQkvLinear,
  kCoreAttn,
  kAttnProj,
  kMlpNorm,
  kExpertFc1,
  kMoeAct
};
/// The attention core's implementation: FlashAttention 3 (Hopper only), 2 or 1, or
/// cuDNN's flash attention (Transformer Engine's FusedAttention backend) — all tiled, no
/// s x s scores stored — or the scores materialised with a fused scale-mask-softmax kernel
/// ("fused", Megatron's), or with separate PyTorch ops ("unfused").
enum class AttentionKernel { kFlash3, kFlash2, kFlash1, kCudnn, kFused, kUnfused };
/// The training codebase a job runs on (training.framework): its overlaps, sharding
/// stages, dtypes and loss buffers are search/framework_profile.h's table.
enum class Framework {
  kMegatronCore,       ///< Megatron-LM / Megatron-Core (the default).
  kNemo,               ///< NeMo 2.0 / Megatron-Bridge, on Megatron-Core.
  kMegatronDeepspeed,  ///< microsoft/Megatron-DeepSpeed: Megatron model code, DeepSpeed engine.
  kDeepspeed,          ///< DeepSpeed ZeRO on a PyTorch model.
  kTorchtitan,         ///< torchtitan: FSDP2, TP, PP, CP as DTensor parallelisms.
  kLlmFoundry,         ///< llm-foundry / Composer: PyTorch FSDP (FSDP1).
  kNemoAutomodel,      ///< NeMo AutoModel: FSDP2 with expert parallelism on BF16 parameters.
};
/// True for the FlashAttention kernels (no s x s scores stored).
bool IsFlash(AttentionKernel k);
/// A collective of an nccl-tests-style sweep.
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kSendRecv, kAllToAll };
/// Work run around a layer on the first or last pipeline stage, besides the layer.
enum class StageExtras {
  kNone,
  kFirst,  ///< VocabParallelEmbedding lookup before the layer.
  kLast,   ///< Final norm, vocab-parallel logits and cross entropy after the layer.
};
/// Sharded data parallelism (ZeRO stages; Rajbhandari et al. 2020): what each rank of the
/// data-parallel (x context-parallel) group keeps only its shard of. kOptimizer is ZeRO-1
/// (Megatron's distributed optimizer), kOptimizerGrads ZeRO-2, kFull ZeRO-3 / FSDP full
/// shard (parameters too: each layer's weights are all-gathered before its forward and its
/// backward, its gradients reduce-scattered after its backward).
enum class DataParallelSharding { kNone, kOptimizer, kOptimizerGrads, kFull };
/// What lives in host memory instead of the GPU's: nothing; the optimizer state with the
/// Adam step on the host CPU (ZeRO-Offload, Megatron-Core's --optimizer-cpu-offload); or
/// that and the parameter and gradient shards, streamed to the GPU layer by layer
/// (ZeRO-Infinity's offload_param, FSDP2's CPUOffloadPolicy; needs full sharding).
enum class Offload { kNone, kOptimizer, kOptimizerAndParams };
/// What a search ranks by: iteration time, or peak memory.
enum class Objective { kThroughput, kMinMemory };
/// How a search scores its candidates: the analytical model, or measured layer tasks.
enum class SearchMode { kModel, kProfile };

// ---- Mixture of experts and attention variants ----
/// Self-attention: multi-head (g = a), grouped-query (g < a), or DeepSeek's multi-head
/// latent attention (low-rank compressed queries and keys/values, decoupled RoPE).
enum class AttentionType { kMha, kGqa, kMla };
/// Megatron-Core's --moe-token-dispatcher-type: all-to-all over the EP group, all-gather of
/// every token then local selection, or the fused DeepEP/HybridEP dispatch ("flex").
enum class MoeTokenDispatcher { kAllToAll, kAllGather, kFlex };
/// How tokens reach experts: forced uniform (as benchmarks run), dropless (the most loaded
/// expert sets the pace), or a capacity per expert (capacity_factor x the mean; the rest
/// dropped).
enum class MoeRouting { kBalanced, kDropless, kCapacity };

// Names used in spec files, tasks, JSON and tables: "gelu" | "swiglu", "layernorm" |
// "rmsnorm", "learned" | "rope", "fp32" | "bf16" | "fp16" | "fp8", "none" | "selective" |
// "full", "all_reduce" | "all_gather" | "reduce_scatter" | "send_recv", "none" | "first" |
// "last", "throughput" | "min_memory", "model" | "profile", "mha" | "gqa" | "mla",
// "alltoall" | "allgather" | "flex", "balanced" | "dropless" | "capacity".
const char* ToString(Activation v);
const char* ToString(Normalization v);
const char* ToString(PositionEmbedding v);
const char* ToString(Precision v);
const char* ToString(Recompute v);
/// "core_attn" | "layernorm" | "mlp" | "moe_act" | "moe" | "shared_experts" | "mla_up_proj"
/// (Megatron-Core's spelling).
const char* ToString(RecomputeModule v);
const char* ToString(OffloadModule v);
/// "flash3" | "flash2" | "flash1" | "fused" | "unfused".
const char* ToString(AttentionKernel v);
const char* ToString(CollectiveOp v);
const char* ToString(StageExtras v);
const char* ToString(Objective v);
const char* ToString(SearchMode v);
const char* ToString(AttentionType v);
const char* ToString(MoeTokenDispatcher v);
const char* ToString(MoeRouting v);
/// "none" | "optimizer" | "optimizer_grads" | "full".
const char* ToString(DataParallelSharding v);
/// "none" | "optimizer" | "optimizer_and_params".
const char* ToString(Offload v);
/// "megatron-core" | "nemo" | "megatron-deepspeed" | "deepspeed" | "torchtitan" |
/// "llm-foundry" | "nemo-automodel".
const char* ToString(Framework v);

/// The value named `s` (exactly as ToString spells it); InvalidArgument otherwise,
/// listing the accepted names: `unknown activation 'relu' (expected gelu, swiglu)`.
absl::StatusOr<Activation> ParseActivation(absl::string_view s);
absl::StatusOr<Normalization> ParseNormalization(absl::string_view s);
absl::StatusOr<PositionEmbedding> ParsePositionEmbedding(absl::string_view s);
absl::StatusOr<Precision> ParsePrecision(absl::string_view s);
absl::StatusOr<Recompute> ParseRecompute(absl::string_view s);
absl::StatusOr<RecomputeModule> ParseRecomputeModule(absl::string_view s);
absl::StatusOr<OffloadModule> ParseOffloadModule(absl::string_view s);
absl::StatusOr<AttentionKernel> ParseAttentionKernel(absl::string_view s);
absl::StatusOr<CollectiveOp> ParseCollectiveOp(absl::string_view s);
absl::StatusOr<StageExtras> ParseStageExtras(absl::string_view s);
absl::StatusOr<Objective> ParseObjective(absl::string_view s);
absl::StatusOr<SearchMode> ParseSearchMode(absl::string_view s);
absl::StatusOr<AttentionType> ParseAttentionType(absl::string_view s);
absl::StatusOr<MoeTokenDispatcher> ParseMoeTokenDispatcher(absl::string_view s);
absl::StatusOr<MoeRouting> ParseMoeRouting(absl::string_view s);
absl::StatusOr<DataParallelSharding> ParseDataParallelSharding(absl::string_view s);
absl::StatusOr<Offload> ParseOffload(absl::string_view s);
absl::StatusOr<Framework> ParseFramework(absl::string_view s);
/// Every training.framework, in the order messages and the catalog list them.
const std::vector<Framework>& AllFrameworks();

}  // namespace paratune

#endif  // PARATUNE_CORE_ENUMS_H_
