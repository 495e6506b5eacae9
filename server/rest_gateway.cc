// RestGateway: the server's lifecycle (TLS, threads, keep-alive, bind) and its routes,
// registered in phases (rest_routes.h).
#include "server/rest_gateway.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>

#include "server/http_status.h"
#include "server/rest_common.h"
#include "server/rest_dashboard.h"
#include "server/rest_routes.h"

namespace paratune::server {
namespace {

// SO_REUSEADDR only: httplib's default options add SO_REUSEPORT, which lets a second server
// bind the same port and take part of the connections. A coordinator owns its port.
void OwnPortSocketOptions(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

namespace fs = std::filesystem;

// A keep-alive connection is closed after this many requests, or this many idle seconds,
// so that open connections cannot keep every pool thread (see Start).
constexpr size_t kKeepAliveMaxRequests = 32;
constexpr time_t kKeepAliveTimeoutS = 2;

}  // namespace

void RegisterOpsRoutes(httplib::Server& server, Metrics* metrics) {
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJsonType);
  });
  server.Get("/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(OpenApiJson()), kJsonType);
  });
  server.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    if (metrics == nullptr) {
      WriteError(res, absl::UnimplementedError("metrics are not enabled on this server"));
      return;
    }
    res.set_content(metrics->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

void InstallHttpHandlers(httplib::Server& server, size_t max_body_bytes) {
  // Take the compression decision away from httplib (see rest_gateway.h): note whether
  // gzip is acceptable, then drop Accept-Encoding so httplib leaves bodies alone. The
  // request object is not const inside httplib; only this callback's view of it is.
  server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto& headers = const_cast<httplib::Request&>(req).headers;
    headers.erase(kAcceptsGzipHeader);  // only we may set it
    const std::string accept = req.get_header_value("Accept-Encoding");
    headers.erase("Accept-Encoding");
    if (accept.find("gzip") != std::string::npos) headers.emplace(kAcceptsGzipHeader, "1");
    // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112
    // 6.3); httplib would instead read a POST's body until the client closes, and answer
    // 400 when its read times out (`curl -X POST .../v1/jobs/ID:cancel`).
    if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      headers.emplace("Content-Length", "0");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // httplib's own failures (no route, body too large, bad request): JSON bodies too. Our
  // handlers' errors already have a body and are left alone.
  server.set_error_handler([max_body_bytes](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    switch (res.status) {
      case 404:
        message = Cat({"no route for ", req.method, " ", req.path});
        break;
      case 413:
        message =
            Cat({"request body exceeds the limit of ", std::to_string(max_body_bytes), " bytes"});
        break;
      case 400:
        message = "malformed HTTP request";
        break;
      case 414:
        message = "request URI too long";
        break;
      default:
        message = Cat({"HTTP status ", std::to_string(res.status)});
    }
    res.set_content(ErrorJson(absl::Status(CodeFromHttpStatus(res.status), message), res.status),
                    kJsonType);
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        WriteError(res, absl::InternalError(Cat({"internal error: ", what})));
      });
}

RestGateway::RestGateway(AutotunerHandler* handler, const Authenticator* authenticator,
                         Metrics* metrics, RestGatewayOptions options)
    : handler_(handler),
      authenticator_(authenticator),
      metrics_(metrics),
      options_(std::move(options)),
      gzip_cache_(std::make_unique<GzipCache>()) {}

RestGateway::~RestGateway() { Stop(); }

absl::StatusOr<int> RestGateway::Start(const std::string& host, int port) {
  if (server_) return absl::FailedPreconditionError("the REST gateway is already started");
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        Cat({"HTTP port (", std::to_string(port), ") must be in [0, 65535]"}));
  }
  if (!options_.dashboard_dir.empty()) {
    std::error_code ec;
    const fs::path root = fs::canonical(options_.dashboard_dir, ec);
    if (ec || !fs::is_directory(root)) {
      return absl::InvalidArgumentError(
          Cat({"--dashboard-dir '", options_.dashboard_dir, "' is not a directory"}));
    }
    dashboard_root_ = root.string();
  }
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (tls()) {
    auto ssl = std::make_unique<httplib::SSLServer>(options_.tls_cert_file.c_str(),
                                                    options_.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          Cat({"cannot load the TLS certificate '", options_.tls_cert_file, "' and key '",
               options_.tls_key_file, "'"}));
    }
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  const int threads = options_.threads > 0 ? options_.threads : 1;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  // Each keep-alive connection holds a pool thread while it is open: with as many busy
  // keep-alive clients as threads, a new connection (a /healthz probe, a /metrics scrape)
  // would wait until one of them went away (14.9 s with 64 polling clients and no limit).
  // A connection ends after kKeepAliveMaxRequests requests or kKeepAliveTimeoutS idle
  // seconds, so a queued connection gets a thread within a fraction of that turnover.
  server_->set_keep_alive_max_count(kKeepAliveMaxRequests);
  server_->set_keep_alive_timeout(kKeepAliveTimeoutS);
  // Responses go out as header and body writes; without NODELAY, Nagle's algorithm and the
  // client's delayed ACK add ~40 ms to each keep-alive request.
  server_->set_tcp_nodelay(true);
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of new
  // connections overflows it and the dropped SYNs are retried after 1 s. Keep the listening
  // socket so the backlog can be raised after bind.
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](socket_t sock) {
    OwnPortSocketOptions(sock);
    listen_fd = sock;
  });
  RegisterRoutes();

  int bound = -1;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (server_->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    server_.reset();  // also drops the &listen_fd capture
    return absl::UnavailableError(
        Cat({"cannot bind the REST gateway to ", host, ":", std::to_string(port)}));
  }
  // Linux allows listen() again on a listening socket to change its backlog.
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  server_->set_socket_options(OwnPortSocketOptions);  // drop the &listen_fd capture
  listener_done_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listener_done_ = true;
  });
  // Return once the listener runs: connections are served from then on.
  WaitForListener();
  return bound;
}

void RestGateway::WaitForListener() const {
  // The listener thread either starts accepting (is_running) or returns (listener_done_);
  // both happen as soon as the thread is scheduled.
  while (!server_->is_running() && !listener_done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void RestGateway::Stop() {
  if (server_ && thread_.joinable()) {
    // httplib's stop() closes the socket only once the listener runs: called before that,
    // it would do nothing and leave the listener in accept() for good.
    WaitForListener();
    server_->stop();
  }
  if (thread_.joinable()) thread_.join();
}

void RestGateway::RegisterRoutes() {
  const ApiContext context{authenticator_, metrics_, handler_ != nullptr};
  RegisterJobRoutes(*server_, context, handler_);
  RegisterCatalogRoutes(*server_, context);
  RegisterOpsRoutes(*server_, metrics_);
  RegisterDashboardRoutes(*server_, dashboard_root_, gzip_cache_.get());
  InstallHttpHandlers(*server_, options_.max_body_bytes);
}

}  // namespace paratune::server
