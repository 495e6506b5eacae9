#include "server/verify_stage.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/ids.h"

namespace paratune::server {
namespace {

// Why the finished parts of one run give no measurement; "" when all succeeded.
std::string RunFailure(const std::vector<const TaskRecord*>& parts) {
  for (const TaskRecord* t : parts) {
    if (t->state == TaskState::kDone && t->result && t->result->has_verify()) continue;
    const v1::TaskResult* res = t->result ? &*t->result : nullptr;
    if (res == nullptr) return "no result";
    if (res->outcome() == v1::TaskResult::OUTCOME_OOM) {
      return absl::StrCat("out of memory on the worker: ", res->message());
    }
    return res->message();
  }
  return "";
}

}  // namespace

Transition VerifyStage::Start(JobEntry& job) {
  if (job.inference) return StartInference(job);
  const int64_t k = job.spec.search.verify_top_k;
  if (k <= 0 || !job.record.results) return {v1::JOB_STATE_SUCCEEDED, ""};
  job.rankings_dirty = true;  // Verification statuses below.
  const std::string& job_id = job.record.job.id();
  // The workers registered now, of the device kind the spec names.
  const std::vector<VerifyHost> hosts = workers_->VerifyHosts(job.spec.cluster.gpu);
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
    absl::StatusOr<ParallelConfig> layout = ParallelConfigFromProto(r.config());
    if (!layout.ok()) {
      v->set_status(absl::StrCat("not verified: ", layout.status().message()));
      continue;
    }
    const int64_t world = layout->world_size();
    if (hosts.empty()) {
      v->set_status(absl::StrCat("not verified: needs ", world, " ranks, no worker of device kind ",
                                 job.spec.cluster.gpu, " is registered"));
      continue;
    }
    VerifyPlacement placement =
        PlaceVerifyRun(world, r.memory().peak_gib() * 1024.0 * 1024.0 * 1024.0, hosts,
                       ToString(job.spec.training.precision));
    if (placement.parts.empty()) {
      v->set_status(absl::StrCat("not verified: ", placement.reason));
      continue;
    }
    const std::string ns = absl::StrCat(job_id, "/v", r.rank(), "/", NewRandomId("g"));
    std::vector<TaskRecord> run;
    absl::Status made;
    for (const VerifyPart& part : placement.parts) {
      absl::StatusOr<v1::VerifyTask> verify = MakeVerifyTask(job.spec, r, part, options_, ns);
      if (!verify.ok()) {
        made = verify.status();
        break;
      }
      TaskRecord t;
      t.task.set_id(absl::StrCat(job_id, "-t", next_index + static_cast<int64_t>(run.size())));
      t.task.set_job_id(job_id);
      t.task.set_device_kind(job.spec.cluster.gpu);
      t.task.set_key(absl::StrCat("verify/", r.rank(), "/", part.first_rank, "+", part.rank_count));
      *t.task.mutable_verify() = *std::move(verify);
      t.task.mutable_verify()->set_backend(placement.backend);
      run.push_back(std::move(t));
    }
    if (!made.ok()) {
      v->set_status(absl::StrCat("not verified: ", made.message()));
      continue;
    }
    v->set_status("verifying");
    next_index += static_cast<int64_t>(run.size());
    for (TaskRecord& t : run) tasks.push_back(std::move(t));
  }
  return QueueTasks(job, std::move(tasks));
}

Transition VerifyStage::QueueTasks(JobEntry& job, std::vector<TaskRecord> tasks) {
  if (tasks.empty()) return {v1::JOB_STATE_SUCCEEDED, ""};
  if (absl::Status s = store_->PutTasks(tasks); !s.ok()) {
    return {v1::JOB_STATE_FAILED, absl::StrCat("store: ", s.message())};
  }
  for (TaskRecord& t : tasks) {
    broker_->Add(t.task);
    job.tasks.push_back(std::move(t));
  }
  if (job.profiling_start_ms == 0) job.profiling_start_ms = clock_->NowMs();
  return {v1::JOB_STATE_VERIFYING, ""};
}

