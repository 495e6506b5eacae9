#include "server/job_manager.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "server/verify_stage.h"

namespace paratune::server {
namespace {

absl::Status UnknownWorker(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("unknown worker_id '", id, "'; register again"));
}

// Ranks one worker needs for `task`: what worker/kernels_executor checks before it runs it.
int64_t RanksNeeded(const v1::ProfileTask& task) {
  if (task.has_layer()) {
    return std::max<int64_t>(1, task.layer().tp()) * std::max<int64_t>(1, task.layer().cp());
  }
  if (task.has_collective()) return std::max<int64_t>(1, task.collective().group_size());
  if (task.has_verify()) return std::max<int64_t>(1, task.verify().rank_count());
  if (task.has_moe_layer()) {
    return std::max<int64_t>(1, task.moe_layer().ep()) *
           std::max<int64_t>(1, task.moe_layer().etp());
  }
  if (task.has_serving_step()) return std::max<int64_t>(1, task.serving_step().tp());
  if (task.has_serving_verify()) return std::max<int64_t>(1, task.serving_verify().tp());
  return 1;
}

absl::Status ValidateOptions(const JobManagerOptions& options) {
  if (options.lease_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_timeout_ms (", options.lease_timeout_ms, ") must be positive"));
  }
  if (options.heartbeat_interval_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat_interval_ms (", options.heartbeat_interval_ms, ") must be positive"));
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts (", options.max_attempts, ") must be at least 1"));
  }
  if (options.profile.iters < 1 || options.profile.warmup < 0 ||
      options.profile.max_candidates < 0) {
    return absl::InvalidArgumentError(absl::StrCat("profile iters (", options.profile.iters,
                                                   ") must be >= 1, warmup (",
                                                   options.profile.warmup, ") and max_candidates (",
                                                   options.profile.max_candidates, ") >= 0"));
  }
  if (!options.plan) {
    return absl::InvalidArgumentError("options.plan (the analytical planner) must be set");
  }
  if (options.results_cache_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("results_cache_size (", options.results_cache_size, ") must be at least 1"));
  }
  if (options.max_finished_jobs_in_memory < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_finished_jobs_in_memory (",
                                                   options.max_finished_jobs_in_memory,
                                                   ") must be at least 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(std::unique_ptr<Store> store,
                                                               const Clock* clock,
                                                               JobManagerOptions options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  std::unique_ptr<JobManager> manager(new JobManager(std::move(store), clock, std::move(options)));
  if (absl::Status s = manager->jobs_.Recover(); !s.ok()) return s;
  manager->UpdateMetrics();
  // Planning runs outside every lock: several jobs can plan at once.
  manager->executor_.Start(std::max(2u, std::thread::hardware_concurrency()),
                           [m = manager.get()](JobWork work, const std::string& job_id) {
                             if (work == JobWork::kPlan) {
                               m->jobs_.RunPlan(job_id);
                             } else {
                               m->jobs_.RunCompose(job_id);
                             }
                           });
  manager->reaper_ = std::thread([m = manager.get()] { m->ReaperLoop(); });
  return manager;
}

JobManager::JobManager(std::unique_ptr<Store> store, const Clock* clock, JobManagerOptions options)
    : clock_(clock),
      options_(std::move(options)),
      workers_(clock, options_.lease_timeout_ms),
      broker_(clock, options_.lease_timeout_ms, options_.max_attempts),
      jobs_(std::move(store), clock, &broker_, &workers_, &executor_, static_cast<const JobLifecycleOptions&>(options_)) {}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(reaper_mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  jobs_.Shutdown();
  broker_.Shutdown();
  executor_.Shutdown();
  if (reaper_.joinable()) reaper_.join();
}

void JobManager::ReaperLoop() {
  const auto period =
      std::chrono::milliseconds(std::clamp<int64_t>(options_.lease_timeout_ms / 4, 20, 1000));
  std::unique_lock<std::mutex> lock(reaper_mu_);
  while (!stopping_) {
    reaper_cv_.wait_for(lock, period);
    if (stopping_) return;
    lock.unlock();
    ReapNow();
    lock.lock();
  }
}

void JobManager::ReapNow() {
  jobs_.Reap();
  UpdateMetrics();
}

void JobManager::UpdateMetrics() {
  if (options_.metrics == nullptr) return;
  JobCounts counts = jobs_.Counts();
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_CANCELLED; ++s) {
    const auto state = static_cast<v1::JobState>(s);
    options_.metrics->SetJobs(state, counts.jobs[state]);
  }
  options_.metrics->SetTasks(TaskGaugeState::kQueued, broker_.queued());
  options_.metrics->SetTasks(TaskGaugeState::kLeased, broker_.leased());
  options_.metrics->SetTasks(TaskGaugeState::kDone, counts.tasks_done);
  options_.metrics->SetTasks(TaskGaugeState::kFailed, counts.tasks_failed);
  for (const auto& [state, n] : workers_.CountByState()) options_.metrics->SetWorkers(state, n);
  for (const char* kind : {"training", "inference"}) {
    options_.metrics->SetJobsOfKind(kind, counts.jobs_by_kind[kind]);
    options_.metrics->SetCandidatesScored(kind, counts.candidates_by_kind[kind]);
  }
}

void JobManager::WaitIdle() { executor_.WaitIdle(); }

int64_t JobManager::leases_granted() const { return broker_.leases_granted(); }

int64_t JobManager::resident_results() const { return jobs_.resident_results(); }

int64_t JobManager::whole_finished_jobs() const { return jobs_.whole_finished_jobs(); }

// --- Autotuner ----------------------------------------------------------------------------

absl::StatusOr<v1::Job> JobManager::SubmitJob(const v1::SubmitJobRequest& request) {
  return jobs_.Submit(request);
}

absl::StatusOr<v1::Job> JobManager::GetJob(const v1::GetJobRequest& request) {
  return jobs_.Get(request);
}

absl::StatusOr<v1::ListJobsResponse> JobManager::ListJobs(const v1::ListJobsRequest& request) {
  return jobs_.List(request);
}

absl::Status JobManager::WatchJob(const v1::WatchJobRequest& request,
                                  const std::function<bool(const v1::Job&)>& on_update) {
  // An unchanged job is sent again this often: the only way to notice a watcher that left
  // while its job sits in one state (on_update returns false then).
  constexpr auto kKeepalive = std::chrono::seconds(10);
  std::string last_sent;
  auto last_send = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    // Wake up on changes, and once a second so that the ETA moves.
    absl::StatusOr<v1::Job> snapshot = jobs_.Snapshot(
        request.id(), first ? std::chrono::milliseconds(0) : std::chrono::seconds(1));
    if (!snapshot.ok()) return snapshot.status();
    std::string bytes = snapshot->SerializeAsString();
    const auto now = std::chrono::steady_clock::now();
    if (first || bytes != last_sent || now - last_send >= kKeepalive) {
      if (!on_update(*snapshot)) return absl::OkStatus();
      last_sent = std::move(bytes);
      last_send = now;
    }
    if (IsTerminal(snapshot->state())) return absl::OkStatus();
  }
}

