#include "server/job_lifecycle.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/empty_result.h"
#include "server/convert.h"
#include "server/convert_inference.h"
#include "server/ids.h"
#include "server/job_requests.h"

namespace paratune::server {
namespace {

// A verify stage's task: a part of a training run or a serving run.
bool IsVerifyTask(const v1::ProfileTask& task) {
  return task.has_verify() || task.has_serving_verify();
}

std::string JobIdOfTask(const std::string& task_id) {
  const size_t pos = task_id.rfind("-t");
  return pos == std::string::npos ? std::string() : task_id.substr(0, pos);
}

v1::ReportResultResponse Refused(std::string reason) {
  v1::ReportResultResponse out;
  out.set_accepted(false);
  out.set_reason(std::move(reason));
  return out;
}

}  // namespace

JobLifecycle::JobLifecycle(std::unique_ptr<Store> store, const Clock* clock, LeaseBroker* broker,
                           WorkerRegistry* workers, JobExecutor* executor,
                           JobLifecycleOptions options)
    : clock_(clock),
      broker_(broker),
      workers_(workers),
      executor_(executor),
      options_(std::move(options)),
      results_cache_(options_.results_cache_size),
      store_(std::move(store)),
      profile_(store_.get(), broker, clock, options_.profile),
      verify_(store_.get(), broker, workers, clock, options_.verify) {}

void JobLifecycle::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_cv_.notify_all();
}

// --- Recovery -----------------------------------------------------------------------------

absl::Status JobLifecycle::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  // Finished jobs come without their rankings (read on demand by GetResults).
  absl::StatusOr<std::vector<JobRecord>> records = store_->ListJobsForRecovery();
  if (!records.ok()) return records.status();
  for (JobRecord& record : *records) {
    const std::string id = record.job.id();
    const bool finished = IsTerminal(record.job.state());
    JobEntry& job = jobs_[id];
    job.record = std::move(record);
    job_order_.push_back(id);
    if (absl::Status s = RecoverJob(job); !s.ok()) return s;
    if (finished) RetireLocked(id);
  }
  return absl::OkStatus();
}

