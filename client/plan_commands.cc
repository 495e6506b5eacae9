// plan, estimate, export: the offline analytical planner on a spec file.
// Exit codes: 0 ok, 1 runtime failure, 2 usage error or invalid spec.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/inference_commands.h"
#include "client/render.h"
#include "client/spec_file.h"
#include "inference/exporters.h"
#include "inference/spec_io.h"
#include "search/device_catalog.h"
#include "search/empty_result.h"
#include "search/exporters.h"
#include "search/framework_profile.h"
#include "search/planner.h"
#include "search/presets.h"
#include "search/spec_io.h"

namespace paratune::client {
namespace {

// `export --format`: the training exporters' formats, then the serving engines'.
std::vector<std::string> ExportFormats() {
  std::vector<std::string> out;
  for (const TrainingExporter& e : TrainingExporters()) out.emplace_back(e.format);
  for (const std::string& f : inference::ServingExportFormats()) out.push_back(f);
  return out;
}

constexpr int kExitFailure = 1;
constexpr int kExitInvalid = 2;

/// Prints `status` and returns the exit code for it: 2 for a spec or usage problem
/// (InvalidArgument, NotFound), 1 otherwise.
int Fail(const absl::Status& status) {
  std::cerr << "paratune: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ||
                 status.code() == absl::StatusCode::kNotFound
             ? kExitInvalid
             : kExitFailure;
}

absl::StatusOr<JobSpec> LoadSpec(const std::string& path) {
  auto json = ReadSpecFile(path);
  if (!json.ok()) return json.status();
  auto spec = JobSpecFromJson(*json);
  if (!spec.ok()) {
    // Keep the code (InvalidArgument) and prefix the file so the user knows where.
    return absl::Status(spec.status().code(),
                        absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

/// The spec file's JSON when its `kind` is inference (the inference commands take over).
std::optional<nlohmann::json> InferenceSpec(const std::string& path) {
  auto json = ReadSpecFile(path);
  if (!json.ok()) return std::nullopt;
  auto kind = inference::JobKindOf(*json);
  if (!kind.ok() || *kind != inference::JobKind::kInference) return std::nullopt;
  return *json;
}

std::string CatalogFooter() {
  return absl::StrCat("\nModel presets: ", absl::StrJoin(PresetNames(), ", "),
                      "\nDevice kinds: ", absl::StrJoin(DeviceNames(), ", "),
                      "\nExit codes: 0 ok, 1 failure, 2 usage error or invalid spec.");
}

struct PlanOptions {
  std::string spec_path;
  int64_t top = 0;
  bool json = false;
  bool csv = false;
};

// "no layout satisfies the spec: REASON; REASON" from the spec-level reasons.
std::string NoLayoutMessage(const JobSpec& spec, const PlanResult& result) {
  return absl::StrCat("no layout satisfies the spec: ",
                      absl::StrJoin(EmptyPlanReasons(spec, result), "; "));
}

int RunPlan(const PlanOptions& o) {
  if (auto j = InferenceSpec(o.spec_path)) {
    return RunInferencePlan(*j, o.spec_path, o.top, o.json, o.csv);
  }
  auto spec = LoadSpec(o.spec_path);
  if (!spec.ok()) return Fail(spec.status());
  if (o.top > 0) {
    spec->search.top_k = o.top;
    if (spec->search.verify_top_k > o.top) spec->search.verify_top_k = o.top;
    if (auto s = spec->Validate(); !s.ok()) return Fail(s);
  }
  auto result = Plan(*spec);
  if (!result.ok()) return Fail(result.status());
  if (o.json) {
    std::cout << PlanJson(*result) << "\n";
  } else if (o.csv) {
    std::cout << FormatPlanCsv(*result);
  } else {
    std::cout << FormatPlanTable(*result, *spec);
  }
  if (result->ranked.empty()) {
    // The answer is printed as asked (an empty ranking, the rejected layouts); the reasons
    // go to stderr and the exit code says that nothing satisfies the spec.
    std::cerr << "paratune: " << NoLayoutMessage(*spec, *result) << "\n";
    return 1;
  }
  return 0;
}

struct EstimateOptions {
  std::string spec_path;
  bool json = false;
};

int RunEstimate(const EstimateOptions& o) {
  if (auto j = InferenceSpec(o.spec_path)) return RunInferenceEstimate(*j, o.spec_path, o.json);
  auto spec = LoadSpec(o.spec_path);
  if (!spec.ok()) return Fail(spec.status());
  auto layout = PinnedLayout(*spec);
  if (!layout.ok()) return Fail(layout.status());
  auto estimate = Estimate(*spec, *layout);
  if (!estimate.ok()) return Fail(estimate.status());
  if (estimate->rank == 0) estimate->rank = 1;
  if (o.json) {
    std::cout << EstimateJson(*estimate) << "\n";
  } else {
    std::cout << FormatEstimate(*estimate, *spec);
  }
  return 0;
}

struct ExportOptions {
  std::string spec_path;
  std::string format;
  int64_t rank = 0;  ///< 0: not given.
};

int RunExport(const ExportOptions& o) {
  if (auto j = InferenceSpec(o.spec_path)) {
    if (o.format.empty()) {
      return Fail(absl::InvalidArgumentError(
          "--format is required for a kind: inference spec (trtllm, vllm or sglang)"));
    }
    return RunInferenceExport(*j, o.spec_path, o.format, o.rank);
  }
  auto spec = LoadSpec(o.spec_path);
  if (!spec.ok()) return Fail(spec.status());
  // Without --format, the format of the spec's training.framework.
  std::string format = o.format;
  if (format.empty()) {
    const char* framework_format = ProfileOf(spec->training.framework).export_format;
    if (framework_format == nullptr) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("training.framework ", ToString(spec->training.framework),
                       " has no export format: give --format ", TrainingExportFormatList())));
    }
    format = framework_format;
  }
  const TrainingExporter* exporter = FindTrainingExporter(format);
  if (exporter == nullptr) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--format ", format,
                     " exports inference specs (kind: inference); a training spec "
                     "exports as ",
                     TrainingExportFormatList())));
  }
  ParallelConfig layout;
  auto pinned = PinnedLayout(*spec);
  if (o.rank == 0 && pinned.ok()) {
    // A fully pinned spec names its layout; check it against the rules.
    if (auto s = ValidateParallelConfig(*pinned, *spec); !s.ok()) return Fail(s);
    layout = *pinned;
  } else {
    const int64_t rank = o.rank > 0 ? o.rank : 1;
    if (spec->search.top_k < rank) spec->search.top_k = rank;
    auto result = Plan(*spec);
    if (!result.ok()) return Fail(result.status());
    if (result->ranked.empty()) {
      std::cerr << "paratune: no layout to export: " << NoLayoutMessage(*spec, *result) << "\n";
      return 1;
    }
    if (static_cast<int64_t>(result->ranked.size()) < rank) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--rank ", rank, " asked for, but the plan ranked ",
                       result->ranked.size(), " layout(s)")));
    }
    const RankedConfig& chosen = result->ranked[rank - 1];
    if (!chosen.fits) {
      std::cerr << "paratune: warning: layout rank " << rank << " (" << chosen.config.ToString()
                << ") does not fit in device memory\n";
    }
    layout = chosen.config;
  }
  absl::StatusOr<std::string> text = exporter->render(*spec, layout);
  if (!text.ok()) return Fail(text.status());
  std::cout << *text;
  return 0;
}

}  // namespace

