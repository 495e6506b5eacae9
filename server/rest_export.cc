#include "server/rest_export.h"

#include <string>

#include "absl/status/status.h"
#include "inference/exporters.h"
#include "search/exporters.h"
#include "server/convert.h"
#include "server/convert_inference.h"

namespace paratune::server {
namespace {

// Job ids are the coordinator's own; anything else is left out of the file name.
std::string FileNameSafe(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.';
    if (keep) out.push_back(c);
  }
  return out;
}

absl::StatusOr<RestBody> RenderInferenceExport(const ExportRequest& request, const v1::Job& job,
                                               const v1::InferencePlanResult& plan) {
  const auto& ranked = plan.ranked();
  if (request.rank > ranked.size()) {
    return absl::NotFoundError(
        Cat({"job '", request.job_id, "' has ", std::to_string(ranked.size()),
             " ranked serving layout(s); there is no rank ", std::to_string(request.rank)}));
  }
  const v1::InferenceRankedConfig& chosen = ranked[request.rank - 1];
  const std::string file =
      Cat({"paratune-", FileNameSafe(request.job_id), "-rank", std::to_string(request.rank)});
  if (request.format == "json") {
    return RestBody{ToJson(chosen), kJsonType,
                    Cat({"attachment; filename=\"", file, "-serving.json\""})};
  }
  if (FindTrainingExporter(request.format) != nullptr) {
    return absl::InvalidArgumentError(
        Cat({"format ", request.format, " exports training layouts; job '", request.job_id,
             "' is an inference job: use trtllm, vllm, sglang or json"}));
  }
  absl::StatusOr<inference::InferenceJobSpec> spec = InferenceSpecFromProto(RenderedSpec(job));
  if (!spec.ok()) return spec.status();
  absl::StatusOr<inference::ServingConfig> config = ServingConfigFromProto(chosen.config());
  if (!config.ok()) return config.status();
  absl::StatusOr<std::string> text =
      inference::FormatServingCommand(*spec, *config, request.format);
  if (!text.ok()) return text.status();
  return RestBody{*std::move(text), kTextType,
                  Cat({"attachment; filename=\"", file, "-", request.format, ".sh\""})};
}

}  // namespace

absl::StatusOr<RestBody> RenderExport(const ExportRequest& request, const v1::Job& job,
                                      const v1::JobResults& results) {
  if (results.plan().has_inference()) {
    return RenderInferenceExport(request, job, results.plan().inference());
  }
  const TrainingExporter* exporter = FindTrainingExporter(request.format);
  if (exporter == nullptr && request.format != "json") {
    return absl::InvalidArgumentError(
        Cat({"format ", request.format, " exports serving layouts; job '", request.job_id,
             "' is a training job: use ", TrainingExportFormatList("json")}));
  }
  const auto& ranked = results.plan().ranked();
  if (request.rank > ranked.size()) {
    return absl::NotFoundError(
        Cat({"job '", request.job_id, "' has ", std::to_string(ranked.size()),
             " ranked layout(s); there is no rank ", std::to_string(request.rank)}));
  }
  const v1::RankedConfig& chosen = ranked[request.rank - 1];
  const std::string file =
      Cat({"paratune-", FileNameSafe(request.job_id), "-rank", std::to_string(request.rank)});
  if (request.format == "json") {
    return RestBody{ToJson(chosen), kJsonType,
                    Cat({"attachment; filename=\"", file, "-layout.json\""})};
  }
  absl::StatusOr<JobSpec> spec = SpecFromProto(RenderedSpec(job));
  if (!spec.ok()) return spec.status();
  absl::StatusOr<ParallelConfig> layout = ParallelConfigFromProto(chosen.config());
  if (!layout.ok()) return layout.status();
  const ParallelConfig& config = *layout;
  absl::StatusOr<std::string> text = exporter->render(*spec, config);
  if (!text.ok()) return text.status();
  return RestBody{*std::move(text), exporter->content_type,
                  Cat({"attachment; filename=\"", file, exporter->file_suffix, "\""})};
}

}  // namespace paratune::server
