// paratune-coordinator: the ParaTune service. Hosts the Autotuner and WorkerHub gRPC
// services and the REST gateway over one JobManager backed by SQLite.
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"

#include "inference/planner.h"
#include "search/planner.h"
#include "server/auth.h"
#include "server/clock.h"
#include "server/grpc_services.h"
#include "server/job_manager.h"
#include "server/metrics.h"
#include "server/rendezvous_service.h"
#include "server/rest_gateway.h"
#include "server/store.h"

namespace {

int Fail(const absl::Status& status) {
  std::cerr << "paratune-coordinator: " << status << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// Takes an exclusive flock on "<db>.lock", held (the descriptor left open) until the
// process exits, so that two coordinators never serve one database. The lock file holds
// the owner's pid, for the message the next one prints. A sidecar file rather than the
// database itself: SQLite's own POSIX locks on the database are dropped when any
// descriptor of the file closes.
absl::Status LockDatabase(const std::string& db) {
  if (db == ":memory:" || db.rfind("file:", 0) == 0) return absl::OkStatus();
  const std::string path = db + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  // A read-only lock file still takes a flock. Where none can be opened because the folder
  // or the file is read-only, SQLite cannot open the database in WAL mode either (it
  // creates -wal and -shm beside it): its message, naming the read-only database, is the
  // one to show.
  if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::OkStatus();
  }
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot open the lock file ", path,
                                                      " of database ", db, ": ",
                                                      std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    std::string owner = n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string();
    while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", db, " is in use by another coordinator",
          owner.empty() ? std::string() : absl::StrCat(" (pid ", owner, ")"), "; lock file ",
          path, ". Two coordinators must not serve one database: stop the other one or "
          "give this one its own --db"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot lock ", path, " of database ", db, ": ", std::strerror(err)));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock is held all the same; only the pid in the next one's message is missing.
    std::cerr << absl::StrCat("paratune-coordinator: cannot write the pid to ", path, ": ",
                              std::strerror(errno), "\n");
  }
  return absl::OkStatus();  // fd stays open: the lock lives as long as the process.
}

// Caps glibc's malloc arenas (default: 8 per core) unless MALLOC_ARENA_MAX says otherwise.
// Every gRPC and HTTP pool thread that allocates gets an arena of its own, and memory freed
// there stays in that arena: under a steady load the RSS crept up by ~15 MiB/min with the
// default and stayed flat with two (bench/server/coordinator_load). The coordinator works
// under one lock, so more arenas buy it no parallelism.
void CapMallocArenas() {
#ifdef __GLIBC__
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
#endif
}

