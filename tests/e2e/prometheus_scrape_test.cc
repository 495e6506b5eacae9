// A real Prometheus server scrapes the gateway's /metrics: `up` becomes 1 and a gauge set
// in-process is queried back through Prometheus' HTTP API.
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/metrics.h"
#include "server/rest_gateway.h"

namespace paratune::server {
namespace {

namespace fs = std::filesystem;

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string FindPrometheus() {
  for (const char* p : {"/usr/bin/prometheus", "/usr/local/bin/prometheus"}) {
    if (fs::exists(p)) return p;
  }
  return "";
}

// Polls `query` until it returns one sample with value `want` (or 90 s pass: Prometheus
// starts slowly next to other tests on two loaded cores; `alive` false ends the wait);
// returns the last value seen ("" when none).
std::string WaitForValue(httplib::Client& prom, const std::string& query,
                         const std::string& want, const std::function<bool()>& alive) {
  std::string last;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline && alive()) {
    auto res = prom.Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
    if (res && res->status == 200) {
      const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
      if (!body.is_discarded() && body["status"] == "success" &&
          !body["data"]["result"].empty()) {
        last = body["data"]["result"][0]["value"][1].get<std::string>();
        if (last == want) return last;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return last;
}

TEST(PrometheusScrapeTest, RealPrometheusScrapesMetrics) {
  const std::string prometheus = FindPrometheus();
  if (prometheus.empty()) {
    GTEST_SKIP() << "the prometheus binary is not installed (Debian package 'prometheus', "
                    "added by scripts/install-deps.sh)";
  }
  Metrics metrics;
  metrics.SetJobs(v1::JOB_STATE_SUCCEEDED, 7);
  metrics.SetWorkers("busy", 3);
  // /metrics does not touch the handler.
  RestGateway gateway(/*handler=*/nullptr, /*authenticator=*/nullptr, &metrics);
  absl::StatusOr<int> port = gateway.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  {
    httplib::Client client("127.0.0.1", *port);
    auto res = client.Get("/v1/jobs");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503);  // no handler behind this gateway
  }

  const fs::path dir = fs::temp_directory_path() /
                       ("paratune_prom_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  std::ofstream(dir / "prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: paratune\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << *port << "']\n";
  const std::string config_arg = "--config.file=" + (dir / "prometheus.yml").string();
  const std::string storage_arg = "--storage.tsdb.path=" + (dir / "data").string();
  const std::string log = (dir / "prometheus.log").string();
  // Prometheus cannot be told to pick its own port, so the port is chosen here, closed and
  // handed over; a test running in parallel can take it in between, and then Prometheus
  // exits at once. It then gets another port, up to three times.
  pid_t pid = -1;
  int web_port = -1;
  bool exited = false;
  auto alive = [&] {
    int wstatus = 0;
    if (!exited && ::waitpid(pid, &wstatus, WNOHANG) == pid) exited = true;
    return !exited;
  };
  std::string up;
  for (int attempt = 0; attempt < 3; ++attempt) {
    web_port = FreePort();
    ASSERT_GT(web_port, 0);
    const std::string listen_arg = "--web.listen-address=127.0.0.1:" + std::to_string(web_port);
    exited = false;
    pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      ::execl(prometheus.c_str(), prometheus.c_str(), config_arg.c_str(), storage_arg.c_str(),
              listen_arg.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    httplib::Client probe("127.0.0.1", web_port);
    probe.set_connection_timeout(1, 0);
    up = WaitForValue(probe, R"(up{job="paratune"})", "1", alive);
    if (alive()) break;
    std::cerr << "prometheus on port " << web_port << " exited (try " << attempt + 1
              << "):\n" << ReadText(log).substr(0, 2000) << "\n";
  }
  ASSERT_TRUE(alive()) << "prometheus did not stay up:\n" << ReadText(log).substr(0, 4000);

  httplib::Client prom("127.0.0.1", web_port);
  prom.set_connection_timeout(1, 0);
  const std::string jobs = WaitForValue(prom, R"(paratune_jobs{state="succeeded"})", "7", alive);
  const std::string busy = WaitForValue(prom, R"(paratune_workers{state="busy"})", "3", alive);

  if (!exited) ::kill(pid, SIGTERM);
  int wstatus = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!exited && ::waitpid(pid, &wstatus, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wstatus, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  gateway.Stop();

  std::ifstream log_in(log);
  const std::string log_text((std::istreambuf_iterator<char>(log_in)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(up, "1") << "Prometheus log:\n" << log_text.substr(0, 4000);
  EXPECT_EQ(jobs, "7");
  EXPECT_EQ(busy, "3");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace paratune::server
