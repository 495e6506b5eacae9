// Strict JSON text reader for specs and request bodies: what nlohmann's parser lets through
// silently (a key given twice keeps its last value) is an error here, and so is nesting
// deeper than any spec needs. Shared by every transport that receives JSON text (the REST
// gateway's request bodies, spec files), so they refuse the same inputs with the same
// messages; JobSpecFromJson (spec_io.h) then reads the parsed document.
#ifndef PARATUNE_SEARCH_SPEC_READER_JSON_H_
#define PARATUNE_SEARCH_SPEC_READER_JSON_H_

#include <nlohmann/json.hpp>
#include <string_view>

#include "absl/status/statusor.h"

namespace paratune {

/// Arrays and objects nested deeper than this are refused (a spec needs 3 levels; a
/// Hugging Face config inside a spec travels as a string, model.hf_config_json).
inline constexpr int kMaxJsonNesting = 64;

/// Parses JSON text. InvalidArgument for: text that is not JSON (with the parser's
/// position), a key that appears twice in one object (naming its path:
/// `the key 'training.flash_attention' appears twice`), nesting deeper than
/// kMaxJsonNesting levels. Array levels show as `[]` in a path (`search.tp[].x`).
absl::StatusOr<nlohmann::json> ParseJsonStrict(std::string_view text);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_SPEC_READER_JSON_H_
