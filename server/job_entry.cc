#include "server/job_entry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/convert_inference.h"

namespace paratune::server {

TaskRecord* JobEntry::FindTask(const std::string& task_id) {
  for (TaskRecord& t : tasks) {
    if (t.task.id() == task_id) return &t;
  }
  return nullptr;
}

void JobEntry::UpdateProgress(int64_t now_ms) {
  if (tasks.empty()) return;
  int64_t done = 0, failed = 0, cached = 0;
  for (const TaskRecord& t : tasks) {
    if (t.state == TaskState::kDone) {
      ++done;
      if (t.task.attempt() == 0) ++cached;  // Done without a lease: from the cache.
    } else if (t.state == TaskState::kFailed) {
      ++failed;
    }
  }
  v1::JobProgress* p = record.job.mutable_progress();
  const int64_t total = static_cast<int64_t>(tasks.size());
  p->set_tasks_total(total);
  p->set_tasks_done(done);
  p->set_tasks_failed(failed);
  p->set_tasks_cached(cached);
  const int64_t measured = done - cached;
  const int64_t remaining = total - done - failed;
  double eta = 0;
  // A job that ended (cancelled with tasks left, say) waits for nothing more.
  if (!IsTerminal(record.job.state()) && measured > 0 && remaining > 0 && profiling_start_ms > 0) {
    const double elapsed_s = (now_ms - profiling_start_ms) / 1e3;
    eta = elapsed_s / static_cast<double>(measured) * static_cast<double>(remaining);
  }
  p->set_eta_s(eta);
}

absl::StatusOr<JobEntry> NewInferenceJobEntry(const v1::SubmitJobRequest& request, int64_t now_ms) {
  absl::StatusOr<inference::InferenceJobSpec> spec = InferenceSpecFromProto(request.spec());
  if (!spec.ok()) return spec.status();
  absl::StatusOr<v1::JobSpec> resolved = InferenceSpecToProto(*spec);
  if (!resolved.ok()) return resolved.status();
  JobEntry entry;
  entry.inference = *std::move(spec);
  v1::Job& job = entry.record.job;
  job.set_name(!entry.inference->name.empty() ? entry.inference->name
                                              : entry.inference->model.name);
  job.set_state(v1::JOB_STATE_PENDING);
  *job.mutable_spec() = request.spec();
  *job.mutable_resolved_spec() = *std::move(resolved);
  SetTime(job.mutable_create_time(), now_ms);
  SetTime(job.mutable_update_time(), now_ms);
  return entry;
}

absl::StatusOr<JobEntry> NewJobEntry(const v1::SubmitJobRequest& request, int64_t now_ms) {
  if (!request.has_spec()) return absl::InvalidArgumentError("spec is required");
  if (IsInferenceSpec(request.spec())) return NewInferenceJobEntry(request, now_ms);
  absl::StatusOr<JobSpec> spec = SpecFromProto(request.spec());
  if (!spec.ok()) return spec.status();
  absl::StatusOr<v1::JobSpec> resolved = SpecToProto(*spec);
  if (!resolved.ok()) return resolved.status();
  JobEntry entry;
  entry.spec = *std::move(spec);
  v1::Job& job = entry.record.job;
  job.set_name(!entry.spec.name.empty() ? entry.spec.name : entry.spec.model.name);
  job.set_state(v1::JOB_STATE_PENDING);
  *job.mutable_spec() = request.spec();
  *job.mutable_resolved_spec() = *std::move(resolved);
  SetTime(job.mutable_create_time(), now_ms);
  SetTime(job.mutable_update_time(), now_ms);
  return entry;
}

void SetTime(google::protobuf::Timestamp* ts, int64_t ms) {
  ts->set_seconds(ms / 1000);
  ts->set_nanos(static_cast<int32_t>((ms % 1000) * 1'000'000));
}

v1::TaskResult FailureResult(const v1::ProfileTask& task, const std::string& message) {
  v1::TaskResult failure;
  failure.set_task_id(task.id());
  failure.set_attempt(task.attempt());
  failure.set_outcome(v1::TaskResult::OUTCOME_FAILED);
  failure.set_message(message);
  return failure;
}

}  // namespace paratune::server
