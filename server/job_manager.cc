#include "server/job_manager.h"

#include <algorithm>
#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "search/compose.h"
#include "server/convert.h"
#include "server/metrics.h"

namespace paratune::server {
namespace {

void SetTime(google::protobuf::Timestamp* ts, int64_t ms) {
  ts->set_seconds(ms / 1000);
  ts->set_nanos(static_cast<int32_t>((ms % 1000) * 1'000'000));
}

std::string JobIdOfTask(const std::string& task_id) {
  const size_t pos = task_id.rfind("-t");
  return pos == std::string::npos ? std::string() : task_id.substr(0, pos);
}

absl::Status NotFoundJob(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
}

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
  return 1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(std::unique_ptr<Store> store,
                                                               const Clock* clock,
                                                               JobManagerOptions options) {
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
    return absl::InvalidArgumentError(absl::StrCat(
        "profile iters (", options.profile.iters, ") must be >= 1, warmup (",
        options.profile.warmup, ") and max_candidates (", options.profile.max_candidates,
        ") >= 0"));
  }
  if (!options.plan) {
    return absl::InvalidArgumentError("options.plan (the analytical planner) must be set");
  }
  if (options.results_cache_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "results_cache_size (", options.results_cache_size, ") must be at least 1"));
  }
  std::unique_ptr<JobManager> manager(
      new JobManager(std::move(store), clock, std::move(options)));
  if (absl::Status s = manager->Recover(); !s.ok()) return s;
  // Planning runs outside the lock: several jobs can plan at once.
  const unsigned executors = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < executors; ++i) {
    manager->executors_.emplace_back([m = manager.get()] { m->ExecutorLoop(); });
  }
  manager->reaper_ = std::thread([m = manager.get()] { m->ReaperLoop(); });
  return manager;
}

JobManager::JobManager(std::unique_ptr<Store> store, const Clock* clock,
                       JobManagerOptions options)
    : clock_(clock),
      options_(std::move(options)),
      store_(std::move(store)),
      queue_(options_.lease_timeout_ms, options_.max_attempts) {}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_cv_.notify_all();
  tasks_cv_.notify_all();
  work_cv_.notify_all();
  for (std::thread& t : executors_) {
    if (t.joinable()) t.join();
  }
  if (reaper_.joinable()) reaper_.join();
}

absl::Status JobManager::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  // Finished jobs come without their rankings (read on demand by GetResults).
  absl::StatusOr<std::vector<JobRecord>> records = store_->ListJobsForRecovery();
  if (!records.ok()) return records.status();
  for (JobRecord& record : *records) {
    const std::string id = record.job.id();
    JobEntry& job = jobs_[id];
    job.record = std::move(record);
    job_order_.push_back(id);
    const v1::JobState state = job.record.job.state();
    if (IsTerminal(state)) {
      job.has_results = job.record.has_results;
      job.record.results.reset();
      job.record.modelled.reset();
      continue;
    }
    // Rankings stored before the rejected list was capped.
    if (job.record.results) CapRejected(*job.record.results);
    if (job.record.modelled) CapRejected(*job.record.modelled);
    const v1::Job& stored = job.record.job;
    absl::StatusOr<JobSpec> spec =
        SpecFromProto(stored.has_resolved_spec() ? stored.resolved_spec() : stored.spec());
    if (!spec.ok()) {
      if (absl::Status s = SetStateLocked(
              job, v1::JOB_STATE_FAILED,
              absl::StrCat("spec no longer valid: ", spec.status().message()));
          !s.ok()) {
        return s;
      }
      continue;
    }
    job.spec = *std::move(spec);
    switch (state) {
      case v1::JOB_STATE_PENDING:
      case v1::JOB_STATE_PLANNING:
        ScheduleLocked(Work::kPlan, id);
        break;
      case v1::JOB_STATE_VERIFYING: {
        absl::StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(id);
        if (!tasks.ok()) return tasks.status();
        job.tasks = *std::move(tasks);
        job.profiling_start_ms = clock_->NowMs();
        // Leases died with the old process: every unfinished run starts again (its parts
        // under a fresh rendezvous namespace).
        std::vector<int64_t> restart;
        for (const TaskRecord& t : job.tasks) {
          if (t.task.has_verify() && t.state == TaskState::kPending &&
              std::find(restart.begin(), restart.end(), t.task.verify().layout_rank()) ==
                  restart.end()) {
            restart.push_back(t.task.verify().layout_rank());
          }
        }
        for (int64_t rank : restart) {
          if (absl::Status s = ResetGangLocked(job, rank, "coordinator restarted", false);
              !s.ok()) {
            return s;
          }
        }
        if (absl::Status s = MaybeFinishVerifyingLocked(job); !s.ok()) return s;
        break;
      }
      case v1::JOB_STATE_PROFILING:
      case v1::JOB_STATE_COMPOSING: {
        absl::StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(id);
        if (!tasks.ok()) return tasks.status();
        job.tasks = *std::move(tasks);
        job.profiling_start_ms = clock_->NowMs();
        if (state == v1::JOB_STATE_COMPOSING) {
          ScheduleLocked(Work::kCompose, id);
          break;
        }
        for (const TaskRecord& t : job.tasks) {
          if (t.state == TaskState::kPending) queue_.Add(t.task);
        }
        if (absl::Status s = MaybeFinishProfilingLocked(job); !s.ok()) return s;
        break;
      }
      default:
        ScheduleLocked(Work::kPlan, id);
        break;
    }
  }
  UpdateMetricsLocked();
  return absl::OkStatus();
}

// --- Background threads -------------------------------------------------------------------

void JobManager::ScheduleLocked(Work work, const std::string& job_id) {
  work_.emplace_back(work, job_id);
  work_cv_.notify_all();
}

