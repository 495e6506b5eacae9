// The job spec's JSON form: the strict reader and the canonical writer (see spec_io.h).
#include "search/spec_io.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/framework_profile.h"
#include "search/hf_import.h"
#include "search/parallel_config.h"
#include "search/presets.h"
#include "search/spec_fields.h"

namespace paratune {
namespace {

using nlohmann::json;

// ---- Reading ----------------------------------------------------------------------------

std::string Shown(const json& v) { return JsonPreview(v); }

absl::Status ReadInt(const json& obj, const std::string& section, const std::string& key,
                     int64_t* out, bool* given = nullptr) {
  return ReadSpecField(obj, section, key, &SpecInt, out, given);
}
absl::Status ReadBool(const json& obj, const std::string& section, const std::string& key,
                      bool* out) {
  return ReadSpecField(obj, section, key, &SpecBool, out);
}
absl::Status ReadDouble(const json& obj, const std::string& section, const std::string& key,
                        double* out) {
  return ReadSpecField(obj, section, key, &SpecDouble, out);
}

absl::StatusOr<Recompute> AsRecompute(const json& v, const std::string& path) {
  return SpecEnum(v, path, &ParseRecompute);
}

absl::StatusOr<RecomputeModule> AsRecomputeModule(const json& v, const std::string& path) {
  return SpecEnum(v, path, &ParseRecomputeModule);
}

/// Megatron-Core's recompute modules, each named once.
constexpr size_t kMaxRecomputeModules = 7;

absl::StatusOr<OffloadModule> AsOffloadModule(const json& v, const std::string& path) {
  return SpecEnum(v, path, &ParseOffloadModule);
}

/// Megatron-Core's offload modules, each named once.
constexpr size_t kMaxOffloadModules = 7;

absl::StatusOr<Offload> AsOffload(const json& v, const std::string& path) {
  return SpecEnum(v, path, &ParseOffload);
}

absl::StatusOr<MoeTokenDispatcher> AsDispatcher(const json& v, const std::string& path) {
  return SpecEnum(v, path, &ParseMoeTokenDispatcher);
}

absl::StatusOr<DataParallelSharding> AsDataParallelSharding(const json& v,
                                                            const std::string& path) {
  return SpecEnum(v, path, &ParseDataParallelSharding);
}

absl::Status Required(bool given, const std::string& path, const char* what) {
  if (given) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, " is required (", what, ")"));
}

// The mixture-of-experts and attention fields of `model` (0 = the proto's default: dense,
// moe_layer_freq 1; attention "" = from num_query_groups).
absl::Status ReadMoeAndAttention(const json& obj, ModelSpec* m, bool* attention_given) {
  const std::string sec = "model";
  const std::pair<const char*, int64_t*> ints[] = {
      {"kv_channels", &m->kv_channels},
      {"num_experts", &m->num_experts},
      {"moe_router_topk", &m->moe_router_topk},
      {"moe_ffn_hidden_size", &m->moe_ffn_hidden_size},
      {"num_shared_experts", &m->num_shared_experts},
      {"shared_expert_ffn_hidden_size", &m->shared_expert_ffn_hidden_size},
      {"first_k_dense_layers", &m->first_k_dense_layers},
      {"moe_layer_freq", &m->moe_layer_freq},
      {"moe_router_num_groups", &m->moe_router_num_groups},
      {"moe_router_group_topk", &m->moe_router_group_topk},
      {"q_lora_rank", &m->q_lora_rank},
      {"kv_lora_rank", &m->kv_lora_rank},
      {"qk_head_dim", &m->qk_head_dim},
      {"qk_rope_head_dim", &m->qk_rope_head_dim},
      {"v_head_dim", &m->v_head_dim},
      {"mtp_layers", &m->mtp_layers},
      {"sliding_window", &m->sliding_window},
      {"window_attn_skip_freq", &m->window_attn_skip_freq}};
  for (const auto& [key, out] : ints) {
    if (auto s = ReadInt(obj, sec, key, out); !s.ok()) return s;
  }
  // Turning a preset's or config's window off turns off which layers skip it, unless the
  // spec names both.
  if (m->sliding_window == 0 && FindSpecField(obj, "sliding_window") != nullptr &&
      FindSpecField(obj, "window_attn_skip_freq") == nullptr) {
    m->window_attn_skip_freq = 0;
  }
  if (m->num_experts == 0) m->num_experts = 1;        // proto: 0 or 1 = dense
  if (m->moe_layer_freq == 0) m->moe_layer_freq = 1;  // proto: default 1
  const json* v = FindSpecField(obj, "attention");
  *attention_given = v != nullptr && v->is_string() && !v->get<std::string>().empty();
  return ReadSpecEnum(obj, sec, "attention", ParseAttentionType, &m->attention);
}

