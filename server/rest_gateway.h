// The REST gateway: the Autotuner API over HTTP+JSON, on the same protobuf messages as gRPC
// (proto3 JSON mapping with the proto field names, snake_case), plus /healthz, /metrics,
// /openapi.json and the static dashboard, all on one port.
//
//   POST /v1/jobs                 body: SubmitJobRequest {"spec": {...}} or a bare JobSpec
//   GET  /v1/jobs                 ?page_size=&page_token=&state=   → ListJobsResponse
//   GET  /v1/jobs/{id}            → Job
//   GET  /v1/jobs/{id}/results    → JobResults
//   GET  /v1/jobs/{id}/results/{rank}:export?format=megatron|nemo|json
//                                 → the text `paratune export` prints for that layout
//                                   (json: its RankedConfig)
//   POST /v1/jobs/{id}:cancel     body: none, {} or {"id": "<same id>"} → Job
//   GET  /v1/workers              → ListWorkersResponse
//   GET  /v1/catalog              → presets, device profiles, precisions (rest_catalog.h)
//   GET  /healthz                 → {"status": "ok"}          (no token needed)
//   GET  /metrics                 → Prometheus text format    (no token needed)
//   GET  /openapi.json            → OpenAPI 3 document        (no token needed)
//   GET  /...                     → the dashboard (when a directory is configured)
//
// Compression: dashboard files go out gzip-compressed (compressed once per file version and
// cached) to clients that accept gzip; API answers are not compressed. cpp-httplib's own
// on-the-fly compression is switched off: it prefers brotli at quality 11, which took 16 s
// for a 2 MB script on the development machine.
//
// Specs are read as the CLI reads a spec file (rest_requests.h): the same strict reader,
// the same messages naming the field.
//
// Errors: {"code": <HTTP status>, "status": "<CANONICAL_CODE>", "message": "..."} with the
// HTTP status from HttpStatusFromCode(). /v1/ routes need the client token when one is
// configured (`authorization: Bearer <token>`).
//
// Thread-safe: handlers run on the HTTP server's thread pool; Start/Stop from one thread.
#ifndef PARATUNE_SERVER_REST_GATEWAY_H_
#define PARATUNE_SERVER_REST_GATEWAY_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/auth.h"
#include "server/handlers.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace paratune::server {
class GzipCache;
}  // namespace paratune::server

namespace paratune::server {

struct RestGatewayOptions {
  /// Serve this directory at / (SPA: unknown paths without a file extension get
  /// index.html). Empty: no dashboard; / answers 404.
  std::string dashboard_dir;
  /// Requests with a larger body get 413.
  size_t max_body_bytes = 1 << 20;
  /// Threads serving connections. A keep-alive connection holds one while open, for at most
  /// 32 requests or 2 idle seconds (rest_gateway.cc), so idle clients cannot starve new ones.
  int threads = 64;
  /// TLS: PEM certificate chain and private key files; both or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
};

/// The OpenAPI 3 document describing the gateway (server/openapi.json, embedded).
std::string_view OpenApiJson();

class RestGateway {
 public:
  /// `handler` must outlive the gateway; `authenticator` and `metrics` may be null (no auth,
  /// no metrics). A null `handler` serves everything but /v1/, which answers 503.
  RestGateway(AutotunerHandler* handler, const Authenticator* authenticator, Metrics* metrics,
              RestGatewayOptions options = {});
  ~RestGateway();
  RestGateway(const RestGateway&) = delete;
  RestGateway& operator=(const RestGateway&) = delete;

  /// Binds host:port (port 0 picks a free one) and serves on a background thread. Returns
  /// the bound port. Errors: InvalidArgument (bad options, e.g. dashboard_dir missing),
  /// Unavailable (cannot bind), FailedPrecondition (already started).
  absl::StatusOr<int> Start(const std::string& host, int port);
  /// Stops accepting and waits for the serving thread. Idempotent.
  void Stop();

  /// Whether the server speaks HTTPS.
  bool tls() const { return !options_.tls_cert_file.empty(); }

 private:
  /// The routes, phase by phase (rest_routes.h): the API, the operations endpoints, the
  /// dashboard (last: it takes every other GET), httplib's own error answers.
  void RegisterRoutes();

  AutotunerHandler* handler_;
  const Authenticator* authenticator_;
  Metrics* metrics_;
  RestGatewayOptions options_;
  std::string dashboard_root_;             // canonical absolute path, empty when no dashboard
  std::unique_ptr<GzipCache> gzip_cache_;  // dashboard files, compressed once each
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listener_done_{false};  // listen_after_bind has returned
  // Until the listener thread accepts (or has given up).
  void WaitForListener() const;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_GATEWAY_H_
