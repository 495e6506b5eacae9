// coordinator_load: N concurrent clients submit GPT-3 175B model-mode jobs to a coordinator
// for a fixed time, over gRPC and/or REST, and report throughput and latency percentiles.
//
// By default it starts build/bin/paratune-coordinator itself (next to this binary) on free
// ports with a fresh SQLite database; --grpc-target / --http-target aim it at a running one.
// Each response is checked: a job id that is empty or repeats counts as wrong.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <google/protobuf/util/json_util.h>

#include "paratune/v1/service.grpc.pb.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// deploy/examples/gpt3-175b.yaml, analytical mode.
paratune::v1::JobSpec Gpt3Spec() {
  paratune::v1::JobSpec spec;
  spec.set_name("load-gpt3-175b");
  spec.mutable_model()->set_preset("gpt3-175b");
  spec.mutable_training()->set_seq_length(2048);
  spec.mutable_training()->set_global_batch_size(1536);
  spec.mutable_training()->set_precision("bf16");
  spec.mutable_cluster()->set_gpu("a100-80gb");
  spec.mutable_cluster()->set_num_gpus(1024);
  spec.mutable_cluster()->set_gpus_per_node(8);
  spec.mutable_search()->set_top_k(10);
  spec.mutable_search()->set_mode("model");
  return spec;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// A coordinator child process on free ports with a temporary database.
class Coordinator {
 public:
  ~Coordinator() { Stop(); }

  bool Start(const std::string& binary) {
    dir_ = fs::temp_directory_path() / ("paratune_load_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string ports = (dir_ / "ports").string();
    const std::string db = (dir_ / "load.db").string();
    const std::string log = (dir_ / "coordinator.log").string();
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      ::execl(binary.c_str(), binary.c_str(), "--bind", "127.0.0.1", "--grpc-port", "0",
              "--http-port", "0", "--db", db.c_str(), "--port-file", ports.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      std::istringstream in(ReadFile(ports));
      if (in >> grpc_port_ >> http_port_) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cerr << "coordinator_load: the coordinator did not start; its log:\n"
              << ReadFile(log) << "\n";
    return false;
  }

  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      pid_ = -1;
    }
    if (!dir_.empty()) fs::remove_all(dir_);
    dir_.clear();
  }

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }

 private:
  pid_t pid_ = -1;
  fs::path dir_;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

struct Outcome {
  std::vector<double> latencies_ms;  // successful requests
  int64_t errors = 0;
  int64_t wrong = 0;  // OK responses with an empty or repeated job id
  std::map<std::string, int64_t> error_kinds;
  double seconds = 0;
};

// Runs `clients` threads calling `submit` until `duration` passes. `submit` returns the job
// id, or an error description.
using Submit = std::function<bool(std::string* id_or_error)>;
using SubmitFactory = std::function<Submit()>;

Outcome RunLoad(int clients, double duration_s, const SubmitFactory& make_submit) {
  std::vector<Outcome> per_client(clients);
  std::vector<std::set<std::string>> ids(clients);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(duration_s));
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Submit submit = make_submit();
      while (!go.load()) std::this_thread::yield();
      Outcome& out = per_client[c];
      while (Clock::now() < end) {
        std::string result;
        const auto t0 = Clock::now();
        const bool ok = submit(&result);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (!ok) {
          ++out.errors;
          ++out.error_kinds[result.substr(0, 120)];
          continue;
        }
        out.latencies_ms.push_back(ms);
        if (result.empty() || !ids[c].insert(result).second) ++out.wrong;
      }
    });
  }
  const auto t_start = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  Outcome total;
  total.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::set<std::string> all_ids;
  for (int c = 0; c < clients; ++c) {
    Outcome& o = per_client[c];
    total.latencies_ms.insert(total.latencies_ms.end(), o.latencies_ms.begin(),
                              o.latencies_ms.end());
    total.errors += o.errors;
    total.wrong += o.wrong;
    for (const auto& [k, n] : o.error_kinds) total.error_kinds[k] += n;
    for (const std::string& id : ids[c]) {
      if (!all_ids.insert(id).second) ++total.wrong;  // the same id handed to two clients
    }
  }
  std::sort(total.latencies_ms.begin(), total.latencies_ms.end());
  return total;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