// `positions_given`: whether the spec itself names model.max_position_embeddings (not only
// its preset or Hugging Face config).
absl::Status ReadModel(const json& obj, ModelSpec* m, bool* positions_given) {
  const std::string sec = "model";
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model must be an object (mapping), got ", Shown(obj)));
  }
  if (auto s = CheckSpecKeys(obj, sec,
                             {"preset",
                              "hf_config",
                              "hf_config_json",
                              "name",
                              "num_layers",
                              "hidden_size",
                              "num_attention_heads",
                              "num_query_groups",
                              "ffn_hidden_size",
                              "vocab_size",
                              "activation",
                              "normalization",
                              "tie_embeddings",
                              "position_embedding",
                              "max_position_embeddings",
                              "kv_channels",
                              "attention",
                              "num_experts",
                              "moe_router_topk",
                              "moe_ffn_hidden_size",
                              "num_shared_experts",
                              "shared_expert_ffn_hidden_size",
                              "first_k_dense_layers",
                              "moe_layer_freq",
                              "moe_router_num_groups",
                              "moe_router_group_topk",
                              "q_lora_rank",
                              "kv_lora_rank",
                              "qk_head_dim",
                              "qk_rope_head_dim",
                              "v_head_dim",
                              "mtp_layers",
                              "sliding_window",
                              "window_attn_skip_freq"});
      !s.ok()) {
    return s;
  }

  std::string preset;
  if (const json* v = FindSpecField(obj, "preset")) {
    auto s = SpecString(*v, "model.preset");
    if (!s.ok()) return s.status();
    preset = *s;
  }
  const json* hf_text = FindSpecField(obj, "hf_config_json");
  const json* hf_object = FindSpecField(obj, "hf_config");
  if (hf_object != nullptr && hf_object->is_string()) {
    return absl::InvalidArgumentError(
        "model.hf_config names a file, which only a spec file read by the CLI may do; send "
        "the file's contents in model.hf_config_json");
  }
  if (hf_text != nullptr && hf_object != nullptr) {
    return absl::InvalidArgumentError(
        "model.hf_config and model.hf_config_json are mutually exclusive");
  }
  const bool has_hf = hf_text != nullptr || hf_object != nullptr;
  if (!preset.empty() && has_hf) {
    return absl::InvalidArgumentError(
        "model.preset and model.hf_config are mutually exclusive: give one of them");
  }

  const bool has_base = !preset.empty() || has_hf;
  if (!preset.empty()) {
    auto p = FindPreset(preset);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("model.preset: ", p.status().message()));
    }
    *m = *p;
    if (m->name.empty()) m->name = preset;
  } else if (has_hf) {
    absl::StatusOr<ModelSpec> hf;
    if (hf_text != nullptr) {
      auto text = SpecString(*hf_text, "model.hf_config_json");
      if (!text.ok()) return text.status();
      hf = ModelSpecFromHfConfigText(*text);
    } else {
      hf = ModelSpecFromHfConfig(*hf_object);
    }
    if (!hf.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("model.", hf.status().message()));
    }
    *m = *hf;
  }

  if (const json* v = FindSpecField(obj, "name")) {
    auto s = SpecString(*v, "model.name");
    if (!s.ok()) return s.status();
    if (!s->empty()) m->name = *s;
  }
  bool layers = false, hidden = false, heads = false, groups = false, ffn = false,
       vocab = false;
  if (auto s = ReadInt(obj, sec, "num_layers", &m->num_layers, &layers); !s.ok()) return s;
  if (auto s = ReadInt(obj, sec, "hidden_size", &m->hidden_size, &hidden); !s.ok()) return s;
  if (auto s = ReadInt(obj, sec, "num_attention_heads", &m->num_attention_heads, &heads);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadInt(obj, sec, "num_query_groups", &m->num_query_groups, &groups); !s.ok()) {
    return s;
  }
  if (auto s = ReadInt(obj, sec, "ffn_hidden_size", &m->ffn_hidden_size, &ffn); !s.ok()) {
    return s;
  }
  if (auto s = ReadInt(obj, sec, "vocab_size", &m->vocab_size, &vocab); !s.ok()) return s;
  if (auto s = ReadSpecEnum(obj, sec, "activation", ParseActivation, &m->activation); !s.ok()) {
    return s;
  }
  if (auto s = ReadSpecEnum(obj, sec, "normalization", ParseNormalization, &m->normalization);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadBool(obj, sec, "tie_embeddings", &m->tie_embeddings); !s.ok()) return s;
  if (auto s = ReadSpecEnum(obj, sec, "position_embedding", ParsePositionEmbedding,
                            &m->position_embedding);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadInt(obj, sec, "max_position_embeddings", &m->max_position_embeddings,
                      positions_given);
      !s.ok()) {
    return s;
  }
  bool attention_given = false;
  if (auto s = ReadMoeAndAttention(obj, m, &attention_given); !s.ok()) return s;

  if (!has_base) {
    const char* why = "or give model.preset or model.hf_config";
    if (auto s = Required(layers, "model.num_layers", why); !s.ok()) return s;
    if (auto s = Required(hidden, "model.hidden_size", why); !s.ok()) return s;
    if (auto s = Required(heads, "model.num_attention_heads", why); !s.ok()) return s;
    if (auto s = Required(vocab, "model.vocab_size", why); !s.ok()) return s;
    if (m->name.empty()) m->name = "custom";
  }
  // Zero means the documented default (spec.proto).
  if ((!has_base && !groups) || (groups && m->num_query_groups == 0) ||
      (attention_given && !groups && m->attention == AttentionType::kMla)) {
    m->num_query_groups = m->num_attention_heads;
  }
  if (groups && m->num_query_groups != m->num_attention_heads && attention_given &&
      m->attention == AttentionType::kMha) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.attention mha needs model.num_query_groups (", m->num_query_groups,
                     ") equal to model.num_attention_heads (", m->num_attention_heads,
                     "); use gqa for grouped-query attention"));
  }
  if (m->attention != AttentionType::kMla) {
    // Not given, or mha/gqa: what num_query_groups says.
    m->attention =
        m->num_query_groups == m->num_attention_heads ? AttentionType::kMha : AttentionType::kGqa;
  }

  if ((!has_base && !ffn) || (ffn && m->ffn_hidden_size == 0)) {
    // Checked against the hidden_size limit first so that 4h cannot overflow.
    if (m->num_experts > 1 && m->moe_ffn_hidden_size > 0) {
      // An MoE model's dense layers (if any) default to the expert width.
      m->ffn_hidden_size = m->moe_ffn_hidden_size;
    } else if (m->hidden_size > 0 && m->hidden_size <= (int64_t{1} << 40)) {
      m->ffn_hidden_size = 4 * m->hidden_size;
    }
  }
  return absl::OkStatus();
}