absl::Status JobLifecycle::RecoverJob(JobEntry& job) {
  const std::string& id = job.record.job.id();
  const v1::JobState state = job.record.job.state();
  if (IsTerminal(state)) {
    job.has_results = job.record.has_results;
    job.record.results.reset();
    job.record.modelled.reset();
    return absl::OkStatus();
  }
  // Rankings stored before the rejected list was capped.
  if (job.record.results) CapRejected(*job.record.results);
  if (job.record.modelled) CapRejected(*job.record.modelled);
  if (IsInferenceSpec(RenderedSpec(job.record.job))) {
    absl::StatusOr<inference::InferenceJobSpec> spec =
        InferenceSpecFromProto(RenderedSpec(job.record.job));
    if (!spec.ok()) {
      return SetStateLocked(job, v1::JOB_STATE_FAILED,
                            absl::StrCat("spec no longer valid: ", spec.status().message()));
    }
    job.inference = *std::move(spec);
  } else {
    absl::StatusOr<JobSpec> spec = SpecFromProto(RenderedSpec(job.record.job));
    if (!spec.ok()) {
      return SetStateLocked(job, v1::JOB_STATE_FAILED,
                            absl::StrCat("spec no longer valid: ", spec.status().message()));
    }
    job.spec = *std::move(spec);
  }
  if (state != v1::JOB_STATE_PROFILING && state != v1::JOB_STATE_COMPOSING &&
      state != v1::JOB_STATE_VERIFYING) {
    executor_->Schedule(JobWork::kPlan, id);  // PENDING, PLANNING.
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<TaskRecord>> tasks = store_->ListTasks(id);
  if (!tasks.ok()) return tasks.status();
  job.tasks = *std::move(tasks);
  job.profiling_start_ms = clock_->NowMs();
  switch (state) {
    case v1::JOB_STATE_COMPOSING:
      executor_->Schedule(JobWork::kCompose, id);
      return absl::OkStatus();
    case v1::JOB_STATE_VERIFYING:
      if (absl::Status s = verify_.Recover(job); !s.ok()) return s;
      if (std::optional<Transition> t = verify_.Check(job)) return ApplyLocked(job, *t);
      return absl::OkStatus();
    default:  // PROFILING
      profile_.QueuePending(job);
      if (std::optional<Transition> t = profile_.Check(job)) return ApplyLocked(job, *t);
      return absl::OkStatus();
  }
}

// --- Planning and composing (executor threads) --------------------------------------------

void JobLifecycle::RunPlan(const std::string& job_id) {
  JobSpec spec;
  std::optional<inference::InferenceJobSpec> inference_spec;
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
      SetStateLocked(job, v1::JOB_STATE_FAILED, absl::StrCat("store: ", s.message())).IgnoreError();
      return;
    }
    spec = job.spec;
    inference_spec = job.inference;
  }
  if (inference_spec) return RunInferencePlan(job_id, *inference_spec);
  absl::StatusOr<PlanResult> plan = options_.plan(spec);
  // The wire form (rejected list capped) and the reasons of an empty answer are built
  // before taking the lock.
  std::optional<v1::PlanResult> plan_proto;
  std::vector<std::string> empty_reasons;
  if (plan.ok()) {
    plan_proto = ToProto(*plan);
    empty_reasons = EmptyPlanReasons(spec, *plan);
  }

  std::lock_guard<std::mutex> lock(mu_);
  JobEntry* planned = PlannedJobLocked(job_id, plan.status());
  if (planned == nullptr) return;
  JobEntry& job = *planned;
  candidates_scored_["training"] += plan->candidates_considered;
  if (plan->ranked.empty()) {
    // The ranking (its rejected layouts) is kept so that GetResults shows them.
    job.record.results = *std::move(plan_proto);
    job.rankings_dirty = true;
    SetStateLocked(
        job, v1::JOB_STATE_FAILED,
        absl::StrCat("no layout satisfies the spec: ", absl::StrJoin(empty_reasons, "; ")))
        .IgnoreError();
    return;
  }
  AcceptPlanLocked(job, *plan, *std::move(plan_proto));
}

JobEntry* JobLifecycle::PlannedJobLocked(const std::string& job_id, const absl::Status& plan) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return nullptr;
  JobEntry& job = it->second;
  if (job.record.job.state() != v1::JOB_STATE_PLANNING) return nullptr;  // Cancelled meanwhile.
  if (!plan.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED, absl::StrCat("planning failed: ", plan.message()))
        .IgnoreError();
    return nullptr;
  }
  return &job;
}

void JobLifecycle::RunInferencePlan(const std::string& job_id,
                                    const inference::InferenceJobSpec& spec) {
  absl::StatusOr<inference::InferencePlanResult> plan =
      options_.plan_inference
          ? options_.plan_inference(spec)
          : absl::UnimplementedError("this coordinator has no inference planner");
  std::optional<v1::PlanResult> plan_proto;
  if (plan.ok()) {
    plan_proto.emplace();
    *plan_proto->mutable_inference() = ToProto(*plan);
    plan_proto->set_candidates_considered(plan->candidates_considered);
    plan_proto->set_feasible(plan->feasible);
    plan_proto->set_elapsed_ms(plan->elapsed_ms);
  }

  std::lock_guard<std::mutex> lock(mu_);
  JobEntry* planned = PlannedJobLocked(job_id, plan.status());
  if (planned == nullptr) return;
  JobEntry& job = *planned;
  candidates_scored_["inference"] += plan->candidates_considered;
  if (!plan->ranked.empty() && spec.search.mode == SearchMode::kProfile) {
    // Profile mode: the modelled plan waits while workers measure its serving steps.
    if (absl::Status s = profile_.CreateInferenceTasks(job, *plan); !s.ok()) {
      SetStateLocked(job, v1::JOB_STATE_FAILED, std::string(s.message())).IgnoreError();
      return;
    }
    job.record.modelled = *std::move(plan_proto);
    job.rankings_dirty = true;
    if (!SetStateLocked(job, v1::JOB_STATE_PROFILING, "").ok()) return;
    profile_.QueuePending(job);
    if (std::optional<Transition> t = profile_.Check(job)) ApplyLocked(job, *t).IgnoreError();
    return;
  }
  job.record.results = *std::move(plan_proto);
  job.rankings_dirty = true;
  if (plan->ranked.empty()) {
    // The rejected layouts stay readable through GetResults.
    std::vector<std::string> reasons;
    for (const auto& [rule, count] : plan->rejected_reasons) {
      reasons.push_back(absl::StrCat(rule, ": ", count));
    }
    SetStateLocked(
        job, v1::JOB_STATE_FAILED,
        absl::StrCat("no serving layout satisfies the spec: all ", plan->candidates_considered,
                     " candidates rejected (", absl::StrJoin(reasons, ", "), ")"))
        .IgnoreError();
    return;
  }
  FinishRankingLocked(job);
}