void JobManager::ExecutorLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !work_.empty();
    });
    if (stopping_) return;
    auto [work, job_id] = work_.front();
    work_.pop_front();
    ++executors_busy_;
    lock.unlock();
    if (work == Work::kPlan) {
      RunPlan(job_id);
    } else {
      RunCompose(job_id);
    }
    lock.lock();
    --executors_busy_;
    work_cv_.notify_all();
  }
}

void JobManager::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  work_cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || (work_.empty() && executors_busy_ == 0);
  });
}

void JobManager::ReaperLoop() {
  const auto period = std::chrono::milliseconds(
      std::clamp<int64_t>(options_.lease_timeout_ms / 4, 20, 1000));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    work_cv_.wait_for(lock, period);
    if (stopping_) return;
    ReapLocked();
  }
}

void JobManager::ReapNow() {
  std::lock_guard<std::mutex> lock(mu_);
  ReapLocked();
}

void JobManager::ReapLocked() {
  const int64_t now = clock_->NowMs();
  for (const TaskQueue::Requeue& r : queue_.Expire(now)) {
    RequeueLocked(r, "lease expired").IgnoreError();
  }
  for (auto& [id, worker] : workers_) {
    if (worker.lost) continue;
    if (now - worker.info.last_heartbeat_unix_ms() <= options_.lease_timeout_ms) continue;
    worker.lost = true;
    worker.info.set_state("lost");
    worker.info.clear_current_task_id();
    for (const TaskQueue::Requeue& r : queue_.ReleaseWorker(id)) {
      RequeueLocked(r, absl::StrCat("worker ", id, " lost")).IgnoreError();
    }
  }
  UpdateMetricsLocked();
}

// --- Planning and composing (executor thread) --------------------------------------------

void JobManager::RunPlan(const std::string& job_id) {
  JobSpec spec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    JobEntry& job = it->second;
    const v1::JobState state = job.record.job.state();
    if (state != v1::JOB_STATE_PENDING && state != v1::JOB_STATE_PLANNING) return;
    if (absl::Status s = SetStateLocked(job, v1::JOB_STATE_PLANNING, ""); !s.ok()) {
      // Not stored (disk full, read-only file): fail the job with the reason instead of
      // leaving it PLANNING in memory with nobody planning it.
      SetStateLocked(job, v1::JOB_STATE_FAILED, absl::StrCat("store: ", s.message()))
          .IgnoreError();
      return;
    }
    spec = job.spec;
  }
  absl::StatusOr<PlanResult> plan = options_.plan(spec);
  // The wire form (rejected list capped) is built before taking the lock.
  std::optional<v1::PlanResult> plan_proto;
  if (plan.ok()) plan_proto = ToProto(*plan);

  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobEntry& job = it->second;
  if (job.record.job.state() != v1::JOB_STATE_PLANNING) return;  // Cancelled meanwhile.
  if (!plan.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED,
                   absl::StrCat("planning failed: ", plan.status().message()))
        .IgnoreError();
    return;
  }
  if (spec.search.mode == SearchMode::kModel) {
    job.record.results = *std::move(plan_proto);
    job.rankings_dirty = true;
    StartVerifyLocked(job).IgnoreError();
    return;
  }
  absl::StatusOr<ProfilePlan> profile = PlanProfiles(spec, *plan, options_.profile);
  if (!profile.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED,
                   absl::StrCat("profile planning failed: ", profile.status().message()))
        .IgnoreError();
    return;
  }
  job.record.modelled = *std::move(plan_proto);
  job.rankings_dirty = true;
  std::vector<TaskRecord> tasks;
  for (size_t i = 0; i < profile->tasks.size(); ++i) {
    TaskRecord t;
    t.task = ToProto(profile->tasks[i]);
    t.task.set_id(absl::StrCat(job_id, "-t", i));
    t.task.set_job_id(job_id);
    absl::StatusOr<std::optional<v1::TaskResult>> cached =
        store_->GetCached(t.task.device_kind(), t.task.key());
    if (!cached.ok()) {
      SetStateLocked(job, v1::JOB_STATE_FAILED,
                     absl::StrCat("profile cache: ", cached.status().message()))
          .IgnoreError();
      return;
    }
    if (cached->has_value()) {
      t.state = TaskState::kDone;
      t.result = **cached;
    }
    tasks.push_back(std::move(t));
  }
  if (absl::Status s = store_->PutTasks(tasks); !s.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED, absl::StrCat("store: ", s.message()))
        .IgnoreError();
    return;
  }
  job.tasks = std::move(tasks);
  job.profiling_start_ms = clock_->NowMs();
  if (!SetStateLocked(job, v1::JOB_STATE_PROFILING, "").ok()) return;
  bool queued = false;
  for (const TaskRecord& t : job.tasks) {
    if (t.state != TaskState::kPending) continue;
    queue_.Add(t.task);
    queued = true;
  }
  if (queued) tasks_cv_.notify_all();
  MaybeFinishProfilingLocked(job).IgnoreError();
}