// Adam's moment dtypes that Megatron-Core's precision-aware optimizer takes.
absl::StatusOr<Precision> ParseOptimizerStateDtype(absl::string_view name) {
  absl::StatusOr<Precision> p = ParsePrecision(name);
  if (!p.ok() || !IsOptimizerStateDtype(*p)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown optimizer state dtype '", name,
                                                   "' (expected fp32, bf16, fp16 or fp8)"));
  }
  return *p;
}

absl::Status ReadTraining(const json& obj, TrainingSpec* t) {
  const std::string sec = "training";
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training must be an object (mapping), got ", Shown(obj)));
  }
  if (auto s = CheckSpecKeys(
          obj, sec,
          {"seq_length", "global_batch_size", "precision", "flash_attention", "dropout",
           "optimizer", "total_tokens", "moe_routing", "moe_capacity_factor", "recompute_modules",
           "attention_kernel", "fused_norm", "framework", "offload_modules", "grad_reduce_in_fp32",
           "fp8_param_gather", "optimizer_state_dtype"});
      !s.ok()) {
    return s;
  }
  bool seq = false, batch = false;
  if (auto s = ReadInt(obj, sec, "seq_length", &t->seq_length, &seq); !s.ok()) return s;
  if (auto s = ReadInt(obj, sec, "global_batch_size", &t->global_batch_size, &batch); !s.ok()) {
    return s;
  }
  if (auto s = ReadSpecEnum(obj, sec, "precision", ParsePrecision, &t->precision); !s.ok())
    return s;
  bool flash_given = false;
  if (auto s = ReadBool(obj, sec, "flash_attention", &t->flash_attention); !s.ok()) return s;
  flash_given = FindSpecField(obj, "flash_attention") != nullptr;
  if (FindSpecField(obj, "attention_kernel") != nullptr) {
    if (auto s =
            ReadSpecEnum(obj, sec, "attention_kernel", ParseAttentionKernel, &t->attention_kernel);
        !s.ok()) {
      return s;
    }
    if (flash_given && t->flash_attention != IsFlash(t->attention_kernel)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.flash_attention (", t->flash_attention ? "true" : "false",
          ") contradicts training.attention_kernel (", ToString(t->attention_kernel),
          "): give one of them"));
    }
    t->flash_attention = IsFlash(t->attention_kernel);
  } else if (!t->flash_attention) {
    t->attention_kernel = AttentionKernel::kFused;
  }
  if (auto s = ReadBool(obj, sec, "fused_norm", &t->fused_norm); !s.ok()) return s;
  if (FindSpecField(obj, "grad_reduce_in_fp32") != nullptr) {
    bool fp32 = true;
    if (auto s = ReadBool(obj, sec, "grad_reduce_in_fp32", &fp32); !s.ok()) return s;
    t->grad_reduce_in_fp32 = fp32;
  }
  if (FindSpecField(obj, "fp8_param_gather") != nullptr) {
    bool fp8 = false;
    if (auto s = ReadBool(obj, sec, "fp8_param_gather", &fp8); !s.ok()) return s;
    t->fp8_param_gather = fp8;
  }
  if (const json* v = FindSpecField(obj, "optimizer_state_dtype");
      v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
    auto dtype = SpecEnum(*v, "training.optimizer_state_dtype", ParseOptimizerStateDtype);
    if (!dtype.ok()) return dtype.status();
    t->optimizer_state_dtype = *dtype;
  }
  if (auto s = ReadSpecEnum(obj, sec, "framework", ParseFramework, &t->framework); !s.ok())
    return s;
  if (auto s = ReadBool(obj, sec, "dropout", &t->dropout); !s.ok()) return s;
  if (const json* v = FindSpecField(obj, "optimizer")) {
    auto s = SpecString(*v, "training.optimizer");
    if (!s.ok()) return s.status();
    if (!s->empty() && *s != "adam" && *s != "adamw") {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.optimizer ('", *s, "') is not supported: only adam is modelled"));
    }
  }
  if (auto s = ReadInt(obj, sec, "total_tokens", &t->total_tokens); !s.ok()) return s;
  if (auto s = ReadSpecEnum(obj, sec, "moe_routing", ParseMoeRouting, &t->moe_routing); !s.ok()) {
    return s;
  }
  if (auto s = ReadDouble(obj, sec, "moe_capacity_factor", &t->moe_capacity_factor); !s.ok()) {
    return s;
  }
  if (const json* v = FindSpecField(obj, "recompute_modules");
      v != nullptr && v->is_array() && v->size() > kMaxRecomputeModules) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.recompute_modules has ", v->size(), " entries; at most ",
                     kMaxRecomputeModules, " (each module once)"));
  }
  if (auto s =
          ReadSpecList(obj, sec, "recompute_modules", AsRecomputeModule, &t->recompute_modules);
      !s.ok()) {
    return s;
  }
  if (t->recompute_modules.empty()) {
    return absl::InvalidArgumentError(
        "training.recompute_modules must name at least one module (core_attn, layernorm, mlp, "
        "moe_act, moe, shared_experts, mla_up_proj); to recompute nothing, set "
        "search.recompute: [none]");
  }
  if (const json* v = FindSpecField(obj, "offload_modules");
      v != nullptr && v->is_array() && v->size() > kMaxOffloadModules) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.offload_modules has ", v->size(), " entries; at most ",
                     kMaxOffloadModules, " (each module once)"));
  }
  if (auto s = ReadSpecList(obj, sec, "offload_modules", AsOffloadModule, &t->offload_modules);
      !s.ok()) {
    return s;
  }
  if (t->offload_modules.empty()) {
    return absl::InvalidArgumentError(
        "training.offload_modules must name at least one module (attn_norm, qkv_linear, "
        "core_attn, attn_proj, mlp_norm, expert_fc1, moe_act); to offload nothing, set "
        "search.activation_offload: [false]");
  }
  if (auto s = Required(seq, "training.seq_length", "tokens per sequence"); !s.ok()) return s;
  return Required(batch, "training.global_batch_size", "sequences per optimizer step");
}