void JobLifecycle::AcceptPlanLocked(JobEntry& job, const PlanResult& plan,
                                    v1::PlanResult plan_proto) {
  if (job.spec.search.mode == SearchMode::kModel) {
    job.record.results = std::move(plan_proto);
    job.rankings_dirty = true;
    FinishRankingLocked(job);
    return;
  }
  if (absl::Status s = profile_.CreateTasks(job, plan); !s.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED, std::string(s.message())).IgnoreError();
    return;
  }
  job.record.modelled = std::move(plan_proto);
  job.rankings_dirty = true;
  if (!SetStateLocked(job, v1::JOB_STATE_PROFILING, "").ok()) return;
  profile_.QueuePending(job);
  if (std::optional<Transition> t = profile_.Check(job)) ApplyLocked(job, *t).IgnoreError();
}

void JobLifecycle::RunCompose(const std::string& job_id) {
  JobSpec spec;
  std::optional<inference::InferenceJobSpec> inference_spec;
  v1::PlanResult modelled;
  std::vector<TaskRecord> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    const JobEntry& job = it->second;
    if (job.record.job.state() != v1::JOB_STATE_COMPOSING) return;
    spec = job.spec;
    inference_spec = job.inference;
    if (job.record.modelled) modelled = *job.record.modelled;
    tasks = job.tasks;
  }
  // The wire form is built before taking the lock. The modelled ranking listed only the
  // first rejected layouts; its counts of all of them come through PlanResult.
  absl::Status composed = absl::OkStatus();
  std::optional<v1::PlanResult> composed_proto;
  if (inference_spec) {
    absl::StatusOr<inference::InferencePlanResult> plan =
        ProfileStage::ComposeInference(*inference_spec, modelled, tasks);
    composed = plan.status();
    if (plan.ok()) {
      composed_proto = modelled;
      *composed_proto->mutable_inference() = ToProto(*plan);
    }
  } else {
    absl::StatusOr<PlanResult> plan =
        ProfileStage::Compose(spec, modelled, tasks, options_.profile);
    composed = plan.status();
    if (plan.ok()) composed_proto = ToProto(*plan);
  }

  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobEntry& job = it->second;
  if (job.record.job.state() != v1::JOB_STATE_COMPOSING) return;
  if (!composed.ok()) {
    SetStateLocked(job, v1::JOB_STATE_FAILED,
                   absl::StrCat("composing failed: ", composed.message()))
        .IgnoreError();
    return;
  }
  job.record.results = *std::move(composed_proto);
  job.rankings_dirty = true;
  FinishRankingLocked(job);
}

void JobLifecycle::FinishRankingLocked(JobEntry& job) {
  ApplyLocked(job, verify_.Start(job)).IgnoreError();
}

// --- State helpers ------------------------------------------------------------------------

