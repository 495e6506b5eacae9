// Checks of client requests before they reach the jobs: each names the field and the rule
// (INVALID_ARGUMENT).
#ifndef PARATUNE_SERVER_JOB_REQUESTS_H_
#define PARATUNE_SERVER_JOB_REQUESTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paratune/v1/service.pb.h"

namespace paratune::server {

/// NOT_FOUND: "job 'ID' not found".
absl::Status JobNotFound(const std::string& id);

/// OK when `id` names a job (non-empty); else "id is required".
absl::Status CheckJobId(const std::string& id);

/// A page of ListJobs, checked.
struct ListJobsQuery {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  ///< UNSPECIFIED: every state.
  int64_t offset = 0;                              ///< Jobs skipped (the page token).
  int64_t page_size = 100;                         ///< 1..1000; 0 asked means 100.
};

/// The query of `request`: its state a JobState value, page_size >= 0 (capped at 1000), and
/// page_token one this server gave (a decimal offset).
absl::StatusOr<ListJobsQuery> ParseListJobs(const v1::ListJobsRequest& request);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_JOB_REQUESTS_H_