absl::Status ReadCluster(const json& obj, ClusterSpec* c) {
  const std::string sec = "cluster";
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster must be an object (mapping), got ", Shown(obj)));
  }
  if (auto s =
          CheckSpecKeys(obj, sec,
                        {"gpu", "num_gpus", "gpus_per_node", "nvlink_bandwidth_gbps",
                         "network_bandwidth_gbps", "memory_gib", "nvlink_domain", "host_memory_gib",
                         "host_link_bandwidth_gbps", "host_memory_bandwidth_gbps"});
      !s.ok()) {
    return s;
  }
  if (const json* v = FindSpecField(obj, "gpu")) {
    auto s = SpecString(*v, "cluster.gpu");
    if (!s.ok()) return s.status();
    c->gpu = *s;
  }
  bool gpus = false, per_node = false;
  if (auto s = ReadInt(obj, sec, "num_gpus", &c->num_gpus, &gpus); !s.ok()) return s;
  if (auto s = ReadInt(obj, sec, "gpus_per_node", &c->gpus_per_node, &per_node); !s.ok()) {
    return s;
  }
  if (per_node && c->gpus_per_node == 0) c->gpus_per_node = 8;  // proto: default 8
  if (auto s = ReadDouble(obj, sec, "nvlink_bandwidth_gbps", &c->nvlink_bandwidth_gbps);
      !s.ok()) {
    return s;
  }
  for (const auto& [key, field] : {std::pair<const char*, double*>{"host_memory_gib",
                                                                    &c->host_memory_gib},
                                   {"host_link_bandwidth_gbps", &c->host_link_bandwidth_gbps},
                                   {"host_memory_bandwidth_gbps",
                                    &c->host_memory_bandwidth_gbps}}) {
    if (auto s = ReadDouble(obj, sec, key, field); !s.ok()) return s;
  }
  if (auto s = ReadDouble(obj, sec, "network_bandwidth_gbps", &c->network_bandwidth_gbps);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadDouble(obj, sec, "memory_gib", &c->memory_gib); !s.ok()) return s;
  if (auto s = ReadInt(obj, sec, "nvlink_domain", &c->nvlink_domain); !s.ok()) return s;
  if (c->gpu.empty()) {
    return absl::InvalidArgumentError(
        "cluster.gpu is required (a device kind such as a100-80gb or h100-sxm-80gb)");
  }
  return Required(gpus, "cluster.num_gpus", "GPUs in the cluster");
}

// search.data_parallel_sharding, or its alias search.distributed_optimizer (true =
// optimizer, false = none); an empty list is the same as an absent one.
absl::Status ReadDataParallelSharding(const json& obj, const std::string& sec, SearchOptions* o) {
  std::vector<bool> alias;
  if (auto s = ReadSpecList(obj, sec, "distributed_optimizer", SpecBool, &alias); !s.ok()) return s;
  if (auto s = ReadSpecList(obj, sec, "data_parallel_sharding", AsDataParallelSharding,
                            &o->data_parallel_sharding);
      !s.ok()) {
    return s;
  }
  if (alias.size() > kMaxSearchListEntries) {
    return absl::InvalidArgumentError(absl::StrCat("search.distributed_optimizer has ",
                                                   alias.size(), " entries; the limit is ",
                                                   kMaxSearchListEntries));
  }
  if (!alias.empty() && !o->data_parallel_sharding.empty()) {
    return absl::InvalidArgumentError(
        "search.distributed_optimizer is an alias of search.data_parallel_sharding (true = "
        "optimizer, false = none): give one of the two");
  }
  for (bool on : alias) {
    o->data_parallel_sharding.push_back(on ? DataParallelSharding::kOptimizer
                                           : DataParallelSharding::kNone);
  }
  return ReadInt(obj, sec, "shard_group_size", &o->shard_group_size);
}

