// Hugging Face `config.json` → ModelSpec, for the decoder-only families ParaTune models:
// Llama, Mistral, Qwen2, GPT-2, GPT-NeoX, Falcon (and others that use the same field
// names), and the mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3 and
// Kimi K2 (multi-head latent attention), GLM-4.5, GPT-OSS, Llama 4, OLMoE, Phi-3.5-MoE and
// MiniMax-M2. A multimodal config's text_config is read for its language model. Other MoE
// families (and hybrids with linear-attention or state-space layers) and encoder-decoder
// configs are rejected.
#ifndef PARATUNE_SEARCH_HF_IMPORT_H_
#define PARATUNE_SEARCH_HF_IMPORT_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "search/specs.h"

namespace paratune {

/// A JSON value shown in an error message: at most `max_chars` characters, and at most four
/// levels deep. Unlike json::dump(), which recurses once per nesting level and copies the
/// whole value, it is safe on untrusted input (a 100,000-deep array overflowed the stack).
std::string JsonPreview(const nlohmann::json& v, size_t max_chars = 60);

/// Maps a parsed config.json to a ModelSpec (not validated; JobSpec::Validate does that).
/// Field aliases: layers num_hidden_layers | n_layer | num_layers; hidden hidden_size |
/// n_embd | d_model; heads num_attention_heads | n_head; key/value heads
/// num_key_value_heads | num_kv_heads | n_head_kv (Falcon: multi_query,
/// new_decoder_architecture); FFN intermediate_size | n_inner | ffn_hidden_size (default
/// 4 * hidden); positions max_position_embeddings | n_positions | n_ctx.
/// head_dim other than hidden / heads becomes kv_channels. Mixture-of-experts fields per
/// family: see ReadMixtureOfExperts in hf_import.cc. InvalidArgument naming the
/// `hf_config.<key>` for missing or malformed fields and for mixture-of-experts configs of
/// other families (num_local_experts, num_experts, n_routed_experts, moe_*).
absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(const nlohmann::json& config);

/// Same, from the text of a config.json.
absl::StatusOr<ModelSpec> ModelSpecFromHfConfigText(const std::string& text);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_HF_IMPORT_H_
