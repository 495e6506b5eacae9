#include "server/rest_dashboard.h"

#include <httplib.h>
#include <zlib.h>

#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/rest_common.h"

namespace paratune::server {
namespace {

namespace fs = std::filesystem;

// Smaller files are sent as they are.
constexpr size_t kMinGzipBytes = 1024;

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
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
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

// The file a dashboard path names: NotFound / InvalidArgument for what must not be served.
absl::StatusOr<fs::path> ResolveDashboardFile(const std::string& path, const fs::path& root) {
  // Refuse traversal outright rather than rely on normalization alone.
  if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos) {
    return absl::InvalidArgumentError("path must not contain NUL or backslash");
  }
  std::stringstream segments(path);
  for (std::string segment; std::getline(segments, segment, '/');) {
    if (segment == "..") return absl::InvalidArgumentError("path must not contain '..' segments");
  }
  std::error_code ec;
  fs::path file = fs::weakly_canonical(root / fs::path(path).relative_path(), ec);
  // A symlink inside the directory may still point outside it.
  if (ec || !IsUnder(file, root)) return absl::NotFoundError(Cat({"no file for ", path}));
  if (fs::is_directory(file, ec)) file /= "index.html";
  if (!fs::is_regular_file(file, ec)) {
    // SPA fallback: client-side routes (no extension) get index.html; missing assets 404.
    if (!fs::path(path).extension().empty()) {
      return absl::NotFoundError(Cat({"no file for ", path}));
    }
    file = root / "index.html";
  }
  return file;
}

void ServeDashboardFile(const httplib::Request& req, httplib::Response& res, const fs::path& root,
                        GzipCache* cache) {
  const std::string& path = req.path;  // already percent-decoded by httplib
  absl::StatusOr<fs::path> file = ResolveDashboardFile(path, root);
  if (!file.ok()) {
    WriteError(res, file.status());
    return;
  }
  absl::StatusOr<std::string> content = ReadFile(*file);
  if (!content.ok()) {
    WriteError(res, absl::NotFoundError(Cat({"no file for ", path})));
    return;
  }
  const bool html = file->extension() == ".html";
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", html ? "no-cache" : "public, max-age=3600");
  res.set_header("Vary", "Accept-Encoding");
  if (content->size() >= kMinGzipBytes && req.has_header(kAcceptsGzipHeader)) {
    std::shared_ptr<const std::string> gzipped = cache->Get(*file, *content);
    if (gzipped != nullptr && !gzipped->empty()) {
      res.set_header("Content-Encoding", "gzip");
      res.set_content(*gzipped, std::string(ContentTypeFor(*file)));
      return;
    }
  }
  res.set_content(*std::move(content), std::string(ContentTypeFor(*file)));
}

}  // namespace

std::shared_ptr<const std::string> GzipCache::Get(const fs::path& file,
                                                  const std::string& content) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(file, ec);
  const fs::file_time_type mtime = fs::last_write_time(file, ec);
  if (ec) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(file.string());
    if (it != entries_.end() && it->second.size == size && it->second.mtime == mtime) {
      return it->second.gzipped;
    }
  }
  // Compress outside the lock; two racing requests may both compress, harmlessly.
  std::string gz = Gzip(content);
  if (gz.size() >= content.size()) gz.clear();
  auto gzipped = std::make_shared<const std::string>(std::move(gz));
  std::lock_guard<std::mutex> lock(mu_);
  entries_[file.string()] = Entry{size, mtime, gzipped};
  return gzipped;
}

void RegisterDashboardRoutes(httplib::Server& server, const std::string& root, GzipCache* cache) {
  server.Get(R"(/.*)", [root = fs::path(root), cache](const httplib::Request& req,
                                                      httplib::Response& res) {
    const std::string& path = req.path;
    if (path == "/v1" || path.rfind("/v1/", 0) == 0) {
      WriteError(res, absl::NotFoundError(Cat({"no route for GET ", path})));
      return;
    }
    if (root.empty()) {
      WriteError(
          res, absl::NotFoundError(Cat({"no route for GET ", path,
                                        " (the dashboard is served only with --dashboard-dir)"})));
      return;
    }
    ServeDashboardFile(req, res, root, cache);
  });
}

}  // namespace paratune::server