SubmitFactory GrpcSubmitter(const std::string& target, const std::string& token,
                            const paratune::v1::JobSpec& spec) {
  return [=] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
    auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    std::shared_ptr<paratune::v1::Autotuner::Stub> stub = paratune::v1::Autotuner::NewStub(channel);
    paratune::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    return Submit([stub, request, token](std::string* out) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
      paratune::v1::Job job;
      const grpc::Status status = stub->SubmitJob(&context, request, &job);
      if (!status.ok()) {
        *out = "gRPC code " + std::to_string(status.error_code()) + ": " + status.error_message();
        return false;
      }
      *out = job.id();
      return true;
    });
  };
}

SubmitFactory RestSubmitter(const std::string& host, int port, const std::string& token,
                            const std::string& body) {
  return [=] {
    auto client = std::make_shared<httplib::Client>(host, port);
    client->set_keep_alive(true);
    client->set_tcp_nodelay(true);
    client->set_read_timeout(10, 0);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return Submit([client, headers, body](std::string* out) {
      auto res = client->Post("/v1/jobs", headers, body, "application/json");
      if (!res) {
        *out = "HTTP transport error " + httplib::to_string(res.error());
        return false;
      }
      if (res->status != 200) {
        *out = "HTTP " + std::to_string(res->status) + ": " + res->body;
        return false;
      }
      const nlohmann::json job = nlohmann::json::parse(res->body, nullptr, false);
      *out = job.is_object() && job.contains("id") && job["id"].is_string()
                 ? job["id"].get<std::string>()
                 : "";
      return true;
    });
  };
}

// paratune_jobs{state="..."} values from /metrics, to show what the coordinator did.
std::map<std::string, double> ScrapeJobGauges(const std::string& host, int port,
                                              const std::string& token) {
  std::map<std::string, double> out;
  httplib::Client client(host, port);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto res = client.Get("/metrics", headers);
  if (!res || res->status != 200) return out;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    const std::string prefix = "paratune_jobs{state=\"";
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t q = line.find('"', prefix.size());
    const size_t sp = line.rfind(' ');
    if (q == std::string::npos || sp == std::string::npos) continue;
    out[line.substr(prefix.size(), q - prefix.size())] = std::stod(line.substr(sp + 1));
  }
  return out;
}

