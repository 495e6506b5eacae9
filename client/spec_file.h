// Spec files for the CLI: YAML or JSON on disk → the JSON form that
// search/spec_io.h's JobSpecFromJson reads. YAML stays here, out of search/.
#ifndef PARATUNE_CLIENT_SPEC_FILE_H_
#define PARATUNE_CLIENT_SPEC_FILE_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace paratune::client {

/// YAML text → JSON. Plain scalars are typed by the YAML 1.2 core schema (null, true/false,
/// integers incl. 0x/0o, floats incl. .inf/.nan); quoted scalars stay strings. A
/// duplicate mapping key is an error naming its path. InvalidArgument with line and
/// column for malformed YAML.
absl::StatusOr<nlohmann::json> YamlToJson(const std::string& text);

/// Reads a spec file: JSON when the name ends in ".json", YAML otherwise. A string
/// `model.hf_config` is a path to a Hugging Face config.json (or to a folder holding one),
/// relative to the spec file's folder; its contents replace it as `model.hf_config_json`.
/// NotFound when the file cannot be read, InvalidArgument when it cannot be parsed.
absl::StatusOr<nlohmann::json> ReadSpecFile(const std::string& path);

}  // namespace paratune::client

#endif  // PARATUNE_CLIENT_SPEC_FILE_H_
