// WorkerDaemon: the register / heartbeat / lease / execute / report loop.
//
// Two threads: Run()'s thread registers, flushes unacknowledged results, long-polls
// LeaseTask and executes; the heartbeat thread renews the running task's lease, applies
// cancellations, re-registers when told to, and enforces the stop grace period. A
// registration "generation" makes sure a stale failing RPC cannot invalidate a newer
// registration.
#include "worker/daemon.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paratune/v1/service.grpc.pb.h"
#include "server/convert_layout.h"
#include "worker/backoff.h"
#include "worker/device_discovery.h"
#include "worker/grpc_rendezvous.h"
#include "worker/kernels_executor.h"

namespace paratune::worker {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// Transport trouble or a slow answer: keep the result and send it again later.
bool IsTransient(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kCancelled || code == absl::StatusCode::kAborted;
}

// The coordinator does not know this worker (it restarted or expired us): re-register.
bool IsUnknownWorker(absl::StatusCode code) {
  return code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kFailedPrecondition;
}

// The coordinator is gone (UNAVAILABLE) or has forgotten us: register again. A slow
// answer (DEADLINE_EXCEEDED) is only retried.
bool NeedsReregister(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || IsUnknownWorker(code);
}

// Registration can never succeed with these: give up instead of retrying forever.
bool IsFatalForRegister(absl::StatusCode code) {
  return code == absl::StatusCode::kUnauthenticated ||
         code == absl::StatusCode::kPermissionDenied ||
         code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kUnimplemented;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "worker";
  return buf;
}

void DefaultLog(std::string_view line) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  // One write per line: the signal thread and the daemon's threads log at once, and
  // std::cerr writes each << piece separately.
  std::cerr << absl::StrCat(stamp, " paratune-worker: ",
                            absl::string_view(line.data(), line.size()), "\n");
}

constexpr int kMaxReportRejections = 5;

// One line naming the workload, for the log.
std::string Describe(const v1::ProfileTask& task) {
  if (task.has_layer()) {
    const v1::LayerProfileTask& l = task.layer();
    return absl::StrCat(
        "layer h=", l.shape().hidden_size(), " a=", l.shape().num_attention_heads(), " tp=", l.tp(),
        l.sequence_parallel() ? " sp" : "", " cp=", l.cp(), " b=", l.micro_batch_size(),
        " s=", l.seq_length(), " recompute=", l.recompute().empty() ? "none" : l.recompute(), " ",
        l.dtype(), l.flash_attention() ? " flash" : "",
        l.extras() == v1::LayerProfileTask::STAGE_EXTRAS_FIRST  ? " +embedding"
        : l.extras() == v1::LayerProfileTask::STAGE_EXTRAS_LAST ? " +logits"
                                                                : "",
        l.attention_only() ? " attention only" : "",
        l.attention_window() > 0 ? absl::StrCat(" window ", l.attention_window()) : "");
  }
  if (task.has_collective()) {
    const v1::CollectiveSweepTask& c = task.collective();
    return absl::StrCat(v1::CollectiveSweepTask::Op_Name(c.op()), " k=", c.group_size(), " ",
                        c.sizes_bytes_size(), " size(s) ", c.dtype());
  }
  if (task.has_verify()) {
    const v1::VerifyTask& v = task.verify();
    absl::StatusOr<ParallelConfig> layout = server::ParallelConfigFromProto(v.parallel());
    return absl::StrCat("verify ", layout.ok() ? layout->ToString() : layout.status().message(),
                        ", ranks ", v.first_rank(), "..",
                        v.first_rank() + v.rank_count() - 1, " of ", v.world_size(), ", ",
                        v.steps(), " steps");
  }
  if (task.has_optimizer()) {
    return absl::StrCat("optimizer step, ", task.optimizer().params(), " parameters per rank");
  }
  if (task.has_moe_layer()) {
    const v1::MoeLayerTask& m = task.moe_layer();
    return absl::StrCat("moe layer h=", m.hidden_size(), " experts=", m.num_experts(), " top",
                        m.moe_router_topk(), " ep=", m.ep(), " etp=", m.etp(), " tokens=",
                        m.tokens());
  }
  return "no workload";
}

