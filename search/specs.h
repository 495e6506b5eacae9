// The domain form of a job specification: model, training, cluster and search options.
// Plain structs with defaults; each has one Validate() that returns the first violated rule
// with a message naming the field (`model.num_attention_heads (0) must be positive`).
// The CLI, the server and the planner all validate through these functions.
#ifndef PARATUNE_SEARCH_SPECS_H_
#define PARATUNE_SEARCH_SPECS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/enums.h"

namespace paratune {

// The enums of a spec (Activation, Normalization, PositionEmbedding, Precision, Recompute,
// Objective, SearchMode), with their ToString and Parse* functions, are core/enums.h's.

// Bounds on the text and lists of a spec, the same for every transport (CLI, REST, gRPC;
// server/limits.h enforces them on the wire before anything is parsed or stored). They keep
// one job small: a ListJobs page of server/limits.h kMaxListJobsPageSize jobs stays under
// gRPC's 4 MiB message limit.
/// `name` and `model.name`: bytes of UTF-8, printable (no control characters).
inline constexpr size_t kMaxSpecNameBytes = 256;
/// A keyword field (`model.preset`, `cluster.gpu`, `training.precision`, ...): bytes.
inline constexpr size_t kMaxSpecKeywordBytes = 64;
/// `model.hf_config_json` (and the file `model.hf_config` names): bytes. The largest
/// config.json of the supported families is under 4 KiB.
inline constexpr size_t kMaxHfConfigJsonBytes = 24 * 1024;
/// Entries of each `search.*` list (tp, pp, ..., recompute).
inline constexpr size_t kMaxSearchListEntries = 64;
/// A spec file (JSON or YAML) read by the CLI: bytes (the REST gateway's body limit).
inline constexpr size_t kMaxSpecFileBytes = 1024 * 1024;

/// Transformer architecture (dense decoder-only).
struct ModelSpec {
  std::string name;                  ///< Display name ("gpt3-175b").
  int64_t num_layers = 0;            ///< L.
  int64_t hidden_size = 0;           ///< h.
  int64_t num_attention_heads = 0;   ///< a.
  int64_t num_query_groups = 0;      ///< g (GQA); set equal to a for multi-head attention.
  int64_t ffn_hidden_size = 0;       ///< f.
  int64_t vocab_size = 0;            ///< V (unpadded).
  Activation activation = Activation::kGelu;
  Normalization normalization = Normalization::kLayerNorm;
  bool tie_embeddings = false;       ///< Input embedding shared with the output layer.
  PositionEmbedding position_embedding = PositionEmbedding::kLearned;
  /// Rows of the learned position table (counted only for kLearned). A spec read by
  /// JobSpecFromJson holds the resolved rows (0 there means seq_length); 0 here: none.
  int64_t max_position_embeddings = 0;
  /// Head dimension d (Megatron's kv_channels); 0 = hidden_size / num_attention_heads.
  int64_t kv_channels = 0;
  /// mha (g = a), gqa, or mla (the MLA ranks below; num_query_groups is then a).
  AttentionType attention = AttentionType::kMha;

  // ---- Mixture of experts (num_experts > 1) and multi-head latent attention ----
  int64_t num_experts = 1;          ///< Routed experts per MoE layer; 1 = dense.
  int64_t moe_router_topk = 0;      ///< Routed experts per token k (MoE: 1..num_experts).
  int64_t moe_ffn_hidden_size = 0;  ///< FFN width of one routed expert (MoE: required).
  int64_t num_shared_experts = 0;   ///< Always-on experts per MoE layer.
  /// FFN width of one shared expert (0 = moe_ffn_hidden_size).
  int64_t shared_expert_ffn_hidden_size = 0;
  /// Dense layers (FFN ffn_hidden_size) before the first expert layer.
  int64_t first_k_dense_layers = 0;
  /// Every n-th layer after the dense ones is an expert layer (1 = all of them).
  int64_t moe_layer_freq = 1;
  /// Group-limited routing (DeepSeek-V3's node-limited routing; Megatron-Core's
  /// --moe-router-num-groups / --moe-router-group-topk): the routed experts form this many
  /// consecutive groups and each token picks its experts inside its best
  /// moe_router_group_topk groups. 0 = not limited.
  int64_t moe_router_num_groups = 0;
  int64_t moe_router_group_topk = 0;
  int64_t q_lora_rank = 0;       ///< MLA: query compression rank (0 = no compression).
  int64_t kv_lora_rank = 0;      ///< MLA: key/value compression rank.
  int64_t qk_head_dim = 0;       ///< MLA: per-head query/key width without RoPE.
  int64_t qk_rope_head_dim = 0;  ///< MLA: per-head decoupled RoPE width.
  int64_t v_head_dim = 0;        ///< MLA: per-head value width.
  /// Multi-token-prediction modules (DeepSeek-V3: 1), each one more transformer layer (an
  /// expert layer in an MoE model) with its projection, on the last pipeline stage.
  int64_t mtp_layers = 0;
  /// Sliding-window attention: a windowed layer's query attends to the last
  /// `sliding_window` positions (itself included); 0 = every layer attends to the whole
  /// sequence (GPT-OSS: 128; Mistral 7B v0.1: 4096).
  int64_t sliding_window = 0;
  /// With sliding_window: every n-th layer (counting from 1, Megatron's
  /// --window-attn-skip-freq) attends to the whole sequence, the others to the window;
  /// 0 = every layer windowed (GPT-OSS: 2, Gemma 3: 6).
  int64_t window_attn_skip_freq = 0;