absl::Status JobLifecycle::ApplyLocked(JobEntry& job, const Transition& transition) {
  absl::Status s = SetStateLocked(job, transition.state, transition.error);
  if (s.ok() && transition.state == v1::JOB_STATE_COMPOSING) {
    executor_->Schedule(JobWork::kCompose, job.record.job.id());
  }
  return s;
}

absl::Status JobLifecycle::SetStateLocked(JobEntry& job, v1::JobState state,
                                          const std::string& error) {
  const bool was_finished = IsTerminal(job.record.job.state());
  job.record.job.set_state(state);
  job.record.job.set_error(error);
  // The ranking blobs are rewritten only when planning, composing or verifying changed
  // them.
  absl::Status s = PersistLocked(job, /*rankings=*/job.rankings_dirty);
  if (!s.ok()) return s;
  job.rankings_dirty = false;
  if (IsTerminal(state)) {
    // The store has the final ranking: a finished job keeps none in memory but the
    // cache's copy (it is usually read right away).
    if (job.record.results) {
      job.has_results = true;
      results_cache_.Put(job.record.job.id(),
                         std::make_shared<const v1::PlanResult>(*std::move(job.record.results)));
      job.record.results.reset();
    }
    job.record.modelled.reset();
    // The store has the job as it ended: it may leave memory once newer ones finished.
    if (!was_finished) RetireLocked(job.record.job.id());
  }
  return s;
}

void JobLifecycle::RetireLocked(const std::string& id) {
  whole_finished_.push_back(id);
  while (static_cast<int64_t>(whole_finished_.size()) > options_.max_finished_jobs_in_memory) {
    auto it = jobs_.find(whole_finished_.front());
    whole_finished_.pop_front();
    if (it == jobs_.end()) continue;
    const JobEntry& job = it->second;
    const v1::JobState state = job.record.job.state();
    ++compact_counts_.jobs[state];
    for (const TaskRecord& t : job.tasks) {
      if (t.state == TaskState::kDone) ++compact_counts_.tasks_done;
      if (t.state == TaskState::kFailed) ++compact_counts_.tasks_failed;
    }
    ++compact_counts_.jobs_by_kind[job.inference ? "inference" : "training"];
    compact_[it->first] = CompactJob{state, job.has_results, job.inference.has_value()};
    jobs_.erase(it);
  }
}

absl::StatusOr<v1::Job> JobLifecycle::JobMessageLocked(const std::string& id) {
  if (auto it = jobs_.find(id); it != jobs_.end()) {
    it->second.UpdateProgress(clock_->NowMs());
    return it->second.record.job;
  }
  if (compact_.count(id) == 0) return JobNotFound(id);
  return store_->GetJobMessage(id);
}

absl::Status JobLifecycle::PersistLocked(JobEntry& job, bool rankings) {
  job.UpdateProgress(clock_->NowMs());
  SetTime(job.record.job.mutable_update_time(), clock_->NowMs());
  absl::Status s = rankings ? store_->PutJob(job.record) : store_->UpdateJob(job.record.job);
  NotifyLocked();
  return s;
}

void JobLifecycle::NotifyLocked() { changed_cv_.notify_all(); }

// --- Leases and results -------------------------------------------------------------------

absl::Status JobLifecycle::RecordLease(const GrantedLease& lease, const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(lease.task.job_id());
  TaskRecord* record = it == jobs_.end() ? nullptr : it->second.FindTask(lease.task.id());
  if (record == nullptr) return absl::OkStatus();
  record->task.set_attempt(lease.task.attempt());
  // The attempt count is durable before the worker sees the task.
  if (absl::Status s = store_->PutTasks({*record}); !s.ok()) {
    record->task.set_attempt(lease.task.attempt() - 1);
    broker_->Undo(lease, worker_id);
    return s;
  }
  return absl::OkStatus();
}