bool IsLoopback(const std::string& address) {
  return address == "127.0.0.1" || address == "localhost" || address == "::1" ||
         address.rfind("127.", 0) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CapMallocArenas();
  CLI::App app{"paratune-coordinator: plans, profiles and ranks parallel layouts"};
  std::string bind = "127.0.0.1";
  int grpc_port = 50051;
  int http_port = 8080;
  std::string db = "./paratune.db";
  paratune::server::JobManagerOptions options;
  std::string client_token_file, worker_token_file, tls_cert, tls_key, dashboard_dir;
  std::string port_file;
  CLI::Option* bind_option =
      app.add_option("--bind", bind,
                     "Address to listen on (default: 0.0.0.0 with --client-token-file, "
                     "127.0.0.1 without; a non-loopback address without it warns)");
  app.add_option("--grpc-port", grpc_port, "gRPC port (0 = pick a free one)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--http-port", http_port,
                 "REST gateway, /metrics and dashboard port (-1 = no HTTP server, 0 = pick)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  app.add_option("--db", db, "SQLite database file (WAL mode)")->capture_default_str();
  app.add_option("--lease-timeout-ms", options.lease_timeout_ms,
                 "A task lease not renewed for this long is re-queued")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-interval-ms", options.heartbeat_interval_ms,
                 "Heartbeat period asked of workers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-attempts", options.max_attempts, "Leases per task before it fails")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--profile-warmup", options.profile.warmup, "Untimed steps per profile task")
      ->capture_default_str();
  app.add_option("--profile-iters", options.profile.iters, "Timed steps per profile task")
      ->capture_default_str();
  app.add_option("--profile-candidates", options.profile.max_candidates,
                 "Profile at most this many top layouts (0 = all of top_k that fit)")
      ->capture_default_str();
  app.add_option("--verify-steps", options.verify.steps,
                 "Training steps of a verify run (search.verify_top_k; the first is untimed)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1000));
  app.add_option("--verify-rendezvous-timeout-ms", options.verify.rendezvous_timeout_ms,
                 "How long a part of a multi-worker verify run waits for its peers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--client-token-file", client_token_file,
                 "File holding the bearer token clients must send (empty = open)");
  app.add_option("--worker-token-file", worker_token_file,
                 "File holding the bearer token workers must send (empty = open)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain (gRPC and HTTP)");
  app.add_option("--tls-key", tls_key, "PEM private key");
  app.add_option("--dashboard-dir", dashboard_dir, "Serve the web dashboard from here");
  app.add_option("--port-file", port_file,
                 "Write the bound gRPC and HTTP ports here (\"GRPC HTTP\"), for scripts");
  int64_t max_pending_jobs = 10'000;
  app.add_option("--max-pending-jobs", max_pending_jobs,
                 "Refuse submissions (RESOURCE_EXHAUSTED, HTTP 429) while this many jobs wait "
                 "to be planned (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  paratune::server::RendezvousOptions rendezvous_options;
  app.add_option("--rendezvous-idle-ttl-ms", rendezvous_options.idle_ttl_ms,
                 "A rendezvous namespace nobody touched for this long is dropped")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // Signals go to the main thread's sigwait only: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<paratune::server::Authenticator> auth =
      paratune::server::Authenticator::FromFiles(client_token_file, worker_token_file);
  if (!auth.ok()) return Fail(auth.status());
  // Open by default only to this host: without a client token anyone who can reach the
  // port could submit and cancel jobs.
  if (bind_option->count() == 0) {
    bind = auth->Enabled(paratune::server::Role::kClient) ? "0.0.0.0" : "127.0.0.1";
  } else if (!auth->Enabled(paratune::server::Role::kClient) && !IsLoopback(bind)) {
    std::cerr << absl::StrCat(
        "paratune-coordinator: WARNING: listening on ", bind,
        " without --client-token-file: anyone who can reach this address can submit and "
        "cancel jobs\n");
  }
  if (absl::Status s = LockDatabase(db); !s.ok()) return Fail(s);
  paratune::server::Metrics metrics;
  absl::StatusOr<std::unique_ptr<paratune::server::Store>> store =
      paratune::server::OpenSqliteStore(db);
  if (!store.ok()) return Fail(store.status());
  paratune::server::SystemClock clock;
  options.plan = [](const paratune::JobSpec& spec) { return paratune::Plan(spec); };
  options.plan_inference = [](const paratune::inference::InferenceJobSpec& spec) {
    return paratune::inference::PlanInference(spec);
  };
  options.metrics = &metrics;
  absl::StatusOr<std::unique_ptr<paratune::server::JobManager>> manager =
      paratune::server::JobManager::Create(*std::move(store), &clock, options);
  if (!manager.ok()) return Fail(manager.status());

  // Both transports submit through the admission control when there is a limit.
  paratune::server::AutotunerHandler* autotuner = manager->get();
  std::optional<paratune::server::AdmissionControl> admission;
  if (max_pending_jobs > 0) {
    admission.emplace(manager->get(), max_pending_jobs, &clock);
    if (absl::Status s = admission->Seed(); !s.ok()) return Fail(s);
    autotuner = &*admission;
  }

  paratune::server::RendezvousStore rendezvous(&clock, rendezvous_options);
  paratune::server::RendezvousService rendezvous_service(&rendezvous, &*auth, &metrics);
  paratune::server::GrpcServerOptions grpc_options;
  grpc_options.extra_services.push_back(&rendezvous_service);
  grpc_options.address = bind + ":" + std::to_string(grpc_port);
  grpc_options.tls_cert_file = tls_cert;
  grpc_options.tls_key_file = tls_key;
  grpc_options.auth = &*auth;
  grpc_options.metrics = &metrics;
  absl::StatusOr<std::unique_ptr<paratune::server::GrpcServer>> grpc =
      paratune::server::GrpcServer::Start(autotuner, manager->get(), grpc_options);
  if (!grpc.ok()) return Fail(grpc.status());

  std::unique_ptr<paratune::server::RestGateway> rest;
  int bound_http = -1;
  if (http_port >= 0) {
    paratune::server::RestGatewayOptions rest_options;
    rest_options.dashboard_dir = dashboard_dir;
    rest_options.tls_cert_file = tls_cert;
    rest_options.tls_key_file = tls_key;
    rest = std::make_unique<paratune::server::RestGateway>(autotuner, &*auth, &metrics,
                                                           rest_options);
    absl::StatusOr<int> port = rest->Start(bind, http_port);
    if (!port.ok()) return Fail(port.status());
    bound_http = *port;
  }
  if (!port_file.empty()) {
    std::ofstream(port_file) << (*grpc)->port() << " " << bound_http << "\n";
  }
  // Whole lines in one write each (other threads may log at the same moment).
  std::cerr << absl::StrCat("paratune-coordinator: gRPC on ", bind, ":", (*grpc)->port(),
                            bound_http >= 0 ? absl::StrCat(", HTTP on ", bind, ":", bound_http)
                                            : std::string(),
                            ", database ", db, "\n");

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << absl::StrCat("paratune-coordinator: signal ", sig, ", shutting down\n");
  if (rest) rest->Stop();
  (*manager)->Shutdown();  // Ends watches and long-polls so that the server can drain.
  rendezvous.Shutdown();   // Ends waiting rendezvous Gets.
  (*grpc)->Shutdown(/*grace_ms=*/2000);
  return 0;
}
