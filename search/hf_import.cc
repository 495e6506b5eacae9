// Hugging Face config.json import (see hf_import.h).
//
// Family defaults follow the transformers configuration classes: GPT-2 and Falcon tie the
// output layer to the input embedding (PretrainedConfig's default), Llama, Mistral, Qwen2
// and GPT-NeoX do not; Falcon without new_decoder_architecture is multi-query by default.
#include "search/hf_import.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paratune {

namespace {

void AppendPreview(const nlohmann::json& v, int depth, size_t max_chars, std::string* out) {
  if (out->size() > max_chars) return;
  if (v.is_array() || v.is_object()) {
    const bool array = v.is_array();
    if (depth >= 4) {
      out->append(array ? "[...]" : "{...}");
      return;
    }
    out->push_back(array ? '[' : '{');
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out->size() <= max_chars; ++it) {
      if (!first) out->push_back(',');
      first = false;
      if (!array) {
        out->append(nlohmann::json(it.key()).dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace));
        out->push_back(':');
      }
      AppendPreview(it.value(), depth + 1, max_chars, out);
    }
    out->push_back(array ? ']' : '}');
    return;
  }
  out->append(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

std::string JsonPreview(const nlohmann::json& v, size_t max_chars) {
  std::string out;
  AppendPreview(v, 0, max_chars, &out);
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}
namespace {

using nlohmann::json;

/// The first key of `keys` present (and not null) in `config`.
const char* FirstKey(const json& config, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = config.find(k);
    if (it != config.end() && !it->is_null()) return k;
  }
  return nullptr;
}

absl::StatusOr<int64_t> IntField(const json& config, const char* key) {
  const json& v = config.at(key);
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("hf_config.", key, " is out of range"));
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::trunc(d) == d && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("hf_config.", key, " must be an integer, got ", JsonPreview(v)));
}

/// Reads the first present alias as an integer; nullopt when none is present.
absl::StatusOr<std::optional<int64_t>> OptionalInt(const json& config,
                                                   std::initializer_list<const char*> keys) {
  const char* key = FirstKey(config, keys);
  if (key == nullptr) return std::optional<int64_t>();
  auto v = IntField(config, key);
  if (!v.ok()) return v.status();
  return std::optional<int64_t>(*v);
}

absl::StatusOr<int64_t> RequiredInt(const json& config, std::initializer_list<const char*> keys) {
  auto v = OptionalInt(config, keys);
  if (!v.ok()) return v.status();
  if (!v->has_value()) {
    std::vector<std::string> names;
    for (const char* k : keys) names.push_back(absl::StrCat("hf_config.", k));
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(names, " / "), " is required"));
  }
  return **v;
}

absl::StatusOr<std::optional<bool>> OptionalBool(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config.", key, " must be true or false, got ", JsonPreview(*it)));
  }
  return std::optional<bool>(it->get<bool>());
}

std::string StringOr(const json& config, const char* key, const std::string& fallback) {
  auto it = config.find(key);
  if (it != config.end() && it->is_string() && !it->get<std::string>().empty()) {
    return it->get<std::string>();
  }
  return fallback;
}

/// The mixture-of-experts families ParaTune imports (model_type).
bool SupportedMoeFamily(const std::string& model_type) {
  for (const char* t :
       {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe",
        "gpt_oss", "llama4", "llama4_text", "olmoe", "phimoe", "minimax_m2"}) {
    if (model_type == t) return true;
  }
  return false;
}

/// Families whose intermediate_size is one routed expert's width (no dense FFN beside it).
bool ExpertWidthIsIntermediateSize(const std::string& type) {
  return type == "mixtral" || type == "gpt_oss" || absl::StartsWith(type, "llama4") ||
         type == "olmoe" || type == "phimoe" || type == "minimax_m2";
}

