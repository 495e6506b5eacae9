// JobLifecycle's client operations: submit, get, list, cancel, results and the counts the
// metrics read (the job state machine and the workers' side are in job_lifecycle.cc).
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/ids.h"
#include "server/job_lifecycle.h"
#include "server/job_requests.h"

namespace paratune::server {

absl::StatusOr<v1::Job> JobLifecycle::Submit(const v1::SubmitJobRequest& request) {
  absl::StatusOr<JobEntry> entry = NewJobEntry(request, clock_->NowMs());
  if (!entry.ok()) return entry.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
  std::string id = NewRandomId("job");
  while (jobs_.count(id) > 0 || compact_.count(id) > 0) id = NewRandomId("job");
  entry->record.job.set_id(id);
  if (absl::Status s = store_->PutJob(entry->record); !s.ok()) return s;
  JobEntry& stored = jobs_[id] = *std::move(entry);
  job_order_.push_back(id);
  executor_->Schedule(JobWork::kPlan, id);
  NotifyLocked();
  return stored.record.job;
}

absl::StatusOr<v1::Job> JobLifecycle::Get(const v1::GetJobRequest& request) {
  if (absl::Status s = CheckJobId(request.id()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  return JobMessageLocked(request.id());
}

absl::StatusOr<v1::ListJobsResponse> JobLifecycle::List(const v1::ListJobsRequest& request) {
  absl::StatusOr<ListJobsQuery> query = ParseListJobs(request);
  if (!query.ok()) return query.status();
  std::lock_guard<std::mutex> lock(mu_);
  v1::ListJobsResponse out;
  int64_t index = 0;
  // Newest first.
  for (auto it = job_order_.rbegin(); it != job_order_.rend(); ++it) {
    auto whole = jobs_.find(*it);
    const v1::JobState state =
        whole != jobs_.end() ? whole->second.record.job.state() : compact_.at(*it).state;
    if (query->state != v1::JOB_STATE_UNSPECIFIED && state != query->state) continue;
    if (index++ < query->offset) continue;
    if (out.jobs_size() == query->page_size) {
      out.set_next_page_token(absl::StrCat(query->offset + query->page_size));
      break;
    }
    if (whole != jobs_.end()) {
      *out.add_jobs() = whole->second.record.job;
      continue;
    }
    absl::StatusOr<v1::Job> stored = store_->GetJobMessage(*it);
    if (!stored.ok()) return stored.status();
    *out.add_jobs() = *std::move(stored);
  }
  return out;
}

absl::StatusOr<v1::Job> JobLifecycle::Snapshot(const std::string& id,
                                               std::chrono::milliseconds wait) {
  if (absl::Status s = CheckJobId(id); !s.ok()) return s;
  std::unique_lock<std::mutex> lock(mu_);
  if (wait.count() > 0) changed_cv_.wait_for(lock, wait);
  if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
  return JobMessageLocked(id);
}

absl::StatusOr<v1::Job> JobLifecycle::Cancel(const v1::CancelJobRequest& request) {
  if (absl::Status s = CheckJobId(request.id()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(request.id());
  if (it == jobs_.end()) {
    auto compact = compact_.find(request.id());
    if (compact == compact_.end()) return JobNotFound(request.id());
    return absl::FailedPreconditionError(absl::StrCat("job '", request.id(), "' already ended (",
                                                      JobStateName(compact->second.state), ")"));
  }
  JobEntry& job = it->second;
  if (IsTerminal(job.record.job.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job '", request.id(), "' already ended (",
                                                      JobStateName(job.record.job.state()), ")"));
  }
  broker_->RemoveJob(request.id());
  if (absl::Status s = SetStateLocked(job, v1::JOB_STATE_CANCELLED, "cancelled by request");
      !s.ok()) {
    return s;
  }
  return job.record.job;
}

absl::StatusOr<v1::JobResults> JobLifecycle::GetResults(const v1::GetResultsRequest& request) {
  if (absl::Status s = CheckJobId(request.id()); !s.ok()) return s;
  v1::JobResults out;
  out.set_job_id(request.id());
  std::shared_ptr<const v1::PlanResult> plan;
  std::string blob;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(request.id());
    auto compact = compact_.find(request.id());
    if (it == jobs_.end() && compact == compact_.end()) return JobNotFound(request.id());
    const bool has_results =
        it != jobs_.end() ? it->second.has_results : compact->second.has_results;
    if (it != jobs_.end() && it->second.record.results) {
      // A running job (VERIFYING), or a finished one whose ranking could not be stored: the
      // ranking is in memory (its rejected list capped, so the copy is small).
      out.set_state(it->second.record.job.state());
      *out.mutable_plan() = *it->second.record.results;
      return out;
    }
    out.set_state(it != jobs_.end() ? it->second.record.job.state() : compact->second.state);
    if (!has_results) {
      absl::StatusOr<v1::Job> j = JobMessageLocked(request.id());
      if (!j.ok()) return j.status();
      return absl::FailedPreconditionError(
          absl::StrCat("job '", request.id(), "' has no results: it is ", JobStateName(j->state()),
                       j->error().empty() ? "" : absl::StrCat(" (", j->error(), ")")));
    }
    plan = results_cache_.Get(request.id());
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
    absl::StatusOr<std::shared_ptr<const v1::PlanResult>> parsed =
        results_cache_.PutSerialized(request.id(), blob);
    if (!parsed.ok()) return parsed.status();
    plan = *std::move(parsed);
  }
  *out.mutable_plan() = *plan;  // Outside the lock.
  return out;
}

// --- Gauges -------------------------------------------------------------------------------

JobCounts JobLifecycle::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  JobCounts out = compact_counts_;
  out.candidates_by_kind = candidates_scored_;
  for (const auto& [id, job] : jobs_) {
    ++out.jobs[job.record.job.state()];
    ++out.jobs_by_kind[job.inference ? "inference" : "training"];
    for (const TaskRecord& t : job.tasks) {
      if (t.state == TaskState::kDone) ++out.tasks_done;
      if (t.state == TaskState::kFailed) ++out.tasks_failed;
    }
  }
  return out;
}

int64_t JobLifecycle::resident_results() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = results_cache_.size();
  for (const auto& [id, job] : jobs_) {
    n += job.record.results.has_value() + job.record.modelled.has_value();
  }
  return n;
}

int64_t JobLifecycle::whole_finished_jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [id, job] : jobs_) n += IsTerminal(job.record.job.state());
  return n;
}

}  // namespace paratune::server