void JobManager::RunCompose(const std::string& job_id) {
  JobSpec spec;
  v1::PlanResult modelled_proto;
  std::vector<TaskRecord> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    const JobEntry& job = it->second;
    if (job.record.job.state() != v1::JOB_STATE_COMPOSING) return;
    spec = job.spec;
    if (job.record.modelled) modelled_proto = *job.record.modelled;
    tasks = job.tasks;
  }
  absl::StatusOr<PlanResult> modelled = PlanResultFromProto(modelled_proto);
  absl::StatusOr<PlanResult> composed = absl::InternalError("not composed");
  if (!modelled.ok()) {
    composed = modelled.status();
  } else {
    absl::StatusOr<ProfilePlan> profile = PlanProfiles(spec, *modelled, options_.profile);
    if (profile.ok()) {
      Measurements measurements;
      // Stage-extras tasks feed Measurements::first_stage / last_stage under their plain
      // layer task's key (the same spec without extras).
      std::map<std::string, const LayerProfileSpec*> extras_tasks;
      for (const ProfileTaskSpec& p : profile->tasks) {
        if (p.kind == ProfileTaskSpec::Kind::kLayer && p.layer.extras != StageExtras::kNone) {
          extras_tasks[p.key] = &p.layer;
        }
      }
      for (const TaskRecord& t : tasks) {
        if (!t.result || t.task.has_verify()) continue;
        if (t.task.has_optimizer()) {
          if (t.state == TaskState::kDone && t.result->outcome() == v1::TaskResult::OUTCOME_OK &&
              t.result->has_optimizer()) {
            measurements.optimizer_seconds_per_param = t.result->optimizer().seconds_per_param();
          }
          continue;
        }
        if (t.task.has_collective()) {
          CommMeasurement c = CommMeasurementFromResult(*t.result);
          if (t.state == TaskState::kFailed) c.ok = false;
          measurements.collectives[t.task.key()] = std::move(c);
          continue;
        }
        LayerMeasurement m = MeasurementFromResult(*t.result);
        if (t.state == TaskState::kFailed && m.outcome == LayerMeasurement::Outcome::kOk) {
          m.outcome = LayerMeasurement::Outcome::kFailed;
          m.message = "task failed";
        }
        if (auto x = extras_tasks.find(t.task.key()); x != extras_tasks.end()) {
          LayerProfileSpec plain = *x->second;
          plain.extras = StageExtras::kNone;
          (x->second->extras == StageExtras::kFirst ? measurements.first_stage
                                                    : measurements.last_stage)[plain.Key()] =
              std::move(m);
          continue;
        }
        measurements.layers[t.task.key()] = std::move(m);
      }
      composed = ComposePlan(spec, *modelled, *profile, options_.profile, measurements);
    } else {
      composed = profile.status();
    }
  }
  // The wire form is built before taking the lock. The modelled ranking listed only the
  // first rejected layouts; its counts of all of them come through PlanResult.
  std::optional<v1::PlanResult> composed_proto;
  if (composed.ok()) composed_proto = ToProto(*composed);

  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobEntry& job = it->second;
  if (job.record.job.state() != v1::JOB_STATE_COMPOSING) return;
  if (!composed.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED,
                   absl::StrCat("composing failed: ", composed.status().message()))
        .IgnoreError();
    return;
  }
  job.record.results = *std::move(composed_proto);
  job.rankings_dirty = true;
  StartVerifyLocked(job).IgnoreError();
}

// --- Verify stage ------------------------------------------------------------------------

absl::Status JobManager::StartVerifyLocked(JobEntry& job) {
  const int64_t k = job.spec.search.verify_top_k;
  if (k <= 0 || !job.record.results) return SetStateLocked(job, v1::JOB_STATE_SUCCEEDED, "");
  job.rankings_dirty = true;  // Verification statuses below.
  const std::string& job_id = job.record.job.id();
  // The workers registered now, of the device kind the spec names.
  std::vector<VerifyHost> hosts;
  for (const auto& [id, w] : workers_) {
    if (w.lost || w.info.device_kind() != job.spec.cluster.gpu) continue;
    hosts.push_back({id, w.info.backend(), static_cast<int64_t>(w.info.devices_size()),
                     w.info.memory_bytes(),
                     w.info.devices_size() > 0 ? w.info.devices(0).memory_bytes() : 0});
  }
  std::vector<TaskRecord> tasks;
  int64_t next_index = static_cast<int64_t>(job.tasks.size());
  int64_t chosen = 0;
  for (v1::RankedConfig& r : *job.record.results->mutable_ranked()) {
    if (chosen == k) break;
    if (!r.fits()) continue;
    ++chosen;
    v1::Verification* v = r.mutable_verification();
    v->set_predicted_iteration_time_s(r.iteration_time_s());
    v->set_predicted_peak_gib(r.memory().peak_gib());
    if (std::string why = VerifyUnsupportedReason(job.spec, r.config()); !why.empty()) {
      v->set_status(absl::StrCat("not verified: ", why));
      continue;
    }
    const v1::ParallelConfig& c = r.config();
    const int64_t world = std::max<int64_t>(1, c.tp()) * std::max<int64_t>(1, c.pp()) *
                          std::max<int64_t>(1, c.dp());
    if (hosts.empty()) {
      v->set_status(absl::StrCat("not verified: needs ", world,
                                 " ranks, no worker of device kind ", job.spec.cluster.gpu,
                                 " is registered"));
      continue;
    }
    VerifyPlacement placement =
        PlaceVerifyRun(world, r.memory().peak_gib() * 1024.0 * 1024.0 * 1024.0, hosts,
                       ToString(job.spec.training.precision));
    if (placement.parts.empty()) {
      v->set_status(absl::StrCat("not verified: ", placement.reason));
      continue;
    }
    v->set_status("verifying");
    const std::string ns = absl::StrCat(job_id, "/v", r.rank(), "/", NewIdLocked("g"));
    for (const VerifyPart& part : placement.parts) {
      TaskRecord t;
      t.task.set_id(absl::StrCat(job_id, "-t", next_index++));
      t.task.set_job_id(job_id);
      t.task.set_device_kind(job.spec.cluster.gpu);
      t.task.set_key(absl::StrCat("verify/", r.rank(), "/", part.first_rank, "+",
                                  part.rank_count));
      *t.task.mutable_verify() = MakeVerifyTask(job.spec, r, part, options_.verify, ns);
      t.task.mutable_verify()->set_backend(placement.backend);
      tasks.push_back(std::move(t));
    }
  }
  if (tasks.empty()) return SetStateLocked(job, v1::JOB_STATE_SUCCEEDED, "");
  if (absl::Status s = store_->PutTasks(tasks); !s.ok()) {
    return SetStateLocked(job, v1::JOB_STATE_FAILED, absl::StrCat("store: ", s.message()));
  }
  for (TaskRecord& t : tasks) {
    queue_.Add(t.task);
    job.tasks.push_back(std::move(t));
  }
  if (job.profiling_start_ms == 0) job.profiling_start_ms = clock_->NowMs();
  tasks_cv_.notify_all();
  return SetStateLocked(job, v1::JOB_STATE_VERIFYING, "");
}

