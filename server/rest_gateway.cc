// RestGateway: cpp-httplib routes → AutotunerHandler, protobuf JSON mapping both ways.
#include "server/rest_gateway.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <sys/socket.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "server/http_status.h"
#include "server/limits.h"

namespace paratune::server {
namespace {

namespace fs = std::filesystem;
namespace pb = google::protobuf;

constexpr char kJsonType[] = "application/json; charset=utf-8";
// Set by the pre-routing handler when the client's Accept-Encoding lists gzip.
constexpr char kAcceptsGzipHeader[] = "X-Paratune-Accepts-Gzip";
// Smaller files are sent as they are.
constexpr size_t kMinGzipBytes = 1024;
// A keep-alive connection is closed after this many requests, or this many idle seconds,
// so that open connections cannot keep every pool thread (see Start).
constexpr size_t kKeepAliveMaxRequests = 32;
constexpr time_t kKeepAliveTimeoutS = 2;

// absl here has its own string_view type, so string building uses std::string directly.
std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

std::string ToJson(const pb::Message& message) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  // Print zeros, empty strings and default enums too, so clients see every field.
  options.always_print_primitive_fields = true;
  std::string out;
  pb::util::Status status = pb::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) return "{}";  // unreachable for our messages (no Any fields)
  return out;
}

absl::Status FromJson(std::string_view body, pb::Message* message, std::string_view what) {
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  pb::util::Status status =
      pb::util::JsonStringToMessage(pb::StringPiece(body.data(), body.size()), message, options);
  if (!status.ok()) {
    const pb::StringPiece msg = status.message();
    return absl::InvalidArgumentError(
        Cat({"invalid ", what, " JSON: ", std::string_view(msg.data(), msg.size())}));
  }
  return absl::OkStatus();
}

// Parses the POST /v1/jobs body: a SubmitJobRequest {"spec": {...}}, or a bare JobSpec
// (JobSpec has no field named "spec", so the two cannot be confused).
absl::StatusOr<v1::SubmitJobRequest> ParseSubmitBody(const std::string& body) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(
        "request body is not valid JSON; expected a SubmitJobRequest {\"spec\": {...}} or a "
        "JobSpec");
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  v1::SubmitJobRequest request;
  if (json.contains("spec")) {
    if (absl::Status s = FromJson(body, &request, "SubmitJobRequest"); !s.ok()) return s;
  } else {
    if (absl::Status s = FromJson(body, request.mutable_spec(), "JobSpec"); !s.ok()) return s;
  }
  return request;
}

absl::StatusOr<int32_t> ParseNonNegativeInt(const std::string& value, std::string_view name) {
  int64_t result = 0;
  if (value.empty() || value.size() > 10) {
    return absl::InvalidArgumentError(
        Cat({"query parameter ", name, " must be a non-negative integer, got '", value, "'"}));
  }
  for (char c : value) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(
          Cat({"query parameter ", name, " must be a non-negative integer, got '", value, "'"}));
    }
    result = result * 10 + (c - '0');
  }
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

std::string_view ContentTypeFor(const fs::path& path) {
  static const std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".htm", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".ico", "image/x-icon"},
      {".woff", "font/woff"},
      {".woff2", "font/woff2"},
      {".ttf", "font/ttf"},
      {".txt", "text/plain; charset=utf-8"},
      {".wasm", "application/wasm"},
  };
  std::string ext = path.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [e, type] : kTypes) {
    if (ext == e) return type;
  }
  return "application/octet-stream";
}

bool IsUnder(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat({"cannot read ", path.string()}));
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// gzip (RFC 1952) of `data` at the best compression level; empty on failure.
std::string Gzip(const std::string& data) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return "";
  }
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END ? out : "";
}

void WriteError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusFromCode(status.code());
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    res.set_header("WWW-Authenticate", "Bearer");
  }
  res.set_content(ErrorJson(status), kJsonType);
}

}  // namespace

// Compressed dashboard files, keyed by path and invalidated when size or mtime change.
struct RestGateway::GzipCache {
  struct Entry {
    uintmax_t size = 0;
    fs::file_time_type mtime;
    std::shared_ptr<const std::string> gzipped;  // empty string: not worth compressing
  };
  std::mutex mu;
  std::map<std::string, Entry> entries ABSL_GUARDED_BY(mu);

