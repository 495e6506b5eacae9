// WorkerDaemon against an in-process fake WorkerHub on 127.0.0.1 (ephemeral port): register,
// lease, report, cancellation, stop, coordinator restart with re-sending of the
// unacknowledged result, re-registration on request, auth and unreachable startup.
#include "worker/daemon.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paratune/v1/service.grpc.pb.h"
#include "tests/e2e/fault_harness.h"
#include "tests/worker/fake_hub.h"

namespace paratune::worker {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::FakeHub;
using testing::HubServer;

// Executor whose behaviour is chosen by the task id's prefix:
//   ok-*     OK with a fixed LayerProfile;
//   block-*  waits until Release() or the cancel flag (then CANCELLED);
//   throw-*  throws std::runtime_error.
class ScriptedExecutor final : public TaskExecutor {
 public:
  v1::TaskResult Execute(const v1::ProfileTask& task, const CancelFlag& cancel) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_.push_back(task.id());
      cv_.notify_all();
    }
    v1::TaskResult r;
    if (task.id().starts_with("throw-")) throw std::runtime_error("kernel exploded");
    if (task.id().starts_with("block-")) {
      std::unique_lock<std::mutex> lock(mu_);
      while (!released_ && !cancel.cancelled()) cv_.wait_for(lock, milliseconds(5));
      if (!released_) {
        r.set_outcome(v1::TaskResult::OUTCOME_CANCELLED);
        return r;
      }
    }
    r.set_outcome(v1::TaskResult::OUTCOME_OK);
    v1::PhaseTiming* p = r.mutable_layer()->add_phases();
    p->set_phase("total");
    p->set_median_s(0.25);
    p->set_min_s(0.2);
    p->set_max_s(0.3);
    r.mutable_layer()->add_peak_bytes_per_rank(12345);
    return r;
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  bool WaitStarted(const std::string& id) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, milliseconds(60000), [&] {
      return std::find(started_.begin(), started_.end(), id) != started_.end();
    });
  }

  std::vector<std::string> started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> started_;
  bool released_ = false;
};

v1::ProfileTask Task(const std::string& id, int64_t attempt = 1,
                     const std::string& kind = "cpu") {
  v1::ProfileTask t;
  t.set_id(id);
  t.set_attempt(attempt);
  t.set_job_id("job-1");
  t.set_device_kind(kind);
  t.mutable_layer()->mutable_shape()->set_hidden_size(64);
  return t;
}