absl::StatusOr<v1::Job> JobManager::CancelJob(const v1::CancelJobRequest& request) {
  return jobs_.Cancel(request);
}

absl::StatusOr<v1::JobResults> JobManager::GetResults(const v1::GetResultsRequest& request) {
  return jobs_.GetResults(request);
}

absl::StatusOr<v1::ListWorkersResponse> JobManager::ListWorkers(const v1::ListWorkersRequest&) {
  v1::ListWorkersResponse out;
  for (v1::WorkerInfo& w : workers_.List()) *out.add_workers() = std::move(w);
  return out;
}

// --- WorkerHub ----------------------------------------------------------------------------

absl::StatusOr<v1::RegisterResponse> JobManager::Register(const v1::RegisterRequest& request) {
  if (request.worker().device_kind().empty()) {
    return absl::InvalidArgumentError("worker.device_kind must be set (e.g. \"cpu\")");
  }
  // A worker that comes back (coordinator restart, network blip) keeps its id; its old
  // leases are gone or still valid, and reports are checked per (task id, attempt) anyway.
  v1::RegisterResponse out;
  out.set_worker_id(workers_.Register(request.worker()));
  out.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  out.set_lease_timeout_ms(options_.lease_timeout_ms);
  return out;
}

absl::StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(const v1::HeartbeatRequest& request) {
  v1::HeartbeatResponse out;
  if (!workers_.Touch(request.worker_id())) {
    out.set_reregister(true);
    return out;
  }
  const std::vector<std::string> ids(request.task_ids().begin(), request.task_ids().end());
  std::vector<std::string> stop = broker_.Renew(request.worker_id(), ids);
  for (const std::string& id : stop) out.add_cancel_task_ids(id);
  std::string running;
  for (const std::string& id : ids) {
    if (std::find(stop.begin(), stop.end(), id) == stop.end()) running = id;
  }
  workers_.SetRunning(request.worker_id(), running);
  return out;
}

