// Megatron-LM and NeMo exporters (see exporters.h). Flag and key names follow
// megatron/training/arguments.py and NeMo's megatron_gpt_config.yaml.
#include "search/exporters.h"

#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "search/model_math.h"

namespace paratune {
namespace {

/// How Megatron should recompute: method ("uniform" | "block") and its num_layers.
struct FullRecompute {
  std::string method;
  int64_t num_layers = 0;
  std::string note;  ///< Set when the layout's count had to be rounded for Megatron.
};

/// The torch dtype Transformer Engine's FusedAdam takes for a moment dtype (FP8 moments are
/// torch.uint8 with a scale).
const char* TorchDtype(Precision dtype) {
  switch (dtype) {
    case Precision::kFp32:
      return "torch.float32";
    case Precision::kFp16:
      return "torch.float16";
    case Precision::kFp8:
      return "torch.uint8";
    default:
      return "torch.bfloat16";
  }
}

/// Layers Megatron splits over the pipeline: with --account-for-embedding-in-pipeline-split
/// and --account-for-loss-in-pipeline-split the embedding and the loss count as one layer
/// each, so L + 2 is divided over pp x vp model chunks.
int64_t PipelineSplitLayers(const JobSpec& spec, const ParallelConfig& c) {
  return PipelineSlots(spec.model, c);
}

/// Megatron-Core's --pipeline-model-parallel-layout for a split that counts the embedding
/// ("E"), the loss ("L") and the MTP modules ("m") as layers ("t"): virtual stages in order,
/// separated by "|".
std::string PipelineLayout(const JobSpec& spec, const ParallelConfig& c) {
  std::string out;
  for (int64_t k = 0; k < c.pp * c.vp; ++k) {
    const int64_t stage = k % c.pp, chunk = k / c.pp;
    if (k > 0) out += "|";
    if (k == 0) out += "E";
    out += std::string(static_cast<size_t>(DecoderLayersInChunk(spec.model, c, stage, chunk)), 't');
    if (k == c.pp * c.vp - 1) {
      out += std::string(static_cast<size_t>(spec.model.mtp_layers), 'm') + "L";
    }
  }
  return out;
}

/// Megatron-Core's --moe-layer-freq: an int (every n-th layer from 0) or the per-layer
/// pattern ("([0]*3+[1]*58)") when dense layers come first.
std::string MoeLayerFreq(const ModelSpec& m) {
  if (m.first_k_dense_layers == 0) return absl::StrCat(m.moe_layer_freq);
  if (m.moe_layer_freq == 1) {
    return absl::StrCat("([0]*", m.first_k_dense_layers, "+[1]*",
                        m.num_layers - m.first_k_dense_layers, ")");
  }
  std::string out = "[";
  for (int64_t i = 0; i < m.num_layers; ++i) {
    absl::StrAppend(&out, i > 0 ? "," : "", IsExpertLayer(m, i) ? 1 : 0);
  }
  return out + "]";
}

const char* DispatcherName(MoeTokenDispatcher d) { return ToString(d); }

/// Megatron-Core's default --recompute-modules (the attention core alone).
bool DefaultRecomputeModules(const TrainingSpec& t) {
  return t.recompute_modules == std::vector<RecomputeModule>{RecomputeModule::kCoreAttn};
}

std::string RecomputeModules(const TrainingSpec& t, const char* separator) {
  std::vector<std::string> names;
  for (RecomputeModule r : t.recompute_modules) names.emplace_back(ToString(r));
  return absl::StrJoin(names, separator);
}

std::string OffloadModules(const TrainingSpec& t, const char* separator) {
  std::vector<std::string> names;
  for (OffloadModule m : t.offload_modules) names.emplace_back(ToString(m));
  return absl::StrJoin(names, separator);
}

/// Activation offload exists in Megatron-Core (and NeMo) only: DeepSpeed's cpu_checkpointing
/// and torchtitan's activation checkpointing move full-recompute checkpoints, not module
/// inputs.
absl::Status NoActivationOffload(const ParallelConfig& c, const char* format) {
  if (!c.activation_offload) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "activation_offload has no ", format,
      " form (Megatron-Core's --fine-grained-activation-offloading offloads module inputs; ",
      format, " offloads full-recompute checkpoints only): export megatron or nemo"));
}

/// The mixture-of-experts, MLA and MTP arguments (Megatron-Core's transformer_config.py
/// names), added after the dense ones.
void AddMoeArgs(const JobSpec& spec, const ParallelConfig& c,
                const std::function<void(std::string, std::string)>& add) {
  const ModelSpec& m = spec.model;
  if (m.kv_channels > 0) add("--kv-channels", absl::StrCat(m.kv_channels));
  if (m.attention == AttentionType::kMla) {
    add("--multi-latent-attention", "");
    if (m.q_lora_rank > 0) add("--q-lora-rank", absl::StrCat(m.q_lora_rank));
    add("--kv-lora-rank", absl::StrCat(m.kv_lora_rank));
    add("--qk-head-dim", absl::StrCat(m.qk_head_dim));
    add("--qk-pos-emb-head-dim", absl::StrCat(m.qk_rope_head_dim));
    add("--v-head-dim", absl::StrCat(m.v_head_dim));
  }
  if (m.mtp_layers > 0) add("--mtp-num-layers", absl::StrCat(m.mtp_layers));
  if (m.sliding_window > 0) {
    // Megatron's (left, right) window of a causal model.
    add("--window-size", absl::StrCat(m.sliding_window, ",0"));
    if (m.window_attn_skip_freq > 0) {
      add("--window-attn-skip-freq", absl::StrCat(m.window_attn_skip_freq));
    }
  }
  if (!IsMoe(m)) return;
  add("--num-experts", absl::StrCat(m.num_experts));
  add("--moe-router-topk", absl::StrCat(m.moe_router_topk));
  add("--moe-ffn-hidden-size", absl::StrCat(m.moe_ffn_hidden_size));
  if (m.num_shared_experts > 0) {
    add("--moe-shared-expert-intermediate-size",
        absl::StrCat(m.num_shared_experts * SharedExpertFfn(m)));
  }
  if (m.first_k_dense_layers > 0 || m.moe_layer_freq != 1) {
    add("--moe-layer-freq", MoeLayerFreq(m));
  }
  if (m.moe_router_num_groups > 0) {
    add("--moe-router-num-groups", absl::StrCat(m.moe_router_num_groups));
    add("--moe-router-group-topk", absl::StrCat(m.moe_router_group_topk));
  }
  add("--expert-model-parallel-size", absl::StrCat(c.ep));
  add("--expert-tensor-parallel-size", absl::StrCat(c.etp));
  add("--moe-token-dispatcher-type", DispatcherName(c.moe_token_dispatcher));
  if (c.moe_token_dispatcher == MoeTokenDispatcher::kFlex) {
    add("--moe-flex-dispatcher-backend", "deepep");
  }
  add("--moe-grouped-gemm", "");
  switch (spec.training.moe_routing) {
    case MoeRouting::kBalanced:
      add("--moe-router-force-load-balancing", "");
      break;
    case MoeRouting::kDropless:
      break;
    case MoeRouting::kCapacity:
      add("--moe-expert-capacity-factor", absl::StrCat(spec.training.moe_capacity_factor));
      add("--moe-pad-expert-input-to-capacity", "");
      break;
  }
}

