#include "server/rest_requests.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "inference/exporters.h"
#include "search/exporters.h"
#include "search/spec_reader_json.h"
#include "server/convert.h"
#include "server/rest_common.h"

namespace paratune::server {
namespace {

using nlohmann::json;

// Training layouts export in the framework formats (search/exporters.h), serving layouts in
// the engine formats (inference/exporters.h); json either.
std::vector<std::string> ExportFormats() {
  std::vector<std::string> formats;
  for (const TrainingExporter& e : TrainingExporters()) formats.push_back(e.format);
  formats.push_back("json");
  for (std::string& f : inference::ServingExportFormats()) formats.push_back(std::move(f));
  return formats;
}

std::string ExportFormatList() { return absl::StrJoin(ExportFormats(), ", "); }

bool IsBlank(std::string_view text) {
  for (char c : text) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  }
  return true;
}

// The body as JSON, or InvalidArgument saying what was expected instead.
absl::StatusOr<json> ParseBody(std::string_view body, std::string_view expected) {
  absl::StatusOr<json> parsed = ParseJsonStrict(body);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        Cat({"request body: ", std::string(parsed.status().message()), "; expected ", expected}));
  }
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(Cat({"request body must be a JSON object: ", expected}));
  }
  return parsed;
}

absl::StatusOr<int32_t> ParseNonNegativeInt(const std::string& value, std::string_view name) {
  int64_t result = 0;
  bool digits = !value.empty() && value.size() <= 10;
  for (char c : value) digits = digits && c >= '0' && c <= '9';
  if (!digits) {
    return absl::InvalidArgumentError(
        Cat({"query parameter ", name, " must be a non-negative integer, got '", value, "'"}));
  }
  for (char c : value) result = result * 10 + (c - '0');
  if (result > INT32_MAX) {
    return absl::InvalidArgumentError(
        Cat({"query parameter ", name, " (", value, ") must be at most 2147483647"}));
  }
  return static_cast<int32_t>(result);
}

// Accepts "JOB_STATE_SUCCEEDED", "SUCCEEDED", "succeeded" or the number.
absl::StatusOr<v1::JobState> ParseJobState(const std::string& value) {
  std::string upper;
  for (char c : value) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  v1::JobState state;
  if (v1::JobState_Parse(upper, &state) || v1::JobState_Parse("JOB_STATE_" + upper, &state)) {
    return state;
  }
  if (absl::StatusOr<int32_t> n = ParseNonNegativeInt(value, "state");
      n.ok() && v1::JobState_IsValid(*n)) {
    return static_cast<v1::JobState>(*n);
  }
  return absl::InvalidArgumentError(
      Cat({"query parameter state must be a JobState (e.g. 'succeeded' or "
           "'JOB_STATE_SUCCEEDED'), got '",
           value, "'"}));
}

}  // namespace

absl::StatusOr<v1::SubmitJobRequest> ParseSubmitBody(std::string_view body) {
  constexpr char kExpected[] = "a SubmitJobRequest {\"spec\": {...}} or a JobSpec";
  absl::StatusOr<json> parsed = ParseBody(body, kExpected);
  if (!parsed.ok()) return parsed.status();
  const json* spec = &*parsed;
  if (auto it = parsed->find("spec"); it != parsed->end()) {
    for (const auto& [key, value] : parsed->items()) {
      if (key != "spec") {
        return absl::InvalidArgumentError(
            Cat({"unknown field '", key, "' (a SubmitJobRequest has only 'spec')"}));
      }
    }
    spec = &*it;
  }
  absl::StatusOr<v1::JobSpec> wire = SpecProtoFromJson(*spec);
  if (!wire.ok()) return wire.status();
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *std::move(wire);
  return request;
}

absl::StatusOr<v1::CancelJobRequest> ParseCancelBody(std::string_view body,
                                                     const std::string& path_id) {
  v1::CancelJobRequest request;
  request.set_id(path_id);
  if (IsBlank(body)) return request;
  absl::StatusOr<json> parsed = ParseBody(body, "an empty body, {} or {\"id\": \"<the job id>\"}");
  if (!parsed.ok()) return parsed.status();
  for (const auto& [key, value] : parsed->items()) {
    if (key != "id") {
      return absl::InvalidArgumentError(
          Cat({"unknown field '", key, "' (a CancelJobRequest has only 'id')"}));
    }
    if (!value.is_string()) {
      return absl::InvalidArgumentError("id must be a string (the job id)");
    }
    const std::string id = value.get<std::string>();
    if (!id.empty() && id != path_id) {
      return absl::InvalidArgumentError(
          Cat({"body id '", id, "' differs from the path id '", path_id, "'"}));
    }
  }
  return request;
}

absl::StatusOr<v1::ListJobsRequest> ParseListJobsQuery(const httplib::Request& req) {
  v1::ListJobsRequest request;
  for (const auto& [key, value] : req.params) {
    if (key == "page_size") {
      absl::StatusOr<int32_t> n = ParseNonNegativeInt(value, "page_size");
      if (!n.ok()) return n.status();
      request.set_page_size(*n);
    } else if (key == "page_token") {
      request.set_page_token(value);
    } else if (key == "state") {
      absl::StatusOr<v1::JobState> state = ParseJobState(value);
      if (!state.ok()) return state.status();
      request.set_state(*state);
    } else {
      return absl::InvalidArgumentError(
          Cat({"unknown query parameter '", key,
               "' (GET /v1/jobs accepts page_size, page_token, state)"}));
    }
  }
  return request;
}

absl::StatusOr<ExportRequest> ParseExportRequest(const std::string& job_id, const std::string& rank,
                                                 const httplib::Request& req) {
  ExportRequest out;
  out.job_id = job_id;
  absl::StatusOr<int32_t> n = ParseNonNegativeInt(rank, "rank");
  if (!n.ok() || *n == 0) {
    return absl::InvalidArgumentError(
        Cat({"rank '", rank, "' must be a positive integer (1 = the best layout)"}));
  }
  out.rank = *n;
  for (const auto& [key, value] : req.params) {
    if (key != "format") {
      return absl::InvalidArgumentError(
          Cat({"unknown query parameter '", key, "' (an export accepts only format)"}));
    }
    const std::vector<std::string> formats = ExportFormats();
    if (std::find(formats.begin(), formats.end(), value) == formats.end()) {
      return absl::InvalidArgumentError(Cat(
          {"query parameter format must be one of ", ExportFormatList(), ", got '", value, "'"}));
    }
    if (!out.format.empty()) {
      return absl::InvalidArgumentError("query parameter format is given more than once");
    }
    out.format = value;
  }
  if (out.format.empty()) {
    return absl::InvalidArgumentError(
        Cat({"query parameter format is required: one of ", ExportFormatList()}));
  }
  return out;
}

}  // namespace paratune::server