struct PendingReport {
  v1::TaskResult result;
  int rejections = 0;  // non-transient failures so far
};

}  // namespace

absl::Status WorkerOptions::Validate() const {
  if (coordinator.empty() && channel == nullptr) {
    return absl::InvalidArgumentError("coordinator must be set (HOST:PORT)");
  }
  if (backend != "auto" && backend != "cuda" && backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend (", backend, ") must be one of auto, cuda, cpu"));
  }
  std::set<int> seen;
  for (int d : devices) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("devices (", d, ") must be >= 0"));
    if (!seen.insert(d).second) {
      return absl::InvalidArgumentError(absl::StrCat("devices lists ", d, " twice"));
    }
  }
  if (heartbeat_interval_ms < 0) {
    return absl::InvalidArgumentError("heartbeat_interval_ms must be >= 0");
  }
  if (lease_wait_ms < 0) return absl::InvalidArgumentError("lease_wait_ms must be >= 0");
  if (rpc_timeout_ms <= 0) return absl::InvalidArgumentError("rpc_timeout_ms must be > 0");
  if (connect_timeout_s < 0) {
    return absl::InvalidArgumentError("connect_timeout_s must be >= 0 (0 = forever)");
  }
  if (backoff_initial_ms <= 0) {
    return absl::InvalidArgumentError("backoff_initial_ms must be > 0");
  }
  if (backoff_max_ms < backoff_initial_ms) {
    return absl::InvalidArgumentError("backoff_max_ms must be >= backoff_initial_ms");
  }
  if (stop_grace_s < 0) return absl::InvalidArgumentError("stop_grace_s must be >= 0");
  if (!tls && !tls_root_certs_pem.empty()) {
    return absl::InvalidArgumentError("tls_root_certs_pem is set but tls is off");
  }
  return absl::OkStatus();
}

class WorkerDaemon::Impl {
 public:
  explicit Impl(WorkerOptions options) : options_(std::move(options)) {
    if (!options_.log) options_.log = DefaultLog;
    if (options_.name.empty()) options_.name = HostName();
  }

  ~Impl() { StopHeartbeat(); }

  absl::Status Run() {
    if (absl::Status s = options_.Validate(); !s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ran_) return absl::FailedPreconditionError("WorkerDaemon::Run called twice");
      ran_ = true;
    }
    absl::StatusOr<DeviceInventory> inv =
        DiscoverDevices(options_.backend, options_.devices, options_.device_kind);
    if (!inv.ok()) return inv.status();
    inventory_ = *std::move(inv);
    std::shared_ptr<grpc::Channel> channel = MakeChannel();
    if (options_.executor) {
      executor_ = options_.executor;
    } else {
      // Parts of a multi-worker verify run meet through the coordinator's rendezvous
      // store, over this worker's channel and token.
      KernelsExecutorOptions executor_options;
      executor_options.rendezvous = [channel, token = options_.token](const std::string& ns,
                                                                      int64_t timeout_ms) {
        return MakeGrpcRendezvous(channel, token, ns, std::chrono::milliseconds(timeout_ms));
      };
      executor_ = CreateKernelsExecutor(inventory_, std::move(executor_options));
    }
    stub_ = v1::WorkerHub::NewStub(channel);