// Runs a WorkerDaemon on a thread; Stop() + join on destruction.
class DaemonThread {
 public:
  explicit DaemonThread(WorkerOptions options) : daemon_(std::move(options)) {
    thread_ = std::thread([this] { status_ = daemon_.Run(); });
  }
  ~DaemonThread() { Join().IgnoreError(); }
  absl::Status Join() {
    daemon_.Stop();
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  WorkerDaemon& daemon() { return daemon_; }

 private:
  WorkerDaemon daemon_;
  absl::Status status_;
  std::thread thread_;
};

// Polls `pred` every 10 ms for up to 60 s (generous: CI runs tests side by side on two
// loaded cores; a condition that holds ends the wait at once).
bool Eventually(const std::function<bool()>& pred) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

WorkerOptions Options(const std::string& address, std::shared_ptr<TaskExecutor> executor) {
  WorkerOptions o;
  o.coordinator = address;
  o.backend = "cpu";
  o.devices = {0, 1, 2, 3};
  o.name = "test-worker";
  o.lease_wait_ms = 100;
  // Generous for a loaded machine: an RPC past its deadline is retried (a report re-sent,
  // counted twice by the fake hub), and a registration not done within connect_timeout_s
  // ends Run(). Neither limit is what these tests check.
  o.rpc_timeout_ms = 10000;
  o.backoff_initial_ms = 20;
  o.backoff_max_ms = 200;
  o.connect_timeout_s = 30;
  o.executor = std::move(executor);
  o.log = [](std::string_view) {};
  return o;
}

TEST(WorkerDaemonTest, RegistersLeasesReportsAndDeregisters) {
  HubServer server(0, "s3cret");
  auto executor = std::make_shared<ScriptedExecutor>();
  WorkerOptions options = Options(server.address(), executor);
  options.token = "s3cret";
  DaemonThread daemon(options);
  FakeHub& hub = server.hub();
  hub.Enqueue(Task("ok-1", 3));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));

  std::vector<v1::RegisterRequest> regs = hub.registers();
  ASSERT_EQ(regs.size(), 1u);
  const v1::WorkerInfo& info = regs[0].worker();
  EXPECT_EQ(info.name(), "test-worker");
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.device_kind(), "cpu");
  ASSERT_EQ(info.devices_size(), 4);
  EXPECT_EQ(info.devices(3).index(), 3);
  EXPECT_EQ(info.devices(0).memory_bytes(), info.memory_bytes());
  EXPECT_GT(info.memory_bytes(), 0);
  EXPECT_GE(info.cpu_cores(), 1);

  v1::ReportResultRequest report = hub.reports()[0];
  EXPECT_EQ(report.worker_id(), "w1");
  EXPECT_EQ(report.result().task_id(), "ok-1");
  EXPECT_EQ(report.result().attempt(), 3);
  EXPECT_EQ(report.result().worker_id(), "w1");
  EXPECT_EQ(report.result().outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_GT(report.result().elapsed_s(), 0.0);
  EXPECT_DOUBLE_EQ(report.result().layer().phases(0).median_s(), 0.25);
  EXPECT_EQ(report.result().layer().peak_bytes_per_rank(0), 12345);

  ASSERT_TRUE(daemon.Join().ok());
  EXPECT_EQ(hub.deregistered(), std::vector<std::string>{"w1"});
  for (const std::string& auth : hub.auth_seen()) EXPECT_EQ(auth, "Bearer s3cret");
  WorkerStats stats = daemon.daemon().stats();
  EXPECT_EQ(stats.registrations, 1);
  EXPECT_EQ(stats.tasks_executed, 1);
  EXPECT_EQ(stats.reports_acked, 1);
  EXPECT_EQ(stats.reports_pending, 0);
}

TEST(WorkerDaemonTest, ExceptionAndWrongDeviceKindAreResultsAndTheDaemonGoesOn) {
  HubServer server;
  auto executor = std::make_shared<ScriptedExecutor>();
  DaemonThread daemon(Options(server.address(), executor));
  FakeHub& hub = server.hub();
  hub.Enqueue(Task("throw-1"));
  hub.Enqueue(Task("ok-gpu", 1, "h100-sxm-80gb"));
  hub.Enqueue(Task("ok-2"));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 3; }));
  std::vector<v1::ReportResultRequest> reports = hub.reports();
  EXPECT_EQ(reports[0].result().outcome(), v1::TaskResult::OUTCOME_FAILED);
  EXPECT_EQ(reports[0].result().message(), "exception: kernel exploded");
  EXPECT_EQ(reports[1].result().outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(reports[1].result().message(),
            "task is for device kind h100-sxm-80gb; this worker has cpu");
  EXPECT_EQ(reports[2].result().outcome(), v1::TaskResult::OUTCOME_OK);
  // The GPU task never reached the executor.
  EXPECT_EQ(executor->started(), (std::vector<std::string>{"throw-1", "ok-2"}));
  EXPECT_TRUE(daemon.Join().ok());
}

TEST(WorkerDaemonTest, HeartbeatsRenewTheLeaseAndCarryCancellation) {
  HubServer server;
  auto executor = std::make_shared<ScriptedExecutor>();
  DaemonThread daemon(Options(server.address(), executor));
  FakeHub& hub = server.hub();
  hub.Enqueue(Task("block-1"));
  ASSERT_TRUE(executor->WaitStarted("block-1"));
  // Heartbeats every 50 ms (the interval the fake returns) name the running task.
  ASSERT_TRUE(hub.WaitFor([&] {
    int with_task = 0;
    for (const auto& hb : hub.heartbeats_unlocked()) {
      with_task += hb.task_ids_size() == 1 && hb.task_ids(0) == "block-1";
    }
    return with_task >= 2;
  }));
  hub.CancelTask("block-1");
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));
  EXPECT_EQ(hub.reports()[0].result().task_id(), "block-1");
  EXPECT_EQ(hub.reports()[0].result().outcome(), v1::TaskResult::OUTCOME_CANCELLED);
  EXPECT_TRUE(daemon.Join().ok());
}