/// DeepSeek-V2/V3's MoE fields (n_shared_experts, first_k_dense_replace, n_group/topk_group,
/// num_nextn_predict_layers), which Kimi K2 (DeepSeek-V3's architecture) and GLM-4.5
/// (grouped-query attention) use too.
bool DeepSeekMoeFields(const std::string& type) {
  return absl::StartsWith(type, "deepseek") || type == "kimi_k2" || type == "glm4_moe";
}

/// Other configs with experts above 1, an enabled moe_* setting, or an MoE model_type.
absl::Status RejectOtherMixtureOfExperts(const json& config, const std::string& model_type) {
  if (SupportedMoeFamily(model_type)) return absl::OkStatus();
  const char* supported =
      "; mixture-of-experts configs are imported for model_type mixtral, qwen2_moe, "
      "qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, glm4_moe, gpt_oss, llama4, olmoe, "
      "phimoe and minimax_m2";
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts",
                          "moe_num_experts", "num_experts_per_tok", "n_shared_experts"}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_number() && it->get<double>() <= 1) continue;
    if (it->is_boolean() && !it->get<bool>()) continue;
    return absl::InvalidArgumentError(absl::StrCat("hf_config.", key, " (", JsonPreview(*it),
                                                   ") describes a mixture-of-experts model of "
                                                   "model_type '",
                                                   model_type, "'", supported));
  }
  for (const auto& [key, value] : config.items()) {
    if (!absl::StartsWith(key, "moe")) continue;
    if (value.is_null() || (value.is_boolean() && !value.get<bool>()) ||
        (value.is_number() && value.get<double>() == 0)) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat("hf_config.", key, " (", JsonPreview(value),
                                                   ") describes a mixture-of-experts model "
                                                   "of model_type '",
                                                   model_type, "'", supported));
  }
  for (const char* moe_type : {"moe", "dbrx", "jamba", "arctic"}) {
    if (absl::StrContains(model_type, moe_type)) {
      return absl::InvalidArgumentError(absl::StrCat("hf_config.model_type ('", model_type,
                                                     "') is a mixture-of-experts architecture",
                                                     supported));
    }
  }
  return absl::OkStatus();
}

/// Configs whose layers are not all attention layers: Mamba/state-space hybrids
/// (Nemotron-H, Zamba, Falcon-H1, Granite 4.0: hybrid_override_pattern, layers_block_type,
/// mamba_* / ssm_* keys) and linear-attention hybrids (Qwen3-Next's layer_types). Imported as
/// transformers they would be planned with attention in every layer.
absl::Status RejectHybridLayers(const json& config, const std::string& model_type) {
  const std::string why = absl::StrCat(
      " describes a model of model_type '", model_type,
      "' with state-space or linear-attention layers; ParaTune models attention layers only");
  for (const char* key : {"hybrid_override_pattern", "layers_block_type", "attn_layer_period"}) {
    if (auto it = config.find(key); it != config.end() && !it->is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hf_config.", key, " (", JsonPreview(*it), ")", why));
    }
  }
  for (const auto& [key, value] : config.items()) {
    if ((absl::StartsWith(key, "mamba") || absl::StartsWith(key, "ssm_")) && !value.is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hf_config.", key, " (", JsonPreview(value), ")", why));
    }
  }
  if (auto it = config.find("layer_types"); it != config.end() && it->is_array()) {
    for (const json& t : *it) {
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
        return absl::InvalidArgumentError(
            absl::StrCat("hf_config.layer_types holds ", JsonPreview(t), why));
      }
    }
  }
  if (absl::StrContains(model_type, "mamba")) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config.model_type ('", model_type, "')", why));
  }
  return absl::OkStatus();
}

/// Reads an integer field into `*out` when present.
absl::Status ReadOptional(const json& config, std::initializer_list<const char*> keys,
                          int64_t* out) {
  auto v = OptionalInt(config, keys);
  if (!v.ok()) return v.status();
  if (v->has_value()) *out = **v;
  return absl::OkStatus();
}

