// Mapping between canonical status codes (gRPC's) and HTTP statuses for the REST gateway.
#ifndef PARATUNE_SERVER_HTTP_STATUS_H_
#define PARATUNE_SERVER_HTTP_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace paratune::server {

/// InvalidArgument→400, Unauthenticated→401, PermissionDenied→403, NotFound→404,
/// FailedPrecondition and AlreadyExists→409, ResourceExhausted→429, Unimplemented→501,
/// Unavailable→503, DeadlineExceeded→504, OK→200, anything else→500.
int HttpStatusFromCode(absl::StatusCode code);

/// The canonical code an HTTP-level failure maps to (for errors the gateway raises itself,
/// e.g. 404 unknown route → NOT_FOUND, 413 → RESOURCE_EXHAUSTED, 405 → UNIMPLEMENTED).
absl::StatusCode CodeFromHttpStatus(int http_status);

/// The error body: {"code": <HTTP status>, "status": "<CANONICAL_CODE>", "message": "..."}
/// (Google API error style; `code` is the HTTP status, `status` the canonical code name).
/// The HTTP status is HttpStatusFromCode(status.code()) unless given.
std::string ErrorJson(const absl::Status& status);
std::string ErrorJson(const absl::Status& status, int http_status);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_HTTP_STATUS_H_