TEST(WorkerDaemonTest, StopLetsTheRunningTaskFinishWithinTheGracePeriod) {
  HubServer server;
  auto executor = std::make_shared<ScriptedExecutor>();
  WorkerOptions options = Options(server.address(), executor);
  options.stop_grace_s = 30;
  auto daemon = std::make_unique<DaemonThread>(options);
  FakeHub& hub = server.hub();
  hub.Enqueue(Task("block-1"));
  ASSERT_TRUE(executor->WaitStarted("block-1"));
  daemon->daemon().Stop();
  std::this_thread::sleep_for(milliseconds(150));
  executor->Release();
  EXPECT_TRUE(daemon->Join().ok());
  std::vector<v1::ReportResultRequest> reports = hub.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].result().outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_EQ(hub.deregistered().size(), 1u);
  // No new task was leased after Stop().
  EXPECT_EQ(executor->started().size(), 1u);
}

TEST(WorkerDaemonTest, StopReleasesATaskThatOutlivesTheGracePeriod) {
  HubServer server;
  auto executor = std::make_shared<ScriptedExecutor>();
  WorkerOptions options = Options(server.address(), executor);
  options.stop_grace_s = 0.2;
  DaemonThread daemon(options);
  FakeHub& hub = server.hub();
  hub.Enqueue(Task("block-1"));
  ASSERT_TRUE(executor->WaitStarted("block-1"));
  const Clock::time_point start = Clock::now();
  EXPECT_TRUE(daemon.Join().ok());
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(took, 0.2);
  EXPECT_LT(took, 10.0);  // room for a loaded machine; the task itself would never end
  // Released, not reported: Deregister hands the lease back.
  EXPECT_TRUE(hub.reports().empty());
  EXPECT_EQ(hub.deregistered().size(), 1u);
}

TEST(WorkerDaemonTest, CoordinatorRestartReRegistersAndResendsTheUnacknowledgedResult) {
  // A port below the kernel's ephemeral range (0: the kernel picks): while the hub is down
  // no parallel test's port-0 server or connection can be handed it.
  auto server = std::make_unique<HubServer>(e2e::PortBelowEphemeralRange());
  const int port = server->port();
  ASSERT_GT(port, 0);
  auto executor = std::make_shared<ScriptedExecutor>();
  DaemonThread daemon(Options(server->address(), executor));
  server->hub().Enqueue(Task("block-7", 2));
  ASSERT_TRUE(executor->WaitStarted("block-7"));

  // The coordinator goes away while the task runs; the result cannot be delivered.
  server->Shutdown();
  executor->Release();
  ASSERT_TRUE(Eventually([&] { return daemon.daemon().stats().reports_pending == 1; }));
  std::this_thread::sleep_for(milliseconds(300));  // a few failed reconnects

  // A new coordinator on the same port knows nothing: the daemon registers again and
  // re-sends the result (same task id and attempt).
  HubServer restarted(port);
  ASSERT_EQ(restarted.port(), port);
  FakeHub& hub = restarted.hub();
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));
  std::vector<v1::RegisterRequest> regs = hub.registers();
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0].worker().id(), "w1");  // the previous identity is offered
  v1::ReportResultRequest report = hub.reports()[0];
  EXPECT_EQ(report.result().task_id(), "block-7");
  EXPECT_EQ(report.result().attempt(), 2);
  EXPECT_EQ(report.result().outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_EQ(report.worker_id(), "w1");  // the new coordinator's id for us (its first)
  EXPECT_TRUE(daemon.Join().ok());
  WorkerStats stats = daemon.daemon().stats();
  EXPECT_EQ(stats.registrations, 2);
  EXPECT_EQ(stats.reports_pending, 0);
}