  /// First violated rule: positive sizes, a % g == 0, the MoE and MLA fields consistent,
  /// overflow-safe sizes.
  absl::Status Validate() const;
};

/// The dtypes Megatron-Core's precision-aware optimizer keeps Adam's moments in (fp32, bf16,
/// fp16, fp8): training.optimizer_state_dtype's values.
bool IsOptimizerStateDtype(Precision dtype);

struct TrainingSpec {
  int64_t seq_length = 0;            ///< s.
  int64_t global_batch_size = 0;     ///< B, sequences per optimizer step.
  Precision precision = Precision::kBf16;
  bool flash_attention = true;       ///< No s x s scores stored.
  /// The attention core's kernel. Kept consistent with flash_attention by the spec reader
  /// (flash_attention false alone means kFused); AttentionKernelOf resolves the two.
  AttentionKernel attention_kernel = AttentionKernel::kFlash2;
  /// Fused RMSNorm/LayerNorm kernels (one read and one write per element); false: the norm
  /// as separate PyTorch ops, which move and store more (search/README.md).
  bool fused_norm = true;
  /// The codebase that runs the job: which overlaps and sharding stages exist, the
  /// gradient and parameter dtypes, the loss buffers (search/framework_profile.h).
  Framework framework = Framework::kMegatronCore;
  /// Gradients accumulated and reduced across data parallelism in FP32 (Megatron-Core's
  /// DistributedDataParallelConfig.grad_reduce_in_fp32; Megatron-LM's default with BF16,
  /// off with --grad-reduce-in-bf16) or in the 16-bit training dtype. Unset: the
  /// framework's (FrameworkProfile). Megatron-Core and NeMo only; 16-bit and FP8 training.
  std::optional<bool> grad_reduce_in_fp32;
  /// FP8 parameters (Megatron-Core's --fp8-param-gather, NeMo's fp8_param_gather): the
  /// linear layers' weights are held in FP8 instead of a 16-bit copy beside a cached FP8
  /// one, and the distributed optimizer all-gathers them in FP8. training.precision fp8 or
  /// mxfp8; Megatron-Core and NeMo only. Unset: the framework's (NeMo's FP8 plugin sets
  /// it; Megatron-LM's flag is off by default).
  std::optional<bool> fp8_param_gather;
  /// Adam's two moments in this dtype (fp32, bf16, fp16 or fp8) under Megatron-Core's
  /// precision-aware optimizer (--use-precision-aware-optimizer --exp-avg-dtype
  /// --exp-avg-sq-dtype; Transformer Engine's FusedAdam holds the main weights, as the
  /// 16 bits a BF16 parameter lacks of its FP32 value where the parameter is BF16).
  /// Unset: the standard optimizer (FP32 main weights and moments). Megatron-Core and NeMo
  /// only; 16-bit and low-precision training.
  std::optional<Precision> optimizer_state_dtype;
  /// The precision-aware optimizer runs: optimizer_state_dtype set and 16-bit or
  /// low-precision training.
  bool PrecisionAwareOptimizer() const {
    return optimizer_state_dtype.has_value() && precision != Precision::kFp32;
  }
  /// fp8_param_gather when set, else the framework's default for the precision.
  bool Fp8ParamGather() const;
  /// Bytes per parameter of the gradient buffer and of the data-parallel reduction:
  /// grad_reduce_in_fp32 when set (4 or 2), else the framework's.
  double GradientBytes() const;
  bool dropout = false;              ///< Dropout masks stored for backward.
  int64_t total_tokens = 0;          ///< > 0: report time_to_train_days.
  /// How tokens are routed to experts (MoE models only).
  MoeRouting moe_routing = MoeRouting::kBalanced;
  /// Tokens an expert takes, as a multiple of the mean (moe_routing capacity; 0 = unset).
  double moe_capacity_factor = 0;
  /// What layouts with selective recompute rerun in backward (Megatron-Core's
  /// --recompute-modules; by default the attention core alone). Never empty: layouts that
  /// recompute nothing have recompute none.
  std::vector<RecomputeModule> recompute_modules = {RecomputeModule::kCoreAttn};
  /// True when `module` is in recompute_modules.
  bool Recomputes(RecomputeModule module) const;
  /// Whose inputs layouts with activation_offload keep in host memory (Megatron-Core's
  /// --offload-modules; by default core_attn, attn_proj and expert_fc1, the example of its
  /// documentation: the norms and moe_act are cheaper to recompute). Modules a layer does
  /// not have (expert_fc1 and moe_act in dense layers) offload nothing there.
  std::vector<OffloadModule> offload_modules = {OffloadModule::kCoreAttn, OffloadModule::kAttnProj,
                                                OffloadModule::kExpertFc1};
  /// True when `module` is in offload_modules.
  bool Offloads(OffloadModule module) const;
  /// attention_kernel, unless flash_attention says otherwise (flash_attention false with a
  /// flash kernel: kFused; true with a materialising kernel: kFlash2).
  AttentionKernel AttentionKernelOf() const;

