// What the REST gateway's route files share: JSON printing in the proto JSON mapping, the
// error body, and the wrapper that turns an API function into an httplib handler (client
// token, 503 without a job manager, JSON or text answer, request metrics).
#ifndef PARATUNE_SERVER_REST_COMMON_H_
#define PARATUNE_SERVER_REST_COMMON_H_

#include <google/protobuf/message.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/auth.h"
#include "server/metrics.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace paratune::server {

inline constexpr char kJsonType[] = "application/json; charset=utf-8";
inline constexpr char kTextType[] = "text/plain; charset=utf-8";
/// Set by the pre-routing handler (rest_gateway.cc) when the client's Accept-Encoding
/// lists gzip; the dashboard route reads it (rest_dashboard.cc).
inline constexpr char kAcceptsGzipHeader[] = "X-Paratune-Accepts-Gzip";

/// Concatenation (abseil here has its own string_view type, so the gateway builds
/// std::string directly).
std::string Cat(std::initializer_list<std::string_view> parts);

/// The proto3 JSON mapping with proto field names, every field printed (defaults too).
std::string ToJson(const google::protobuf::Message& message);

/// Sets the HTTP status and the JSON error body ({"code", "status", "message"}).
void WriteError(httplib::Response& res, const absl::Status& status);

/// An API answer: the body and its content type.
struct RestBody {
  std::string content;
  std::string content_type = kJsonType;
  /// Set as Content-Disposition when not empty (downloads).
  std::string disposition;
};
using ApiFunction = std::function<absl::StatusOr<RestBody>(const httplib::Request&)>;
using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

/// What every /v1/ route checks before it runs.
struct ApiContext {
  const Authenticator* authenticator = nullptr;  ///< null: no token needed
  Metrics* metrics = nullptr;                    ///< null: nothing recorded
  bool has_handler = false;                      ///< false: job routes answer 503
};

/// Wraps `fn`: the client-token check, 503 when `needs_handler` and there is no job
/// manager, the answer or the JSON error, and one request metric named `method`.
RouteHandler ApiRoute(const ApiContext& context, std::string method, ApiFunction fn,
                      bool needs_handler = true);

/// A message as a JSON answer, or the error.
template <typename Message>
absl::StatusOr<RestBody> JsonAnswer(const absl::StatusOr<Message>& message) {
  if (!message.ok()) return message.status();
  return RestBody{ToJson(*message), kJsonType, ""};
}

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_COMMON_H_