TEST(WorkerDaemonTest, ReportsFailingWithAServerErrorAreRetriedThenDropped) {
  HubServer server;
  auto executor = std::make_shared<ScriptedExecutor>();
  DaemonThread daemon(Options(server.address(), executor));
  FakeHub& hub = server.hub();
  // Two failures, then the third send of the same result is accepted.
  hub.FailReports(2);
  hub.Enqueue(Task("ok-1", 4));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));
  EXPECT_EQ(hub.report_calls(), 3);
  EXPECT_EQ(hub.reports()[0].result().task_id(), "ok-1");
  EXPECT_EQ(hub.reports()[0].result().attempt(), 4);
  // Five failures: the result is dropped and the daemon serves the next task.
  hub.FailReports(5);
  hub.Enqueue(Task("ok-2"));
  hub.Enqueue(Task("ok-3"));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 2; }));
  EXPECT_EQ(hub.reports()[1].result().task_id(), "ok-3");
  EXPECT_EQ(hub.report_calls(), 3 + 5 + 1);
  // The hub records a report before the daemon reads the answer: poll the daemon's view.
  EXPECT_TRUE(Eventually([&] { return daemon.daemon().stats().reports_pending == 0; }));
  EXPECT_TRUE(daemon.Join().ok());
  EXPECT_EQ(hub.registers().size(), 1u);  // a server error is not a lost coordinator
}

TEST(WorkerDaemonTest, ReRegistersWhenTheHeartbeatSaysSo) {
  HubServer server;
  auto executor = std::make_shared<ScriptedExecutor>();
  DaemonThread daemon(Options(server.address(), executor));
  FakeHub& hub = server.hub();
  ASSERT_TRUE(hub.WaitFor([&] { return hub.heartbeats_unlocked().size() >= 1; }));
  hub.ForgetWorkers();
  ASSERT_TRUE(hub.WaitFor([&] { return hub.registers_unlocked().size() == 2; }));
  hub.Enqueue(Task("ok-1"));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));
  EXPECT_EQ(hub.reports()[0].worker_id(), "again-w2");
  EXPECT_TRUE(daemon.Join().ok());
}

TEST(WorkerDaemonTest, RunsOverAnInProcessChannel) {
  // How the embedded `paratune tune` can wire its worker: no address, no port.
  HubServer server;
  WorkerOptions options = Options("", std::make_shared<ScriptedExecutor>());
  options.channel = server.InProcessChannel();
  DaemonThread daemon(options);
  FakeHub& hub = server.hub();
  hub.Enqueue(Task("ok-1"));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));
  EXPECT_EQ(hub.reports()[0].result().outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_TRUE(daemon.Join().ok());
  EXPECT_EQ(hub.deregistered().size(), 1u);
}

TEST(WorkerDaemonTest, StopBeforeRunRegistersNothingAndRunOnlyOnce) {
  HubServer server;
  WorkerDaemon daemon(Options(server.address(), std::make_shared<ScriptedExecutor>()));
  daemon.Stop();
  EXPECT_TRUE(daemon.Run().ok());
  EXPECT_TRUE(server.hub().registers().empty());
  EXPECT_EQ(daemon.Run().message(), "WorkerDaemon::Run called twice");
}

