// libFuzzer: arbitrary bytes parsed as JSON and read as a serving job spec
// (InferenceJobSpecFromJson, validation included); an accepted spec's canonical JSON must be
// accepted again and read back to the same canonical JSON (round trip).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "inference/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  absl::StatusOr<paratune::inference::InferenceJobSpec> spec =
      paratune::inference::InferenceJobSpecFromJson(j);
  if (!spec.ok()) {
    if (spec.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  const nlohmann::json canonical = paratune::inference::InferenceJobSpecToJson(*spec);
  absl::StatusOr<paratune::inference::InferenceJobSpec> again =
      paratune::inference::InferenceJobSpecFromJson(canonical);
  if (!again.ok()) std::abort();  // the canonical form of an accepted spec is accepted
  if (paratune::inference::InferenceJobSpecToJson(*again) != canonical) std::abort();
  return 0;
}
