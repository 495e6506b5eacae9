#include "kernels/step_runner.h"

#include "absl/strings/str_cat.h"

namespace paratune::kernels {

absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("backend (", name, ") must be cpu or cuda"));
}

const PhaseTiming* StepResult::Find(absl::string_view phase) const {
  for (const PhaseTiming& p : phases) {
    if (p.phase == phase) return &p;
  }
  return nullptr;
}

absl::Status StepConfig::Validate() const {
  if (absl::Status s = layer.Validate(); !s.ok()) return s;
  if (warmup < 0) return absl::InvalidArgumentError(absl::StrCat("warmup (", warmup, ") must be >= 0"));
  if (iters < 1) return absl::InvalidArgumentError(absl::StrCat("iters (", iters, ") must be >= 1"));
  return absl::OkStatus();
}

absl::StatusOr<StepResult> RunLayerStep(const StepConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return absl::UnimplementedError("UNIMPLEMENTED: RunLayerStep (the layer is being built)");
}

}  // namespace paratune::kernels