absl::Status JobManager::ResetGangLocked(JobEntry& job, int64_t layout_rank,
                                         const std::string& why, bool give_up) {
  std::vector<TaskRecord*> gang;
  int64_t attempts = 0;
  for (TaskRecord& t : job.tasks) {
    if (!t.task.has_verify() || t.task.verify().layout_rank() != layout_rank) continue;
    gang.push_back(&t);
    attempts = std::max(attempts, t.task.attempt());
  }
  if (gang.empty()) return absl::OkStatus();
  const bool fail = give_up || attempts >= queue_.max_attempts();
  const std::string ns =
      absl::StrCat(job.record.job.id(), "/v", layout_rank, "/", NewIdLocked("g"));
  std::vector<TaskRecord> changed;
  for (TaskRecord* t : gang) {
    queue_.Remove(t->task.id());
    if (fail) {
      if (t->state == TaskState::kFailed && t->result) {
        changed.push_back(*t);
        continue;
      }
      t->state = TaskState::kFailed;
      v1::TaskResult failure;
      failure.set_task_id(t->task.id());
      failure.set_attempt(t->task.attempt());
      failure.set_outcome(v1::TaskResult::OUTCOME_FAILED);
      failure.set_message(give_up ? why
                                  : absl::StrCat(why, "; gave up after ", attempts, " attempts"));
      t->result = failure;
    } else {
      t->state = TaskState::kPending;
      t->result.reset();
      v1::VerifyTask* v = t->task.mutable_verify();
      if (v->rank_count() < v->world_size()) v->set_rendezvous_namespace(ns);
      queue_.Add(t->task);
    }
    changed.push_back(*t);
  }
  if (!fail) tasks_cv_.notify_all();
  return store_->PutTasks(changed);
}

absl::Status JobManager::MaybeFinishVerifyingLocked(JobEntry& job) {
  if (job.record.job.state() != v1::JOB_STATE_VERIFYING) return absl::OkStatus();
  std::map<int64_t, std::vector<const TaskRecord*>> runs;
  for (const TaskRecord& t : job.tasks) {
    if (!t.task.has_verify()) continue;
    if (t.state == TaskState::kPending) return absl::OkStatus();
    runs[t.task.verify().layout_rank()].push_back(&t);
  }
  if (!job.record.results) {
    return SetStateLocked(job, v1::JOB_STATE_FAILED, "verifying: the ranking is missing");
  }
  job.rankings_dirty = true;
  for (v1::RankedConfig& r : *job.record.results->mutable_ranked()) {
    auto it = runs.find(r.rank());
    if (it == runs.end()) continue;
    v1::Verification* v = r.mutable_verification();
    std::string failure;
    std::vector<v1::VerifyResult> parts;
    int64_t world = 0;
    for (const TaskRecord* t : it->second) {
      world = t->task.verify().world_size();
      if (t->state == TaskState::kDone && t->result && t->result->has_verify()) {
        parts.push_back(t->result->verify());
        continue;
      }
      if (!failure.empty()) continue;
      const v1::TaskResult* res = t->result ? &*t->result : nullptr;
      if (res != nullptr && res->outcome() == v1::TaskResult::OUTCOME_OOM) {
        failure = absl::StrCat("out of memory on the worker: ", res->message());
      } else if (res != nullptr) {
        failure = res->message();
      } else {
        failure = "no result";
      }
    }
    if (failure.empty()) {
      absl::StatusOr<v1::Verification> measured = VerificationFromParts(job.spec, r, world, parts);
      if (measured.ok()) {
        *v = *std::move(measured);
        continue;
      }
      failure = std::string(measured.status().message());
    }
    v->set_status(absl::StrCat("not verified: ", failure));
  }
  std::optional<v1::VerificationSummary> summary = SummarizeVerification(*job.record.results);
  if (summary) *job.record.results->mutable_verification_summary() = *std::move(summary);
  return SetStateLocked(job, v1::JOB_STATE_SUCCEEDED, "");
}

// --- State helpers -----------------------------------------------------------------------

absl::Status JobManager::SetStateLocked(JobEntry& job, v1::JobState state,
                                        const std::string& error) {
  job.record.job.set_state(state);
  job.record.job.set_error(error);
  // The ranking blobs are rewritten only when planning, composing or verifying changed
  // them.
  absl::Status s = PersistJobLocked(job, /*rankings=*/job.rankings_dirty);
  if (!s.ok()) return s;
  job.rankings_dirty = false;
  if (IsTerminal(state)) {
    // The store has the final ranking: a finished job keeps none in memory but the
    // cache's copy (it is usually read right away).
    if (job.record.results) {
      job.has_results = true;
      CacheResultsLocked(job.record.job.id(), std::make_shared<const v1::PlanResult>(
                                                  *std::move(job.record.results)));
      job.record.results.reset();
    }
    job.record.modelled.reset();
  }
  return s;
}

absl::Status JobManager::PersistJobLocked(JobEntry& job, bool rankings) {
  UpdateProgressLocked(job);
  SetTime(job.record.job.mutable_update_time(), clock_->NowMs());
  absl::Status s = rankings ? store_->PutJob(job.record) : store_->UpdateJob(job.record.job);
  NotifyLocked();
  return s;
}

