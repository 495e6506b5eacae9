// A serving layout as the command line that starts it on an engine: trtllm-serve (with its
// extra LLM-API options YAML) and trtllm-bench, `vllm serve`, SGLang's launch_server. The
// exporters are a table of kinds (ServingExportFormats); the flag names are the engines'
// documented ones (trtllm-serve and trtllm-bench --help, vLLM engine arguments, SGLang
// server arguments).
#ifndef PARATUNE_INFERENCE_EXPORTERS_H_
#define PARATUNE_INFERENCE_EXPORTERS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"

namespace paratune::inference {

/// The export format names, in the order `paratune export --format` lists them.
std::vector<std::string> ServingExportFormats();

/// The commands for `c` in `format` ("trtllm", "vllm", "sglang"): one command per pool
/// (aggregated: one per replica group; disaggregated: prefill and decode). The model path
/// is left as $MODEL. InvalidArgument for an unknown format or a precision the engine does
/// not offer.
absl::StatusOr<std::string> FormatServingCommand(const InferenceJobSpec& spec,
                                                 const ServingConfig& c, const std::string& format);

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_EXPORTERS_H_
