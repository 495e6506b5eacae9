// The dashboard's static files (a single-page app) on the REST gateway's port: content
// types, SPA fallback to index.html, no path traversal, gzip compressed once per file
// version for clients that accept it.
#ifndef PARATUNE_SERVER_REST_DASHBOARD_H_
#define PARATUNE_SERVER_REST_DASHBOARD_H_

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace paratune::server {

/// Gzip-compressed dashboard files, keyed by path and recompressed when size or mtime
/// change. Thread-safe.
class GzipCache {
 public:
  /// The compressed `content` of `file`; an empty string when compression does not make
  /// it smaller; null when the file's size or time cannot be read.
  std::shared_ptr<const std::string> Get(const std::filesystem::path& file,
                                         const std::string& content);

 private:
  struct Entry {
    uintmax_t size = 0;
    std::filesystem::file_time_type mtime;
    std::shared_ptr<const std::string> gzipped;
  };
  std::mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

/// GET /... (registered last: it catches every GET no other route took). With an empty
/// `root` every path answers 404 naming --dashboard-dir; /v1/... paths always answer 404
/// "no route". `cache` must outlive the server.
void RegisterDashboardRoutes(httplib::Server& server, const std::string& root, GzipCache* cache);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_DASHBOARD_H_