void JobManager::UpdateProgressLocked(JobEntry& job) {
  if (job.tasks.empty()) return;
  int64_t done = 0, failed = 0, cached = 0;
  for (const TaskRecord& t : job.tasks) {
    if (t.state == TaskState::kDone) {
      ++done;
      if (t.task.attempt() == 0) ++cached;  // Done without a lease: from the cache.
    } else if (t.state == TaskState::kFailed) {
      ++failed;
    }
  }
  v1::JobProgress* p = job.record.job.mutable_progress();
  const int64_t total = static_cast<int64_t>(job.tasks.size());
  p->set_tasks_total(total);
  p->set_tasks_done(done);
  p->set_tasks_failed(failed);
  p->set_tasks_cached(cached);
  const int64_t measured = done - cached;
  const int64_t remaining = total - done - failed;
  double eta = 0;
  if (measured > 0 && remaining > 0 && job.profiling_start_ms > 0) {
    const double elapsed_s = (clock_->NowMs() - job.profiling_start_ms) / 1e3;
    eta = elapsed_s / static_cast<double>(measured) * static_cast<double>(remaining);
  }
  p->set_eta_s(eta);
}

void JobManager::NotifyLocked() {
  ++version_;
  changed_cv_.notify_all();
}

TaskRecord* JobManager::FindTaskLocked(JobEntry& job, const std::string& task_id) {
  for (TaskRecord& t : job.tasks) {
    if (t.task.id() == task_id) return &t;
  }
  return nullptr;
}

absl::Status JobManager::MaybeFinishProfilingLocked(JobEntry& job) {
  if (job.record.job.state() != v1::JOB_STATE_PROFILING) return absl::OkStatus();
  int64_t done = 0;
  const TaskRecord* first_failure = nullptr;
  bool all_unsupported = true;
  for (const TaskRecord& t : job.tasks) {
    if (t.state == TaskState::kPending) return absl::OkStatus();
    if (t.state == TaskState::kDone) ++done;
    if (t.state != TaskState::kFailed) continue;
    if (first_failure == nullptr) first_failure = &t;
    if (!t.result || t.result->outcome() != v1::TaskResult::OUTCOME_UNSUPPORTED) {
      all_unsupported = false;
    }
  }
  // Tasks that no worker could run as asked (e.g. more ranks than a worker has) leave the
  // modelled ranking, each entry sourced "modelled" with a note saying why; tasks that
  // broke (crashes, timeouts after every attempt) fail the job.
  if (done == 0 && first_failure != nullptr && !all_unsupported) {
    const std::string why = first_failure->result ? first_failure->result->message() : "";
    return SetStateLocked(job, v1::JOB_STATE_FAILED,
                          absl::StrCat("all ", job.tasks.size(),
                                       " profile tasks failed; first: ", why));
  }
  absl::Status s = SetStateLocked(job, v1::JOB_STATE_COMPOSING, "");
  if (s.ok()) ScheduleLocked(Work::kCompose, job.record.job.id());
  return s;
}

absl::Status JobManager::RequeueLocked(const TaskQueue::Requeue& r, const std::string& why) {
  auto it = jobs_.find(r.task.job_id());
  if (it == jobs_.end()) return absl::OkStatus();
  JobEntry& job = it->second;
  TaskRecord* record = FindTaskLocked(job, r.task.id());
  if (record == nullptr) return absl::OkStatus();
  if (record->task.has_verify()) {
    // The gang's other parts cannot finish without this one: all of them start again.
    if (absl::Status s = ResetGangLocked(job, record->task.verify().layout_rank(), why, false);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = PersistJobLocked(job); !s.ok()) return s;
    return MaybeFinishVerifyingLocked(job);
  }
  if (!r.exhausted) {
    tasks_cv_.notify_all();
    return absl::OkStatus();
  }
  record->state = TaskState::kFailed;
  v1::TaskResult failure;
  failure.set_task_id(r.task.id());
  failure.set_attempt(r.task.attempt());
  failure.set_outcome(v1::TaskResult::OUTCOME_FAILED);
  failure.set_message(absl::StrCat(why, "; gave up after ", r.task.attempt(), " attempts"));
  record->result = failure;
  if (absl::Status s = store_->PutTasks({*record}); !s.ok()) return s;
  if (absl::Status s = PersistJobLocked(job); !s.ok()) return s;
  return MaybeFinishProfilingLocked(job);
}

void JobManager::UpdateMetricsLocked() {
  if (options_.metrics == nullptr) return;
  std::map<v1::JobState, int64_t> jobs;
  int64_t done = 0, failed = 0;
  for (const auto& [id, job] : jobs_) {
    ++jobs[job.record.job.state()];
    for (const TaskRecord& t : job.tasks) {
      if (t.state == TaskState::kDone) ++done;
      if (t.state == TaskState::kFailed) ++failed;
    }
  }
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_CANCELLED; ++s) {
    const auto state = static_cast<v1::JobState>(s);
    options_.metrics->SetJobs(state, jobs[state]);
  }
  options_.metrics->SetTasks(TaskGaugeState::kQueued, queue_.queued());
  options_.metrics->SetTasks(TaskGaugeState::kLeased, queue_.leased());
  options_.metrics->SetTasks(TaskGaugeState::kDone, done);
  options_.metrics->SetTasks(TaskGaugeState::kFailed, failed);
  std::map<std::string, int64_t> workers{{"idle", 0}, {"busy", 0}, {"lost", 0}};
  for (const auto& [id, w] : workers_) ++workers[w.info.state()];
  for (const auto& [state, n] : workers) options_.metrics->SetWorkers(state, n);
}

std::string JobManager::NewIdLocked(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%s-%012x", prefix, rng() & 0xffffffffffffULL);
}

int64_t JobManager::leases_granted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_granted_;
}

// --- Autotuner ---------------------------------------------------------------------------