absl::StatusOr<int64_t> LayersPerChunk(const JobSpec& spec, const ParallelConfig& c) {
  const int64_t layers = PipelineSplitLayers(spec, c);
  if (c.pp <= 0 || c.vp <= 0 || layers % (c.pp * c.vp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.split_counts_embedding_and_loss ? "model.num_layers + 2 (" : "model.num_layers (",
        layers, ") must be divisible by pp x vp (", c.pp, " x ", c.vp,
        ") to export the layout"));
  }
  return layers / (c.pp * c.vp);
}

absl::StatusOr<FullRecompute> FullRecomputeOf(const JobSpec& spec, const ParallelConfig& c) {
  auto per_chunk = LayersPerChunk(spec, c);
  if (!per_chunk.ok()) return per_chunk.status();
  const int64_t per_stage = PipelineSplitLayers(spec, c) / c.pp;
  FullRecompute r;
  if (c.recompute_num_layers <= 0 || c.recompute_num_layers >= per_stage) {
    // Every layer: checkpoint each layer's input, recompute it in backward.
    r.method = "uniform";
    r.num_layers = 1;
    return r;
  }
  // Megatron's block method counts layers per model chunk; a stage holds vp chunks.
  r.method = "block";
  r.num_layers = (c.recompute_num_layers + c.vp - 1) / c.vp;
  if (r.num_layers * c.vp != c.recompute_num_layers) {
    r.note = absl::StrCat("recompute_num_layers ", c.recompute_num_layers,
                          " per stage rounded up to ", r.num_layers, " per model chunk x ",
                          c.vp, " chunks");
  }
  return r;
}