bool JobLifecycle::AcceptsUnleasedLocked(const TaskRecord* record,
                                         const v1::TaskResult& result) const {
  // A worker that finished while the coordinator was down reports the attempt of the lease
  // the store recorded; the task waits in the queue again, unleased. Verify parts are
  // excluded: their gang restarted under a new rendezvous namespace.
  return record != nullptr && !IsVerifyTask(record->task) && record->state == TaskState::kPending &&
         result.attempt() >= 1 && result.attempt() == record->task.attempt() &&
         !broker_->IsLeased(record->task.id());
}

absl::StatusOr<v1::ReportResultResponse> JobLifecycle::ApplyReport(const std::string& worker_id,
                                                                   const v1::TaskResult& result) {
  std::lock_guard<std::mutex> lock(mu_);
  auto jit = jobs_.find(JobIdOfTask(result.task_id()));
  TaskRecord* record = jit == jobs_.end() ? nullptr : jit->second.FindTask(result.task_id());
  if (absl::Status s = broker_->Complete(result.task_id(), result.attempt(), worker_id); !s.ok()) {
    if (!AcceptsUnleasedLocked(record, result)) return Refused(std::string(s.message()));
    broker_->Remove(result.task_id());  // Its queued copy.
  }
  workers_->TaskEnded(worker_id, result.task_id());
  const v1::JobState expected = record != nullptr && IsVerifyTask(record->task)
                                    ? v1::JOB_STATE_VERIFYING
                                    : v1::JOB_STATE_PROFILING;
  if (record == nullptr || jit->second.record.job.state() != expected) {
    return Refused(absl::StrCat("task ", result.task_id(), " no longer belongs to a running job"));
  }
  JobEntry& job = jit->second;
  const bool verify = IsVerifyTask(record->task);
  absl::Status s = verify ? verify_.ApplyReport(job, *record, worker_id, result)
                          : profile_.ApplyReport(*record, worker_id, result);
  if (!s.ok()) return s;
  if (absl::Status p = PersistLocked(job); !p.ok()) return p;
  std::optional<Transition> t = verify ? verify_.Check(job) : profile_.Check(job);
  if (t) {
    if (absl::Status a = ApplyLocked(job, *t); !a.ok()) return a;
  }
  v1::ReportResultResponse out;
  out.set_accepted(true);
  return out;
}

void JobLifecycle::RequeueLocked(const std::vector<TaskQueue::Requeue>& requeues,
                                 const std::string& why) {
  for (const TaskQueue::Requeue& r : requeues) {
    auto it = jobs_.find(r.task.job_id());
    if (it == jobs_.end()) continue;
    JobEntry& job = it->second;
    TaskRecord* record = job.FindTask(r.task.id());
    if (record == nullptr) continue;
    const bool verify = IsVerifyTask(record->task);
    const bool gang = record->task.has_verify();
    // A gang's other parts cannot finish without this one: all of them start again. Other
    // tasks were queued again, or fail once exhausted.
    absl::Status s = gang ? verify_.ResetGang(job, record->task.verify().layout_rank(), why,
                                              /*give_up=*/false)
                          : profile_.ApplyRequeue(*record, r, why);
    if (!s.ok() || (!gang && !r.exhausted)) continue;
    if (!PersistLocked(job).ok()) continue;
    std::optional<Transition> t = verify ? verify_.Check(job) : profile_.Check(job);
    if (t) ApplyLocked(job, *t).IgnoreError();
  }
}

void JobLifecycle::Reap() {
  std::lock_guard<std::mutex> lock(mu_);
  RequeueLocked(broker_->Expire(), "lease expired");
  for (const std::string& id : workers_->MarkLost()) {
    RequeueLocked(broker_->ReleaseWorker(id), absl::StrCat("worker ", id, " lost"));
  }
}

void JobLifecycle::ReleaseWorker(const std::string& worker_id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  RequeueLocked(broker_->ReleaseWorker(worker_id), why);
}

// --- Client operations --------------------------------------------------------------------

}  // namespace paratune::server