absl::StatusOr<v1::Job> JobManager::SubmitJob(const v1::SubmitJobRequest& request) {
  if (!request.has_spec()) return absl::InvalidArgumentError("spec is required");
  absl::StatusOr<JobSpec> spec = SpecFromProto(request.spec());
  if (!spec.ok()) return spec.status();
  absl::StatusOr<v1::JobSpec> resolved = SpecToProto(*spec);
  if (!resolved.ok()) return resolved.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
  std::string id = NewIdLocked("job");
  while (jobs_.count(id) > 0) id = NewIdLocked("job");
  JobEntry entry;
  entry.spec = *std::move(spec);
  v1::Job& job = entry.record.job;
  job.set_id(id);
  job.set_name(!entry.spec.name.empty() ? entry.spec.name : entry.spec.model.name);
  job.set_state(v1::JOB_STATE_PENDING);
  *job.mutable_spec() = request.spec();
  *job.mutable_resolved_spec() = *std::move(resolved);
  SetTime(job.mutable_create_time(), clock_->NowMs());
  SetTime(job.mutable_update_time(), clock_->NowMs());
  if (absl::Status s = store_->PutJob(entry.record); !s.ok()) return s;
  JobEntry& stored = jobs_[id] = std::move(entry);
  job_order_.push_back(id);
  ScheduleLocked(Work::kPlan, id);
  NotifyLocked();
  return stored.record.job;
}

absl::StatusOr<v1::Job> JobManager::GetJob(const v1::GetJobRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(request.id());
  if (it == jobs_.end()) return NotFoundJob(request.id());
  UpdateProgressLocked(it->second);
  return it->second.record.job;
}

absl::StatusOr<v1::ListJobsResponse> JobManager::ListJobs(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size (", request.page_size(), ") must be >= 0"));
  }
  const int64_t page_size = request.page_size() == 0 ? 100 : std::min(request.page_size(), 1000);
  int64_t offset = 0;
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &offset) || offset < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token '", request.page_token(), "' is not one this server gave"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  v1::ListJobsResponse out;
  int64_t index = 0;
  // Newest first.
  for (auto it = job_order_.rbegin(); it != job_order_.rend(); ++it) {
    const v1::Job& job = jobs_.at(*it).record.job;
    if (request.state() != v1::JOB_STATE_UNSPECIFIED && job.state() != request.state()) continue;
    if (index++ < offset) continue;
    if (out.jobs_size() == page_size) {
      out.set_next_page_token(absl::StrCat(offset + page_size));
      break;
    }
    *out.add_jobs() = job;
  }
  return out;
}

absl::Status JobManager::WatchJob(const v1::WatchJobRequest& request,
                                  const std::function<bool(const v1::Job&)>& on_update) {
  std::string last_sent;
  bool first = true;
  // An unchanged job is sent again this often: the only way to notice a watcher that left
  // while its job sits in one state (on_update returns false then).
  constexpr auto kKeepalive = std::chrono::seconds(10);
  auto last_send = std::chrono::steady_clock::now();
  while (true) {
    v1::Job snapshot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!first) {
        // Wake up on changes, and once a second so that the ETA moves.
        changed_cv_.wait_for(lock, std::chrono::seconds(1));
      }
      if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
      auto it = jobs_.find(request.id());
      if (it == jobs_.end()) return NotFoundJob(request.id());
      UpdateProgressLocked(it->second);
      snapshot = it->second.record.job;
    }
    std::string bytes = snapshot.SerializeAsString();
    const auto now = std::chrono::steady_clock::now();
    if (first || bytes != last_sent || now - last_send >= kKeepalive) {
      if (!on_update(snapshot)) return absl::OkStatus();
      last_sent = std::move(bytes);
      last_send = now;
    }
    first = false;
    if (IsTerminal(snapshot.state())) return absl::OkStatus();
  }
}

absl::StatusOr<v1::Job> JobManager::CancelJob(const v1::CancelJobRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(request.id());
  if (it == jobs_.end()) return NotFoundJob(request.id());
  JobEntry& job = it->second;
  if (IsTerminal(job.record.job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", request.id(), "' already ended (", JobStateName(job.record.job.state()), ")"));
  }
  queue_.RemoveJob(request.id());
  if (absl::Status s = SetStateLocked(job, v1::JOB_STATE_CANCELLED, "cancelled by request");
      !s.ok()) {
    return s;
  }
  return job.record.job;
}

absl::StatusOr<v1::JobResults> JobManager::GetResults(const v1::GetResultsRequest& request) {
  v1::JobResults out;
  out.set_job_id(request.id());
  std::shared_ptr<const v1::PlanResult> plan;
  std::string blob;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(request.id());
    if (it == jobs_.end()) return NotFoundJob(request.id());
    const JobEntry& job = it->second;
    out.set_state(job.record.job.state());
    if (job.record.results) {
      // A running job (VERIFYING), or a finished one whose ranking could not be stored: the
      // ranking is in memory (its rejected list capped, so the copy is small).
      *out.mutable_plan() = *job.record.results;
      return out;
    }
    if (!job.has_results) {
      const v1::Job& j = job.record.job;
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", request.id(), "' has no results: it is ", JobStateName(j.state()),
          j.error().empty() ? "" : absl::StrCat(" (", j.error(), ")")));
    }
    plan = CachedResultsLocked(request.id());
    if (plan == nullptr) {
      absl::StatusOr<std::optional<std::string>> stored = store_->GetResultsBlob(request.id());
      if (!stored.ok()) return stored.status();
      if (!stored->has_value()) {
        return absl::DataLossError(
            absl::StrCat("job '", request.id(), "': its stored ranking is missing"));
      }
      blob = **std::move(stored);
    }
  }
  if (plan == nullptr) {
    // Parsed outside the lock; two readers that miss at once both parse, the cache keeps one.
    auto parsed = std::make_shared<v1::PlanResult>();
    if (!parsed->ParseFromString(blob)) {
      return absl::DataLossError(
          absl::StrCat("job '", request.id(), "': cannot parse its stored ranking"));
    }
    CapRejected(*parsed);  // Stored before the rejected list was capped.
    plan = std::move(parsed);
    std::lock_guard<std::mutex> lock(mu_);
    CacheResultsLocked(request.id(), plan);
  }
  *out.mutable_plan() = *plan;  // Outside the lock.
  return out;
}