/// Sliding-window attention: sliding_window (unless use_sliding_window is false, as Qwen2's
/// configs say), windowed in every layer but each n-th: layer_types' period (GPT-OSS,
/// Gemma 3 in newer transformers), Gemma 3's sliding_window_pattern, Gemma 2's alternation.
absl::Status ReadSlidingWindow(const json& config, const std::string& model_type, ModelSpec& m) {
  auto use = OptionalBool(config, "use_sliding_window");
  if (!use.ok()) return use.status();
  if (!use->value_or(true)) return absl::OkStatus();
  auto window = OptionalInt(config, {"sliding_window"});
  if (!window.ok()) return window.status();
  if (!window->has_value() || **window <= 0) return absl::OkStatus();
  m.sliding_window = **window;
  if (auto it = config.find("layer_types"); it != config.end() && it->is_array()) {
    // Full-attention layers at every n-th position (1-based) and nowhere else.
    std::vector<int64_t> full;
    for (size_t i = 0; i < it->size(); ++i) {
      if ((*it)[i] == "full_attention") full.push_back(static_cast<int64_t>(i) + 1);
    }
    if (full.empty()) return absl::OkStatus();
    if (full.size() == it->size()) {
      m.sliding_window = 0;  // No layer is windowed.
      return absl::OkStatus();
    }
    const int64_t n = full.front();
    for (size_t k = 0; k < full.size(); ++k) {
      if (full[k] != n * static_cast<int64_t>(k + 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "hf_config.layer_types: the full-attention layers are not every n-th layer (layer ",
            full[k], " is full attention after layer ", k == 0 ? 0 : full[k - 1],
            "); model.window_attn_skip_freq describes a period"));
      }
    }
    if (static_cast<int64_t>(it->size()) / n != static_cast<int64_t>(full.size())) {
      return absl::InvalidArgumentError(
          "hf_config.layer_types: the full-attention layers are not every n-th layer");
    }
    m.window_attn_skip_freq = n;
    return absl::OkStatus();
  }
  int64_t pattern = 0;
  if (auto s = ReadOptional(config, {"sliding_window_pattern"}, &pattern); !s.ok()) return s;
  if (pattern > 0) {
    m.window_attn_skip_freq = pattern;
  } else if (model_type == "gemma2" || model_type == "gpt_oss") {
    // transformers' default layer_types: even layers (0-based) windowed, odd ones full.
    m.window_attn_skip_freq = 2;
  }
  return absl::OkStatus();
}

