#include "server/profile_stage.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference/serving_profile.h"
#include "search/compose.h"
#include "server/convert.h"
#include "server/convert_inference.h"

namespace paratune::server {
namespace {

// The measurements the tasks' results carry, keyed as ComposePlan looks them up.
Measurements CollectMeasurements(const ProfilePlan& profile, const std::vector<TaskRecord>& tasks) {
  Measurements measurements;
  // Stage-extras and attention-only tasks feed Measurements::first_stage / last_stage /
  // attention_parts under their plain layer task's key (the same spec without extras, with
  // the MLP block).
  std::map<std::string, const LayerProfileSpec*> twin_tasks;
  for (const ProfileTaskSpec& p : profile.tasks) {
    if (p.kind == ProfileTaskSpec::Kind::kLayer &&
        (p.layer.extras != StageExtras::kNone || p.layer.attention_only)) {
      twin_tasks[p.key] = &p.layer;
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
    if (t.task.has_moe_layer()) {
      MoeMeasurement m = MoeMeasurementFromResult(*t.result);
      if (t.state == TaskState::kFailed && m.ok) {
        m.ok = false;
        m.message = "task failed";
      }
      measurements.moe_layers[t.task.key()] = std::move(m);
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
    if (auto x = twin_tasks.find(t.task.key()); x != twin_tasks.end()) {
      LayerProfileSpec plain = *x->second;
      plain.extras = StageExtras::kNone;
      plain.attention_only = false;
      (x->second->attention_only                  ? measurements.attention_parts
       : x->second->extras == StageExtras::kFirst ? measurements.first_stage
                                                  : measurements.last_stage)[plain.Key()] =
          std::move(m);
      continue;
    }
    measurements.layers[t.task.key()] = std::move(m);
  }
  return measurements;
}

}  // namespace

absl::Status ProfileStage::CreateTasks(JobEntry& job, const PlanResult& plan) {
  absl::StatusOr<ProfilePlan> profile = PlanProfiles(job.spec, plan, options_);
  if (!profile.ok()) {
    return absl::Status(profile.status().code(),
                        absl::StrCat("profile planning failed: ", profile.status().message()));
  }
  std::vector<v1::ProfileTask> protos;
  for (const ProfileTaskSpec& t : profile->tasks) protos.push_back(ToProto(t));
  return StoreTasks(job, std::move(protos));
}

absl::Status ProfileStage::CreateInferenceTasks(JobEntry& job,
                                                const inference::InferencePlanResult& plan) {
  inference::ServingProfileOptions o;
  o.warmup = options_.warmup;
  o.iters = options_.iters;
  absl::StatusOr<inference::ServingProfilePlan> profile =
      inference::PlanServingProfiles(*job.inference, plan, o);
  if (!profile.ok()) {
    return absl::Status(profile.status().code(),
                        absl::StrCat("profile planning failed: ", profile.status().message()));
  }
  std::vector<v1::ProfileTask> protos;
  for (const inference::ServingStepTaskSpec& t : profile->steps) protos.push_back(ToProto(t));
  for (const CollectiveSweepSpec& c : profile->sweeps) {
    ProfileTaskSpec sweep;
    sweep.kind = ProfileTaskSpec::Kind::kCollective;
    sweep.device_kind = job.inference->cluster.gpu;
    sweep.collective = c;
    sweep.key = c.Key();
    protos.push_back(ToProto(sweep));
  }
  return StoreTasks(job, std::move(protos));
}

absl::Status ProfileStage::StoreTasks(JobEntry& job, std::vector<v1::ProfileTask> protos) {
  const std::string& job_id = job.record.job.id();
  std::vector<TaskRecord> tasks;
  for (size_t i = 0; i < protos.size(); ++i) {
    TaskRecord t;
    t.task = std::move(protos[i]);
    t.task.set_id(absl::StrCat(job_id, "-t", i));
    t.task.set_job_id(job_id);
    absl::StatusOr<std::optional<v1::TaskResult>> cached =
        store_->GetCached(t.task.device_kind(), t.task.key());
    if (!cached.ok()) {
      return absl::Status(cached.status().code(),
                          absl::StrCat("profile cache: ", cached.status().message()));
    }
    if (cached->has_value()) {
      t.state = TaskState::kDone;
      t.result = **cached;
    }
    tasks.push_back(std::move(t));
  }
  if (absl::Status s = store_->PutTasks(tasks); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("store: ", s.message()));
  }
  job.tasks = std::move(tasks);
  job.profiling_start_ms = clock_->NowMs();
  return absl::OkStatus();
}

void ProfileStage::QueuePending(const JobEntry& job) {
  for (const TaskRecord& t : job.tasks) {
    if (t.state == TaskState::kPending && !t.task.has_verify() && !t.task.has_serving_verify()) {
      broker_->Add(t.task);
    }
  }
}

absl::Status ProfileStage::ApplyReport(TaskRecord& task, const std::string& worker_id,
                                       const v1::TaskResult& result) {
  TaskRecord updated = task;
  updated.result = result;
  updated.result->set_worker_id(worker_id);
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
      requeue = RetryOrGiveUp(updated, broker_->max_attempts());
      break;
  }
  if (absl::Status s = store_->PutTaskAndCache(updated, cache); !s.ok()) {
    broker_->Add(task.task);  // Not recorded: the task goes back so that it is not lost.
    return s;
  }
  task = std::move(updated);
  if (requeue) broker_->Add(task.task);
  return absl::OkStatus();
}

absl::Status ProfileStage::ApplyRequeue(TaskRecord& task, const TaskQueue::Requeue& requeue,
                                        const std::string& why) {
  if (!requeue.exhausted) return absl::OkStatus();
  task.state = TaskState::kFailed;
  task.result = FailureResult(
      requeue.task, absl::StrCat(why, "; gave up after ", requeue.task.attempt(), " attempts"));
  return store_->PutTasks({task});
}

std::optional<Transition> ProfileStage::Check(const JobEntry& job) const {
  if (job.record.job.state() != v1::JOB_STATE_PROFILING) return std::nullopt;
  int64_t done = 0;
  const TaskRecord* first_failure = nullptr;
  bool all_unsupported = true;
  for (const TaskRecord& t : job.tasks) {
    if (t.state == TaskState::kPending) return std::nullopt;
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
    return Transition{v1::JOB_STATE_FAILED, absl::StrCat("all ", job.tasks.size(),
                                                         " profile tasks failed; first: ", why)};
  }
  return Transition{v1::JOB_STATE_COMPOSING, ""};
}

absl::StatusOr<PlanResult> ProfileStage::Compose(const JobSpec& spec,
                                                 const v1::PlanResult& modelled_proto,
                                                 const std::vector<TaskRecord>& tasks,
                                                 const ProfilePlanOptions& options) {
  absl::StatusOr<PlanResult> modelled = PlanResultFromProto(modelled_proto);
  if (!modelled.ok()) return modelled.status();
  absl::StatusOr<ProfilePlan> profile = PlanProfiles(spec, *modelled, options);
  if (!profile.ok()) return profile.status();
  return ComposePlan(spec, *modelled, *profile, options, CollectMeasurements(*profile, tasks));
}

absl::StatusOr<inference::InferencePlanResult> ProfileStage::ComposeInference(
    const inference::InferenceJobSpec& spec, const v1::PlanResult& modelled,
    const std::vector<TaskRecord>& tasks) {
  absl::StatusOr<inference::InferencePlanResult> plan =
      InferencePlanResultFromProto(modelled.inference());
  if (!plan.ok()) return plan.status();
  inference::ServingMeasurements measured;
  for (const TaskRecord& t : tasks) {
    if (t.task.has_collective()) {
      if (t.state != TaskState::kDone || !t.result) continue;
      const CommMeasurement c = CommMeasurementFromResult(*t.result);
      if (!c.ok) continue;
      auto& samples = measured.allreduce[t.task.collective().group_size()];
      for (const CommMeasurement::Sample& x : c.samples) {
        samples.push_back({x.size_bytes, x.time_s});
      }
      continue;
    }
    if (!t.task.has_serving_step()) continue;
    absl::StatusOr<inference::StepShape> shape =
        StepShapeFromTask(t.task.serving_step(), spec.model.num_layers);
    if (!shape.ok()) return shape.status();
    const bool ok = t.state == TaskState::kDone && t.result &&
                    t.result->outcome() == v1::TaskResult::OUTCOME_OK;
    absl::StatusOr<inference::StepSample> sample =
        ok ? StepSampleFromResult(t.task.serving_step(), *t.result)
           : absl::StatusOr<inference::StepSample>(absl::UnavailableError(
                 t.result ? (t.result->outcome() == v1::TaskResult::OUTCOME_OOM
                                 ? absl::StrCat("out of memory: ", t.task.key())
                                 : t.result->message())
                          : "task failed"));
    if (!sample.ok()) {
      measured.failures.emplace(
          *shape, absl::StrCat("serving_step task failed: ", sample.status().message()));
      continue;
    }
    measured.steps[*shape].push_back(*sample);
  }
  return inference::ComposeInference(spec, *plan, measured);
}

}  // namespace paratune::server
