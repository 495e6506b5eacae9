// plan, estimate and export for specs of `kind: inference` (client/plan_commands.cc hands
// them over after reading the file).
#ifndef PARATUNE_CLIENT_INFERENCE_COMMANDS_H_
#define PARATUNE_CLIENT_INFERENCE_COMMANDS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace paratune::client {

/// `plan`: ranks the serving layouts. Exit code: 0 ok, 1 nothing fits the limits, 2 invalid.
int RunInferencePlan(const nlohmann::json& spec, const std::string& path, int64_t top, bool json,
                     bool csv);
/// `estimate`: the pinned serving layout.
int RunInferenceEstimate(const nlohmann::json& spec, const std::string& path, bool json);
/// `export --format trtllm|vllm|sglang`: the pinned layout, else the plan's `rank`-th.
int RunInferenceExport(const nlohmann::json& spec, const std::string& path,
                       const std::string& format, int64_t rank);

}  // namespace paratune::client

#endif  // PARATUNE_CLIENT_INFERENCE_COMMANDS_H_
