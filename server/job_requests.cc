#include "server/job_requests.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace paratune::server {

absl::Status JobNotFound(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
}

absl::Status CheckJobId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("id is required (the job's id)");
  return absl::OkStatus();
}

absl::StatusOr<ListJobsQuery> ParseListJobs(const v1::ListJobsRequest& request) {
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat("state (", static_cast<int>(request.state()), ") is not a JobState value"));
  }
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size (", request.page_size(), ") must be >= 0"));
  }
  ListJobsQuery query;
  query.state = request.state();
  if (request.page_size() > 0) query.page_size = std::min(request.page_size(), 1000);
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &query.offset) || query.offset < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token '", request.page_token(), "' is not one this server gave"));
  }
  return query;
}

}  // namespace paratune::server