absl::Status ReadSearch(const json& obj, SearchOptions* o) {
  const std::string sec = "search";
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("search must be an object (mapping), got ", Shown(obj)));
  }
  if (auto s = CheckSpecKeys(obj, sec,
                             {"tp",
                              "pp",
                              "dp",
                              "cp",
                              "vp",
                              "micro_batch_size",
                              "sequence_parallel",
                              "recompute",
                              "recompute_num_layers",
                              "distributed_optimizer",
                              "top_k",
                              "objective",
                              "mode",
                              "allow_tp_across_nodes",
                              "verify_top_k",
                              "ep",
                              "etp",
                              "moe_token_dispatcher",
                              "data_parallel_sharding",
                              "shard_group_size",
                              "tp_comm_overlap",
                              "overlap_grad_reduce",
                              "overlap_p2p_comm",
                              "overlap_param_gather",
                              "offload",
                              "activation_offload"});
      !s.ok()) {
    return s;
  }
  const std::pair<const char*, std::vector<int64_t>*> int_lists[] = {
      {"tp", &o->tp},
      {"pp", &o->pp},
      {"dp", &o->dp},
      {"cp", &o->cp},
      {"vp", &o->vp},
      {"micro_batch_size", &o->micro_batch_size},
      {"recompute_num_layers", &o->recompute_num_layers},
      {"ep", &o->ep},
      {"etp", &o->etp}};
  for (const auto& [key, list] : int_lists) {
    if (auto s = ReadSpecList(obj, sec, key, SpecInt, list); !s.ok()) return s;
  }
  if (auto s = ReadSpecList(obj, sec, "sequence_parallel", SpecBool, &o->sequence_parallel);
      !s.ok()) {
    return s;
  }
  for (const auto& [key, list] :
       {std::pair<const char*, std::vector<bool>*>{"tp_comm_overlap", &o->tp_comm_overlap},
        {"overlap_grad_reduce", &o->overlap_grad_reduce},
        {"overlap_p2p_comm", &o->overlap_p2p_comm},
        {"overlap_param_gather", &o->overlap_param_gather},
        {"activation_offload", &o->activation_offload}}) {
    if (auto s = ReadSpecList(obj, sec, key, SpecBool, list); !s.ok()) return s;
  }
  if (auto s = ReadDataParallelSharding(obj, sec, o); !s.ok()) return s;
  if (auto s = ReadSpecList(obj, sec, "offload", AsOffload, &o->offload); !s.ok()) return s;
  if (auto s = ReadSpecList(obj, sec, "recompute", AsRecompute, &o->recompute); !s.ok()) return s;
  if (auto s =
          ReadSpecList(obj, sec, "moe_token_dispatcher", AsDispatcher, &o->moe_token_dispatcher);
      !s.ok()) {
    return s;
  }
  bool top_k = false;
  if (auto s = ReadInt(obj, sec, "top_k", &o->top_k, &top_k); !s.ok()) return s;
  if (top_k && o->top_k == 0) o->top_k = 10;  // proto: default 10
  if (auto s = ReadSpecEnum(obj, sec, "objective", ParseObjective, &o->objective); !s.ok())
    return s;
  if (auto s = ReadSpecEnum(obj, sec, "mode", ParseSearchMode, &o->mode); !s.ok()) return s;
  if (auto s = ReadBool(obj, sec, "allow_tp_across_nodes", &o->allow_tp_across_nodes); !s.ok()) {
    return s;
  }
  return ReadInt(obj, sec, "verify_top_k", &o->verify_top_k);
}

// ---- Writing ----------------------------------------------------------------------------

json IntsToJson(const std::vector<int64_t>& v) { return json(v); }

json BoolsToJson(const std::vector<bool>& v) {
  json a = json::array();
  for (bool b : v) a.push_back(b);
  return a;
}

// Learned positions: model.max_position_embeddings is the table's rows. Megatron-LM's
// default is seq_length (0 here), and a preset's or Hugging Face config's table smaller than
// training.seq_length grows to it, as the exported arguments do (search/exporters.cc); a
// value the spec itself gives must be 0 or at least seq_length. Runs after JobSpec::Validate,
// so both sizes are in range.
absl::Status ResolvePositionRows(bool given, JobSpec* spec) {
  ModelSpec& m = spec->model;
  const int64_t seq = spec->training.seq_length;
  if (m.position_embedding != PositionEmbedding::kLearned) return absl::OkStatus();
  if (given && m.max_position_embeddings > 0 && m.max_position_embeddings < seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.max_position_embeddings (", m.max_position_embeddings,
        ") must be at least training.seq_length (", seq,
        "): a learned position table needs a row for every position (0 means seq_length)"));
  }
  m.max_position_embeddings = std::max(m.max_position_embeddings, seq);
  return absl::OkStatus();
}