/// The experts, shared experts, layer pattern, MLA ranks and MTP modules of the supported
/// MoE families (their transformers configuration classes):
///   mixtral, gpt_oss, phimoe, minimax_m2, olmoe: num_local_experts (OLMoE: num_experts),
///     num_experts_per_tok (gpt_oss: experts_per_token), intermediate_size per expert;
///     MiniMax-M2's num_mtp_modules x mtp_transformer_layers where use_mtp, and only
///     softmax-attention layers in attn_type_list;
///   qwen2_moe, qwen3_moe: num_experts, num_experts_per_tok, moe_intermediate_size,
///     decoder_sparse_step, shared_expert_intermediate_size (Qwen2-MoE: one shared expert);
///   deepseek_v2/v3, kimi_k2, glm4_moe (grouped-query attention): n_routed_experts, n_shared_experts (moe_intermediate_size each),
///     first_k_dense_replace, moe_layer_freq, n_group and topk_group (unless topk_method is
///     greedy), q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
///     num_nextn_predict_layers;
///   llama4: num_local_experts, intermediate_size per expert and one shared expert of the
///     same width, intermediate_size_mlp for the dense layers, interleave_moe_layer_step
///     (every step-th layer, counting from 1, is an expert layer).
absl::Status ReadMixtureOfExperts(const json& config, const std::string& type, ModelSpec& m) {
  if (!SupportedMoeFamily(type)) return absl::OkStatus();
  if (auto s = ReadOptional(config, {"num_local_experts", "num_experts", "n_routed_experts"},
                            &m.num_experts);
      !s.ok()) {
    return s;
  }
  if (auto s =
          ReadOptional(config, {"num_experts_per_tok", "experts_per_token"}, &m.moe_router_topk);
      !s.ok()) {
    return s;
  }
  if (ExpertWidthIsIntermediateSize(type)) {
    m.moe_ffn_hidden_size = m.ffn_hidden_size;
  } else if (auto s = ReadOptional(config, {"moe_intermediate_size"}, &m.moe_ffn_hidden_size);
             !s.ok()) {
    return s;
  }
  if (absl::StartsWith(type, "qwen")) {
    if (auto s = ReadOptional(config, {"decoder_sparse_step"}, &m.moe_layer_freq); !s.ok()) {
      return s;
    }
    if (auto it = config.find("mlp_only_layers");
        it != config.end() && it->is_array() && !it->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config.mlp_only_layers (", JsonPreview(*it),
          ") is not supported: dense layers are modelled only before the first expert layer "
          "(first_k_dense_layers) or every moe_layer_freq-th"));
    }
    int64_t shared = 0;
    if (auto s = ReadOptional(config, {"shared_expert_intermediate_size"}, &shared); !s.ok()) {
      return s;
    }
    if (shared > 0) {
      m.num_shared_experts = 1;
      m.shared_expert_ffn_hidden_size = shared;
    }
  }
  if (DeepSeekMoeFields(type)) {
    if (auto s = ReadOptional(config, {"n_shared_experts"}, &m.num_shared_experts); !s.ok()) {
      return s;
    }
    if (m.num_shared_experts > 0) m.shared_expert_ffn_hidden_size = m.moe_ffn_hidden_size;
    if (auto s = ReadOptional(config, {"first_k_dense_replace"}, &m.first_k_dense_layers);
        !s.ok()) {
      return s;
    }
    if (auto s = ReadOptional(config, {"moe_layer_freq"}, &m.moe_layer_freq); !s.ok()) return s;
    // Group-limited routing (V2's group_limited_greedy, V3's noaux_tc): n_group groups,
    // topk_group of them per token; one group, or the plain greedy top-k, is not limited.
    int64_t groups = 0, chosen = 0;
    if (auto s = ReadOptional(config, {"n_group"}, &groups); !s.ok()) return s;
    if (auto s = ReadOptional(config, {"topk_group"}, &chosen); !s.ok()) return s;
    const auto method = config.find("topk_method");
    const bool greedy = method != config.end() && method->is_string() && *method == "greedy";
    if (groups > 1 && chosen > 0 && !greedy) {
      m.moe_router_num_groups = groups;
      m.moe_router_group_topk = chosen;
    }
    if (FirstKey(config, {"kv_lora_rank"}) != nullptr) {
      m.attention = AttentionType::kMla;
      m.num_query_groups = m.num_attention_heads;
      const std::pair<const char*, int64_t*> ranks[] = {
          {"q_lora_rank", &m.q_lora_rank},  // null: queries not compressed (V2-Lite)
          {"kv_lora_rank", &m.kv_lora_rank},
          {"qk_nope_head_dim", &m.qk_head_dim},
          {"qk_rope_head_dim", &m.qk_rope_head_dim},
          {"v_head_dim", &m.v_head_dim}};
      for (const auto& [key, out] : ranks) {
        if (auto s = ReadOptional(config, {key}, out); !s.ok()) return s;
      }
    }
    if (auto s = ReadOptional(config, {"num_nextn_predict_layers"}, &m.mtp_layers); !s.ok()) {
      return s;
    }
  }
  if (type == "minimax_m2") {
    // attn_type_list: 1 for a softmax-attention layer, 0 for a lightning (linear-attention)
    // layer (MiniMax-01/M1); M2's layers are all 1.
    if (auto it = config.find("attn_type_list"); it != config.end() && it->is_array()) {
      for (const json& t : *it) {
        if (!t.is_number_integer() || t.get<int64_t>() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "hf_config.attn_type_list holds ", JsonPreview(t),
              ": only softmax-attention layers (1) are modelled, not lightning attention (0)"));
        }
      }
    }
    // Its multi-token prediction: num_mtp_modules modules of mtp_transformer_layers layers.
    auto use_mtp = OptionalBool(config, "use_mtp");
    if (!use_mtp.ok()) return use_mtp.status();
    if (use_mtp->value_or(false)) {
      int64_t modules = 0, layers_per_module = 1;
      if (auto s = ReadOptional(config, {"num_mtp_modules"}, &modules); !s.ok()) return s;
      if (auto s = ReadOptional(config, {"mtp_transformer_layers"}, &layers_per_module); !s.ok()) {
        return s;
      }
      m.mtp_layers = modules * layers_per_module;
    }
  }
  if (absl::StartsWith(type, "llama4")) {
    m.num_shared_experts = 1;
    m.shared_expert_ffn_hidden_size = m.moe_ffn_hidden_size;
    int64_t step = 1;
    if (auto s = ReadOptional(config, {"interleave_moe_layer_step"}, &step); !s.ok()) return s;
    if (step < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("hf_config.interleave_moe_layer_step (", step, ") must be positive"));
    }
    // Layers step-1, 2*step-1, ... are expert layers: step-1 dense ones first, then every
    // step-th.
    m.first_k_dense_layers = step - 1;
    m.moe_layer_freq = step;
    if (auto s = ReadOptional(config, {"intermediate_size_mlp"}, &m.ffn_hidden_size); !s.ok()) {
      return s;
    }
  }
  if (m.num_experts <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config of model_type '", type,
                     "' needs num_local_experts / num_experts / n_routed_experts above 1"));
  }
  if (m.moe_router_topk <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config.num_experts_per_tok / hf_config.experts_per_token is required for a "
        "mixture-of-experts config (model_type '",
        type, "')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Activation> MapActivation(const std::string& key, const std::string& act,
                                         bool gated_family) {
  if (act == "silu" || act == "swish" || act == "swiglu") return Activation::kSwiglu;
  if (act == "relu2" || act == "squared_relu" || act == "squared-relu") {
    return Activation::kSquaredRelu;  // Nemotron.
  }
  if (act == "geglu") return Activation::kGeglu;
  if (absl::StartsWith(act, "gelu") || act == "quick_gelu" || act == "relu") {
    // Gemma's gated GELU is GeGLU.
    return gated_family ? Activation::kGeglu : Activation::kGelu;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "hf_config.", key, " ('", act,
      "') is not supported (silu/swiglu or gelu for gated MLPs, gelu/gelu_new/relu for plain "
      "ones, relu2 for squared ReLU)"));
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(const json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("hf_config must be a JSON object (a config.json)");
  }
  // Multimodal configs (Llama 4, Kimi K2.5, Gemma 3) nest the language model's fields in
  // text_config.
  const bool llama4 = absl::StartsWith(StringOr(config, "model_type", ""), "llama4");
  if (auto it = config.find("text_config");
      it != config.end() && it->is_object() &&
      (llama4 || FirstKey(config, {"num_hidden_layers", "n_layer", "num_layers"}) == nullptr)) {
    json text = *it;
    if (llama4) text["model_type"] = "llama4_text";
    if (!text.contains("_name_or_path") && config.contains("_name_or_path")) {
      text["_name_or_path"] = config["_name_or_path"];
    }
    return ModelSpecFromHfConfig(text);
  }
  const std::string model_type = StringOr(config, "model_type", "");
  if (auto s = RejectHybridLayers(config, model_type); !s.ok()) return s;
  if (auto s = RejectOtherMixtureOfExperts(config, model_type); !s.ok()) return s;
  if (auto it = config.find("is_encoder_decoder");
      it != config.end() && it->is_boolean() && it->get<bool>()) {
    return absl::InvalidArgumentError(
        "hf_config.is_encoder_decoder is true; ParaTune plans decoder-only models only");
  }

  const bool falcon = model_type == "falcon" || absl::StartsWith(model_type, "RefinedWeb");
  const bool gpt2 = model_type == "gpt2";
  const bool gemma = absl::StartsWith(model_type, "gemma");

  ModelSpec m;
  m.name = StringOr(config, "_name_or_path", model_type.empty() ? "hf-model" : model_type);

  auto layers = RequiredInt(config, {"num_hidden_layers", "n_layer", "num_layers"});
  if (!layers.ok()) return layers.status();
  m.num_layers = *layers;
  auto hidden = RequiredInt(config, {"hidden_size", "n_embd", "n_embed", "d_model"});
  if (!hidden.ok()) return hidden.status();
  m.hidden_size = *hidden;
  auto heads = RequiredInt(config, {"num_attention_heads", "n_head", "num_heads"});
  if (!heads.ok()) return heads.status();
  m.num_attention_heads = *heads;
  auto vocab = RequiredInt(config, {"vocab_size"});
  if (!vocab.ok()) return vocab.status();
  m.vocab_size = *vocab;

  // Key/value heads.
  m.num_query_groups = m.num_attention_heads;
  if (falcon) {
    auto new_arch = OptionalBool(config, "new_decoder_architecture");
    if (!new_arch.ok()) return new_arch.status();
    auto multi_query = OptionalBool(config, "multi_query");
    if (!multi_query.ok()) return multi_query.status();
    // The original RefinedWeb (40B) checkpoints are the "new" architecture.
    const bool is_new = new_arch->value_or(model_type == "RefinedWeb");
    if (is_new) {
      auto kv = OptionalInt(config, {"num_kv_heads", "n_head_kv"});
      if (!kv.ok()) return kv.status();
      if (kv->has_value()) m.num_query_groups = **kv;
    } else if (multi_query->value_or(true)) {
      m.num_query_groups = 1;
    }
  } else {
    auto kv = OptionalInt(config, {"num_key_value_heads", "num_kv_heads", "n_head_kv"});
    if (!kv.ok()) return kv.status();
    if (kv->has_value()) m.num_query_groups = **kv;
    auto multi_query = OptionalBool(config, "multi_query");
    if (!multi_query.ok()) return multi_query.status();
    if (!kv->has_value() && multi_query->value_or(false)) m.num_query_groups = 1;
  }

  // A head dimension other than hidden / heads (Qwen3, GPT-OSS, Llama 4) is kv_channels.
  if (auto head_dim = OptionalInt(config, {"head_dim"}); !head_dim.ok()) {
    return head_dim.status();
  } else if (head_dim->has_value()) {
    if (**head_dim <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("hf_config.head_dim (", **head_dim, ") must be positive"));
    }
    int64_t product = 0;
    if (m.num_attention_heads <= 0 ||
        __builtin_mul_overflow(**head_dim, m.num_attention_heads, &product) ||
        product != m.hidden_size) {
      m.kv_channels = **head_dim;
    }
  }
  m.attention =
      m.num_query_groups == m.num_attention_heads ? AttentionType::kMha : AttentionType::kGqa;

  auto ffn = OptionalInt(config, {"intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim"});
  if (!ffn.ok()) return ffn.status();
  // 4 x hidden; a hidden_size past int64 / 4 (refused by validation, which checks
  // hidden_size first) saturates instead of overflowing.
  int64_t four_h = 0;
  if (__builtin_mul_overflow(m.hidden_size, 4, &four_h)) {
    four_h = m.hidden_size > 0 ? std::numeric_limits<int64_t>::max()
                               : std::numeric_limits<int64_t>::min();
  }
  m.ffn_hidden_size = ffn->value_or(four_h);

  auto positions = OptionalInt(config, {"max_position_embeddings", "n_positions", "n_ctx"});
  if (!positions.ok()) return positions.status();
  m.max_position_embeddings = positions->value_or(0);

  // Activation.
  m.activation = Activation::kGelu;
  if (const char* key = FirstKey(config, {"hidden_act", "activation_function", "activation"})) {
    const json& v = config.at(key);
    if (!v.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hf_config.", key, " must be a string, got ", JsonPreview(v)));
    }
    auto act = MapActivation(key, v.get<std::string>(), gemma);
    if (!act.ok()) return act.status();
    m.activation = *act;
  } else if (!gpt2 && !falcon && !FirstKey(config, {"n_inner"}) &&
             FirstKey(config, {"intermediate_size"})) {
    // Llama-style configs without hidden_act use SiLU (transformers' default).
    m.activation = Activation::kSwiglu;
  }

  // Normalization.
  if (FirstKey(config, {"rms_norm_eps"})) {
    m.normalization = Normalization::kRmsNorm;
  } else if (FirstKey(config, {"layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon"}) ||
             gpt2 || falcon) {
    m.normalization = Normalization::kLayerNorm;
  } else {
    m.normalization = IsGated(m.activation) ? Normalization::kRmsNorm : Normalization::kLayerNorm;
  }

  // Phi-3.5-MoE's decoder layers use LayerNorm (with its eps under the rms_norm_eps key).
  if (model_type == "phimoe") m.normalization = Normalization::kLayerNorm;

  // Position embedding: rotary (or ALiBi, which has no table either) vs a learned table.
  const bool rope_keys = FirstKey(config, {"rope_theta", "rope_scaling", "rotary_pct",
                                           "rotary_emb_base", "rotary_dim",
                                           "partial_rotary_factor", "alibi"}) != nullptr;
  const bool rope_family = falcon || model_type == "llama" || model_type == "mistral" ||
                           SupportedMoeFamily(model_type) || absl::StartsWith(model_type, "qwen") ||
                           model_type == "gpt_neox" || gemma;
  m.position_embedding =
      (!gpt2 && (rope_keys || rope_family)) ? PositionEmbedding::kRope : PositionEmbedding::kLearned;

  // Tied embeddings.
  auto tie = OptionalBool(config, "tie_word_embeddings");
  if (!tie.ok()) return tie.status();
  const bool untied_family = model_type == "llama" || model_type == "mistral" ||
                             absl::StartsWith(model_type, "qwen") || model_type == "gpt_neox" ||
                             SupportedMoeFamily(model_type);
  m.tie_embeddings = tie->value_or(!untied_family);

  m.num_experts = 1;
  if (auto s = ReadMixtureOfExperts(config, model_type, m); !s.ok()) return s;
  if (auto s = ReadSlidingWindow(config, model_type, m); !s.ok()) return s;
  return m;
}

absl::StatusOr<ModelSpec> ModelSpecFromHfConfigText(const std::string& text) {
  if (text.size() > kMaxHfConfigJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("hf_config is ", text.size(),
                                                   " bytes; the limit is ",
                                                   kMaxHfConfigJsonBytes, " bytes"));
  }
  // The messages give the byte offset only: nlohmann's own ("last read: '...'") quote the
  // text, which may be a file that is not a config at all (hf_config: /etc/shadow).
  json config;
  try {
    config = json::parse(text);
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config is not valid JSON (syntax error at byte ", e.byte, " of ",
                     text.size(), ")"));
  } catch (const json::exception&) {  // out_of_range for 1e999
    return absl::InvalidArgumentError(
        "hf_config is not valid JSON (a number out of range of a double)");
  }
  return ModelSpecFromHfConfig(config);
}

}  // namespace paratune