std::shared_ptr<const v1::PlanResult> JobManager::CachedResultsLocked(
    const std::string& job_id) {
  for (auto it = results_cache_.begin(); it != results_cache_.end(); ++it) {
    if (it->first != job_id) continue;
    results_cache_.splice(results_cache_.begin(), results_cache_, it);
    return results_cache_.front().second;
  }
  return nullptr;
}

void JobManager::CacheResultsLocked(const std::string& job_id,
                                    std::shared_ptr<const v1::PlanResult> results) {
  results_cache_.remove_if([&](const auto& e) { return e.first == job_id; });
  results_cache_.emplace_front(job_id, std::move(results));
  while (static_cast<int64_t>(results_cache_.size()) > options_.results_cache_size) {
    results_cache_.pop_back();
  }
}

int64_t JobManager::resident_results() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = static_cast<int64_t>(results_cache_.size());
  for (const auto& [id, job] : jobs_) {
    n += job.record.results.has_value() + job.record.modelled.has_value();
  }
  return n;
}

absl::StatusOr<v1::ListWorkersResponse> JobManager::ListWorkers(const v1::ListWorkersRequest&) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::ListWorkersResponse out;
  for (const auto& [id, w] : workers_) *out.add_workers() = w.info;
  return out;
}

// --- WorkerHub ---------------------------------------------------------------------------

absl::StatusOr<v1::RegisterResponse> JobManager::Register(const v1::RegisterRequest& request) {
  if (request.worker().device_kind().empty()) {
    return absl::InvalidArgumentError("worker.device_kind must be set (e.g. \"cpu\")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  // A worker that comes back (coordinator restart, network blip) keeps its id; its old
  // leases are gone or still valid, and reports are checked per (task id, attempt) anyway.
  std::string id = request.worker().id();
  if (id.empty()) {
    id = NewIdLocked("w");
    while (workers_.count(id) > 0) id = NewIdLocked("w");
  }
  WorkerEntry& w = workers_[id];
  w.lost = false;
  w.info = request.worker();
  w.info.set_id(id);
  w.info.set_state("idle");
  w.info.clear_current_task_id();
  w.info.set_last_heartbeat_unix_ms(clock_->NowMs());
  v1::RegisterResponse out;
  out.set_worker_id(id);
  out.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  out.set_lease_timeout_ms(options_.lease_timeout_ms);
  return out;
}

absl::StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(
    const v1::HeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::HeartbeatResponse out;
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end()) {
    out.set_reregister(true);
    return out;
  }
  WorkerEntry& w = it->second;
  const int64_t now = clock_->NowMs();
  w.lost = false;
  w.info.set_last_heartbeat_unix_ms(now);
  const std::vector<std::string> ids(request.task_ids().begin(), request.task_ids().end());
  std::vector<std::string> stop = queue_.Renew(request.worker_id(), ids, now);
  for (const std::string& id : stop) out.add_cancel_task_ids(id);
  std::string running;
  for (const std::string& id : ids) {
    if (std::find(stop.begin(), stop.end(), id) == stop.end()) running = id;
  }
  w.info.set_state(running.empty() ? "idle" : "busy");
  w.info.set_current_task_id(running);
  return out;
}

absl::StatusOr<v1::LeaseTaskResponse> JobManager::LeaseTask(const v1::LeaseTaskRequest& request) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::clamp<int64_t>(request.wait_ms(), 0, 60'000));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto wit = workers_.find(request.worker_id());
    if (wit == workers_.end()) return UnknownWorker(request.worker_id());
    WorkerEntry& w = wit->second;
    const int64_t now = clock_->NowMs();
    w.lost = false;
    w.info.set_last_heartbeat_unix_ms(now);
    if (stopping_) return v1::LeaseTaskResponse();
    // A verify part needs its ranks' devices on one worker of the backend it was placed
    // for (CPU, or CUDA for 16-bit specs). A profile task needing more
    // ranks than this worker has waits for a registered worker of its kind that has them;
    // when none has, this worker takes it and answers UNSUPPORTED with the reason. A worker
    // that registered no devices is not held back (its count is unknown).
    const int64_t devices = w.info.devices_size();
    const std::string& backend = w.info.backend();
    // The most devices a registered worker of this kind has: scanned over the workers only
    // for a task larger than this one, once per wake-up (most leases never need it).
    std::optional<int64_t> largest;
    const auto largest_of_kind = [&] {
      if (!largest) {
        largest = 0;
        for (const auto& [id, other] : workers_) {
          if (!other.lost && other.info.device_kind() == w.info.device_kind()) {
            largest = std::max<int64_t>(*largest, other.info.devices_size());
          }
        }
      }
      return *largest;
    };
    std::optional<v1::ProfileTask> task = queue_.Lease(
        request.worker_id(), w.info.device_kind(), now, [&](const v1::ProfileTask& t) {
          if (t.has_verify()) {
            const std::string& want = t.verify().backend().empty() ? "cpu" : t.verify().backend();
            return want == backend && RanksNeeded(t) <= devices;
          }
          const int64_t need = RanksNeeded(t);
          return devices == 0 || need <= devices || need > largest_of_kind();
        });
    if (task) {
      auto jit = jobs_.find(task->job_id());
      TaskRecord* record = jit == jobs_.end() ? nullptr : FindTaskLocked(jit->second, task->id());
      if (record != nullptr) {
        record->task.set_attempt(task->attempt());
        // The attempt count is durable before the worker sees the task.
        if (absl::Status s = store_->PutTasks({*record}); !s.ok()) {
          queue_.Complete(task->id(), task->attempt(), request.worker_id()).IgnoreError();
          record->task.set_attempt(task->attempt() - 1);
          queue_.Add(record->task);
          return s;
        }
      }
      ++leases_granted_;
      w.info.set_state("busy");
      w.info.set_current_task_id(task->id());
      v1::LeaseTaskResponse out;
      out.set_lease_expires_unix_ms(queue_.LeaseExpiry(task->id()));
      *out.mutable_task() = *std::move(task);
      return out;
    }
    if (tasks_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return v1::LeaseTaskResponse();
    }
  }
}

