#include "client/inference_commands.h"

#include <iostream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/render_inference.h"
#include "inference/exporters.h"
#include "inference/planner.h"
#include "inference/spec_io.h"

namespace paratune::client {
namespace {

using inference::InferenceJobSpec;

int Fail(const absl::Status& status) {
  std::cerr << "paratune: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ||
                 status.code() == absl::StatusCode::kNotFound
             ? 2
             : 1;
}

absl::StatusOr<InferenceJobSpec> Load(const nlohmann::json& j, const std::string& path) {
  auto spec = inference::InferenceJobSpecFromJson(j);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace

int RunInferencePlan(const nlohmann::json& j, const std::string& path, int64_t top, bool json,
                     bool csv) {
  auto spec = Load(j, path);
  if (!spec.ok()) return Fail(spec.status());
  if (top > 0) spec->search.top_k = top;
  auto result = inference::PlanInference(*spec);
  if (!result.ok()) return Fail(result.status());
  if (json) {
    std::cout << inference::ToJson(*result).dump(2) << "\n";
  } else if (csv) {
    std::cout << FormatInferencePlanCsv(*result);
  } else {
    std::cout << FormatInferencePlanTable(*result, *spec);
  }
  if (result->ranked.empty() || !result->ranked.front().meets_limits) {
    std::cerr << "paratune: no serving layout meets the limits\n";
    return 1;
  }
  return 0;
}

int RunInferenceEstimate(const nlohmann::json& j, const std::string& path, bool json) {
  auto spec = Load(j, path);
  if (!spec.ok()) return Fail(spec.status());
  auto config = inference::PinnedServingConfig(*spec);
  if (!config.ok()) return Fail(config.status());
  auto r = inference::EstimateInference(*spec, *config);
  if (!r.ok()) return Fail(r.status());
  if (json) {
    std::cout << inference::ToJson(*r).dump(2) << "\n";
  } else {
    std::cout << FormatInferenceEstimate(*r, *spec);
  }
  return 0;
}

int RunInferenceExport(const nlohmann::json& j, const std::string& path, const std::string& format,
                       int64_t rank) {
  auto spec = Load(j, path);
  if (!spec.ok()) return Fail(spec.status());
  inference::ServingConfig config;
  auto pinned = inference::PinnedServingConfig(*spec);
  if (rank == 0 && pinned.ok()) {
    config = *pinned;
  } else {
    const int64_t want = rank > 0 ? rank : 1;
    if (spec->search.top_k < want) spec->search.top_k = want;
    auto result = inference::PlanInference(*spec);
    if (!result.ok()) return Fail(result.status());
    if (static_cast<int64_t>(result->ranked.size()) < want) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--rank ", want,
                                                          " asked for, but the plan ranked ",
                                                          result->ranked.size(), " layout(s)")));
    }
    config = result->ranked[want - 1].config;
  }
  auto text = inference::FormatServingCommand(*spec, config, format);
  if (!text.ok()) return Fail(text.status());
  std::cout << *text;
  return 0;
}

}  // namespace paratune::client
