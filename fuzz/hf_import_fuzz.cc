// libFuzzer: arbitrary bytes as a Hugging Face config.json (search/hf_import.h); an
// imported model either validates or is refused with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "search/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<paratune::ModelSpec> model = paratune::ModelSpecFromHfConfigText(text);
  if (!model.ok()) {
    if (model.status().message().empty()) std::abort();
    return 0;
  }
  (void)model->Validate();
  return 0;
}
