// Named model presets (Megatron-LM papers, GPT-3, Llama, Nemotron, BLOOM; the mixtures of
// experts Mixtral, Qwen3-MoE, DeepSeek-V3 and GPT-OSS).
#ifndef PARATUNE_SEARCH_PRESETS_H_
#define PARATUNE_SEARCH_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "search/specs.h"

namespace paratune {

/// The preset's architecture; NotFound listing the known names for an unknown one.
absl::StatusOr<ModelSpec> FindPreset(const std::string& name);
/// All preset names, sorted.
std::vector<std::string> PresetNames();

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PRESETS_H_