bool SplitHostPort(const std::string& target, std::string* host, int* port) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) return false;
  *host = target.substr(0, colon);
  try {
    *port = std::stoi(target.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return *port > 0 && *port < 65536;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coordinator_load: concurrent SubmitJob load (gpt3-175b, model mode) over gRPC "
               "and REST"};
  double duration = 30;
  int clients = 32;
  std::string transport = "both";
  std::string coordinator_bin;
  std::string grpc_target, http_target, token_file;
  double target_p99_ms = 250;
  bool json_output = false;
  app.add_option("--duration", duration, "Seconds of load per transport")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--clients", clients, "Concurrent clients")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--transport", transport, "grpc, rest or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"grpc", "rest", "both"}));
  app.add_option("--coordinator-bin", coordinator_bin,
                 "Coordinator to start (default: paratune-coordinator next to this binary)");
  app.add_option("--grpc-target", grpc_target,
                 "host:port of a running coordinator's gRPC server (no coordinator started)");
  app.add_option("--http-target", http_target,
                 "host:port of a running coordinator's REST gateway (no coordinator started)");
  app.add_option("--client-token-file", token_file, "Bearer token for a guarded coordinator");
  app.add_option("--target-p99-ms", target_p99_ms, "Pass/fail threshold for p99 latency")
      ->capture_default_str();
  app.add_flag("--json", json_output, "Print one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);

  const bool want_grpc = transport != "rest";
  const bool want_rest = transport != "grpc";
  const std::string token = token_file.empty() ? "" : Trim(ReadFile(token_file));

  std::optional<Coordinator> coordinator;
  std::string grpc_host = "127.0.0.1", http_host = "127.0.0.1";
  int grpc_port = 0, http_port = 0;
  const bool external = !grpc_target.empty() || !http_target.empty();
  if (external) {
    const bool have_grpc = SplitHostPort(grpc_target, &grpc_host, &grpc_port);
    const bool have_http = SplitHostPort(http_target, &http_host, &http_port);
    if ((want_grpc && !have_grpc) || (want_rest && !have_http)) {
      std::cerr << "coordinator_load: --transport " << transport
                << " needs --grpc-target and/or --http-target as host:port\n";
      return 2;
    }
  } else {
    if (coordinator_bin.empty()) {
      coordinator_bin = (fs::path(argv[0]).parent_path() / "paratune-coordinator").string();
    }
    if (!fs::exists(coordinator_bin)) {
      std::cerr << "coordinator_load: no coordinator binary at " << coordinator_bin << "\n";
      return 1;
    }
    coordinator.emplace();
    if (!coordinator->Start(coordinator_bin)) return 1;
    grpc_port = coordinator->grpc_port();
    http_port = coordinator->http_port();
  }

  const paratune::v1::JobSpec spec = Gpt3Spec();
  paratune::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  std::string body;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(request, &body, print);

  struct Row {
    std::string transport;
    Outcome outcome;
  };
  std::vector<Row> rows;
  if (want_grpc) {
    const std::string target = grpc_host + ":" + std::to_string(grpc_port);
    rows.push_back({"grpc", RunLoad(clients, duration, GrpcSubmitter(target, token, spec))});
  }
  if (want_rest) {
    rows.push_back(
        {"rest", RunLoad(clients, duration, RestSubmitter(http_host, http_port, token, body))});
  }
  std::map<std::string, double> jobs;
  if (http_port > 0) jobs = ScrapeJobGauges(http_host, http_port, token);
  if (coordinator) coordinator->Stop();

  bool pass = true;
  nlohmann::json json_rows = nlohmann::json::array();
  for (const Row& row : rows) {
    const Outcome& o = row.outcome;
    const double p99 = Percentile(o.latencies_ms, 99);
    if (o.errors != 0 || o.wrong != 0 || p99 >= target_p99_ms || o.latencies_ms.empty()) {
      pass = false;
    }
    json_rows.push_back({{"transport", row.transport},
                         {"clients", clients},
                         {"seconds", o.seconds},
                         {"requests", o.latencies_ms.size()},
                         {"errors", o.errors},
                         {"wrong", o.wrong},
                         {"requests_per_s", static_cast<double>(o.latencies_ms.size()) / o.seconds},
                         {"p50_ms", Percentile(o.latencies_ms, 50)},
                         {"p90_ms", Percentile(o.latencies_ms, 90)},
                         {"p99_ms", p99},
                         {"max_ms", o.latencies_ms.empty() ? 0 : o.latencies_ms.back()},
                         {"error_kinds", o.error_kinds}});
  }

  if (json_output) {
    std::cout << nlohmann::json({{"benchmark", "coordinator_load"},
                                 {"job", "gpt3-175b (1024 x a100-80gb, mode=model)"},
                                 {"duration_s", duration},
                                 {"target_p99_ms", target_p99_ms},
                                 {"rows", json_rows},
                                 {"coordinator_jobs", jobs},
                                 {"pass", pass}})
                     .dump(2)
              << "\n";
    return pass ? 0 : 1;
  }

  std::printf("# ParaTune coordinator load: SubmitJob gpt3-175b (1024 x a100-80gb, mode=model)\n");
  std::printf("# %d concurrent clients, %.0f s per transport, coordinator %s\n", clients, duration,
              external ? "given" : coordinator_bin.c_str());
  std::printf("#\n");
  std::printf("# %9s %7s %8s %9s %7s %6s %9s %8s %8s %8s %8s\n", "transport", "clients",
              "duration", "requests", "errors", "#wrong", "rate", "p50", "p90", "p99", "max");
  std::printf("# %9s %7s %8s %9s %7s %6s %9s %8s %8s %8s %8s\n", "", "", "s", "", "", "", "req/s",
              "ms", "ms", "ms", "ms");
  for (const nlohmann::json& r : json_rows) {
    std::printf("  %9s %7d %8.1f %9zu %7lld %6lld %9.1f %8.2f %8.2f %8.2f %8.2f\n",
                r["transport"].get<std::string>().c_str(), clients, r["seconds"].get<double>(),
                r["requests"].get<size_t>(), static_cast<long long>(r["errors"].get<int64_t>()),
                static_cast<long long>(r["wrong"].get<int64_t>()),
                r["requests_per_s"].get<double>(), r["p50_ms"].get<double>(),
                r["p90_ms"].get<double>(), r["p99_ms"].get<double>(), r["max_ms"].get<double>());
  }
  for (const Row& row : rows) {
    for (const auto& [kind, n] : row.outcome.error_kinds) {
      std::printf("# %s error x%lld: %s\n", row.transport.c_str(), static_cast<long long>(n),
                  kind.c_str());
    }
  }
  if (!jobs.empty()) {
    std::printf("# coordinator jobs at the end:");
    for (const auto& [state, n] : jobs) {
      if (n > 0) std::printf(" %s %.0f", state.c_str(), n);
    }
    std::printf("\n");
  }
  std::printf("# target: zero errors, p99 < %.0f ms: %s\n", target_p99_ms, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