    // Nothing is logged before the first registration: an unreachable coordinator gives
    // exactly one line (the caller prints the returned status).
    if (absl::Status s = RegisterAtStartup(); !s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!registered_) return absl::OkStatus();  // stopped before reaching the coordinator
    }
    Log(absl::StrCat("backend ", inventory_.backend, ", device kind ", inventory_.device_kind,
                     ", ", inventory_.devices.size(), " device(s), ", inventory_.cpu_cores,
                     " core(s); coordinator ",
                     options_.channel ? std::string("(in-process channel)")
                                      : options_.coordinator));
    heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });

    absl::Status fatal = ServeLoop();
    Shutdown();
    return fatal;
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_time_ = Clock::now();
    if (lease_ctx_ != nullptr) lease_ctx_->TryCancel();
    if (options_.stop_grace_s == 0 && cancel_ != nullptr) {
      released_ = true;
      cancel_->Cancel();
    }
    cv_.notify_all();
  }

  WorkerStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    WorkerStats s = stats_;
    s.worker_id = worker_id_;
    s.reports_pending = static_cast<int64_t>(pending_.size());
    return s;
  }

 private:
  std::shared_ptr<grpc::Channel> MakeChannel() {
    if (options_.channel) return options_.channel;
    grpc::ChannelArguments args;
    // gRPC's own reconnect backoff defaults to 1 s .. 120 s; follow ours instead so a
    // restarted coordinator is found within backoff_max_ms.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(options_.backoff_initial_ms));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(options_.backoff_initial_ms));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(options_.backoff_max_ms));
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    if (options_.tls) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = options_.tls_root_certs_pem;
      credentials = grpc::SslCredentials(ssl);
    } else {
      credentials = grpc::InsecureChannelCredentials();
    }
    return grpc::CreateCustomChannel(options_.coordinator, credentials, args);
  }

  void Log(std::string_view line) { options_.log(line); }

  bool Stopping() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  }

  // Waits up to `ms` or until Stop(); true when stopping.
  bool SleepMs(int64_t ms) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_; });
    return stopping_;
  }

  void Prepare(grpc::ClientContext* ctx, int64_t timeout_ms) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
  }

  // --- Registration ----------------------------------------------------------------------

  // One Register attempt unless already registered. Returns the RPC status.
  absl::Status TryRegister() {
    std::lock_guard<std::mutex> reg_lock(register_mu_);
    std::string previous_id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (registered_) return absl::OkStatus();
      previous_id = worker_id_;
    }
    v1::RegisterRequest request;
    v1::WorkerInfo* info = request.mutable_worker();
    info->set_id(previous_id);  // lets a coordinator keep our identity across a blip
    info->set_name(options_.name);
    info->set_backend(inventory_.backend);
    info->set_device_kind(inventory_.device_kind);
    for (const v1::Device& d : inventory_.devices) *info->add_devices() = d;
    info->set_cpu_cores(inventory_.cpu_cores);
    info->set_hostname(HostName());  // the coordinator keeps co-located workers apart
    info->set_memory_bytes(inventory_.memory_bytes);
    info->set_state("idle");
    v1::RegisterResponse response;
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.rpc_timeout_ms);
    absl::Status status = FromGrpc(stub_->Register(&ctx, request, &response));
    if (!status.ok()) return status;
    if (response.worker_id().empty()) {
      return absl::InternalError("Register answered an empty worker_id");
    }
    std::lock_guard<std::mutex> lock(mu_);
    worker_id_ = response.worker_id();
    registered_ = true;
    ++generation_;
    ++stats_.registrations;
    heartbeat_ms_ = options_.heartbeat_interval_ms > 0 ? options_.heartbeat_interval_ms
                    : response.heartbeat_interval_ms() > 0 ? response.heartbeat_interval_ms()
                                                           : 5000;
    Log(absl::StrCat("registered as ", worker_id_, " (heartbeat every ", heartbeat_ms_, " ms)"));
    cv_.notify_all();
    return absl::OkStatus();
  }

  // Forgets the registration made at `generation` (a newer one stays valid).
  void Invalidate(int64_t generation, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation != generation_ || !registered_) return;
    registered_ = false;
    Log(absl::StrCat("lost the coordinator (", why, "); re-registering"));
  }

  // Id and generation of the current registration.
  std::pair<std::string, int64_t> Identity() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {worker_id_, generation_};
  }

  absl::Status RegisterAtStartup() {
    Backoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms);
    const Clock::time_point start = Clock::now();
    while (!Stopping()) {
      absl::Status status = TryRegister();
      if (status.ok()) return status;
      if (IsFatalForRegister(status.code())) {
        return absl::Status(status.code(), absl::StrCat("coordinator rejected registration: ",
                                                        status.message()));
      }
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (options_.connect_timeout_s > 0 && elapsed >= options_.connect_timeout_s) {
        return absl::UnavailableError(absl::StrCat(
            "cannot reach coordinator ", options_.coordinator, " after ",
            absl::StrFormat("%g", options_.connect_timeout_s), " s: ", status.message()));
      }
      int64_t delay = backoff.NextDelayMs();
      if (options_.connect_timeout_s > 0) {
        delay = std::min<int64_t>(
            delay, static_cast<int64_t>((options_.connect_timeout_s - elapsed) * 1000) + 1);
      }
      SleepMs(delay);
    }
    return absl::OkStatus();
  }

  // --- Serving ---------------------------------------------------------------------------

  // Returns OK after Stop(), or a fatal registration error.
  absl::Status ServeLoop() {
    Backoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms);
    while (!Stopping()) {
      absl::Status reg = TryRegister();
      if (!reg.ok()) {
        if (IsFatalForRegister(reg.code())) {
          return absl::Status(reg.code(), absl::StrCat("coordinator rejected registration: ",
                                                       reg.message()));
        }
        SleepMs(backoff.NextDelayMs());
        continue;
      }
      if (!FlushReports()) {
        SleepMs(backoff.NextDelayMs());
        continue;
      }
      std::optional<v1::ProfileTask> task;
      absl::Status lease = Lease(&task);
      if (!lease.ok()) {
        if (!Stopping()) SleepMs(backoff.NextDelayMs());
        continue;
      }
      backoff.Reset();
      if (task.has_value()) RunTask(*task);
    }
    return absl::OkStatus();
  }

  absl::Status Lease(std::optional<v1::ProfileTask>* task) {
    auto [id, generation] = Identity();
    v1::LeaseTaskRequest request;
    request.set_worker_id(id);
    request.set_wait_ms(options_.lease_wait_ms);
    v1::LeaseTaskResponse response;
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.rpc_timeout_ms + options_.lease_wait_ms);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return absl::CancelledError("stopping");
      lease_ctx_ = &ctx;
    }
    absl::Status status = FromGrpc(stub_->LeaseTask(&ctx, request, &response));
    {
      std::lock_guard<std::mutex> lock(mu_);
      lease_ctx_ = nullptr;
    }
    if (!status.ok()) {
      if (Stopping()) return status;
      if (NeedsReregister(status.code())) {
        Invalidate(generation, absl::StrCat("LeaseTask: ", status.ToString()));
      } else {
        Log(absl::StrCat("LeaseTask failed: ", status.ToString()));
      }
      return status;
    }
    if (response.has_task()) *task = response.task();
    return absl::OkStatus();
  }

  void RunTask(const v1::ProfileTask& task) {
    auto cancel = std::make_shared<CancelFlag>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_task_id_ = task.id();
      cancel_ = cancel;
      released_ = false;
    }
    Log(absl::StrCat("task ", task.id(), " attempt ", task.attempt(), ": ", Describe(task)));
    const Clock::time_point start = Clock::now();
    v1::TaskResult result = ExecuteGuarded(task, *cancel);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    result.set_task_id(task.id());
    result.set_attempt(task.attempt());
    result.set_elapsed_s(elapsed);
    bool released = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_task_id_.clear();
      cancel_.reset();
      released = released_;
      ++stats_.tasks_executed;
    }
    if (released && result.outcome() == v1::TaskResult::OUTCOME_CANCELLED) {
      // Stopped by the grace period: not a result; Deregister hands the lease back.
      Log(absl::StrCat("task ", task.id(), ": released (worker stopping)"));
      return;
    }
    Log(absl::StrCat("task ", task.id(), ": ", v1::TaskResult::Outcome_Name(result.outcome()),
                     result.message().empty() ? "" : absl::StrCat(" (", result.message(), ")"),
                     absl::StrFormat(" in %.3f s", elapsed)));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(PendingReport{std::move(result), 0});
    }
    FlushReports();
  }

  v1::TaskResult ExecuteGuarded(const v1::ProfileTask& task, const CancelFlag& cancel) {
    v1::TaskResult result;
    if (task.kind_case() == v1::ProfileTask::KIND_NOT_SET) {
      result.set_outcome(v1::TaskResult::OUTCOME_UNSUPPORTED);
      result.set_message("task names no workload (neither layer nor collective)");
      return result;
    }
    if (!task.device_kind().empty() && task.device_kind() != inventory_.device_kind) {
      result.set_outcome(v1::TaskResult::OUTCOME_UNSUPPORTED);
      result.set_message(absl::StrCat("task is for device kind ", task.device_kind(),
                                      "; this worker has ", inventory_.device_kind));
      return result;
    }
    try {
      result = executor_->Execute(task, cancel);
    } catch (const std::bad_alloc&) {
      result.Clear();
      result.set_outcome(v1::TaskResult::OUTCOME_OOM);
      result.set_message("std::bad_alloc during the task");
    } catch (const std::exception& e) {
      result.Clear();
      result.set_outcome(v1::TaskResult::OUTCOME_FAILED);
      result.set_message(absl::StrCat("exception: ", e.what()));
    } catch (...) {
      result.Clear();
      result.set_outcome(v1::TaskResult::OUTCOME_FAILED);
      result.set_message("unknown exception");
    }
    if (result.outcome() == v1::TaskResult::OUTCOME_UNSPECIFIED) {
      result.set_outcome(v1::TaskResult::OUTCOME_FAILED);
      result.set_message(absl::StrCat("executor returned no outcome. ", result.message()));
    }
    return result;
  }

  // Sends every pending result; false when the coordinator could not be reached (the
  // rest stay pending).
  bool FlushReports() {
    while (true) {
      PendingReport report;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty()) return true;
        report = pending_.front();
      }
      auto [id, generation] = Identity();
      v1::ReportResultRequest request;
      request.set_worker_id(id);
      *request.mutable_result() = report.result;
      request.mutable_result()->set_worker_id(id);
      v1::ReportResultResponse response;
      grpc::ClientContext ctx;
      Prepare(&ctx, options_.rpc_timeout_ms);
      absl::Status status = FromGrpc(stub_->ReportResult(&ctx, request, &response));
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        ++stats_.reports_acked;
        if (!response.accepted()) {
          Log(absl::StrCat("report of task ", report.result.task_id(),
                           " not accepted (harmless): ", response.reason()));
        }
        pending_.pop_front();
        continue;
      }
      if (NeedsReregister(status.code())) {
        if (generation == generation_ && registered_) {
          registered_ = false;
          Log(absl::StrCat("lost the coordinator (ReportResult: ", status.ToString(),
                           "); result kept, re-registering"));
        }
      }
      if (IsTransient(status.code())) return false;
      if (++pending_.front().rejections >= kMaxReportRejections) {
        Log(absl::StrCat("dropping the result of task ", report.result.task_id(), " after ",
                         kMaxReportRejections, " rejections: ", status.ToString()));
        pending_.pop_front();
        continue;
      }
      return false;
    }
  }

  // --- Heartbeats ------------------------------------------------------------------------

  void HeartbeatLoop() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        int64_t wait_ms = heartbeat_ms_;
        if (stopping_ && cancel_ != nullptr && !released_) {
          const double left =
              options_.stop_grace_s -
              std::chrono::duration<double>(Clock::now() - stop_time_).count();
          if (left <= 0) {
            released_ = true;
            cancel_->Cancel();
            Log(absl::StrCat("stop grace period over: cancelling task ", running_task_id_));
          } else {
            wait_ms = std::min<int64_t>(wait_ms, static_cast<int64_t>(left * 1000) + 1);
          }
        }
        cv_.wait_for(lock, std::chrono::milliseconds(wait_ms));
        if (heartbeat_exit_) return;
        if (stopping_ && cancel_ != nullptr && !released_ &&
            std::chrono::duration<double>(Clock::now() - stop_time_).count() >=
                options_.stop_grace_s) {
          continue;  // the top of the loop cancels it
        }
      }
      {
        // While idle, Run()'s thread re-registers (with backoff); while a task runs it
        // cannot, so this thread does, to renew the lease with a restarted coordinator.
        std::lock_guard<std::mutex> lock(mu_);
        if (!registered_ && running_task_id_.empty()) continue;
      }
      if (!TryRegister().ok()) continue;
      SendHeartbeat();
    }
  }

  void SendHeartbeat() {
    auto [id, generation] = Identity();
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!running_task_id_.empty()) request.add_task_ids(running_task_id_);
    }
    v1::HeartbeatResponse response;
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.rpc_timeout_ms);
    absl::Status status = FromGrpc(stub_->Heartbeat(&ctx, request, &response));
    if (!status.ok()) {
      if (NeedsReregister(status.code())) {
        Invalidate(generation, absl::StrCat("Heartbeat: ", status.ToString()));
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& cancel_id : response.cancel_task_ids()) {
      if (cancel_ != nullptr && cancel_id == running_task_id_ && !cancel_->cancelled()) {
        cancel_->Cancel();
        Log(absl::StrCat("task ", cancel_id, ": cancelled by the coordinator"));
      }
    }
    if (response.reregister() && generation == generation_ && registered_) {
      registered_ = false;
      Log("coordinator asked to re-register");
      cv_.notify_all();
    }
  }

  void StopHeartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      heartbeat_exit_ = true;
      cv_.notify_all();
    }
    if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  }

  // After Stop(): one last attempt to deliver results, then Deregister.
  void Shutdown() {
    StopHeartbeat();
    bool registered = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      registered = registered_;
    }
    if (registered && !FlushReports()) {
      Log(absl::StrCat(stats().reports_pending, " result(s) could not be delivered"));
    }
    auto [id, generation] = Identity();
    (void)generation;
    if (registered) {
      v1::DeregisterRequest request;
      request.set_worker_id(id);
      v1::DeregisterResponse response;
      grpc::ClientContext ctx;
      Prepare(&ctx, std::min<int64_t>(options_.rpc_timeout_ms, 2000));
      absl::Status status = FromGrpc(stub_->Deregister(&ctx, request, &response));
      Log(status.ok() ? absl::StrCat("deregistered ", id)
                      : absl::StrCat("Deregister failed: ", status.ToString()));
    }
  }

  WorkerOptions options_;
  DeviceInventory inventory_;
  std::shared_ptr<TaskExecutor> executor_;
  std::unique_ptr<v1::WorkerHub::Stub> stub_;
  std::thread heartbeat_thread_;

  std::mutex register_mu_;  // serializes Register calls (acquired before mu_)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  bool ran_ = false;
  bool stopping_ = false;
  Clock::time_point stop_time_;
  bool heartbeat_exit_ = false;
  bool registered_ = false;
  int64_t generation_ = 0;
  std::string worker_id_;
  int64_t heartbeat_ms_ = 5000;
  grpc::ClientContext* lease_ctx_ = nullptr;
  std::string running_task_id_;
  std::shared_ptr<CancelFlag> cancel_;
  bool released_ = false;  // the running task was cancelled because the worker stops
  std::deque<PendingReport> pending_;
  WorkerStats stats_;
};

WorkerDaemon::WorkerDaemon(WorkerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
WorkerDaemon::~WorkerDaemon() = default;
absl::Status WorkerDaemon::Run() { return impl_->Run(); }
void WorkerDaemon::Stop() { impl_->Stop(); }
WorkerStats WorkerDaemon::stats() const { return impl_->stats(); }

}  // namespace paratune::worker
