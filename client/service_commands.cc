// submit, watch, results, cancel, workers: talk to a coordinator over gRPC; tune: run the
// coordinator logic and a local worker in this process (DESIGN.md "embedded default").
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/render.h"
#include "client/render_inference.h"
#include "client/spec_file.h"
#include "paratune/v1/service.grpc.pb.h"
#include "inference/planner.h"
#include "search/planner.h"
#include "server/clock.h"
#include "server/convert.h"
#include "server/convert_inference.h"
#include "server/grpc_services.h"
#include "server/job_manager.h"
#include "server/store.h"
#include "worker/daemon.h"

namespace paratune::client {
namespace {

using server::FromGrpcStatus;
using server::JobStateName;

constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";

/// 0 ok, 2 invalid argument (usage / bad spec), 1 anything else.
int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return 0;
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Fail(const absl::Status& status) {
  std::cerr << "paratune: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return ExitCodeFor(status);
}

absl::StatusOr<std::string> ReadText(const std::string& path, const char* what) {
  absl::StatusOr<std::string> text = ReadInputFile(path, kMaxSpecFileBytes, what);
  if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
  return text;
}

/// The results of a job as a table: training rankings by ResultsTable, inference ones by
/// FormatInferencePlanTable (client/render_inference.h); the results' JSON when the plan or
/// the spec does not convert.
std::string JobResultsText(const v1::JobResults& results, const v1::JobSpec& spec) {
  if (!results.plan().has_inference()) return ResultsTable(results, spec);
  absl::StatusOr<inference::InferencePlanResult> plan =
      server::InferencePlanResultFromProto(results.plan().inference());
  absl::StatusOr<inference::InferenceJobSpec> inference_spec = server::InferenceSpecFromProto(spec);
  if (!plan.ok() || !inference_spec.ok()) return server::WireJson(results) + "\n";
  return FormatInferencePlanTable(*plan, *inference_spec);
}

// --- Connection ---------------------------------------------------------------------------

struct Connection {
  std::string coordinator;  // HOST:PORT; empty = $PARATUNE_COORDINATOR or the default.
  std::string token_file;   // Bearer token for the client role.
  std::string tls_ca;       // PEM roots; set = TLS.

  void AddOptions(CLI::App* cmd) {
    cmd->add_option("--coordinator", coordinator,
                    "Coordinator HOST:PORT (default $PARATUNE_COORDINATOR or 127.0.0.1:50051)");
    cmd->add_option("--token-file", token_file, "File with the client bearer token");
    cmd->add_option("--tls-ca", tls_ca, "PEM CA certificates: connect with TLS");
  }

  std::string Address() const {
    if (!coordinator.empty()) return coordinator;
    const char* env = std::getenv("PARATUNE_COORDINATOR");
    return env != nullptr && *env != '\0' ? env : kDefaultCoordinator;
  }

  absl::StatusOr<std::unique_ptr<v1::Autotuner::Stub>> Stub() {
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
    if (!tls_ca.empty()) {
      absl::StatusOr<std::string> roots = ReadText(tls_ca, "--tls-ca");
      if (!roots.ok()) return roots.status();
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = *roots;
      creds = grpc::SslCredentials(ssl);
    }
    if (!token_file.empty()) {
      absl::StatusOr<std::string> token = ReadText(token_file, "--token-file");
      if (!token.ok()) return token.status();
      token_ = *token;
      token_.erase(token_.find_last_not_of(" \t\r\n") + 1);
    }
    std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(Address(), creds);
    // A first connection attempt that fails (a coordinator still coming up, a reset under
    // load: seen once as UNAVAILABLE on a fresh machine's test run) is retried by the
    // channel's own backoff for up to 3 s before the first call fails fast.
    channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(3));
    return v1::Autotuner::NewStub(channel);
  }

  /// A context carrying the token; `deadline_s` 0 = none (streams).
  std::unique_ptr<grpc::ClientContext> Context(double deadline_s = 30) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    if (deadline_s > 0) {
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1e3)));
    }
    return ctx;
  }

  /// Adds where we tried to a transport error.
  absl::Status Explain(const grpc::Status& status) const {
    absl::Status s = FromGrpcStatus(status);
    if (s.code() == absl::StatusCode::kUnavailable ||
        s.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::Status(s.code(), absl::StrCat("cannot reach the coordinator at ", Address(),
                                                  ": ", s.message()));
    }
    return s;
  }

 private:
  std::string token_;
};

