// REST requests to the messages the handlers take: bodies read by the strict JSON reader
// (search/spec_reader_json.h) and specs by the CLI's strict spec reader
// (search/spec_io.h via server/convert.h), so that REST refuses what the CLI refuses, with
// the same messages; query parameters checked by name and type.
#ifndef PARATUNE_SERVER_REST_REQUESTS_H_
#define PARATUNE_SERVER_REST_REQUESTS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "paratune/v1/service.pb.h"

namespace httplib {
struct Request;
}  // namespace httplib

namespace paratune::server {

/// The POST /v1/jobs body: a SubmitJobRequest {"spec": {...}} or a bare JobSpec (JobSpec
/// has no field named "spec", so the two cannot be confused). The spec is read and
/// validated as `paratune submit` reads a spec file, and the request carries its
/// canonical form (explicit model fields, defaults written out). InvalidArgument naming
/// the field (`training.seq_lenght: unknown field (did you mean ...)`), a key given
/// twice, or what the body is instead of JSON.
absl::StatusOr<v1::SubmitJobRequest> ParseSubmitBody(std::string_view body);

/// The POST /v1/jobs/{id}:cancel body: empty, {} or {"id": "<the path id>"}.
absl::StatusOr<v1::CancelJobRequest> ParseCancelBody(std::string_view body,
                                                     const std::string& path_id);

/// GET /v1/jobs ?page_size=&page_token=&state= (state: "JOB_STATE_SUCCEEDED",
/// "SUCCEEDED", "succeeded" or the number). Unknown parameters are refused.
absl::StatusOr<v1::ListJobsRequest> ParseListJobsQuery(const httplib::Request& req);

/// What an export asks for: the rank (1 = best) and the format.
struct ExportRequest {
  std::string job_id;
  int32_t rank = 0;
  std::string format;  ///< "megatron", "nemo", "json", "trtllm", "vllm" or "sglang"
};
/// GET /v1/jobs/{id}/results/{rank}:export?format=megatron|nemo|json|trtllm|vllm|sglang
/// (training jobs: megatron, nemo; inference jobs: the engines). InvalidArgument for
/// a rank that is not a positive integer, a missing or unknown format (naming the allowed
/// values), an unknown query parameter.
absl::StatusOr<ExportRequest> ParseExportRequest(const std::string& job_id, const std::string& rank,
                                                 const httplib::Request& req);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_REQUESTS_H_
