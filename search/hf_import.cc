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

/// Counts of experts above 1, any enabled moe_* setting, or an MoE model_type.
absl::Status RejectMixtureOfExperts(const json& config, const std::string& model_type) {
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts",
                          "moe_num_experts", "num_experts_per_tok", "n_shared_experts"}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_number() && it->get<double>() <= 1) continue;
    if (it->is_boolean() && !it->get<bool>()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config.", key, " (", JsonPreview(*it),
        ") describes a mixture-of-experts model; ParaTune plans dense models only"));
  }
  for (const auto& [key, value] : config.items()) {
    if (!absl::StartsWith(key, "moe")) continue;
    if (value.is_null() || (value.is_boolean() && !value.get<bool>()) ||
        (value.is_number() && value.get<double>() == 0)) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config.", key, " (", JsonPreview(value),
        ") describes a mixture-of-experts model; ParaTune plans dense models only"));
  }
  for (const char* moe_type : {"moe", "mixtral", "dbrx", "deepseek_v2", "deepseek_v3",
                               "jamba", "arctic"}) {
    if (absl::StrContains(model_type, moe_type)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config.model_type ('", model_type,
          "') is a mixture-of-experts architecture; ParaTune plans dense models only"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Activation> MapActivation(const std::string& key, const std::string& act,
                                         bool gated_family) {
  if (act == "silu" || act == "swish" || act == "swiglu") return Activation::kSwiglu;
  if (absl::StartsWith(act, "gelu") || act == "quick_gelu" || act == "relu") {
    // Gemma's gated GELU (GeGLU) has SwiGLU's three matrices and the same cost.
    return gated_family ? Activation::kSwiglu : Activation::kGelu;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "hf_config.", key, " ('", act,
      "') is not supported (silu/swiglu for gated MLPs, gelu/gelu_new/relu for plain ones)"));
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(const json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("hf_config must be a JSON object (a config.json)");
  }
  const std::string model_type = StringOr(config, "model_type", "");
  if (auto s = RejectMixtureOfExperts(config, model_type); !s.ok()) return s;
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

  if (auto head_dim = OptionalInt(config, {"head_dim"}); !head_dim.ok()) {
    return head_dim.status();
  } else if (int64_t product = 0;
             head_dim->has_value() && m.num_attention_heads > 0 &&
             (__builtin_mul_overflow(**head_dim, m.num_attention_heads, &product) ||
              product != m.hidden_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config.head_dim (", **head_dim, ") x num_attention_heads (", m.num_attention_heads,
        ") differs from hidden_size (", m.hidden_size,
        "); ParaTune models head_dim = hidden_size / num_attention_heads"));
  }

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
    m.normalization = m.activation == Activation::kSwiglu ? Normalization::kRmsNorm
                                                          : Normalization::kLayerNorm;
  }

  // Position embedding: rotary (or ALiBi, which has no table either) vs a learned table.
  const bool rope_keys = FirstKey(config, {"rope_theta", "rope_scaling", "rotary_pct",
                                           "rotary_emb_base", "rotary_dim",
                                           "partial_rotary_factor", "alibi"}) != nullptr;
  const bool rope_family = falcon || model_type == "llama" || model_type == "mistral" ||
                           absl::StartsWith(model_type, "qwen") || model_type == "gpt_neox" ||
                           gemma;
  m.position_embedding =
      (!gpt2 && (rope_keys || rope_family)) ? PositionEmbedding::kRope : PositionEmbedding::kLearned;

  // Tied embeddings.
  auto tie = OptionalBool(config, "tie_word_embeddings");
  if (!tie.ok()) return tie.status();
  const bool untied_family = model_type == "llama" || model_type == "mistral" ||
                             absl::StartsWith(model_type, "qwen") || model_type == "gpt_neox";
  m.tie_embeddings = tie->value_or(!untied_family);

  m.num_experts = 1;
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