// --- Spec loading (submit, tune) --------------------------------------------------------

struct SpecArgs {
  std::string file;
  std::string preset;
  std::string hf_config;
  std::string mode;

  void AddOptions(CLI::App* cmd) {
    cmd->add_option("--spec,spec", file, "Job spec file (YAML or JSON)")->required();
    cmd->add_option("--preset", preset, "Shortcut: model.preset (replaces the file's model)");
    cmd->add_option("--hf-config", hf_config,
                    "Shortcut: a Hugging Face config.json as the model (replaces the file's)");
    cmd->add_option("--mode", mode, "Shortcut: search.mode (model | profile)");
  }

  /// The validated wire spec; InvalidArgument naming the field.
  absl::StatusOr<v1::JobSpec> Load() const {
    absl::StatusOr<nlohmann::json> json = ReadSpecFile(file);
    if (!json.ok()) {
      // A missing spec file is a usage error (exit 2), like a malformed one.
      return absl::InvalidArgumentError(json.status().message());
    }
    if (!preset.empty()) (*json)["model"] = nlohmann::json{{"preset", preset}};
    if (!hf_config.empty()) {
      absl::StatusOr<std::string> text = ReadText(hf_config, "--hf-config");
      if (!text.ok()) return text.status();
      (*json)["model"] = nlohmann::json{{"hf_config_json", *text}};
    }
    if (!mode.empty()) (*json)["search"]["mode"] = mode;
    return server::SpecProtoFromJson(*json);
  }
};

// --- Output -------------------------------------------------------------------------------

/// Prints progress lines; on a terminal, one line rewritten in place.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool json) : json_(json), tty_(isatty(STDOUT_FILENO) != 0) {}
  void Update(const v1::Job& job) {
    if (json_) {
      const std::string line = server::WireJson(job, /*pretty=*/false);
      if (line == last_) return;  // keepalives repeat an unchanged job
      std::cout << line << std::endl;
      last_ = line;
      return;
    }
    const std::string line = ProgressLine(job);
    if (line == last_) return;
    if (tty_) {
      std::cout << "\r\033[K" << line << std::flush;
      if (server::IsTerminal(job.state())) std::cout << "\n";
    } else {
      std::cout << line << std::endl;
    }
    last_ = line;
  }

 private:
  const bool json_;
  const bool tty_;
  std::string last_;
};

// --- Remote commands ----------------------------------------------------------------------

/// Follows the job to a terminal state. A coordinator that goes away mid-watch (restart,
/// outage) is retried with backoff (250 ms doubling to 5 s) for up to `reconnect_s`, then
/// the watch resumes.
int WatchRemote(Connection& conn, v1::Autotuner::Stub& stub, const std::string& id, bool json,
                double reconnect_s = 300) {
  v1::WatchJobRequest req;
  req.set_id(id);
  ProgressPrinter printer(json);
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  auto last_contact = std::chrono::steady_clock::now();
  bool workers_checked = false;
  int64_t backoff_ms = 250;
  while (true) {
    auto ctx = conn.Context(/*deadline_s=*/0);
    std::unique_ptr<grpc::ClientReader<v1::Job>> reader = stub.WatchJob(ctx.get(), req);
    v1::Job job;
    while (reader->Read(&job)) {
      if (job.state() == v1::JOB_STATE_PROFILING && !workers_checked) {
        // Tasks only go to workers of the spec's device kind: say so when there is none.
        workers_checked = true;
        v1::ListWorkersResponse workers;
        if (stub.ListWorkers(conn.Context().get(), v1::ListWorkersRequest(), &workers).ok()) {
          const std::string& kind = job.spec().cluster().gpu();
          bool any = false;
          for (const v1::WorkerInfo& w : workers.workers()) {
            any = any || (w.device_kind() == kind && w.state() != "lost");
          }
          if (!any) {
            std::cerr << "paratune: no live worker of device kind " << kind
                      << " is registered; the profile tasks wait for one\n";
          }
        }
      }
      printer.Update(job);
      last = job.state();
      last_contact = std::chrono::steady_clock::now();
      backoff_ms = 250;
    }
    grpc::Status status = reader->Finish();
    if (status.ok()) break;
    const bool seen = last != v1::JOB_STATE_UNSPECIFIED;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_contact).count();
    if (seen && !server::IsTerminal(last) &&
        status.error_code() == grpc::StatusCode::UNAVAILABLE && waited < reconnect_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 5000);
      continue;
    }
    return Fail(conn.Explain(status));
  }
  return last == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