  std::shared_ptr<const std::string> Get(const fs::path& file, const std::string& content) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    const fs::file_time_type mtime = fs::last_write_time(file, ec);
    if (ec) return nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = entries.find(file.string());
      if (it != entries.end() && it->second.size == size && it->second.mtime == mtime) {
        return it->second.gzipped;
      }
    }
    // Compress outside the lock; two racing requests may both compress, harmlessly.
    std::string gz = Gzip(content);
    if (gz.size() >= content.size()) gz.clear();
    auto gzipped = std::make_shared<const std::string>(std::move(gz));
    std::lock_guard<std::mutex> lock(mu);
    entries[file.string()] = Entry{size, mtime, gzipped};
    return gzipped;
  }
};

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
      return absl::InvalidArgumentError(Cat({"cannot load the TLS certificate '",
                                             options_.tls_cert_file, "' and key '",
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
  // used to wait until one of them went away (14.9 s with 64 polling clients). A
  // connection now ends after kKeepAliveMaxRequests requests or kKeepAliveTimeoutS idle
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
    // SO_REUSEADDR only: httplib's default SO_REUSEPORT lets a second server share the port.
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
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
  server_->set_socket_options(httplib::default_socket_options);  // drop the &listen_fd capture
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void RestGateway::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void RestGateway::RegisterRoutes() {
  using Body = absl::StatusOr<std::string>;
  using Api = std::function<Body(const httplib::Request&)>;
  // Wraps an API route: client-token check, JSON response or JSON error, metrics.
  const auto api = [this](std::string method, Api fn) {
    return [this, method = std::move(method), fn = std::move(fn)](const httplib::Request& req,
                                                                   httplib::Response& res) {
      const auto start = std::chrono::steady_clock::now();
      absl::Status status;
      if (authenticator_ != nullptr) {
        status = authenticator_->Check(req.get_header_value("Authorization"), Role::kClient);
      }
      if (status.ok() && handler_ == nullptr) {
        status = absl::UnavailableError("this server has no job manager behind its REST API");
      }
      if (status.ok()) {
        Body body = fn(req);
        status = body.status();
        if (body.ok()) {
          res.status = 200;
          res.set_content(*std::move(body), kJsonType);
        }
      }
      if (!status.ok()) WriteError(res, status);
      if (metrics_ != nullptr) {
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        metrics_->ObserveRequest(method, Transport::kRest, status.code(), elapsed.count());
      }
    };
  };
  const auto json_or = [](auto status_or) -> Body {
    if (!status_or.ok()) return status_or.status();
    return ToJson(*status_or);
  };

  server_->Post("/v1/jobs", api("SubmitJob", [this, json_or](const httplib::Request& req) {
                  absl::StatusOr<v1::SubmitJobRequest> request = ParseSubmitBody(req.body);
                  if (!request.ok()) return Body(request.status());
                  if (absl::Status s = ValidateSubmitJobRequest(*request); !s.ok()) return Body(s);
                  return json_or(handler_->SubmitJob(*request));
                }));
  server_->Get("/v1/jobs", api("ListJobs", [this, json_or](const httplib::Request& req) {
                 absl::StatusOr<v1::ListJobsRequest> request = ParseListJobsQuery(req);
                 if (!request.ok()) return Body(request.status());
                 return json_or(handler_->ListJobs(*request));
               }));
  server_->Get(R"(/v1/jobs/([^/:]+))", api("GetJob", [this, json_or](const httplib::Request& req) {
                 v1::GetJobRequest request;
                 request.set_id(req.matches[1].str());
                 return json_or(handler_->GetJob(request));
               }));
  server_->Get(R"(/v1/jobs/([^/:]+)/results)",
               api("GetResults", [this, json_or](const httplib::Request& req) {
                 v1::GetResultsRequest request;
                 request.set_id(req.matches[1].str());
                 return json_or(handler_->GetResults(request));
               }));
  server_->Post(R"(/v1/jobs/([^/:]+):cancel)",
                api("CancelJob", [this, json_or](const httplib::Request& req) {
                  // The body is optional: empty, {} or a CancelJobRequest naming the same id.
                  v1::CancelJobRequest request;
                  if (!req.body.empty()) {
                    if (absl::Status s = FromJson(req.body, &request, "CancelJobRequest");
                        !s.ok()) {
                      return Body(s);
                    }
                  }
                  const std::string id = req.matches[1].str();
                  if (!request.id().empty() && request.id() != id) {
                    return Body(absl::InvalidArgumentError(
                        Cat({"body id '", request.id(), "' differs from the path id '", id, "'"})));
                  }
                  request.set_id(id);
                  return json_or(handler_->CancelJob(request));
                }));
  server_->Get("/v1/workers", api("ListWorkers", [this, json_or](const httplib::Request&) {
                 return json_or(handler_->ListWorkers(v1::ListWorkersRequest()));
               }));

  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJsonType);
  });
  server_->Get("/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(OpenApiJson()), kJsonType);
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (metrics_ == nullptr) {
      WriteError(res, absl::UnimplementedError("metrics are not enabled on this server"));
      return;
    }
    res.set_content(metrics_->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });

  // Everything else that is a GET: the dashboard (single-page app).
  server_->Get(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string& path = req.path;  // already percent-decoded by httplib
    if (path == "/v1" || path.rfind("/v1/", 0) == 0) {
      WriteError(res, absl::NotFoundError(Cat({"no route for GET ", path})));
      return;
    }
    if (dashboard_root_.empty()) {
      WriteError(res, absl::NotFoundError(
                          Cat({"no route for GET ", path,
                               " (the dashboard is served only with --dashboard-dir)"})));
      return;
    }
    // Refuse traversal outright rather than rely on normalization alone.
    if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos) {
      WriteError(res, absl::InvalidArgumentError("path must not contain NUL or backslash"));
      return;
    }
    std::stringstream segments(path);
    for (std::string segment; std::getline(segments, segment, '/');) {
      if (segment == "..") {
        WriteError(res, absl::InvalidArgumentError("path must not contain '..' segments"));
        return;
      }
    }
    const fs::path root(dashboard_root_);
    std::error_code ec;
    fs::path file = fs::weakly_canonical(root / fs::path(path).relative_path(), ec);
    // A symlink inside the directory may still point outside it.
    if (ec || !IsUnder(file, root)) {
      WriteError(res, absl::NotFoundError(Cat({"no file for ", path})));
      return;
    }
    if (fs::is_directory(file, ec)) file /= "index.html";
    if (!fs::is_regular_file(file, ec)) {
      // SPA fallback: client-side routes (no extension) get index.html; missing assets 404.
      if (!fs::path(path).extension().empty()) {
        WriteError(res, absl::NotFoundError(Cat({"no file for ", path})));
        return;
      }
      file = root / "index.html";
    }
    absl::StatusOr<std::string> content = ReadFile(file);
    if (!content.ok()) {
      WriteError(res, absl::NotFoundError(Cat({"no file for ", path})));
      return;
    }
    const bool html = file.extension() == ".html";
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", html ? "no-cache" : "public, max-age=3600");
    res.set_header("Vary", "Accept-Encoding");
    if (content->size() >= kMinGzipBytes && req.has_header(kAcceptsGzipHeader)) {
      std::shared_ptr<const std::string> gzipped = gzip_cache_->Get(file, *content);
      if (gzipped != nullptr && !gzipped->empty()) {
        res.set_header("Content-Encoding", "gzip");
        res.set_content(*gzipped, std::string(ContentTypeFor(file)));
        return;
      }
    }
    res.set_content(*std::move(content), std::string(ContentTypeFor(file)));
  });

  // Take the compression decision away from httplib (see rest_gateway.h): note whether
  // gzip is acceptable, then drop Accept-Encoding so httplib leaves bodies alone. The
  // request object is not const inside httplib; only this callback's view of it is.
  server_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto& headers = const_cast<httplib::Request&>(req).headers;
    headers.erase(kAcceptsGzipHeader);  // only we may set it
    const std::string accept = req.get_header_value("Accept-Encoding");
    headers.erase("Accept-Encoding");
    if (accept.find("gzip") != std::string::npos) headers.emplace(kAcceptsGzipHeader, "1");
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // httplib's own failures (no route, body too large, bad request): JSON bodies too. Our
  // handlers' errors already have a body and are left alone.
  const size_t max_body = options_.max_body_bytes;
  server_->set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    switch (res.status) {
      case 404:
        message = Cat({"no route for ", req.method, " ", req.path});
        break;
      case 413:
        message = Cat({"request body exceeds the limit of ", std::to_string(max_body), " bytes"});
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
    res.set_content(
        ErrorJson(absl::Status(CodeFromHttpStatus(res.status), message), res.status),
        kJsonType);
  });
  server_->set_exception_handler(
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

}  // namespace paratune::server