TEST(WorkerDaemonTest, RealKernelsExecutorMeasuresThroughTheDaemon) {
  HubServer server;
  WorkerOptions options = Options(server.address(), nullptr);  // the kernels executor
  options.devices = {0, 1};
  DaemonThread daemon(options);
  FakeHub& hub = server.hub();
  v1::ProfileTask sweep = Task("comm-1");
  v1::CollectiveSweepTask* c = sweep.mutable_collective();
  c->set_op(v1::CollectiveSweepTask::OP_ALL_REDUCE);
  c->set_group_size(2);
  c->add_sizes_bytes(8192);
  c->set_dtype("fp32");
  c->set_warmup(1);
  c->set_iters(2);
  hub.Enqueue(sweep);
  v1::ProfileTask bf16 = Task("layer-bf16");
  bf16.mutable_layer()->set_dtype("bf16");
  hub.Enqueue(bf16);
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 2; }));
  const v1::TaskResult comm = hub.reports()[0].result();
  ASSERT_EQ(comm.outcome(), v1::TaskResult::OUTCOME_OK) << comm.message();
  ASSERT_EQ(comm.comm().samples_size(), 1);
  const v1::CommSample& s = comm.comm().samples(0);
  EXPECT_EQ(s.size_bytes(), 8192);
  EXPECT_EQ(s.wrong(), 0);
  EXPECT_NEAR(s.algbw_gbps(), 8192 / s.time_s() / 1e9, 1e-9 * s.algbw_gbps());
  EXPECT_NEAR(s.busbw_gbps(), s.algbw_gbps(), 1e-9 * s.busbw_gbps());  // 2(k-1)/k = 1
  const v1::TaskResult layer = hub.reports()[1].result();
  EXPECT_EQ(layer.outcome(), v1::TaskResult::OUTCOME_UNSUPPORTED);
  EXPECT_EQ(layer.message(), "dtype bf16 needs the CUDA backend; this worker is CPU-only");
  EXPECT_TRUE(daemon.Join().ok());
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// TLS with a self-signed certificate made by the openssl CLI.
TEST(WorkerDaemonTest, ConnectsOverTlsTrustingTheGivenRoot) {
  // Names with the pid: another run of the suite on this machine must not share them.
  const std::string dir = ::testing::TempDir();
  const std::string pid = std::to_string(::getpid());
  const std::string cert = dir + "/worker_tls_cert_" + pid + ".pem",
                    key = dir + "/worker_tls_key_" + pid + ".pem";
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + key + " -out " + cert +
      " >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "the openssl CLI is not available";
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({ReadFile(key), ReadFile(cert)});
  HubServer server(0, "", grpc::SslServerCredentials(ssl));
  FakeHub& hub = server.hub();

  WorkerOptions plain = Options(server.address(), std::make_shared<ScriptedExecutor>());
  plain.connect_timeout_s = 0.3;
  EXPECT_EQ(WorkerDaemon(plain).Run().code(), absl::StatusCode::kUnavailable);

  WorkerOptions options = plain;
  options.tls = true;
  options.tls_root_certs_pem = ReadFile(cert);
  options.connect_timeout_s = 30;
  DaemonThread daemon(options);
  hub.Enqueue(Task("ok-1"));
  ASSERT_TRUE(hub.WaitFor([&] { return hub.reports_unlocked().size() == 1; }));
  EXPECT_EQ(hub.reports()[0].result().outcome(), v1::TaskResult::OUTCOME_OK);
  EXPECT_TRUE(daemon.Join().ok());
  std::remove(cert.c_str());
  std::remove(key.c_str());
}

TEST(WorkerDaemonTest, RejectedTokenEndsRunWithUnauthenticated) {
  HubServer server(0, "right");
  WorkerOptions options = Options(server.address(), std::make_shared<ScriptedExecutor>());
  options.token = "wrong";
  WorkerDaemon daemon(options);
  absl::Status status = daemon.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(status.message(), "coordinator rejected registration: bad token");
}

TEST(WorkerDaemonTest, UnreachableCoordinatorGivesUpAfterTheConnectTimeout) {
  int port = 0;
  {
    HubServer probe;  // find a free port, then close it
    port = probe.port();
  }
  WorkerOptions options = Options(absl::StrCat("127.0.0.1:", port), nullptr);
  options.connect_timeout_s = 0.5;
  WorkerDaemon daemon(options);
  const Clock::time_point start = Clock::now();
  absl::Status status = daemon.Run();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(
      status.message(), absl::StrCat("cannot reach coordinator 127.0.0.1:", port, " after 0.5 s: ")))
      << status.message();
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 10.0);  // room for a loaded machine
}

TEST(WorkerDaemonTest, StopDuringStartupRetriesReturnsOk) {
  WorkerOptions options = Options("127.0.0.1:1", nullptr);
  options.connect_timeout_s = 0;  // forever
  DaemonThread daemon(options);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(daemon.Join().ok());
}

TEST(WorkerOptionsTest, ValidateNamesTheField) {
  WorkerOptions o;
  EXPECT_EQ(o.Validate().message(), "coordinator must be set (HOST:PORT)");
  o.coordinator = "h:1";
  EXPECT_TRUE(o.Validate().ok());
  o.backend = "tpu";
  EXPECT_EQ(o.Validate().message(), "backend (tpu) must be one of auto, cuda, cpu");
  o.backend = "cpu";
  o.devices = {0, 1, 0};
  EXPECT_EQ(o.Validate().message(), "devices lists 0 twice");
  o.devices = {};
  o.backoff_max_ms = 10;
  EXPECT_EQ(o.Validate().message(), "backoff_max_ms must be >= backoff_initial_ms");
  o.backoff_max_ms = 5000;
  o.tls_root_certs_pem = "-----BEGIN CERTIFICATE-----";
  EXPECT_EQ(o.Validate().message(), "tls_root_certs_pem is set but tls is off");
}

}  // namespace
}  // namespace paratune::worker
