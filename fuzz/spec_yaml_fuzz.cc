// libFuzzer: arbitrary bytes as a YAML spec file (client/spec_file.h YamlToJson, the
// reader behind `paratune plan --spec x.yaml`), then JobSpecFromJson on what it gives.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/spec_file.h"
#include "search/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::json> j = paratune::client::YamlToJson(text);
  if (!j.ok()) {
    if (j.status().message().empty()) std::abort();
    return 0;
  }
  absl::StatusOr<paratune::JobSpec> spec = paratune::JobSpecFromJson(*j);
  if (!spec.ok() && spec.status().message().empty()) std::abort();
  return 0;
}
