// Spec files for the CLI: YAML or JSON on disk → the JSON form that
// search/spec_io.h's JobSpecFromJson reads. YAML stays here, out of search/.
#ifndef PARATUNE_CLIENT_SPEC_FILE_H_
#define PARATUNE_CLIENT_SPEC_FILE_H_

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "search/specs.h"

namespace paratune::client {

/// Values (scalars, lists and mappings, aliases counted each time they are used) one spec
/// may expand to: a 10-line YAML of nested aliases otherwise expands to gigabytes.
inline constexpr size_t kMaxSpecValues = 100000;

/// Reads a regular file of at most `max_bytes` bytes. Devices (/dev/zero, /dev/urandom),
/// fifos, sockets and directories are refused without reading (a fifo is opened
/// non-blocking, so that nothing waits for a writer). `what` names the input in messages
/// ("spec file", "model.hf_config"); the messages never quote the file's content.
/// NotFound when it cannot be opened, InvalidArgument for the other refusals.
absl::StatusOr<std::string> ReadInputFile(const std::string& path, size_t max_bytes,
                                          const std::string& what);

/// YAML text → JSON. Plain scalars are typed by the YAML 1.2 core schema (null, true/false,
/// integers incl. 0x/0o, floats incl. .inf/.nan); quoted scalars stay strings. A
/// duplicate mapping key is an error naming its path. InvalidArgument with line and
/// column for malformed YAML, when the document expands to more than kMaxSpecValues
/// values, and when it nests deeper than kMaxJsonNesting levels (search/spec_reader_json.h;
/// an alias used inside its own anchor nests without end).
absl::StatusOr<nlohmann::json> YamlToJson(const std::string& text);

/// Reads a spec file: JSON when the name ends in ".json", YAML otherwise. A string
/// `model.hf_config` is a path to a Hugging Face config.json (or to a folder holding one),
/// relative to the spec file's folder; its contents replace it as `model.hf_config_json`.
/// Both are read with ReadInputFile (kMaxSpecFileBytes, kMaxHfConfigJsonBytes).
/// NotFound when the file cannot be read, InvalidArgument when it cannot be parsed.
absl::StatusOr<nlohmann::json> ReadSpecFile(const std::string& path);

}  // namespace paratune::client

#endif  // PARATUNE_CLIENT_SPEC_FILE_H_