  absl::Status Validate() const;
};

struct ClusterSpec {
  std::string gpu;                   ///< Catalog key (DeviceProfile), e.g. "a100-80gb".
  int64_t num_gpus = 0;              ///< N.
  int64_t gpus_per_node = 8;         ///< n.
  double nvlink_bandwidth_gbps = 0;  ///< Override, GB/s bus bandwidth per GPU (0 = catalog).
  double network_bandwidth_gbps = 0; ///< Override, GB/s per GPU across nodes (0 = catalog).
  double memory_gib = 0;             ///< Override of device memory (0 = catalog).
  /// Overrides of the host behind each GPU (offload; 0 = the device kind's usual server):
  /// host DRAM per GPU, the GPU-host link each way, host DRAM bandwidth per GPU.
  double host_memory_gib = 0;
  double host_link_bandwidth_gbps = 0;
  double host_memory_bandwidth_gbps = 0;
  /// GPUs that share one NVLink domain (8 on a DGX, 72 on an NVL72 rack); 0 = the
  /// device's (DeviceProfile::nvlink_domain, e.g. 72 for gb200), else gpus_per_node.
  /// Expert all-to-alls inside it run over NVLink, beyond it over the NIC.
  int64_t nvlink_domain = 0;
  /// The NVLink domain in GPUs: nvlink_domain, the device kind's, or gpus_per_node.
  int64_t NvlinkDomain() const;

  absl::Status Validate() const;
};

/// Allowed values per dimension; empty = the planner chooses; one value pins it.
struct SearchOptions {
  std::vector<int64_t> tp, pp, dp, cp, vp, micro_batch_size, recompute_num_layers;
  std::vector<bool> sequence_parallel;
  std::vector<Recompute> recompute;
  /// Expert parallel and expert tensor parallel sizes, and the token dispatcher (MoE).
  std::vector<int64_t> ep, etp;
  std::vector<MoeTokenDispatcher> moe_token_dispatcher;
  int64_t top_k = 10;
  Objective objective = Objective::kThroughput;
  SearchMode mode = SearchMode::kModel;
  bool allow_tp_across_nodes = false;
  int64_t verify_top_k = 0;

  // ---- Sharded data parallelism ----
  /// Sharding stages to try; empty = none and the framework's usual stage (Megatron-Core:
  /// the distributed optimizer, FSDP codebases: full), where dp*cp > 1. Spec files may give
  /// `distributed_optimizer` instead (true = optimizer, false = none).
  std::vector<DataParallelSharding> data_parallel_sharding;
  /// HSDP shard group (ranks); 0 = the whole dp*cp group. Layouts whose dp*cp it does not
  /// divide are skipped.
  int64_t shard_group_size = 0;
  // ---- Communication overlaps ----
  /// Values of ParallelConfig's overlap flags to try: Megatron-Core's --tp-comm-overlap
  /// (needs sequence parallelism), --overlap-grad-reduce, --overlap-p2p-communication and
  /// --overlap-param-gather.
  /// Empty = training.framework's defaults (Megatron-Core: off, on, on, what the exports
  /// use); a framework without an overlap refuses true (search/framework_profile.h).
  /// overlap_param_gather: Megatron's --overlap-param-gather (a sharded optimizer's
  /// all-gather behind the next forward).
  std::vector<bool> tp_comm_overlap, overlap_grad_reduce, overlap_p2p_comm, overlap_param_gather;
  /// Offloads to try; empty = none (offload is a last resort: it is tried only when asked).
  /// optimizer_and_params applies to fully sharded layouts only.
  std::vector<Offload> offload;
  /// Fine-grained activation offload to try (ParallelConfig::activation_offload), as an
  /// alternative to recompute; empty = off. Layouts with full recompute store only each
  /// layer's input and are not offloaded.
  std::vector<bool> activation_offload;

  absl::Status Validate() const;
};

struct JobSpec {
  std::string name;
  ModelSpec model;
  TrainingSpec training;
  ClusterSpec cluster;
  SearchOptions search;

  /// Validates every section, then the cross-section rules (e.g. num_gpus vs pinned
  /// tp*pp*cp*dp, gpu in the catalog).
  absl::Status Validate() const;
};

// Names used in spec files, JSON and tables ("throughput", "profile", ...).

}  // namespace paratune

#endif  // PARATUNE_SEARCH_SPECS_H_