int64_t NumNodes(const ClusterSpec& cluster) {
  return (cluster.num_gpus + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
}

std::string YamlBool(bool b) { return b ? "true" : "false"; }

/// HSDP: the replicas of each shard group (1 without a shard group or sharding).
int64_t ShardReplicas(const ParallelConfig& c) {
  if (!c.distributed_optimizer() || c.shard_group_size <= 0) return 1;
  return c.dp * c.cp / c.shard_group_size;
}

const std::string& DisplayName(const JobSpec& spec) {
  return spec.name.empty() ? spec.model.name : spec.name;
}

/// The NeMo 2 / Megatron-Core TransformerConfig keys of the MoE, MLA and MTP settings.
std::string NemoMoeKeys(const JobSpec& spec, const ParallelConfig& c) {
  const ModelSpec& m = spec.model;
  std::string out;
  if (m.kv_channels > 0) absl::StrAppend(&out, "  kv_channels: ", m.kv_channels, "\n");
  if (m.attention == AttentionType::kMla) {
    absl::StrAppend(
        &out, "  multi_latent_attention: true\n",
        "  q_lora_rank: ", m.q_lora_rank > 0 ? absl::StrCat(m.q_lora_rank) : "null", "\n",
        "  kv_lora_rank: ", m.kv_lora_rank, "\n", "  qk_head_dim: ", m.qk_head_dim, "\n",
        "  qk_pos_emb_head_dim: ", m.qk_rope_head_dim, "\n", "  v_head_dim: ", m.v_head_dim, "\n");
  }
  if (m.mtp_layers > 0) absl::StrAppend(&out, "  mtp_num_layers: ", m.mtp_layers, "\n");
  if (m.sliding_window > 0) {
    absl::StrAppend(&out, "  window_size: [", m.sliding_window, ", 0]\n");
    if (m.window_attn_skip_freq > 0) {
      absl::StrAppend(&out, "  window_attn_skip_freq: ", m.window_attn_skip_freq, "\n");
    }
  }
  if (c.split_counts_embedding_and_loss && m.mtp_layers > 0) {
    absl::StrAppend(&out, "  pipeline_model_parallel_layout: \"", PipelineLayout(spec, c), "\"\n");
  }
  if (!IsMoe(m)) return out;
  absl::StrAppend(&out, "  num_moe_experts: ", m.num_experts, "\n",
                  "  moe_router_topk: ", m.moe_router_topk, "\n",
                  "  moe_ffn_hidden_size: ", m.moe_ffn_hidden_size, "\n");
  if (m.num_shared_experts > 0) {
    absl::StrAppend(&out, "  moe_shared_expert_intermediate_size: ",
                    m.num_shared_experts * SharedExpertFfn(m), "\n");
  }
  if (m.first_k_dense_layers > 0 || m.moe_layer_freq != 1) {
    absl::StrAppend(&out, "  moe_layer_freq: \"", MoeLayerFreq(m), "\"\n");
  }
  if (m.moe_router_num_groups > 0) {
    absl::StrAppend(&out, "  moe_router_num_groups: ", m.moe_router_num_groups, "\n",
                    "  moe_router_group_topk: ", m.moe_router_group_topk, "\n");
  }
  absl::StrAppend(&out, "  expert_model_parallel_size: ", c.ep, "\n",
                  "  expert_tensor_parallel_size: ", c.etp, "\n",
                  "  moe_token_dispatcher_type: ", DispatcherName(c.moe_token_dispatcher), "\n",
                  "  moe_grouped_gemm: true\n");
  if (c.moe_token_dispatcher == MoeTokenDispatcher::kFlex) {
    absl::StrAppend(&out, "  moe_flex_dispatcher_backend: deepep\n");
  }
  switch (spec.training.moe_routing) {
    case MoeRouting::kBalanced:
      absl::StrAppend(&out, "  moe_router_force_load_balancing: true\n");
      break;
    case MoeRouting::kDropless:
      break;
    case MoeRouting::kCapacity:
      absl::StrAppend(&out, "  moe_expert_capacity_factor: ", spec.training.moe_capacity_factor,
                      "\n  moe_pad_expert_input_to_capacity: true\n");
      break;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<CommandLineFlag>> MegatronArgs(const JobSpec& spec,
                                                          const ParallelConfig& c) {
  auto per_chunk = LayersPerChunk(spec, c);
  if (!per_chunk.ok()) return per_chunk.status();
  if (c.offload == Offload::kOptimizerAndParams) {
    return absl::InvalidArgumentError(
        "offload optimizer_and_params has no Megatron-LM form (it offloads the optimizer only, "
        "--optimizer-cpu-offload): export deepspeed or torchtitan");
  }
  const ModelSpec& m = spec.model;
  const TrainingSpec& t = spec.training;
  std::vector<CommandLineFlag> args;
  auto add = [&args](std::string flag, std::string value = "") {
    args.emplace_back(std::move(flag), std::move(value));
  };
  add("--tensor-model-parallel-size", absl::StrCat(c.tp));
  add("--pipeline-model-parallel-size", absl::StrCat(c.pp));
  if (c.split_counts_embedding_and_loss && m.mtp_layers > 0) {
    // The account-for flags do not count MTP modules; the layout names every slot.
    add("--pipeline-model-parallel-layout", absl::StrCat("\"", PipelineLayout(spec, c), "\""));
  } else {
    if (c.vp > 1) add("--num-layers-per-virtual-pipeline-stage", absl::StrCat(*per_chunk));
    if (c.split_counts_embedding_and_loss) {
      add("--account-for-embedding-in-pipeline-split");
      add("--account-for-loss-in-pipeline-split");
    }
  }
  add("--context-parallel-size", absl::StrCat(c.cp));
  if (c.sequence_parallel) add("--sequence-parallel");
  add("--micro-batch-size", absl::StrCat(c.micro_batch_size));
  add("--global-batch-size", absl::StrCat(t.global_batch_size));
  if (c.recompute == Recompute::kSelective) {
    add("--recompute-granularity", "selective");
    if (!DefaultRecomputeModules(t)) add("--recompute-modules", RecomputeModules(t, " "));
  } else if (c.recompute == Recompute::kFull) {
    auto full = FullRecomputeOf(spec, c);
    if (!full.ok()) return full.status();
    add("--recompute-granularity", "full");
    add("--recompute-method", full->method);
    add("--recompute-num-layers", absl::StrCat(full->num_layers));
  }
  if (c.distributed_optimizer()) add("--use-distributed-optimizer");
  if (c.offload == Offload::kOptimizer) {
    add("--optimizer-cpu-offload");
    add("--optimizer-offload-fraction", "1.0");
  }
  if (c.activation_offload) {
    add("--fine-grained-activation-offloading");
    add("--offload-modules", OffloadModules(t, " "));
  }
  if (c.data_parallel_sharding == DataParallelSharding::kOptimizerGrads ||
      c.data_parallel_sharding == DataParallelSharding::kFull) {
    // Megatron-FSDP (Megatron-Core 0.14+), which needs the distributed optimizer too and
    // no gradient-accumulation fusion.
    add("--use-megatron-fsdp");
    add("--data-parallel-sharding-strategy", c.data_parallel_sharding == DataParallelSharding::kFull
                                                 ? "optim_grads_params"
                                                 : "optim_grads");
    add("--no-gradient-accumulation-fusion");
  }
  if (const int64_t replicas = ShardReplicas(c); replicas > 1) {
    add("--num-distributed-optimizer-instances", absl::StrCat(replicas));
  }
  // The time model hides all but the last gradient bucket behind the backward pass only
  // when Megatron is told to overlap the reduce; the plan assumes what the export says.
  if (c.overlap_grad_reduce && c.dp * c.cp > 1) add("--overlap-grad-reduce");
  // Megatron takes --overlap-param-gather with the distributed optimizer and the gradient
  // overlap only.
  if (c.overlap_param_gather && c.overlap_grad_reduce && c.distributed_optimizer() &&
      c.dp * c.cp > 1) {
    add("--overlap-param-gather");
  }
  if (c.tp_comm_overlap) add("--tp-comm-overlap");
  if (!c.overlap_p2p_comm && c.pp > 1 && c.vp > 1) add("--no-overlap-p2p-communication");

  add("--num-layers", absl::StrCat(m.num_layers));
  add("--hidden-size", absl::StrCat(m.hidden_size));
  add("--num-attention-heads", absl::StrCat(m.num_attention_heads));
  if (m.num_query_groups != m.num_attention_heads) {
    add("--group-query-attention");
    add("--num-query-groups", absl::StrCat(m.num_query_groups));
  }
  add("--ffn-hidden-size", absl::StrCat(m.ffn_hidden_size));
  add("--seq-length", absl::StrCat(t.seq_length));
  add("--max-position-embeddings",
      absl::StrCat(std::max(m.max_position_embeddings, t.seq_length)));
  if (m.activation == Activation::kSwiglu) add("--swiglu");
  if (m.activation == Activation::kSquaredRelu) add("--squared-relu");
  if (m.activation == Activation::kGeglu) {
    return absl::InvalidArgumentError(
        "model.activation geglu has no Megatron-LM argument (NeMo's activation: fast-geglu "
        "sets it): export nemo");
  }
  if (m.normalization == Normalization::kRmsNorm) add("--normalization", "RMSNorm");
  if (!m.tie_embeddings) add("--untie-embeddings-and-output-weights");
  if (m.position_embedding == PositionEmbedding::kRope) add("--position-embedding-type", "rope");
  switch (t.precision) {
    case Precision::kBf16: add("--bf16"); break;
    case Precision::kFp16: add("--fp16"); break;
    case Precision::kFp8:
      // FP8 GEMMs (Transformer Engine) on top of BF16 mixed precision.
      add("--bf16");
      add("--fp8-format", "hybrid");
      break;
    case Precision::kMxfp8:
      // Block-scaled FP8 (E4M3 data, E8M0 scale per 32 elements) on Blackwell.
      add("--bf16");
      add("--fp8-format", "e4m3");
      add("--fp8-recipe", "mxfp8");
      break;
    case Precision::kNvfp4:
      // NVFP4 GEMMs (E2M1 data, FP8 scale per 16 elements) on Blackwell.
      add("--bf16");
      add("--fp4-format", "e2m1");
      add("--fp4-recipe", "nvfp4");
      break;
    case Precision::kFp32: break;
  }
  if (t.grad_reduce_in_fp32.has_value() && !*t.grad_reduce_in_fp32) add("--grad-reduce-in-bf16");
  if (t.Fp8ParamGather()) add("--fp8-param-gather");
  if (t.optimizer_state_dtype.has_value()) {
    const std::string dtype = ToString(*t.optimizer_state_dtype);
    add("--use-precision-aware-optimizer");
    add("--exp-avg-dtype", dtype);
    add("--exp-avg-sq-dtype", dtype);
  }
  const AttentionKernel kernel = t.AttentionKernelOf();
  if (kernel == AttentionKernel::kCudnn) {
    // Transformer Engine's FusedAttention (cuDNN) backend.
    add("--attention-backend", "fused");
  } else if (IsFlash(kernel)) {
    add("--use-flash-attn");
  } else {
    // Megatron's own DotProductAttention: materialised scores, its fused scale-mask-softmax
    // unless told otherwise.
    add("--attention-backend", "local");
    if (kernel == AttentionKernel::kUnfused) add("--no-masked-softmax-fusion");
  }
  if (!t.dropout) {
    add("--attention-dropout", "0.0");
    add("--hidden-dropout", "0.0");
  }
  AddMoeArgs(spec, c, add);
  return args;
}

absl::StatusOr<std::string> FormatMegatronArgs(const JobSpec& spec, const ParallelConfig& c) {
  auto args = MegatronArgs(spec, c);
  if (!args.ok()) return args.status();
  std::string out = absl::StrCat(
      "# Megatron-LM arguments for ", DisplayName(spec), ": ", c.ToString(), "\n# ",
      spec.cluster.num_gpus, " GPUs = tp ", c.tp, " x pp ", c.pp, " x cp ", c.cp, " x dp ", c.dp,
      IsMoe(spec.model)
          ? absl::StrCat(" (experts: etp ", c.etp, " x ep ", c.ep, " x edp ", c.edp(), ")")
          : "",
      "; launch on ", NumNodes(spec.cluster), " node(s) x ",
      std::min(spec.cluster.gpus_per_node, spec.cluster.num_gpus), " GPUs (torchrun --nnodes ",
      NumNodes(spec.cluster), " --nproc-per-node ",
      std::min(spec.cluster.gpus_per_node, spec.cluster.num_gpus), " pretrain_gpt.py ...)\n");
  if (c.recompute == Recompute::kFull) {
    auto full = FullRecomputeOf(spec, c);
    if (!full.ok()) return full.status();
    if (!full->note.empty()) absl::StrAppend(&out, "# note: ", full->note, "\n");
  }
  for (size_t i = 0; i < args->size(); ++i) {
    const auto& [flag, value] = (*args)[i];
    absl::StrAppend(&out, flag, value.empty() ? "" : " ", value,
                    i + 1 < args->size() ? " \\\n" : "\n");
  }
  return out;
}

absl::StatusOr<std::string> NemoConfigOverride(const JobSpec& spec, const ParallelConfig& c) {
  auto per_chunk = LayersPerChunk(spec, c);
  if (!per_chunk.ok()) return per_chunk.status();
  if (c.offload == Offload::kOptimizerAndParams) {
    return absl::InvalidArgumentError(
        "offload optimizer_and_params has no NeMo (Megatron-Core) form: export deepspeed or "
        "torchtitan");
  }
  const ModelSpec& m = spec.model;
  const TrainingSpec& t = spec.training;
  std::string precision;
  switch (t.precision) {
    case Precision::kBf16:
    case Precision::kFp8:
    case Precision::kMxfp8:
    case Precision::kNvfp4: precision = "bf16-mixed"; break;
    case Precision::kFp16: precision = "16-mixed"; break;
    case Precision::kFp32: precision = "32"; break;
  }
  std::string granularity = "null", method = "null", num_layers = "null", note;
  std::string modules;
  if (c.recompute == Recompute::kSelective) {
    granularity = "selective";
    if (!DefaultRecomputeModules(t)) {
      modules = absl::StrCat("  recompute_modules: [", RecomputeModules(t, ", "), "]\n");
    }
  } else if (c.recompute == Recompute::kFull) {
    auto full = FullRecomputeOf(spec, c);
    if (!full.ok()) return full.status();
    granularity = "full";
    method = full->method;
    num_layers = absl::StrCat(full->num_layers);
    if (!full->note.empty()) note = absl::StrCat("# note: ", full->note, "\n");
  }
  std::string out = absl::StrCat(
      "# NeMo megatron_gpt_config.yaml overrides for ", DisplayName(spec), ": ", c.ToString(),
      "\n", note,
      "trainer:\n",
      "  num_nodes: ", NumNodes(spec.cluster), "\n",
      "  devices: ", std::min(spec.cluster.gpus_per_node, spec.cluster.num_gpus), "\n",
      "  precision: ", precision, "\n",
      "model:\n",
      "  micro_batch_size: ", c.micro_batch_size, "\n",
      "  global_batch_size: ", t.global_batch_size, "\n",
      "  tensor_model_parallel_size: ", c.tp, "\n",
      "  pipeline_model_parallel_size: ", c.pp, "\n",
      "  virtual_pipeline_model_parallel_size: ", c.vp > 1 ? absl::StrCat(c.vp) : "null", "\n",
      "  context_parallel_size: ", c.cp, "\n",
      "  sequence_parallel: ", YamlBool(c.sequence_parallel), "\n",
      "  activations_checkpoint_granularity: ", granularity, "\n",
      "  activations_checkpoint_method: ", method, "\n",
      "  activations_checkpoint_num_layers: ", num_layers, "\n", modules);
  absl::StrAppend(
      &out,
      "  encoder_seq_length: ", t.seq_length, "\n",
      "  max_position_embeddings: ", std::max(m.max_position_embeddings, t.seq_length), "\n",
      "  num_layers: ", m.num_layers, "\n",
      "  hidden_size: ", m.hidden_size, "\n",
      "  ffn_hidden_size: ", m.ffn_hidden_size, "\n",
      "  num_attention_heads: ", m.num_attention_heads, "\n",
      "  num_query_groups: ",
      m.num_query_groups != m.num_attention_heads ? absl::StrCat(m.num_query_groups) : "null",
      "\n",
      "  activation: ",
      m.activation == Activation::kSwiglu       ? "fast-swiglu"
      : m.activation == Activation::kGeglu      ? "fast-geglu"
      : m.activation == Activation::kSquaredRelu ? "squared-relu"
                                                 : "gelu",
      "\n",
      "  normalization: ", m.normalization == Normalization::kRmsNorm ? "rmsnorm" : "layernorm",
      "\n",
      "  position_embedding_type: ",
      m.position_embedding == PositionEmbedding::kRope ? "rope" : "learned_absolute", "\n",
      "  share_embeddings_and_output_weights: ", YamlBool(m.tie_embeddings), "\n",
      "  use_flash_attention: ", YamlBool(IsFlash(t.AttentionKernelOf())), "\n");
  if (t.AttentionKernelOf() == AttentionKernel::kUnfused) {
    absl::StrAppend(&out, "  masked_softmax_fusion: false\n");
  }
  if (c.offload == Offload::kOptimizer) {
    absl::StrAppend(&out, "  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n");
  }
  if (c.activation_offload) {
    absl::StrAppend(&out, "  fine_grained_activation_offloading: true\n  offload_modules: [",
                    OffloadModules(t, ", "), "]\n");
  }
  if (!t.dropout) absl::StrAppend(&out, "  hidden_dropout: 0.0\n  attention_dropout: 0.0\n");
  if (t.precision == Precision::kFp8) absl::StrAppend(&out, "  fp8: true\n  fp8_hybrid: true\n");
  if (t.precision == Precision::kFp8 || t.precision == Precision::kMxfp8) {
    absl::StrAppend(&out, "  fp8_params: ", YamlBool(t.Fp8ParamGather()), "\n");
  }
  if (t.optimizer_state_dtype.has_value()) {
    // Megatron-Core's OptimizerConfig, which NeMo 2.0 and Megatron-Bridge take as the
    // optimizer's config.
    const char* dtype = TorchDtype(*t.optimizer_state_dtype);
    absl::StrAppend(&out,
                    "  # OptimizerConfig(use_precision_aware_optimizer=True, exp_avg_dtype=", dtype,
                    ", exp_avg_sq_dtype=", dtype, ")\n");
  }
  if (t.grad_reduce_in_fp32.has_value()) {
    // NeMo 2.0 sets it on the mixed-precision plugin and the DDP config.
    absl::StrAppend(&out, "  # MegatronMixedPrecision(grad_reduce_in_fp32=",
                    *t.grad_reduce_in_fp32 ? "True" : "False", ")\n");
  }
  // Block-scaled recipes under Megatron-Core's TransformerConfig names (fp8_recipe,
  // fp4, fp4_recipe), which NeMo passes through from the model section.
  if (t.precision == Precision::kMxfp8) {
    absl::StrAppend(&out, "  fp8: true\n  fp8_e4m3: true\n  fp8_recipe: mxfp8\n");
  }
  if (t.precision == Precision::kNvfp4) {
    absl::StrAppend(&out, "  fp4: e2m1\n  fp4_recipe: nvfp4\n");
  }
  absl::StrAppend(&out, NemoMoeKeys(spec, c));
  switch (c.data_parallel_sharding) {
    case DataParallelSharding::kNone:
    case DataParallelSharding::kOptimizer:
      break;
    // NeMo 1.x's PyTorch FSDP: 'grad' shards gradients and optimizer state (ZeRO-2),
    // 'full' everything, 'hybrid' full sharding inside a node, replicated across nodes.
    case DataParallelSharding::kOptimizerGrads:
      absl::StrAppend(&out, "  fsdp: true\n  fsdp_sharding_strategy: grad\n");
      break;
    case DataParallelSharding::kFull:
      absl::StrAppend(&out, "  fsdp: true\n  fsdp_sharding_strategy: ",
                      ShardReplicas(c) > 1 ? "hybrid" : "full", "\n");
      break;
  }
  absl::StrAppend(&out, "  optim:\n    name: ",
                  c.data_parallel_sharding == DataParallelSharding::kOptimizer
                      ? "distributed_fused_adam"
                      : "fused_adam",
                  "\n");
  return out;
}

absl::StatusOr<std::string> DeepSpeedConfig(const JobSpec& spec, const ParallelConfig& c) {
  if (auto s = NoActivationOffload(c, "DeepSpeed"); !s.ok()) return s;
  if (c.cp > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp (", c.cp,
                     ") has no DeepSpeed config form: DeepSpeed runs no ring context "
                     "parallelism (export megatron or torchtitan)"));
  }
  if (c.sequence_parallel) {
    return absl::InvalidArgumentError(
        "sequence_parallel has no DeepSpeed config form (AutoTP does not split the "
        "norms' sequence): export megatron or torchtitan");
  }
  const int stage = static_cast<int>(c.data_parallel_sharding);
  if (c.pp > 1 && stage > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel_sharding ", ToString(c.data_parallel_sharding), " with pp (",
                     c.pp, ") > 1: DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only"));
  }
  const TrainingSpec& t = spec.training;
  nlohmann::ordered_json ds;
  ds["train_batch_size"] = t.global_batch_size;
  ds["train_micro_batch_size_per_gpu"] = c.micro_batch_size;
  ds["gradient_accumulation_steps"] = NumMicroBatches(c, t);
  ds["gradient_clipping"] = 1.0;
  // FP8 and the block-scaled formats are GEMM precisions (Transformer Engine in the model
  // code) on top of BF16 mixed precision, which is all the config says.
  ds["bf16"] = {{"enabled", t.precision != Precision::kFp16 && t.precision != Precision::kFp32}};
  ds["fp16"] = {{"enabled", t.precision == Precision::kFp16}};
  nlohmann::ordered_json zero;
  zero["stage"] = stage;
  zero["overlap_comm"] = c.overlap_grad_reduce;
  zero["contiguous_gradients"] = true;
  zero["reduce_scatter"] = true;
  zero["reduce_bucket_size"] = 40000000;
  zero["allgather_bucket_size"] = 40000000;
  if (c.data_parallel_sharding == DataParallelSharding::kFull) {
    zero["stage3_prefetch_bucket_size"] = 40000000;
    zero["stage3_param_persistence_threshold"] = 100000;
  }
  if (ShardReplicas(c) > 1) {
    if (c.data_parallel_sharding == DataParallelSharding::kFull) {
      zero["zero_hpz_partition_size"] = c.shard_group_size;
    } else {
      zero["mics_shard_size"] = c.shard_group_size;
    }
  }
  if (c.offload != Offload::kNone) {
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  if (c.offload == Offload::kOptimizerAndParams) {
    zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  ds["zero_optimization"] = zero;
  if (c.tp > 1) ds["tensor_parallel"] = {{"autotp_size", c.tp}};
  if (c.pp > 1) ds["pipeline"] = {{"stages", c.pp}, {"partition", "parameters"}};
  if (c.recompute != Recompute::kNone) {
    ds["activation_checkpointing"] = {
        {"partition_activations", c.tp > 1},
        {"contiguous_memory_optimization", false},
        {"cpu_checkpointing", false},
        {"number_checkpoints",
         c.recompute_num_layers > 0 ? c.recompute_num_layers : spec.model.num_layers / c.pp}};
  }
  ds["wall_clock_breakdown"] = false;
  return ds.dump(2) + "\n";
}

// How a codebase names the modules of its pipeline stages.
struct StageModuleNames {
  const char* layer_prefix;        ///< "layers." → "layers.0", "layers.1", ...
  std::vector<std::string> first;  ///< Before the first stage's layers (the embedding).
  std::vector<std::string> last;   ///< After the last stage's layers (norm, head).
  std::vector<std::string> every;  ///< At the end of every stage.
};

// The modules of each of the p*v virtual stages in stage order, the layers as the layout
// splits them (DecoderLayersInChunk).
std::vector<std::vector<std::string>> StageModules(const JobSpec& spec, const ParallelConfig& c,
                                                   const StageModuleNames& names) {
  const int64_t stages = c.pp * c.vp;
  std::vector<std::vector<std::string>> out;
  int64_t layer = 0;
  for (int64_t k = 0; k < stages; ++k) {
    std::vector<std::string> part = k == 0 ? names.first : std::vector<std::string>{};
    const int64_t n = DecoderLayersInChunk(spec.model, c, k % c.pp, k / c.pp);
    for (int64_t i = 0; i < n; ++i) part.push_back(absl::StrCat(names.layer_prefix, layer++));
    if (k == stages - 1) part.insert(part.end(), names.last.begin(), names.last.end());
    part.insert(part.end(), names.every.begin(), names.every.end());
    out.push_back(std::move(part));
  }
  return out;
}

// The items per stage of a split that gives ceil(items / per) stages with the first
// (items mod stages) one item heavier, where some value gives `stages`; 0 where none does.
int64_t ItemsPerStageGiving(int64_t items, int64_t stages) {
  const int64_t per = (items + stages - 1) / stages;
  return (items + per - 1) / per == stages ? per : 0;
}

// torchtitan's virtual stages beyond its default of two per rank. Its split
// (generate_llm_fqn_per_model_part, first/last_stage_less_layers 1) depends only on the
// number of stages, ceil((L + 2) / pipeline_parallel_layers_per_stage); where no
// layers-per-stage value gives p*v stages (or the layout's split is not torchtitan's), the
// stages are listed module by module.
std::string TorchtitanVirtualStages(const JobSpec& spec, const ParallelConfig& c) {
  const int64_t per = ItemsPerStageGiving(spec.model.num_layers + 2, c.pp * c.vp);
  if (c.split_counts_embedding_and_loss && per > 0) {
    return absl::StrCat("pipeline_parallel_layers_per_stage = ", per, "\n");
  }
  std::string out = "module_fqns_per_model_part = [";
  const std::vector<std::vector<std::string>> parts =
      StageModules(spec, c, {"layers.", {"tok_embeddings"}, {"norm", "output"}, {}});
  for (size_t k = 0; k < parts.size(); ++k) {
    std::vector<std::string> quoted;
    for (const std::string& name : parts[k]) quoted.push_back(absl::StrCat("\"", name, "\""));
    absl::StrAppend(&out, k > 0 ? ", [" : "[", absl::StrJoin(quoted, ", "), "]");
  }
  return out + "]\n";
}

absl::StatusOr<std::string> TorchtitanConfig(const JobSpec& spec, const ParallelConfig& c) {
  if (spec.training.precision == Precision::kNvfp4) {
    return absl::InvalidArgumentError(
        "training.precision nvfp4 has no torchtitan form (export megatron or nemo)");
  }
  std::string reshard;
  switch (c.data_parallel_sharding) {
    case DataParallelSharding::kNone:
      break;
    case DataParallelSharding::kOptimizer:
      // Under its pipeline FSDP2 keeps the gathered parameters and defers the gradient
      // sync: "default" does not reshard with PP.
      if (c.pp > 1) {
        reshard = "default";
        break;
      }
      return absl::InvalidArgumentError(
          "data_parallel_sharding optimizer (ZeRO-1 alone) has no torchtitan form without a "
          "pipeline: torchtitan shards with FSDP2 (use optimizer_grads or full, or export "
          "megatron)");
    case DataParallelSharding::kOptimizerGrads:
      reshard = "never";
      break;
    case DataParallelSharding::kFull:
      reshard = "default";
      break;
  }
  const int64_t group = c.dp * c.cp;
  int64_t shard = 1, replicate = c.dp;
  if (c.data_parallel_sharding != DataParallelSharding::kNone) {
    const int64_t ranks = c.ShardRanks();
    if (ranks % c.cp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_group_size (", ranks, ") must be a multiple of cp (", c.cp,
                       ") for torchtitan, whose FSDP mesh is data_parallel_shard_degree x cp"));
    }
    shard = ranks / c.cp;
    replicate = group / ranks;
  }
  if (auto s = NoActivationOffload(c, "torchtitan"); !s.ok()) return s;
  if (c.offload == Offload::kOptimizer) {
    return absl::InvalidArgumentError(
        "offload optimizer has no torchtitan form (FSDP2's CPU offload moves the parameters "
        "too: use offload optimizer_and_params with full sharding, or export megatron or "
        "deepspeed)");
  }
  const ModelSpec& m = spec.model;
  const TrainingSpec& t = spec.training;
  std::string ac = "none";
  if (c.recompute == Recompute::kSelective) ac = "selective";
  if (c.recompute == Recompute::kFull) ac = "full";
  std::string out = absl::StrCat(
      "# torchtitan job config for ", DisplayName(spec), ": ", c.ToString(), "\n",
      "# model: ", m.num_layers, " layers, hidden ", m.hidden_size, ", ", m.num_attention_heads,
      " heads (", m.num_query_groups, " KV), FFN ", m.ffn_hidden_size, ", vocab ", m.vocab_size,
      ": pick or add the matching [model] flavor\n", "# launch: torchrun --nnodes ",
      NumNodes(spec.cluster), " --nproc-per-node ",
      std::min(spec.cluster.gpus_per_node, spec.cluster.num_gpus),
      " -m torchtitan.train --job.config_file this.toml\n\n", "[job]\n", "description = \"",
      DisplayName(spec), "\"\n\n", "[training]\n", "seq_len = ", t.seq_length, "\n",
      "global_batch_size = ", t.global_batch_size, "\n",
      // Per DP rank and step; gradient accumulation makes up the rest without PP.
      "local_batch_size = ", c.pp > 1 ? t.global_batch_size / c.dp : c.micro_batch_size, "\n",
      "mixed_precision_param = \"",
      t.precision == Precision::kFp32   ? "float32"
      : t.precision == Precision::kFp16 ? "float16"
                                        : "bfloat16",
      "\"\n", "mixed_precision_reduce = \"float32\"\n",
      // FSDP2's CPUOffloadPolicy: parameter, gradient and optimizer shards on the host.
      c.offload == Offload::kOptimizerAndParams ? "enable_cpu_offload = true\n" : "",
      "\n[parallelism]\n",
      "data_parallel_replicate_degree = ", replicate, "\n", "data_parallel_shard_degree = ", shard,
      "\n");
  if (!reshard.empty()) {
    absl::StrAppend(&out, "fsdp_reshard_after_forward = \"", reshard, "\"\n");
  }
  absl::StrAppend(&out, "tensor_parallel_degree = ", c.tp, "\n",
                  "enable_async_tensor_parallel = ", YamlBool(c.tp_comm_overlap), "\n",
                  "context_parallel_degree = ", c.cp, "\n", "pipeline_parallel_degree = ", c.pp,
                  "\n");
  if (IsMoe(m)) {
    // torchtitan folds EP out of the FSDP and TP ranks (dp_shard·cp·tp = efsdp·ep), as the
    // layout does.
    absl::StrAppend(&out, "expert_parallel_degree = ", c.ep, "\n",
                    "expert_tensor_parallel_degree = ", c.etp, "\n");
    // The flex dispatcher is torchtitan's DeepEP backend (HybridEP on NVLink racks);
    // neither runs with expert tensor parallelism, and there is no all-gather dispatcher.
    if (c.moe_token_dispatcher == MoeTokenDispatcher::kFlex) {
      absl::StrAppend(&out, "expert_parallel_comm_backend = \"",
                      spec.cluster.NvlinkDomain() > 8 ? "hybridep" : "deepep", "\"\n");
      if (c.etp > 1) {
        absl::StrAppend(&out,
                        "# note: torchtitan's DeepEP and HybridEP backends run with "
                        "expert_tensor_parallel_degree 1 only\n");
      }
    } else if (c.moe_token_dispatcher == MoeTokenDispatcher::kAllGather) {
      absl::StrAppend(&out,
                      "# note: the layout was scored with the allgather token dispatcher; "
                      "torchtitan's experts exchange tokens by all-to-all\n");
    }
  }
  if (c.pp > 1) {
    absl::StrAppend(&out, "pipeline_parallel_schedule = \"", c.vp > 1 ? "Interleaved1F1B" : "1F1B",
                    "\"\n", "pipeline_parallel_microbatch_size = ", c.micro_batch_size, "\n");
    if (c.vp > 2) absl::StrAppend(&out, TorchtitanVirtualStages(spec, c));
  }
  absl::StrAppend(&out, "\n[activation_checkpoint]\n", "mode = \"", ac, "\"\n");
  if (c.recompute == Recompute::kSelective) {
    absl::StrAppend(&out, "selective_ac_option = \"op\"\n");
    if (!DefaultRecomputeModules(t)) {
      absl::StrAppend(&out, "# note: torchtitan's op-level selective checkpointing has no module ",
                      "list; the layout was scored recomputing ", RecomputeModules(t, ", "), "\n");
    }
  }
  if (t.precision == Precision::kFp8) {
    absl::StrAppend(&out, "\n[model]\n", "converters = [\"float8\"]\n");
  }
  if (t.precision == Precision::kMxfp8) {
    absl::StrAppend(&out, "\n[model]\n", "converters = [\"mx\"]\n\n[mx]\n",
                    "recipe_name = \"mxfp8\"\n");
  }
  return out;
}

// NeMo AutoModel's pipeline stages module by module, as its default split names them for
// Hugging Face-style models (generate_hf_model_fqn_per_model_part): the embedding first,
// the norm and the head last, the rotary embedding in every stage.
std::string AutomodelStageModules(const JobSpec& spec, const ParallelConfig& c) {
  std::string out = "    module_fqns_per_model_part:\n";
  for (const std::vector<std::string>& part : StageModules(spec, c,
                                                           {"model.layers.",
                                                            {"model.embed_tokens"},
                                                            {"model.norm", "lm_head"},
                                                            {"model.rotary_emb"}})) {
    absl::StrAppend(&out, "      - [", absl::StrJoin(part, ", "), "]\n");
  }
  return out;
}

absl::StatusOr<std::string> AutomodelConfig(const JobSpec& spec, const ParallelConfig& c) {
  const TrainingSpec& t = spec.training;
  if (t.precision != Precision::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.precision ", ToString(t.precision),
        " has no NeMo AutoModel form here: its models train in bf16 (export megatron or "
        "torchtitan)"));
  }
  if (c.data_parallel_sharding == DataParallelSharding::kOptimizerGrads) {
    return absl::InvalidArgumentError(
        "data_parallel_sharding optimizer_grads has no NeMo AutoModel form: its FSDP2 keeps "
        "the parameters gathered only with the gradients unsharded (use optimizer, full or "
        "none, or export megatron, deepspeed or torchtitan)");
  }
  if (c.offload != Offload::kNone) {
    return absl::InvalidArgumentError(
        "offload has no NeMo AutoModel form here (export megatron, deepspeed or torchtitan)");
  }
  if (auto s = NoActivationOffload(c, "automodel"); !s.ok()) return s;
  const ModelSpec& m = spec.model;
  // FSDP2 either way: kept gathered and synced once per step (optimizer) or resharded and
  // synced every micro-batch (full).
  const bool fsdp = c.data_parallel_sharding != DataParallelSharding::kNone;
  const bool keep_gathered = c.data_parallel_sharding == DataParallelSharding::kOptimizer;
  // Sequences per data-parallel rank and step: one pipeline flush of them all under PP,
  // one micro-batch per pass (gradient accumulation makes up the rest) without.
  const int64_t local_batch = c.pp > 1 ? t.global_batch_size / c.dp : c.micro_batch_size;
  std::string out = absl::StrCat(
      "# NeMo AutoModel recipe keys for ", DisplayName(spec), ": ", c.ToString(), "\n",
      "# merge into the recipe's YAML (model, dataset and optimizer as the recipe has them);\n",
      "# launch: automodel <recipe>.yaml --nproc-per-node ",
      std::min(spec.cluster.gpus_per_node, spec.cluster.num_gpus), " on ", NumNodes(spec.cluster),
      " node(s)\n", "step_scheduler:\n", "  global_batch_size: ", t.global_batch_size, "\n",
      "  local_batch_size: ", local_batch, "\n", "distributed:\n",
      "  strategy: ", fsdp ? "fsdp2" : "ddp", "\n", "  tp_size: ", c.tp, "\n", "  cp_size: ", c.cp,
      "\n", "  pp_size: ", c.pp, "\n", "  ep_size: ", IsMoe(m) ? c.ep : 1, "\n",
      "  sequence_parallel: ", YamlBool(c.sequence_parallel), "\n", "  activation_checkpointing: ",
      c.recompute == Recompute::kFull        ? "true"
      : c.recompute == Recompute::kSelective ? "selective"
                                             : "false",
      "\n");
  if (fsdp) {
    absl::StrAppend(&out, "  reshard_after_forward: ", YamlBool(!keep_gathered), "\n",
                    "  defer_fsdp_grad_sync: ", YamlBool(keep_gathered), "\n");
  }
  if (c.tp_comm_overlap) absl::StrAppend(&out, "  enable_async_tensor_parallel: true\n");
  if (fsdp && c.ShardRanks() < c.dp * c.cp) {
    absl::StrAppend(&out, "  # note: the layout shards over groups of ", c.ShardRanks(),
                    " ranks and replicates across ", c.dp * c.cp / c.ShardRanks(),
                    " (HSDP): set the FSDP2 mesh's dp_replicate dimension to match\n");
  }
  if (c.pp > 1) {
    absl::StrAppend(&out, "  pipeline:\n",
                    "    pp_schedule: ", c.vp > 1 ? "interleaved1f1b" : "1f1b", "\n",
                    "    pp_microbatch_size: ", c.micro_batch_size, "\n");
    // ceil(L / layers_per_stage) virtual stages, the first L mod stages one layer more:
    // the layout's split wherever some value gives p*v stages.
    const int64_t per = ItemsPerStageGiving(m.num_layers, c.pp * c.vp);
    if (!c.split_counts_embedding_and_loss && per > 0) {
      absl::StrAppend(&out, "    layers_per_stage: ", per, "\n");
    } else {
      absl::StrAppend(&out, AutomodelStageModules(spec, c));
    }
  }
  if (IsMoe(m)) {
    // DeepEP's experts run grouped_gemm's kernels; the all-gather experts torch._grouped_mm.
    const bool deepep = c.moe_token_dispatcher == MoeTokenDispatcher::kFlex;
    absl::StrAppend(&out, "model:\n  backend:\n    experts: ", deepep ? "gmm" : "torch_mm",
                    "\n    dispatcher: ", deepep ? "deepep" : "torch",
                    "\n    fake_balanced_gate: ", YamlBool(t.moe_routing == MoeRouting::kBalanced),
                    "\n");
    if (!keep_gathered && fsdp) {
      absl::StrAppend(&out,
                      "# note: the layout reshards after the forward; set the MoE parallelizer's "
                      "reshard_after_forward to true as well (its default keeps the parameters "
                      "gathered)\n");
    }
    if (c.etp > 1) {
      absl::StrAppend(&out, "# note: the layout was scored with expert tensor parallelism (etp ",
                      c.etp, "); NeMo AutoModel's experts run with ep_size alone\n");
    }
    if (c.moe_token_dispatcher == MoeTokenDispatcher::kAllToAll && c.ep * c.etp > 1) {
      absl::StrAppend(&out,
                      "# note: the layout was scored with the alltoall token dispatcher; "
                      "NeMo AutoModel's torch dispatcher all-gathers the tokens (deepep is "
                      "its fused dispatch)\n");
    }
  }
  return out;
}

const std::vector<TrainingExporter>& TrainingExporters() {
  static const std::vector<TrainingExporter> kExporters = {
      {"megatron", "-megatron.txt", "text/plain; charset=utf-8", &FormatMegatronArgs},
      {"nemo", "-nemo.yaml", "application/yaml; charset=utf-8", &NemoConfigOverride},
      {"deepspeed", "-deepspeed.json", "application/json; charset=utf-8", &DeepSpeedConfig},
      {"torchtitan", "-torchtitan.toml", "application/toml; charset=utf-8", &TorchtitanConfig},
      {"automodel", "-automodel.yaml", "application/yaml; charset=utf-8", &AutomodelConfig}};
  return kExporters;
}

std::string TrainingExportFormatList(absl::string_view more) {
  std::vector<std::string> names;
  for (const TrainingExporter& e : TrainingExporters()) names.emplace_back(e.format);
  if (!more.empty()) names.emplace_back(more);
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

const TrainingExporter* FindTrainingExporter(absl::string_view format) {
  for (const TrainingExporter& e : TrainingExporters()) {
    if (format == e.format) return &e;
  }
  return nullptr;
}

}  // namespace paratune