absl::StatusOr<v1::LeaseTaskResponse> JobManager::LeaseTask(const v1::LeaseTaskRequest& request) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::clamp<int64_t>(request.wait_ms(), 0, 60'000));
  std::optional<v1::WorkerInfo> w = workers_.TouchAndGet(request.worker_id());
  if (!w) return UnknownWorker(request.worker_id());
  // A verify part needs its ranks' devices on one worker of the backend it was placed for
  // (CPU, or CUDA for 16-bit specs). A profile task needing more ranks than this worker has
  // waits for a registered worker of its kind that has them; when none has, this worker
  // takes it and answers UNSUPPORTED with the reason. A worker that registered no devices
  // is not held back (its count is unknown).
  const int64_t devices = w->devices_size();
  LeaseRequest lease_request;
  lease_request.worker_id = request.worker_id();
  lease_request.device_kind = w->device_kind();
  lease_request.host = w->hostname();
  lease_request.can_run = [&](const v1::ProfileTask& t) {
    if (t.has_verify()) {
      const std::string& want = t.verify().backend().empty() ? "cpu" : t.verify().backend();
      return want == w->backend() && RanksNeeded(t) <= devices;
    }
    // The serving loop runs on a worker holding all of its ranks: a CPU worker, or a CUDA
    // worker for aggregated layouts with pp 1.
    if (t.has_serving_verify()) {
      return (w->backend() == "cpu" ||
              (w->backend() == "cuda" && ServingVerifyRunsOnCuda(t.serving_verify()))) &&
             RanksNeeded(t) <= devices;
    }
    const int64_t need = RanksNeeded(t);
    return devices == 0 || need <= devices || need > workers_.LargestDeviceCount(w->device_kind());
  };
  std::optional<GrantedLease> lease = broker_.Lease(lease_request, deadline);
  // Long polls count as contact: a waiting worker is alive.
  if (!workers_.Touch(request.worker_id())) {
    if (lease) broker_.Undo(*lease, request.worker_id());
    return UnknownWorker(request.worker_id());
  }
  if (!lease) return v1::LeaseTaskResponse();
  if (absl::Status s = jobs_.RecordLease(*lease, request.worker_id()); !s.ok()) return s;
  workers_.SetRunning(request.worker_id(), lease->task.id());
  v1::LeaseTaskResponse out;
  out.set_lease_expires_unix_ms(lease->expires_ms);
  *out.mutable_task() = std::move(lease->task);
  return out;
}

absl::StatusOr<v1::ReportResultResponse> JobManager::ReportResult(
    const v1::ReportResultRequest& request) {
  if (!workers_.Touch(request.worker_id())) return UnknownWorker(request.worker_id());
  return jobs_.ApplyReport(request.worker_id(), request.result());
}

absl::StatusOr<v1::DeregisterResponse> JobManager::Deregister(
    const v1::DeregisterRequest& request) {
  jobs_.ReleaseWorker(request.worker_id(), absl::StrCat("worker ", request.worker_id(), " left"));
  workers_.Remove(request.worker_id());
  return v1::DeregisterResponse();
}

}  // namespace paratune::server
