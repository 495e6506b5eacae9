// A fake paratune.v1.WorkerHub for worker tests, served on 127.0.0.1.
#ifndef PARATUNE_TESTS_WORKER_FAKE_HUB_H_
#define PARATUNE_TESTS_WORKER_FAKE_HUB_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "paratune/v1/service.grpc.pb.h"

namespace paratune::worker::testing {

// A WorkerHub that keeps everything it is told, hands out queued tasks and can require a
// token, forget its workers (as after a restart) or cancel tasks via heartbeats.
class FakeHub final : public v1::WorkerHub::Service {
 public:
  explicit FakeHub(std::string token = "") : token_(std::move(token)) {}

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    registers_.push_back(*request);
    const std::string id = absl::StrCat(prefix_, "w", registers_.size());
    known_.insert(id);
    response->set_worker_id(id);
    response->set_heartbeat_interval_ms(50);
    response->set_lease_timeout_ms(1000);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    heartbeats_.push_back(*request);
    if (!known_.contains(request->worker_id())) response->set_reregister(true);
    for (const std::string& id : request->task_ids()) {
      if (cancel_.contains(id)) response->add_cancel_task_ids(id);
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status LeaseTask(grpc::ServerContext* ctx, const v1::LeaseTaskRequest* request,
                         v1::LeaseTaskResponse* response) override {
    if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
    std::unique_lock<std::mutex> lock(mu_);
    if (!known_.contains(request->worker_id())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker");
    }
    using Clock = std::chrono::steady_clock;
    const Clock::time_point end = Clock::now() + std::chrono::milliseconds(request->wait_ms());
    // Long-poll in slices so that a closing server or a cancelled call ends it.
    while (queue_.empty() && !closed_ && !ctx->IsCancelled() && Clock::now() < end) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
    if (!queue_.empty() && !closed_) {
      *response->mutable_task() = queue_.front();
      queue_.pop_front();
      leased_.push_back(response->task().id());
      cv_.notify_all();
    }
    return grpc::Status::OK;
  }

  grpc::Status ReportResult(grpc::ServerContext* ctx, const v1::ReportResultRequest* request,
                            v1::ReportResultResponse* response) override {
    if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    ++report_calls_;
    if (failing_reports_ > 0) {
      --failing_reports_;
      cv_.notify_all();
      return grpc::Status(grpc::StatusCode::INTERNAL, "store hiccup");
    }
    reports_.push_back(*request);
    response->set_accepted(true);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Deregister(grpc::ServerContext* ctx, const v1::DeregisterRequest* request,
                          v1::DeregisterResponse*) override {
    if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    deregistered_.push_back(request->worker_id());
    cv_.notify_all();
    return grpc::Status::OK;
  }

  void Enqueue(v1::ProfileTask task) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    cv_.notify_all();
  }
  void CancelTask(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_.insert(id);
  }
  /// The next `n` ReportResult calls fail with INTERNAL.
  void FailReports(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_reports_ = n;
  }
  int report_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return report_calls_;
  }
  void ForgetWorkers() {
    std::lock_guard<std::mutex> lock(mu_);
    known_.clear();
    prefix_ = "again-";
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

  /// Waits until `pred` (called under the lock) holds; false after `timeout`.
  bool WaitFor(const std::function<bool()>& pred,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }

  // Accessors for tests (copies taken under the lock).
  std::vector<v1::RegisterRequest> registers() const { return Locked(registers_); }
  std::vector<v1::ReportResultRequest> reports() const { return Locked(reports_); }
  std::vector<v1::HeartbeatRequest> heartbeats() const { return Locked(heartbeats_); }
  std::vector<std::string> deregistered() const { return Locked(deregistered_); }
  std::vector<std::string> auth_seen() const { return Locked(auth_seen_); }

  // Unlocked views, only inside WaitFor predicates.
  const std::vector<v1::ReportResultRequest>& reports_unlocked() const { return reports_; }
  const std::vector<v1::RegisterRequest>& registers_unlocked() const { return registers_; }
  const std::vector<std::string>& leased_unlocked() const { return leased_; }
  const std::vector<std::string>& deregistered_unlocked() const { return deregistered_; }
  const std::vector<v1::HeartbeatRequest>& heartbeats_unlocked() const { return heartbeats_; }

 private:
  template <typename T>
  T Locked(const T& v) const {
    std::lock_guard<std::mutex> lock(mu_);
    return v;
  }

  grpc::Status CheckAuth(grpc::ServerContext* ctx) {
    auto it = ctx->client_metadata().find("authorization");
    std::string auth = it == ctx->client_metadata().end()
                           ? ""
                           : std::string(it->second.data(), it->second.size());
    std::lock_guard<std::mutex> lock(mu_);
    auth_seen_.push_back(auth);
    if (!token_.empty() && auth != "Bearer " + token_) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
    }
    return grpc::Status::OK;
  }

  const std::string token_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string prefix_;
  std::set<std::string> known_;
  std::set<std::string> cancel_;
  std::deque<v1::ProfileTask> queue_;
  std::vector<std::string> leased_;
  std::vector<v1::RegisterRequest> registers_;
  std::vector<v1::HeartbeatRequest> heartbeats_;
  std::vector<v1::ReportResultRequest> reports_;
  std::vector<std::string> deregistered_;
  std::vector<std::string> auth_seen_;
  int failing_reports_ = 0;
  int report_calls_ = 0;
  bool closed_ = false;
};

// A FakeHub served on 127.0.0.1:`port` (0 = ephemeral).
class HubServer {
 public:
  explicit HubServer(int port = 0, std::string token = "",
                     std::shared_ptr<grpc::ServerCredentials> credentials = nullptr)
      : hub_(std::move(token)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             credentials ? credentials : grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&hub_);
    server_ = builder.BuildAndStart();
  }
  ~HubServer() { Shutdown(); }

  void Shutdown() {
    if (server_ == nullptr) return;
    hub_.Close();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
    server_.reset();
  }

  FakeHub& hub() { return hub_; }
  std::shared_ptr<grpc::Channel> InProcessChannel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  FakeHub hub_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace paratune::worker::testing

#endif  // PARATUNE_TESTS_WORKER_FAKE_HUB_H_