struct RemoteArgs {
  Connection conn;
  SpecArgs spec;
  std::string id;
  bool json = false;
  bool watch = false;
};

int Submit(RemoteArgs& a) {
  absl::StatusOr<v1::JobSpec> spec = a.spec.Load();
  if (!spec.ok()) return Fail(spec.status());
  auto stub = a.conn.Stub();
  if (!stub.ok()) return Fail(stub.status());
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  v1::Job job;
  grpc::Status status = (*stub)->SubmitJob(a.conn.Context().get(), req, &job);
  if (!status.ok()) return Fail(a.conn.Explain(status));
  if (a.json) {
    std::cout << server::WireJson(job) << "\n";
  } else {
    std::cout << job.id() << "\n";
  }
  if (a.watch) return WatchRemote(a.conn, **stub, job.id(), a.json);
  return 0;
}

int Watch(RemoteArgs& a) {
  auto stub = a.conn.Stub();
  if (!stub.ok()) return Fail(stub.status());
  return WatchRemote(a.conn, **stub, a.id, a.json);
}

int Results(RemoteArgs& a) {
  auto stub = a.conn.Stub();
  if (!stub.ok()) return Fail(stub.status());
  v1::GetResultsRequest req;
  req.set_id(a.id);
  v1::JobResults results;
  grpc::Status status = (*stub)->GetResults(a.conn.Context().get(), req, &results);
  if (!status.ok()) return Fail(a.conn.Explain(status));
  if (a.json) {
    std::cout << server::WireJson(results) << "\n";
    return 0;
  }
  v1::GetJobRequest get;
  get.set_id(a.id);
  v1::Job job;
  status = (*stub)->GetJob(a.conn.Context().get(), get, &job);
  if (!status.ok()) return Fail(a.conn.Explain(status));
  std::cout << JobResultsText(results, server::RenderedSpec(job));
  return 0;
}

int Cancel(RemoteArgs& a) {
  auto stub = a.conn.Stub();
  if (!stub.ok()) return Fail(stub.status());
  v1::CancelJobRequest req;
  req.set_id(a.id);
  v1::Job job;
  grpc::Status status = (*stub)->CancelJob(a.conn.Context().get(), req, &job);
  if (!status.ok()) return Fail(a.conn.Explain(status));
  std::cout << (a.json ? server::WireJson(job) + "\n" : ProgressLine(job) + "\n");
  return 0;
}

