#include "server/http_status.h"

#include <nlohmann/json.hpp>

namespace paratune::server {

int HttpStatusFromCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

absl::StatusCode CodeFromHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kFailedPrecondition;
    case 413:
    case 414:
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return http_status < 400 ? absl::StatusCode::kOk : absl::StatusCode::kInternal;
  }
}

std::string ErrorJson(const absl::Status& status) {
  return ErrorJson(status, HttpStatusFromCode(status.code()));
}

std::string ErrorJson(const absl::Status& status, int http_status) {
  nlohmann::json body = {{"code", http_status},
                         {"status", absl::StatusCodeToString(status.code())},
                         {"message", std::string(status.message())}};
  // Replace invalid UTF-8 rather than throw: messages may quote user input.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace paratune::server
