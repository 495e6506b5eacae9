#include "server/rest_common.h"

#include <httplib.h>

#include <chrono>
#include <utility>

#include "server/convert.h"
#include "server/http_status.h"

namespace paratune::server {

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

// The one JSON dialect (server/convert.h): every field, proto names, as the CLI prints.
std::string ToJson(const google::protobuf::Message& message) { return WireJson(message, false); }

void WriteError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusFromCode(status.code());
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    res.set_header("WWW-Authenticate", "Bearer");
  }
  res.set_content(ErrorJson(status), kJsonType);
}

RouteHandler ApiRoute(const ApiContext& context, std::string method, ApiFunction fn,
                      bool needs_handler) {
  return [context, needs_handler, method = std::move(method), fn = std::move(fn)](
             const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status status;
    if (context.authenticator != nullptr) {
      status = context.authenticator->Check(req.get_header_value("Authorization"), Role::kClient);
    }
    if (status.ok() && needs_handler && !context.has_handler) {
      status = absl::UnavailableError("this server has no job manager behind its REST API");
    }
    if (status.ok()) {
      absl::StatusOr<RestBody> body = fn(req);
      status = body.status();
      if (body.ok()) {
        res.status = 200;
        if (!body->disposition.empty()) res.set_header("Content-Disposition", body->disposition);
        res.set_content(std::move(body->content), body->content_type);
      }
    }
    if (!status.ok()) WriteError(res, status);
    if (context.metrics != nullptr) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      context.metrics->ObserveRequest(method, Transport::kRest, status.code(), elapsed.count());
    }
  };
}

}  // namespace paratune::server