int Jobs(RemoteArgs& a) {
  auto stub = a.conn.Stub();
  if (!stub.ok()) return Fail(stub.status());
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  grpc::Status status = (*stub)->ListJobs(a.conn.Context().get(), req, &resp);
  if (!status.ok()) return Fail(a.conn.Explain(status));
  if (a.json) {
    std::cout << server::WireJson(resp) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-17s %-20s %s\n", "id", "name", "state / progress");
  for (const v1::Job& j : resp.jobs()) {
    std::cout << absl::StrFormat("%-17s %-20s %s\n", j.id(), j.name(),
                                 ProgressLine(j).substr(j.id().size() + 1));
  }
  return 0;
}

int Workers(RemoteArgs& a) {
  auto stub = a.conn.Stub();
  if (!stub.ok()) return Fail(stub.status());
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  grpc::Status status = (*stub)->ListWorkers(a.conn.Context().get(), req, &resp);
  if (!status.ok()) return Fail(a.conn.Explain(status));
  if (a.json) {
    std::cout << server::WireJson(resp) << "\n";
    return 0;
  }
  const int64_t now_ms = server::SystemClock().NowMs();
  std::cout << absl::StrFormat("%-16s %-16s %-7s %-15s %7s %-5s %8s  %s\n", "id", "name",
                               "backend", "device_kind", "devices", "state", "seen", "task");
  for (const v1::WorkerInfo& w : resp.workers()) {
    std::cout << absl::StrFormat("%-16s %-16s %-7s %-15s %7d %-5s %6.1fs  %s\n", w.id(),
                                 w.name(), w.backend(), w.device_kind(), w.devices_size(),
                                 w.state(), (now_ms - w.last_heartbeat_unix_ms()) / 1e3,
                                 w.current_task_id());
  }
  if (resp.workers_size() == 0) std::cout << "(no workers registered)\n";
  return 0;
}

// --- Embedded tune ----------------------------------------------------------------------

struct TuneArgs {
  SpecArgs spec;
  std::string db = "./paratune.db";
  bool json = false;
  std::string backend = "auto";
  double worker_wait_s = 30;
};

int Tune(const TuneArgs& a) {
  absl::StatusOr<v1::JobSpec> spec = a.spec.Load();
  if (!spec.ok()) return Fail(spec.status());
  const bool profile = spec->search().mode() == "profile";
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::OpenSqliteStore(a.db);
  if (!store.ok()) return Fail(store.status());
  server::SystemClock clock;
  server::JobManagerOptions options;
  options.plan = [](const JobSpec& s) { return Plan(s); };
  options.plan_inference = [](const inference::InferenceJobSpec& s) {
    return inference::PlanInference(s);
  };
  // One local worker: leases are renewed by its heartbeats; keep them short so that a task
  // lost to a crash of the worker thread would be retried quickly.
  options.lease_timeout_ms = 10'000;
  options.heartbeat_interval_ms = 1'000;
  absl::StatusOr<std::unique_ptr<server::JobManager>> manager =
      server::JobManager::Create(*std::move(store), &clock, options);
  if (!manager.ok()) return Fail(manager.status());

  std::unique_ptr<server::GrpcServer> grpc;
  std::unique_ptr<worker::WorkerDaemon> daemon;
  std::thread worker_thread;
  std::atomic<bool> worker_failed{false};
  auto stop_all = [&] {
    if (daemon) daemon->Stop();
    if (worker_thread.joinable()) worker_thread.join();
    (*manager)->Shutdown();
    if (grpc) grpc->Shutdown(1000);
  };
  if (profile) {
    // The worker reaches the job manager's WorkerHub through an in-process channel: no
    // port is opened.
    server::GrpcServerOptions grpc_options;
    grpc_options.address = "";
    absl::StatusOr<std::unique_ptr<server::GrpcServer>> started =
        server::GrpcServer::Start(manager->get(), manager->get(), grpc_options);
    if (!started.ok()) return Fail(started.status());
    grpc = *std::move(started);
    worker::WorkerOptions wopts;
    wopts.channel = grpc->InProcessChannel();
    wopts.backend = a.backend;
    wopts.name = "tune-local";
    wopts.lease_wait_ms = 500;
    // One write per line: the worker's threads log concurrently.
    wopts.log = [](std::string_view line) {
      std::cerr << absl::StrCat("worker: ", absl::string_view(line.data(), line.size()), "\n");
    };
    daemon = std::make_unique<worker::WorkerDaemon>(std::move(wopts));
    worker_thread = std::thread([&] {
      absl::Status s = daemon->Run();
      if (!s.ok()) {
        std::cerr << "paratune: local worker stopped: " << s << "\n";
        worker_failed = true;
      }
    });
    // The local worker must be able to run tasks for the spec's device kind.
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(a.worker_wait_s * 1e3));
    std::optional<v1::WorkerInfo> local;
    while (!local && !worker_failed && std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<v1::ListWorkersResponse> workers =
          (*manager)->ListWorkers(v1::ListWorkersRequest());
      if (workers.ok() && workers->workers_size() > 0) local = workers->workers(0);
      if (!local) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!local) {
      stop_all();
      return Fail(absl::UnavailableError("the local worker did not start"));
    }
    if (local->device_kind() != spec->cluster().gpu()) {
      stop_all();
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "profile mode measures on the device the spec names (cluster.gpu = ",
          spec->cluster().gpu(), "), but this machine's worker has device kind ",
          local->device_kind(), "; run `paratune-worker` on such a node against a "
          "`paratune-coordinator`, or use search.mode: model")));
    }
  }

  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  absl::StatusOr<v1::Job> job = (*manager)->SubmitJob(req);
  if (!job.ok()) {
    stop_all();
    return Fail(job.status());
  }
  ProgressPrinter printer(/*json=*/false);
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  v1::WatchJobRequest watch;
  watch.set_id(job->id());
  absl::Status watched = (*manager)->WatchJob(watch, [&](const v1::Job& j) {
    if (!a.json) printer.Update(j);
    last = j.state();
    return true;
  });
  absl::StatusOr<v1::JobResults> results = absl::UnknownError("no results");
  if (last == v1::JOB_STATE_SUCCEEDED) {
    v1::GetResultsRequest get;
    get.set_id(job->id());
    results = (*manager)->GetResults(get);
  }
  v1::GetJobRequest get_job;
  get_job.set_id(job->id());
  absl::StatusOr<v1::Job> final_job = (*manager)->GetJob(get_job);
  stop_all();
  if (!watched.ok()) return Fail(watched);
  if (last != v1::JOB_STATE_SUCCEEDED) {
    return Fail(absl::AbortedError(absl::StrCat(
        "job ", job->id(), " ended ", JobStateName(last),
        final_job.ok() && !final_job->error().empty() ? ": " + final_job->error() : "")));
  }
  if (!results.ok()) return Fail(results.status());
  std::cout << (a.json ? server::WireJson(*results) + "\n" : JobResultsText(*results, *spec));
  return 0;
}

}  // namespace

