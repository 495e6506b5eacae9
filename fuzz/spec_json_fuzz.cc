// libFuzzer: arbitrary bytes parsed as JSON, then JobSpecFromJson (validation included),
// and for accepted specs the canonical JSON read back to the same spec (round trip).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "search/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  absl::StatusOr<paratune::JobSpec> spec = paratune::JobSpecFromJson(j);
  if (!spec.ok()) {
    if (spec.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  absl::StatusOr<paratune::JobSpec> again =
      paratune::JobSpecFromJson(paratune::JobSpecToJson(*spec));
  if (!again.ok()) std::abort();  // the canonical form of an accepted spec is accepted
  return 0;
}