// A spec that names no attention kernel (neither training.attention_kernel nor
// training.flash_attention) gets the one its framework runs on its device (cuDNN's on
// Hopper and later under Megatron-Core). Profile mode keeps FlashAttention-2: the workers
// time their own flash kernel.
void ResolveAttentionKernel(const json& training, JobSpec* spec) {
  if (FindSpecField(training, "attention_kernel") != nullptr ||
      FindSpecField(training, "flash_attention") != nullptr ||
      spec->search.mode == SearchMode::kProfile) {
    return;
  }
  absl::StatusOr<DeviceProfile> device = FindDevice(spec->cluster.gpu);
  if (!device.ok()) return;  // Validate names the unknown device.
  spec->training.attention_kernel = DefaultAttentionKernel(spec->training.framework, *device);
}

}  // namespace

absl::StatusOr<JobSpec> JobSpecFromJson(const json& j) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a job spec must be an object with model, training, cluster and search, got ",
        Shown(j)));
  }
  if (auto s = CheckSpecKeys(j, "", {"kind", "name", "model", "training", "cluster", "search"});
      !s.ok()) {
    return s;
  }
  // `kind` (absent = training) says which reader a spec needs; inference specs are read by
  // inference/spec_io.h.
  if (const json* v = FindSpecField(j, "kind")) {
    auto kind = SpecString(*v, "kind");
    if (!kind.ok()) return kind.status();
    if (*kind != "training") {
      return absl::InvalidArgumentError(absl::StrCat(
          "kind ('", *kind, "') must be training for a training spec (inference specs have "
          "a serving section instead of training)"));
    }
  }
  JobSpec spec;
  if (const json* v = FindSpecField(j, "name")) {
    auto s = SpecString(*v, "name");
    if (!s.ok()) return s.status();
    spec.name = *s;
  }
  for (const char* section : {"model", "training", "cluster"}) {
    if (FindSpecField(j, section) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("section '", section, "' is required"));
    }
  }
  bool positions_given = false;
  if (auto s = ReadModel(j.at("model"), &spec.model, &positions_given); !s.ok()) return s;
  if (auto s = ReadTraining(j.at("training"), &spec.training); !s.ok()) return s;
  if (auto s = ReadCluster(j.at("cluster"), &spec.cluster); !s.ok()) return s;
  if (const json* search = FindSpecField(j, "search")) {
    if (auto s = ReadSearch(*search, &spec.search); !s.ok()) return s;
  }
  if (spec.name.empty()) spec.name = spec.model.name;
  ResolveAttentionKernel(j.at("training"), &spec);
  if (auto s = spec.Validate(); !s.ok()) return s;
  if (auto s = ResolvePositionRows(positions_given, &spec); !s.ok()) return s;
  return spec;
}