absl::StatusOr<v1::ReportResultResponse> JobManager::ReportResult(
    const v1::ReportResultRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  auto wit = workers_.find(request.worker_id());
  if (wit == workers_.end()) return UnknownWorker(request.worker_id());
  WorkerEntry& w = wit->second;
  w.lost = false;
  w.info.set_last_heartbeat_unix_ms(clock_->NowMs());
  const v1::TaskResult& result = request.result();
  v1::ReportResultResponse out;
  if (absl::Status s = queue_.Complete(result.task_id(), result.attempt(), request.worker_id());
      !s.ok()) {
    out.set_accepted(false);
    out.set_reason(std::string(s.message()));
    return out;
  }
  if (w.info.current_task_id() == result.task_id()) {
    w.info.set_state("idle");
    w.info.clear_current_task_id();
  }
  auto jit = jobs_.find(JobIdOfTask(result.task_id()));
  TaskRecord* record = jit == jobs_.end() ? nullptr : FindTaskLocked(jit->second, result.task_id());
  const v1::JobState expected =
      record != nullptr && record->task.has_verify() ? v1::JOB_STATE_VERIFYING
                                                     : v1::JOB_STATE_PROFILING;
  if (record == nullptr || jit->second.record.job.state() != expected) {
    out.set_accepted(false);
    out.set_reason(absl::StrCat("task ", result.task_id(), " no longer belongs to a running job"));
    return out;
  }
  JobEntry& job = jit->second;
  if (record->task.has_verify()) {
    const int64_t layout = record->task.verify().layout_rank();
    absl::Status s;
    switch (result.outcome()) {
      case v1::TaskResult::OUTCOME_OK: {
        TaskRecord updated = *record;
        updated.state = TaskState::kDone;
        updated.result = result;
        updated.result->set_worker_id(request.worker_id());
        s = store_->PutTasks({updated});
        if (s.ok()) {
          *record = std::move(updated);
        } else {
          // Not recorded: the lease goes back so that the part is not lost.
          queue_.Add(record->task);
          tasks_cv_.notify_all();
        }
        break;
      }
      case v1::TaskResult::OUTCOME_OOM:
      case v1::TaskResult::OUTCOME_UNSUPPORTED: {
        // Another attempt would end the same way; record this part's reason first.
        const std::string why =
            result.outcome() == v1::TaskResult::OUTCOME_OOM
                ? absl::StrCat("out of memory on worker ", request.worker_id(), ": ",
                               result.message())
                : absl::StrCat("worker ", request.worker_id(), ": ", result.message());
        s = ResetGangLocked(job, layout, why, /*give_up=*/true);
        break;
      }
      default:  // FAILED (e.g. peers that never came), CANCELLED: the whole gang again.
        s = ResetGangLocked(job, layout,
                            absl::StrCat("worker ", request.worker_id(), ": ", result.message()),
                            /*give_up=*/false);
        break;
    }
    if (!s.ok()) return s;
    if (absl::Status p = PersistJobLocked(job); !p.ok()) return p;
    if (absl::Status f = MaybeFinishVerifyingLocked(job); !f.ok()) return f;
    out.set_accepted(true);
    return out;
  }
  TaskRecord updated = *record;
  updated.result = result;
  updated.result->set_worker_id(request.worker_id());
  bool cache = false;
  bool requeue = false;
  switch (result.outcome()) {
    case v1::TaskResult::OUTCOME_OK:
    case v1::TaskResult::OUTCOME_OOM:
      updated.state = TaskState::kDone;
      cache = true;
      break;
    case v1::TaskResult::OUTCOME_UNSUPPORTED:
      updated.state = TaskState::kFailed;
      break;
    default:  // FAILED, CANCELLED, unspecified: try again while attempts remain.
      if (updated.task.attempt() >= queue_.max_attempts()) {
        updated.state = TaskState::kFailed;
        updated.result->set_message(absl::StrCat(result.message(), "; gave up after ",
                                                 updated.task.attempt(), " attempts"));
      } else {
        requeue = true;
      }
      break;
  }
  if (absl::Status s = store_->PutTaskAndCache(updated, cache); !s.ok()) {
    // Not recorded: the lease goes back so that the task is not lost.
    queue_.Add(record->task);
    tasks_cv_.notify_all();
    return s;
  }
  *record = updated;
  if (requeue) {
    queue_.Add(record->task);
    tasks_cv_.notify_all();
  }
  if (absl::Status s = PersistJobLocked(job); !s.ok()) return s;
  if (absl::Status s = MaybeFinishProfilingLocked(job); !s.ok()) return s;
  out.set_accepted(true);
  return out;
}

absl::StatusOr<v1::DeregisterResponse> JobManager::Deregister(
    const v1::DeregisterRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const TaskQueue::Requeue& r : queue_.ReleaseWorker(request.worker_id())) {
    RequeueLocked(r, absl::StrCat("worker ", request.worker_id(), " left")).IgnoreError();
  }
  workers_.erase(request.worker_id());
  return v1::DeregisterResponse();
}

}  // namespace paratune::server