void RegisterServiceCommands(CLI::App& app, int* exit_code) {
  auto remote = std::make_shared<RemoteArgs>();
  auto tune = std::make_shared<TuneArgs>();

  CLI::App* tune_cmd = app.add_subcommand(
      "tune", "Plan, profile on a local worker and rank, in one process (no servers)");
  tune->spec.AddOptions(tune_cmd);
  tune_cmd->add_option("--db", tune->db, "SQLite file (jobs, profile cache)")
      ->capture_default_str();
  tune_cmd->add_option("--backend", tune->backend, "Local worker backend: auto | cpu | cuda")
      ->capture_default_str();
  tune_cmd->add_flag("--json", tune->json, "Print the results as JSON");
  tune_cmd->callback([tune, exit_code] { *exit_code = Tune(*tune); });

  CLI::App* submit = app.add_subcommand("submit", "Submit a job spec to a coordinator");
  remote->spec.AddOptions(submit);
  remote->conn.AddOptions(submit);
  submit->add_flag("--watch", remote->watch, "Then follow it until it ends");
  submit->add_flag("--json", remote->json, "Print the job as JSON");
  submit->callback([remote, exit_code] { *exit_code = Submit(*remote); });

  struct IdCommand {
    const char* name;
    const char* help;
    int (*run)(RemoteArgs&);
  };
  for (const IdCommand& c : {IdCommand{"watch",
                                       "Follow a job's progress until it ends (exit 0 only "
                                       "when it SUCCEEDED)",
                                       Watch},
                             IdCommand{"results", "Show a job's ranked layouts", Results},
                             IdCommand{"cancel", "Cancel a job", Cancel}}) {
    CLI::App* cmd = app.add_subcommand(c.name, c.help);
    cmd->add_option("id", remote->id, "Job id")->required();
    remote->conn.AddOptions(cmd);
    cmd->add_flag("--json", remote->json, "JSON output (watch: one Job per line)");
    cmd->callback([remote, exit_code, run = c.run] { *exit_code = run(*remote); });
  }
  CLI::App* jobs = app.add_subcommand("jobs", "List the jobs of a coordinator, newest first");
  remote->conn.AddOptions(jobs);
  jobs->add_flag("--json", remote->json, "JSON output");
  jobs->callback([remote, exit_code] { *exit_code = Jobs(*remote); });
  CLI::App* workers =
      app.add_subcommand("workers", "List the workers registered with a coordinator");
  remote->conn.AddOptions(workers);
  workers->add_flag("--json", remote->json, "JSON output");
  workers->callback([remote, exit_code] { *exit_code = Workers(*remote); });
}

}  // namespace paratune::client