json JobSpecToJson(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const TrainingSpec& t = spec.training;
  const ClusterSpec& c = spec.cluster;
  const SearchOptions& o = spec.search;
  json recompute = json::array();
  for (Recompute r : o.recompute) recompute.push_back(ToString(r));
  json dispatchers = json::array();
  json sharding = json::array();
  for (DataParallelSharding d : o.data_parallel_sharding) sharding.push_back(ToString(d));
  for (MoeTokenDispatcher d : o.moe_token_dispatcher) dispatchers.push_back(ToString(d));
  json out = json{{"name", spec.name},
                  {"model",
                   {{"name", m.name},
                    {"num_layers", m.num_layers},
                    {"hidden_size", m.hidden_size},
                    {"num_attention_heads", m.num_attention_heads},
                    {"num_query_groups", m.num_query_groups},
                    {"ffn_hidden_size", m.ffn_hidden_size},
                    {"vocab_size", m.vocab_size},
                    {"activation", ToString(m.activation)},
                    {"normalization", ToString(m.normalization)},
                    {"tie_embeddings", m.tie_embeddings},
                    {"position_embedding", ToString(m.position_embedding)},
                    {"max_position_embeddings", m.max_position_embeddings},
                    {"num_experts", m.num_experts}}},
                  {"training",
                   {{"seq_length", t.seq_length},
                    {"global_batch_size", t.global_batch_size},
                    {"precision", ToString(t.precision)},
                    {"flash_attention", IsFlash(t.AttentionKernelOf())},
                    {"attention_kernel", ToString(t.AttentionKernelOf())},
                    {"fused_norm", t.fused_norm},
                    {"framework", ToString(t.framework)},
                    {"dropout", t.dropout},
                    {"optimizer", "adam"},
                    {"total_tokens", t.total_tokens}}},
                  {"cluster",
                   {{"gpu", c.gpu},
                    {"num_gpus", c.num_gpus},
                    {"gpus_per_node", c.gpus_per_node},
                    {"nvlink_bandwidth_gbps", c.nvlink_bandwidth_gbps},
                    {"network_bandwidth_gbps", c.network_bandwidth_gbps},
                    {"host_memory_gib", c.host_memory_gib},
                    {"host_link_bandwidth_gbps", c.host_link_bandwidth_gbps},
                    {"host_memory_bandwidth_gbps", c.host_memory_bandwidth_gbps},
                    {"memory_gib", c.memory_gib}}},
                  {"search",
                   {{"tp", IntsToJson(o.tp)},
                    {"pp", IntsToJson(o.pp)},
                    {"dp", IntsToJson(o.dp)},
                    {"cp", IntsToJson(o.cp)},
                    {"vp", IntsToJson(o.vp)},
                    {"micro_batch_size", IntsToJson(o.micro_batch_size)},
                    {"sequence_parallel", BoolsToJson(o.sequence_parallel)},
                    {"tp_comm_overlap", BoolsToJson(o.tp_comm_overlap)},
                    {"overlap_grad_reduce", BoolsToJson(o.overlap_grad_reduce)},
                    {"overlap_p2p_comm", BoolsToJson(o.overlap_p2p_comm)},
                    {"overlap_param_gather", BoolsToJson(o.overlap_param_gather)},
                    {"recompute", recompute},
                    {"recompute_num_layers", IntsToJson(o.recompute_num_layers)},
                    {"data_parallel_sharding", sharding},
                    {"shard_group_size", o.shard_group_size},
                    {"top_k", o.top_k},
                    {"objective", ToString(o.objective)},
                    {"mode", ToString(o.mode)},
                    {"allow_tp_across_nodes", o.allow_tp_across_nodes},
                    {"verify_top_k", o.verify_top_k}}}};
  // Mixture of experts and attention variants.
  json& model = out["model"];
  model["kv_channels"] = m.kv_channels;
  model["attention"] =
      ToString(m.attention == AttentionType::kMla            ? AttentionType::kMla
               : m.num_query_groups == m.num_attention_heads ? AttentionType::kMha
                                                             : AttentionType::kGqa);
  model["moe_router_topk"] = m.moe_router_topk;
  model["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
  model["num_shared_experts"] = m.num_shared_experts;
  model["shared_expert_ffn_hidden_size"] = m.shared_expert_ffn_hidden_size;
  model["first_k_dense_layers"] = m.first_k_dense_layers;
  model["moe_layer_freq"] = m.moe_layer_freq;
  model["moe_router_num_groups"] = m.moe_router_num_groups;
  model["moe_router_group_topk"] = m.moe_router_group_topk;
  model["q_lora_rank"] = m.q_lora_rank;
  model["kv_lora_rank"] = m.kv_lora_rank;
  model["qk_head_dim"] = m.qk_head_dim;
  model["qk_rope_head_dim"] = m.qk_rope_head_dim;
  model["v_head_dim"] = m.v_head_dim;
  model["mtp_layers"] = m.mtp_layers;
  model["sliding_window"] = m.sliding_window;
  model["window_attn_skip_freq"] = m.window_attn_skip_freq;
  out["training"]["moe_routing"] = ToString(t.moe_routing);
  out["training"]["moe_capacity_factor"] = t.moe_capacity_factor;
  json modules = json::array();
  for (RecomputeModule r : t.recompute_modules) modules.push_back(ToString(r));
  out["training"]["recompute_modules"] = modules;
  json offload_modules = json::array();
  for (OffloadModule x : t.offload_modules) offload_modules.push_back(ToString(x));
  out["training"]["offload_modules"] = offload_modules;
  if (t.grad_reduce_in_fp32.has_value()) {
    out["training"]["grad_reduce_in_fp32"] = *t.grad_reduce_in_fp32;
  }
  if (t.fp8_param_gather.has_value()) {
    out["training"]["fp8_param_gather"] = *t.fp8_param_gather;
  }
  if (t.optimizer_state_dtype.has_value()) {
    out["training"]["optimizer_state_dtype"] = ToString(*t.optimizer_state_dtype);
  }
  out["cluster"]["nvlink_domain"] = c.nvlink_domain;
  out["search"]["ep"] = IntsToJson(o.ep);
  out["search"]["etp"] = IntsToJson(o.etp);
  out["search"]["moe_token_dispatcher"] = dispatchers;
  json offloads = json::array();
  for (Offload x : o.offload) offloads.push_back(ToString(x));
  out["search"]["offload"] = offloads;
  out["search"]["activation_offload"] = BoolsToJson(o.activation_offload);
  return out;
}

absl::StatusOr<ParallelConfig> PinnedLayout(const JobSpec& spec) {
  const SearchOptions& o = spec.search;
  auto unpinned = [](const char* dim, size_t n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.", dim, " is not pinned: a single layout needs exactly one value, got ",
        n == 0 ? "none" : absl::StrCat(n, " values")));
  };
  ParallelConfig c;
  if (o.tp.size() != 1) return unpinned("tp", o.tp.size());
  c.tp = o.tp[0];
  if (o.pp.size() != 1) return unpinned("pp", o.pp.size());
  c.pp = o.pp[0];
  if (o.cp.size() != 1) return unpinned("cp", o.cp.size());
  c.cp = o.cp[0];
  if (o.dp.size() == 1) {
    c.dp = o.dp[0];
  } else if (o.dp.empty()) {
    if (spec.cluster.num_gpus % (c.tp * c.pp * c.cp) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster.num_gpus (", spec.cluster.num_gpus, ") must be divisible by tp x pp x cp (",
          c.tp, " x ", c.pp, " x ", c.cp, ") to derive dp"));
    }
    c.dp = spec.cluster.num_gpus / (c.tp * c.pp * c.cp);
  } else {
    return unpinned("dp", o.dp.size());
  }
  // Absent: one chunk per stage (1F1B, Megatron's default without
  // --num-layers-per-virtual-pipeline-stage).
  if (o.vp.size() == 1) {
    c.vp = o.vp[0];
  } else if (!o.vp.empty()) {
    return unpinned("vp", o.vp.size());
  }
  // The stages split as training.framework splits them (as the planner's layouts do).
  c.split_counts_embedding_and_loss = SplitCountsEmbeddingAndLoss(spec, c.pp, c.vp);
  if (o.micro_batch_size.size() != 1) {
    return unpinned("micro_batch_size", o.micro_batch_size.size());
  }
  c.micro_batch_size = o.micro_batch_size[0];
  if (o.sequence_parallel.size() == 1) {
    c.sequence_parallel = o.sequence_parallel[0];
  } else if (!(o.sequence_parallel.empty() && c.tp == 1)) {
    return unpinned("sequence_parallel", o.sequence_parallel.size());
  }
  if (o.recompute.size() != 1) return unpinned("recompute", o.recompute.size());
  c.recompute = o.recompute[0];
  if (c.recompute == Recompute::kFull) {
    // Absent: every layer of the stage, as the planner reads an empty list.
    if (o.recompute_num_layers.size() > 1) {
      return unpinned("recompute_num_layers", o.recompute_num_layers.size());
    }
    c.recompute_num_layers = o.recompute_num_layers.empty() ? 0 : o.recompute_num_layers[0];
  }
  if (o.data_parallel_sharding.size() == 1) {
    c.data_parallel_sharding = o.data_parallel_sharding[0];
  } else if (!(o.data_parallel_sharding.empty() && c.dp * c.cp == 1)) {
    return unpinned("data_parallel_sharding", o.data_parallel_sharding.size());
  }
  // Expert layout: ep and etp default to 1, the dispatcher to alltoall.
  if (o.ep.size() == 1) {
    c.ep = o.ep[0];
  } else if (!o.ep.empty()) {
    return unpinned("ep", o.ep.size());
  }
  if (o.etp.size() == 1) {
    c.etp = o.etp[0];
  } else if (!o.etp.empty()) {
    return unpinned("etp", o.etp.size());
  }
  if (o.moe_token_dispatcher.size() == 1) {
    c.moe_token_dispatcher = o.moe_token_dispatcher[0];
  } else if (!o.moe_token_dispatcher.empty()) {
    return unpinned("moe_token_dispatcher", o.moe_token_dispatcher.size());
  }
  c.shard_group_size = o.shard_group_size;
  if (o.offload.size() == 1) {
    c.offload = o.offload[0];
  } else if (!o.offload.empty()) {
    return unpinned("offload", o.offload.size());
  }
  // Overlaps and activation offload: one value pins the flag; none takes the framework's
  // default (activation offload: off).
  const FrameworkProfile& framework = ProfileOf(spec.training.framework);
  c.tp_comm_overlap = framework.tp_comm_overlap.exists && framework.tp_comm_overlap.default_on;
  c.overlap_grad_reduce =
      DefaultOverlapGradReduce(spec.training.framework, c.data_parallel_sharding, c.pp);
  c.overlap_p2p_comm = framework.overlap_p2p_comm.exists && framework.overlap_p2p_comm.default_on;
  c.overlap_param_gather =
      DefaultOverlapParamGather(spec.training.framework, c.data_parallel_sharding);
  for (const auto& [key, list, flag] :
       {std::tuple<const char*, const std::vector<bool>*, bool*>{
            "tp_comm_overlap", &o.tp_comm_overlap, &c.tp_comm_overlap},
        {"overlap_grad_reduce", &o.overlap_grad_reduce, &c.overlap_grad_reduce},
        {"overlap_p2p_comm", &o.overlap_p2p_comm, &c.overlap_p2p_comm},
        {"overlap_param_gather", &o.overlap_param_gather, &c.overlap_param_gather},
        {"activation_offload", &o.activation_offload, &c.activation_offload}}) {
    if (list->size() == 1) {
      *flag = (*list)[0];
    } else if (!list->empty()) {
      return unpinned(key, list->size());
    }
  }
  return c;
}

absl::StatusOr<ModelSpec> ModelSpecFromJson(const json& j) {
  ModelSpec m;
  bool positions_given = false;
  if (auto s = ReadModel(j, &m, &positions_given); !s.ok()) return s;
  return m;
}

absl::StatusOr<ClusterSpec> ClusterSpecFromJson(const json& j) {
  ClusterSpec c;
  if (auto s = ReadCluster(j, &c); !s.ok()) return s;
  return c;
}

json ModelSpecToJson(const ModelSpec& m) {
  JobSpec spec;
  spec.model = m;
  return JobSpecToJson(spec).at("model");
}

json ClusterSpecToJson(const ClusterSpec& c) {
  JobSpec spec;
  spec.cluster = c;
  return JobSpecToJson(spec).at("cluster");
}

}  // namespace paratune