absl::Status VerifyStage::ResetGang(JobEntry& job, int64_t layout_rank, const std::string& why,
                                    bool give_up) {
  std::vector<TaskRecord*> gang;
  int64_t attempts = 0;
  for (TaskRecord& t : job.tasks) {
    if (!t.task.has_verify() || t.task.verify().layout_rank() != layout_rank) continue;
    gang.push_back(&t);
    attempts = std::max(attempts, t.task.attempt());
  }
  if (gang.empty()) return absl::OkStatus();
  const bool fail = give_up || attempts >= broker_->max_attempts();
  const std::string ns =
      absl::StrCat(job.record.job.id(), "/v", layout_rank, "/", NewRandomId("g"));
  std::vector<TaskRecord> changed;
  for (TaskRecord* t : gang) {
    broker_->Remove(t->task.id());
    if (fail) {
      if (t->state == TaskState::kFailed && t->result) {
        changed.push_back(*t);
        continue;
      }
      t->state = TaskState::kFailed;
      t->result = FailureResult(
          t->task, give_up ? why : absl::StrCat(why, "; gave up after ", attempts, " attempts"));
    } else {
      t->state = TaskState::kPending;
      t->result.reset();
      v1::VerifyTask* v = t->task.mutable_verify();
      if (v->rank_count() < v->world_size()) v->set_rendezvous_namespace(ns);
      broker_->Add(t->task);
    }
    changed.push_back(*t);
  }
  return store_->PutTasks(changed);
}

absl::Status VerifyStage::Recover(JobEntry& job) {
  std::vector<int64_t> restart;
  for (const TaskRecord& t : job.tasks) {
    // A serving run is one task on one worker: it only needs queueing again.
    if (t.task.has_serving_verify() && t.state == TaskState::kPending) broker_->Add(t.task);
    if (t.task.has_verify() && t.state == TaskState::kPending &&
        std::find(restart.begin(), restart.end(), t.task.verify().layout_rank()) == restart.end()) {
      restart.push_back(t.task.verify().layout_rank());
    }
  }
  for (int64_t rank : restart) {
    if (absl::Status s = ResetGang(job, rank, "coordinator restarted", false); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyStage::ApplyReport(JobEntry& job, TaskRecord& task, const std::string& worker_id,
                                      const v1::TaskResult& result) {
  if (task.task.has_serving_verify()) return ApplyInferenceReport(task, worker_id, result);
  const int64_t layout = task.task.verify().layout_rank();
  switch (result.outcome()) {
    case v1::TaskResult::OUTCOME_OK: {
      TaskRecord updated = task;
      updated.state = TaskState::kDone;
      updated.result = result;
      updated.result->set_worker_id(worker_id);
      absl::Status s = store_->PutTasks({updated});
      if (s.ok()) {
        task = std::move(updated);
      } else {
        broker_->Add(task.task);  // Not recorded: the part goes back so that it is not lost.
      }
      return s;
    }
    case v1::TaskResult::OUTCOME_OOM:
    case v1::TaskResult::OUTCOME_UNSUPPORTED: {
      // Another attempt would end the same way; record this part's reason first.
      const std::string why =
          result.outcome() == v1::TaskResult::OUTCOME_OOM
              ? absl::StrCat("out of memory on worker ", worker_id, ": ", result.message())
              : absl::StrCat("worker ", worker_id, ": ", result.message());
      return ResetGang(job, layout, why, /*give_up=*/true);
    }
    default:  // FAILED (e.g. peers that never came), CANCELLED: the whole gang again.
      return ResetGang(job, layout, absl::StrCat("worker ", worker_id, ": ", result.message()),
                       /*give_up=*/false);
  }
}

std::optional<Transition> VerifyStage::Check(JobEntry& job) const {
  if (job.record.job.state() != v1::JOB_STATE_VERIFYING) return std::nullopt;
  if (job.inference) return CheckInference(job);
  std::map<int64_t, std::vector<const TaskRecord*>> runs;
  for (const TaskRecord& t : job.tasks) {
    if (!t.task.has_verify()) continue;
    if (t.state == TaskState::kPending) return std::nullopt;
    runs[t.task.verify().layout_rank()].push_back(&t);
  }
  if (!job.record.results) {
    return Transition{v1::JOB_STATE_FAILED, "verifying: the ranking is missing"};
  }
  job.rankings_dirty = true;
  for (v1::RankedConfig& r : *job.record.results->mutable_ranked()) {
    auto it = runs.find(r.rank());
    if (it == runs.end()) continue;
    std::string failure = RunFailure(it->second);
    if (failure.empty()) {
      std::vector<v1::VerifyResult> parts;
      for (const TaskRecord* t : it->second) parts.push_back(t->result->verify());
      const int64_t world = it->second.back()->task.verify().world_size();
      absl::StatusOr<v1::Verification> measured = VerificationFromParts(job.spec, r, world, parts);
      if (measured.ok()) {
        *r.mutable_verification() = *std::move(measured);
        continue;
      }
      failure = std::string(measured.status().message());
    }
    r.mutable_verification()->set_status(absl::StrCat("not verified: ", failure));
  }
  std::optional<v1::VerificationSummary> summary = SummarizeVerification(*job.record.results);
  if (summary) *job.record.results->mutable_verification_summary() = *std::move(summary);
  return Transition{v1::JOB_STATE_SUCCEEDED, ""};
}

}  // namespace paratune::server