void RegisterPlanCommands(CLI::App& app, int* exit_code) {
  auto plan_options = std::make_shared<PlanOptions>();
  CLI::App* plan =
      app.add_subcommand("plan", "Rank every valid parallel layout for a spec (analytical model)");
  plan->add_option("spec,--spec", plan_options->spec_path, "Job spec file (YAML or JSON)")
      ->required();
  plan->add_option("--top", plan_options->top, "Number of ranked layouts (overrides search.top_k)")
      ->check(CLI::PositiveNumber);
  CLI::Option* json = plan->add_flag(
      "--json", plan_options->json,
      "Print the PlanResult as JSON (the proto JSON mapping, as `results --json` and REST)");
  plan->add_flag("--csv", plan_options->csv, "Print one CSV row per candidate")->excludes(json);
  plan->footer(CatalogFooter());
  plan->callback([plan_options, exit_code] { *exit_code = RunPlan(*plan_options); });

  auto estimate_options = std::make_shared<EstimateOptions>();
  CLI::App* estimate = app.add_subcommand(
      "estimate", "Predict time and memory of one fully pinned layout (one value per search "
                  "dimension)");
  estimate->add_option("spec,--spec", estimate_options->spec_path, "Job spec file (YAML or JSON)")
      ->required();
  estimate->add_flag("--json", estimate_options->json, "Print the RankedConfig as JSON");
  estimate->footer(CatalogFooter());
  estimate->callback(
      [estimate_options, exit_code] { *exit_code = RunEstimate(*estimate_options); });

  auto export_options = std::make_shared<ExportOptions>();
  CLI::App* exporter = app.add_subcommand(
      "export", "Export a layout as Megatron-LM arguments or a NeMo config override");
  exporter->add_option("spec,--spec", export_options->spec_path, "Job spec file (YAML or JSON)")
      ->required();
  exporter
      ->add_option("--format", export_options->format,
                   "megatron (pretrain_gpt.py arguments), nemo (megatron_gpt_config.yaml "
                   "overrides), deepspeed (ds_config.json), torchtitan (job TOML) or "
                   "automodel (NeMo AutoModel recipe keys); for kind: inference specs "
                   "trtllm, vllm or sglang (required). Default for a training spec: its "
                   "training.framework's (megatron-core: megatron, nemo: nemo, "
                   "megatron-deepspeed and deepspeed: deepspeed, torchtitan: torchtitan, "
                   "nemo-automodel: automodel)")
      ->check(CLI::IsMember(ExportFormats()));
  exporter
      ->add_option("--rank", export_options->rank,
                   "Export the Nth ranked layout of the plan (default: the pinned layout of a "
                   "fully pinned spec, else 1)")
      ->check(CLI::PositiveNumber);
  exporter->footer(CatalogFooter());
  exporter->callback([export_options, exit_code] { *exit_code = RunExport(*export_options); });
}

}  // namespace paratune::client
