#include "server/job_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "search/compose.h"
#include "search/planner.h"
#include "search/profile_plan.h"
#include "server/clock.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "tests/server/job_manager_fixture.h"

namespace paratune::server {
namespace {

// A tiny model on the CPU device kind: L=4, h=64, a=4, V=128, s=32, B=8, N=2.
v1::JobSpec TinySpec(const std::string& mode) {
  nlohmann::json j = {
      {"name", "tiny"},
      {"model",
       {{"name", "tiny"}, {"num_layers", 4}, {"hidden_size", 64},
        {"num_attention_heads", 4}, {"vocab_size", 128}}},
      {"training", {{"seq_length", 32}, {"global_batch_size", 8}}},
      {"cluster", {{"gpu", "cpu"}, {"num_gpus", 2}, {"gpus_per_node", 2}}},
      {"search", {{"mode", mode}}}};
  absl::StatusOr<v1::JobSpec> spec = SpecProtoFromJson(j);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

RankedConfig Candidate(int64_t tp, int64_t pp, int64_t dp, double iteration_s,
                       double compute_s) {
  RankedConfig r;
  r.config.tp = tp;
  r.config.pp = pp;
  r.config.dp = dp;
  r.config.sequence_parallel = tp > 1;
  r.iteration_time_s = iteration_s;
  r.time.compute = compute_s;
  r.tokens_per_sec_per_gpu = 8.0 * 32 / iteration_s / 2;
  return r;
}

// Three layouts; the first two run layers at the same shape (tp1, mb1): two tasks.
PlanResult FakePlan() {
  PlanResult p;
  p.ranked = {Candidate(1, 1, 2, 1.0, 0.6), Candidate(1, 2, 1, 1.1, 0.6),
              Candidate(2, 1, 1, 1.2, 0.5)};
  for (size_t i = 0; i < p.ranked.size(); ++i) p.ranked[i].rank = static_cast<int64_t>(i) + 1;
  p.candidates_considered = 3;
  p.feasible = 3;
  return p;
}

JobManagerOptions Options() {
  JobManagerOptions o;
  o.lease_timeout_ms = 1000;
  o.heartbeat_interval_ms = 200;
  o.max_attempts = 2;
  o.profile.warmup = 1;
  o.profile.iters = 3;
  o.plan = [](const JobSpec&) -> absl::StatusOr<PlanResult> { return FakePlan(); };
  return o;
}

v1::TaskResult LayerResult(const v1::ProfileTask& task, const std::string& worker,
                           double fwd_s, double bwd_s, double extras_fwd_s = 0,
                           double extras_bwd_s = 0) {
  v1::TaskResult r;
  r.set_task_id(task.id());
  r.set_attempt(task.attempt());
  r.set_worker_id(worker);
  r.set_outcome(v1::TaskResult::OUTCOME_OK);
  for (auto [phase, seconds] : {std::pair<const char*, double>{"forward", fwd_s},
                                {"backward", bwd_s},
                                {"extras_forward", extras_fwd_s},
                                {"extras_backward", extras_bwd_s}}) {
    v1::PhaseTiming* p = r.mutable_layer()->add_phases();
    p->set_phase(phase);
    p->set_median_s(seconds);
  }
  return r;
}

// The fake worker's optimizer step: 2 ns per parameter.
constexpr double kOptimizerSecondsPerParam = 2e-9;

// A collective sweep measured at 2.5 GB/s bus bandwidth; a layer 10 ms fwd, 20 ms bwd; with
// the first stage's embedding 12 ms and 23 ms, of which the embedding 2 ms and 3 ms; with
// the last stage's logits and loss 15 ms and 31 ms, of which theirs 5 ms and 11 ms; the
// optimizer at kOptimizerSecondsPerParam.
v1::TaskResult ResultFor(const v1::ProfileTask& task, const std::string& worker) {
  if (task.has_layer()) {
    switch (task.layer().extras()) {
      case v1::LayerProfileTask::STAGE_EXTRAS_FIRST:
        return LayerResult(task, worker, 0.012, 0.023, 0.002, 0.003);
      case v1::LayerProfileTask::STAGE_EXTRAS_LAST:
        return LayerResult(task, worker, 0.015, 0.031, 0.005, 0.011);
      default:
        return LayerResult(task, worker, 0.010, 0.020);
    }
  }
  if (task.has_optimizer()) {
    v1::TaskResult r;
    r.set_task_id(task.id());
    r.set_attempt(task.attempt());
    r.set_outcome(v1::TaskResult::OUTCOME_OK);
    r.mutable_optimizer()->set_seconds_per_param(kOptimizerSecondsPerParam);
    r.mutable_optimizer()->set_step_s(kOptimizerSecondsPerParam * task.optimizer().params());
    r.mutable_optimizer()->set_copies(2);
    return r;
  }
  v1::TaskResult r;
  r.set_task_id(task.id());
  r.set_attempt(task.attempt());
  r.set_outcome(v1::TaskResult::OUTCOME_OK);
  for (int64_t size : task.collective().sizes_bytes()) {
    v1::CommSample* s = r.mutable_comm()->add_samples();
    s->set_size_bytes(size);
    s->set_busbw_gbps(2.5);
    s->set_time_s(static_cast<double>(size) / 2.5e9);
  }
  return r;
}

class JobManagerTest : public JobManagerFixture {
 protected:
  JobManagerTest() : JobManagerFixture("job-manager") {}

  void Open(const std::string& db = ":memory:",
            std::function<absl::StatusOr<PlanResult>(const JobSpec&)> plan = nullptr) {
    JobManagerOptions options = Options();
    if (plan) options.plan = std::move(plan);
    options.verify.steps = 4;
    options.verify.rendezvous_timeout_ms = 7000;
    options.metrics = &metrics_;
    options.results_cache_size = results_cache_size_;
    options.max_finished_jobs_in_memory = max_finished_jobs_;
    OpenManager(options, db);
  }
  std::string Submit(const std::string& mode) { return SubmitSpec(TinySpec(mode)); }
  std::string RegisterWorker(const std::string& kind = "cpu", const std::string& id = "") {
    v1::RegisterRequest req;
    req.mutable_worker()->set_id(id);
    req.mutable_worker()->set_name("test");
    req.mutable_worker()->set_device_kind(kind);
    return manager_->Register(req)->worker_id();
  }
  std::optional<v1::ProfileTask> Lease(const std::string& worker) {
    v1::LeaseTaskRequest req;
    req.set_worker_id(worker);
    req.set_wait_ms(0);
    absl::StatusOr<v1::LeaseTaskResponse> r = manager_->LeaseTask(req);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r->has_task()) return std::nullopt;
    return r->task();
  }
  v1::ReportResultResponse Report(const std::string& worker, const v1::TaskResult& result) {
    v1::ReportResultRequest req;
    req.set_worker_id(worker);
    *req.mutable_result() = result;
    return *manager_->ReportResult(req);
  }
  // Leases and answers every task: forward 10 ms, backward 20 ms.
  int RunAllTasks(const std::string& worker) {
    int n = 0;
    while (std::optional<v1::ProfileTask> t = Lease(worker)) {
      EXPECT_TRUE(Report(worker, ResultFor(*t, worker)).accepted());
      ++n;
    }
    manager_->WaitIdle();
    return n;
  }
  v1::PlanResult Results(const std::string& id) { return ResultsProto(id).plan(); }

  Metrics metrics_;
  int64_t results_cache_size_ = 16;
  int64_t max_finished_jobs_ = 256;
};

TEST_F(JobManagerTest, ModelModeSucceedsWithThePlannersRanking) {
  Open();
  const std::string id = Submit("model");
  std::vector<v1::JobState> seen;
  v1::WatchJobRequest watch;
  watch.set_id(id);
  ASSERT_TRUE(manager_->WatchJob(watch, [&](const v1::Job& j) {
    seen.push_back(j.state());
    return true;
  }).ok());
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), v1::JOB_STATE_SUCCEEDED);
  v1::PlanResult plan = Results(id);
  ASSERT_EQ(plan.ranked_size(), 3);
  EXPECT_EQ(plan.ranked(0).iteration_time_s(), 1.0);
  EXPECT_EQ(plan.ranked(0).source(), "modelled");
  EXPECT_EQ(Get(id).progress().tasks_total(), 0);
  // The reaper refreshes the gauges.
  manager_->ReapNow();
  const std::string text = metrics_.Serialize();
  EXPECT_NE(text.find("paratune_jobs{state=\"succeeded\"} 1"), std::string::npos) << text;
}

TEST_F(JobManagerTest, InvalidSpecIsRejectedNamingTheField) {
  Open();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = TinySpec("model");
  req.mutable_spec()->mutable_model()->set_num_attention_heads(-4);
  absl::StatusOr<v1::Job> job = manager_->SubmitJob(req);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("num_attention_heads"), std::string::npos)
      << job.status();
  // verify_top_k beyond top_k names both fields.
  *req.mutable_spec() = TinySpec("model");
  req.mutable_spec()->mutable_search()->set_top_k(2);
  req.mutable_spec()->mutable_search()->set_verify_top_k(3);
  job = manager_->SubmitJob(req);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("verify_top_k"), std::string::npos) << job.status();
  v1::ListJobsRequest list;
  EXPECT_EQ(manager_->ListJobs(list)->jobs_size(), 0);
}

// Every task answered with `outcome` and `message` (after max_attempts for a failure).
v1::TaskResult Outcome(const v1::ProfileTask& task, v1::TaskResult::Outcome outcome,
                       const std::string& message) {
  v1::TaskResult r;
  r.set_task_id(task.id());
  r.set_attempt(task.attempt());
  r.set_outcome(outcome);
  r.set_message(message);
  return r;
}

// A profile job whose tasks no worker can run as asked (here: a 1-device worker and tasks
// it calls unsupported) still answers with the planner's ranking, every entry modelled and
// saying why; one whose tasks all broke fails and says why.
TEST_F(JobManagerTest, ProfileJobWhoseTasksAreAllUnsupportedKeepsTheModelledRanking) {
  Open();
  const std::string worker = RegisterWorker();
  const std::string id = Submit("profile");
  int n = 0;
  while (std::optional<v1::ProfileTask> t = Lease(worker)) {
    EXPECT_TRUE(Report(worker, Outcome(*t, v1::TaskResult::OUTCOME_UNSUPPORTED,
                                       "task needs 2 ranks (tp 2 x cp 1); this worker has 1"))
                    .accepted());
    ++n;
  }
  manager_->WaitIdle();
  EXPECT_EQ(n, 8);
  const v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.progress().tasks_failed(), 8);
  const v1::PlanResult plan = Results(id);
  const PlanResult modelled = FakePlan();
  ASSERT_EQ(plan.ranked_size(), static_cast<int>(modelled.ranked.size()));
  for (int i = 0; i < plan.ranked_size(); ++i) {
    const v1::RankedConfig& r = plan.ranked(i);
    EXPECT_EQ(r.source(), "modelled");
    EXPECT_DOUBLE_EQ(r.iteration_time_s(), modelled.ranked[i].iteration_time_s);
    bool says_why = false;
    for (const std::string& note : r.notes()) {
      says_why = says_why || note.find("this worker has 1") != std::string::npos;
    }
    EXPECT_TRUE(says_why) << "rank " << r.rank() << ": no note names the reason";
  }
}

// In a cluster of unequal workers, a task needing more ranks than a worker has goes to one
// that has them (not to whoever asks first, which would answer UNSUPPORTED and lose it);
// when no registered worker has them, any worker takes it and says why.
TEST_F(JobManagerTest, TasksNeedingMoreRanksWaitForAWorkerThatHasThem) {
  Open();
  const std::string small = RegisterCpuWorker(1);
  const std::string big = RegisterCpuWorker(2);
  const std::string id = Submit("profile");
  auto needs = [](const v1::ProfileTask& t) -> int64_t {
    if (t.has_layer()) {
      return std::max<int64_t>(1, t.layer().tp()) * std::max<int64_t>(1, t.layer().cp());
    }
    if (t.has_collective()) return t.collective().group_size();
    return 1;
  };
  int small_ran = 0;
  while (std::optional<v1::ProfileTask> t = Lease(small)) {
    EXPECT_EQ(needs(*t), 1) << t->key();
    EXPECT_TRUE(Report(small, ResultFor(*t, small)).accepted());
    ++small_ran;
  }
  // FakePlan's 8 tasks: the tp1 layer with its two stage-extras twins and the optimizer
  // need one rank; the tp2 layer, its twins and the dp=2 sweep need two.
  EXPECT_EQ(small_ran, 4);
  std::optional<v1::ProfileTask> held = Lease(big);
  ASSERT_TRUE(held);
  EXPECT_EQ(needs(*held), 2);
  // The big worker leaves: its task goes back, and nothing is left to wait for.
  v1::DeregisterRequest bye;
  bye.set_worker_id(big);
  ASSERT_TRUE(manager_->Deregister(bye).ok());
  int unsupported = 0;
  while (std::optional<v1::ProfileTask> t = Lease(small)) {
    EXPECT_EQ(needs(*t), 2) << t->key();
    EXPECT_TRUE(Report(small, Outcome(*t, v1::TaskResult::OUTCOME_UNSUPPORTED,
                                      "task needs 2 ranks; this worker has 1"))
                    .accepted());
    ++unsupported;
  }
  manager_->WaitIdle();
  EXPECT_EQ(unsupported, 4);
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.progress().tasks_done(), 4);
  EXPECT_EQ(job.progress().tasks_failed(), 4);
}

TEST_F(JobManagerTest, ProfileJobWhoseTasksAllBrokeFailsAndSaysWhy) {
  Open();
  const std::string worker = RegisterWorker();
  const std::string id = Submit("profile");
  while (std::optional<v1::ProfileTask> t = Lease(worker)) {
    EXPECT_TRUE(
        Report(worker, Outcome(*t, v1::TaskResult::OUTCOME_FAILED, "segfault")).accepted());
  }
  manager_->WaitIdle();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.error().find("all 8 profile tasks failed; first: segfault"), std::string::npos)
      << job.error();
}

TEST_F(JobManagerTest, ProfileModeComposesMeasuredLayersAndSecondJobIsServedFromCache) {
  Open();
  const std::string worker = RegisterWorker();
  const std::string id = Submit("profile");
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PROFILING);
  // Two layer shapes (tp1 shared by two layouts, tp2), each also with the first stage's
  // embedding and with the last stage's logits, the dp=2 all-reduce sweep and the CPU job's
  // optimizer task.
  EXPECT_EQ(job.progress().tasks_total(), 8);
  EXPECT_EQ(RunAllTasks(worker), 8);
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.progress().tasks_done(), 8);
  EXPECT_EQ(job.progress().tasks_cached(), 0);

  v1::PlanResult plan = Results(id);
  ASSERT_EQ(plan.ranked_size(), 3);
  for (const v1::RankedConfig& r : plan.ranked()) EXPECT_EQ(r.source(), "measured");
  // The job manager's figures are search/compose.h's for the measurements the fake worker
  // reported (tests/search/compose_test.cc derives those by hand): every layer task 10 ms
  // forward + 20 ms backward, 12 + 23 ms with the embedding, 15 + 31 ms with the logits, the
  // dp=2 all-reduce at 2.5 GB/s, the optimizer at 2 ns per parameter.
  const JobSpec spec = *SpecFromProto(TinySpec("profile"));
  ProfilePlanOptions popts;
  popts.warmup = 1;
  popts.iters = 3;
  Measurements ms;
  auto expected = [&](const RankedConfig& modelled) {
    for (const LayerProfileSpec& t : LayerTasksFor(spec, modelled.config, popts)) {
      ms.layers[t.Key()].forward_s = 0.010;
      ms.layers[t.Key()].backward_s = 0.020;
    }
    if (auto sweep = DpSweepFor(spec, modelled.config, popts)) {
      CommMeasurement c;
      for (int64_t size : sweep->sizes_bytes) c.samples.push_back({size, size / 2.5e9, 2.5e9});
      ms.collectives[sweep->Key()] = c;
    }
    const std::string plain = LayerTasksFor(spec, modelled.config, popts).back().Key();
    ms.first_stage[plain].forward_s = 0.012;
    ms.first_stage[plain].backward_s = 0.023;
    ms.first_stage[plain].extras_forward_s = 0.002;
    ms.first_stage[plain].extras_backward_s = 0.003;
    ms.last_stage[plain].forward_s = 0.015;
    ms.last_stage[plain].backward_s = 0.031;
    ms.last_stage[plain].extras_forward_s = 0.005;
    ms.last_stage[plain].extras_backward_s = 0.011;
    ms.optimizer_seconds_per_param = kOptimizerSecondsPerParam;
    absl::StatusOr<RankedConfig> r = ComposeCandidate(spec, modelled, popts, ms);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return 0.0;
    // Every part measured: the note lists them, and the edges and optimizer changed the
    // figure (the same candidate without them differs).
    EXPECT_NE(r->notes.back().find("layers, embedding, logits, optimizer"), std::string::npos)
        << r->notes.back();
    Measurements layers_only = ms;
    layers_only.first_stage.clear();
    layers_only.last_stage.clear();
    layers_only.optimizer_seconds_per_param = 0;
    absl::StatusOr<RankedConfig> without = ComposeCandidate(spec, modelled, popts, layers_only);
    EXPECT_TRUE(without.ok()) << without.status();
    if (without.ok()) {
      EXPECT_GT(std::abs(r->iteration_time_s - without->iteration_time_s), 1e-6);
    }
    return r->iteration_time_s;
  };
  // tp1 pp1 dp2: m = 4 micro-batches of 4 layers x 30 ms (480 ms) plus the rest.
  const double expect_a = expected(FakePlan().ranked[0]);
  // tp1 pp2 dp1: m = 8, 2 layers per stage (60 ms), (m + p - 1) = 9 slots (540 ms) and more.
  const double expect_b = expected(FakePlan().ranked[1]);
  EXPECT_GT(expect_a, 0.480);
  EXPECT_GT(expect_b, 0.540);
  bool found_a = false, found_b = false;
  for (const v1::RankedConfig& r : plan.ranked()) {
    if (r.config().tp() == 1 && r.config().pp() == 1) {
      EXPECT_NEAR(r.iteration_time_s(), expect_a, 1e-9);
      found_a = true;
    }
    if (r.config().pp() == 2) {
      EXPECT_NEAR(r.iteration_time_s(), expect_b, 1e-9);
      found_b = true;
    }
  }
  EXPECT_TRUE(found_a && found_b);
  // Ranked by composed time.
  for (int i = 1; i < plan.ranked_size(); ++i) {
    EXPECT_LE(plan.ranked(i - 1).iteration_time_s(), plan.ranked(i).iteration_time_s());
    EXPECT_EQ(plan.ranked(i).rank(), i + 1);
  }

  const int64_t leases = manager_->leases_granted();
  const std::string again = Submit("profile");
  v1::Job second = Get(again);
  EXPECT_EQ(second.state(), v1::JOB_STATE_SUCCEEDED) << second.error();
  EXPECT_EQ(second.progress().tasks_total(), 8);
  EXPECT_EQ(second.progress().tasks_cached(), 8);
  EXPECT_EQ(manager_->leases_granted(), leases);  // zero new tasks
  EXPECT_EQ(Results(again).SerializeAsString(), plan.SerializeAsString());
}

TEST_F(JobManagerTest, ExpiredLeaseIsRequeuedLateReportIgnoredAndMaxAttemptsFails) {
  Open();
  const std::string w1 = RegisterWorker();
  const std::string id = Submit("profile");
  std::optional<v1::ProfileTask> first = Lease(w1);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->attempt(), 1);
  // w1 keeps heartbeating but the lease of `first` is not renewed (it names no task).
  clock_.AdvanceMs(1001);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w1);
  ASSERT_TRUE(manager_->Heartbeat(hb).ok());
  manager_->ReapNow();
  // The expired task went back to the end of the queue: w2 gets it after the others.
  const std::string w2 = RegisterWorker();
  std::optional<v1::ProfileTask> requeued;
  int others = 0;
  while (std::optional<v1::ProfileTask> t = Lease(w2)) {
    if (t->id() == first->id()) requeued = t;
    else ++others;
  }
  ASSERT_TRUE(requeued.has_value());
  EXPECT_EQ(others, 7);
  EXPECT_EQ(requeued->attempt(), 2);
  // The late report of attempt 1 is ignored.
  v1::ReportResultResponse late = Report(w1, ResultFor(*first, w1));
  EXPECT_FALSE(late.accepted());
  EXPECT_NE(late.reason().find("stale"), std::string::npos) << late.reason();
  // w1 and w2 go silent: both are lost; w2's leases end. The re-queued task has had
  // max_attempts = 2 leases and fails with the reason; the others go back to the queue.
  clock_.AdvanceMs(1001);
  manager_->ReapNow();
  v1::ListWorkersResponse workers = *manager_->ListWorkers(v1::ListWorkersRequest());
  int lost = 0;
  for (const v1::WorkerInfo& w : workers.workers()) lost += w.state() == "lost";
  EXPECT_EQ(lost, 2);
  const std::string w3 = RegisterWorker();
  EXPECT_EQ(RunAllTasks(w3), 7);
  v1::Job job = Get(id);
  EXPECT_EQ(job.progress().tasks_failed(), 1);
  EXPECT_EQ(job.progress().tasks_done(), 7);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  v1::PlanResult plan = Results(id);
  int modelled = 0;
  for (const v1::RankedConfig& r : plan.ranked()) {
    if (r.source() != "modelled") continue;
    ++modelled;
    ASSERT_GT(r.notes_size(), 0);
    EXPECT_NE(r.notes(r.notes_size() - 1).find("gave up after 2 attempts"), std::string::npos)
        << r.notes(r.notes_size() - 1);
  }
  EXPECT_EQ(modelled, 2);  // the two layouts that run the failed layer shape
}

TEST_F(JobManagerTest, ListJobsPagesNewestFirstAndFiltersByState) {
  Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit("model"));
  const std::string profiling = Submit("profile");  // no worker: stays PROFILING
  v1::ListJobsRequest req;
  req.set_page_size(3);
  v1::ListJobsResponse page = *manager_->ListJobs(req);
  ASSERT_EQ(page.jobs_size(), 3);
  EXPECT_EQ(page.jobs(0).id(), profiling);
  EXPECT_EQ(page.jobs(1).id(), ids[2]);
  EXPECT_EQ(page.next_page_token(), "3");
  req.set_page_token(page.next_page_token());
  page = *manager_->ListJobs(req);
  ASSERT_EQ(page.jobs_size(), 1);
  EXPECT_EQ(page.jobs(0).id(), ids[0]);
  EXPECT_TRUE(page.next_page_token().empty());
  v1::ListJobsRequest succeeded;
  succeeded.set_state(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(manager_->ListJobs(succeeded)->jobs_size(), 3);
  req.set_page_token("bogus");
  EXPECT_EQ(manager_->ListJobs(req).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobManagerTest, CancelStopsTheJobAndTellsTheWorkerToStop) {
  Open();
  const std::string w = RegisterWorker();
  const std::string id = Submit("profile");
  std::optional<v1::ProfileTask> t = Lease(w);
  ASSERT_TRUE(t.has_value());
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  EXPECT_EQ(manager_->CancelJob(cancel)->state(), v1::JOB_STATE_CANCELLED);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  hb.add_task_ids(t->id());
  v1::HeartbeatResponse r = *manager_->Heartbeat(hb);
  ASSERT_EQ(r.cancel_task_ids_size(), 1);
  EXPECT_EQ(r.cancel_task_ids(0), t->id());
  EXPECT_FALSE(Report(w, LayerResult(*t, w, 0.01, 0.02)).accepted());
  EXPECT_FALSE(Lease(w).has_value());
  EXPECT_EQ(manager_->CancelJob(cancel).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::GetResultsRequest results;
  results.set_id(id);
  EXPECT_EQ(manager_->GetResults(results).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobManagerTest, GpuTasksWaitForAWorkerOfThatKindAndUnknownWorkersMustRegister) {
  Open();
  const std::string cpu = RegisterWorker("cpu");
  v1::SubmitJobRequest req;
  *req.mutable_spec() = TinySpec("profile");
  req.mutable_spec()->mutable_cluster()->set_gpu("h100-sxm-80gb");
  ASSERT_TRUE(manager_->SubmitJob(req).ok());
  manager_->WaitIdle();
  EXPECT_FALSE(Lease(cpu).has_value());
  const std::string gpu = RegisterWorker("h100-sxm-80gb");
  std::optional<v1::ProfileTask> t = Lease(gpu);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->device_kind(), "h100-sxm-80gb");
  v1::LeaseTaskRequest unknown;
  unknown.set_worker_id("w-nobody");
  EXPECT_EQ(manager_->LeaseTask(unknown).status().code(), absl::StatusCode::kNotFound);
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w-nobody");
  EXPECT_TRUE(manager_->Heartbeat(hb)->reregister());
}

TEST_F(JobManagerTest, RestartOnTheSameDatabaseFinishesTheJobWithTheSameRanking) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("paratune_jm_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "restart.db").string();
  std::filesystem::remove(db);

  // Uninterrupted run with the same measurements, for comparison.
  Open();
  const std::string ref_id = Submit("profile");
  RunAllTasks(RegisterWorker());
  const v1::PlanResult reference = Results(ref_id);

  Open(db);
  std::string w = RegisterWorker();
  const std::string id = Submit("profile");
  std::optional<v1::ProfileTask> done = Lease(w);
  ASSERT_TRUE(Report(w, ResultFor(*done, w)).accepted());
  std::optional<v1::ProfileTask> running = Lease(w);  // In flight when the process "dies".
  ASSERT_TRUE(running.has_value());
  manager_.reset();

  Open(db);
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PROFILING);
  EXPECT_EQ(job.progress().tasks_done(), 1);
  // The old worker id is unknown to the new process: it must register again.
  v1::ReportResultRequest late;
  late.set_worker_id(w);
  *late.mutable_result() = ResultFor(*running, w);
  EXPECT_EQ(manager_->ReportResult(late).status().code(), absl::StatusCode::kNotFound);
  // Registering again with its old id keeps the identity.
  EXPECT_EQ(RegisterWorker("cpu", w), w);
  std::optional<v1::ProfileTask> again = Lease(w);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->id(), running->id());
  EXPECT_EQ(again->attempt(), running->attempt() + 1);  // the attempt count survived
  EXPECT_TRUE(Report(w, ResultFor(*again, w)).accepted());
  EXPECT_EQ(RunAllTasks(w), 6);  // the other six tasks
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  const v1::PlanResult recovered = Results(id);
  ASSERT_EQ(recovered.ranked_size(), reference.ranked_size());
  for (int i = 0; i < recovered.ranked_size(); ++i) {
    EXPECT_EQ(recovered.ranked(i).config().SerializeAsString(),
              reference.ranked(i).config().SerializeAsString());
    EXPECT_DOUBLE_EQ(recovered.ranked(i).iteration_time_s(),
                     reference.ranked(i).iteration_time_s());
  }
}

// --- Verify stage ---------------------------------------------------------------------

// World 4 (tp2 dp2), world 2 (tp1 dp2), world 1; fp32 model, predicted peaks 0.5 GiB.
PlanResult VerifyPlan() {
  PlanResult p;
  p.ranked = {Candidate(2, 1, 2, 0.20, 0.1), Candidate(1, 1, 2, 0.25, 0.1),
              Candidate(1, 1, 1, 0.30, 0.1)};
  for (size_t i = 0; i < p.ranked.size(); ++i) {
    p.ranked[i].rank = static_cast<int64_t>(i) + 1;
    p.ranked[i].memory.weights = 0.5 * (1 << 30);
  }
  return p;
}

v1::JobSpec VerifySpec(int64_t verify_top_k) {
  v1::JobSpec spec = TinySpec("model");
  spec.mutable_training()->set_precision("fp32");
  spec.mutable_cluster()->set_num_gpus(4);
  spec.mutable_cluster()->set_gpus_per_node(4);
  spec.mutable_search()->set_verify_top_k(verify_top_k);
  return spec;
}

// The result of a verify part: steps of 0.9, 0.3, 0.5, 0.4 s (median after the first:
// 0.4 s), losses 5.0 - 0.1·step, peak (10 + rank) MiB per rank.
v1::TaskResult VerifyResultFor(const v1::ProfileTask& t, const std::string& worker) {
  v1::TaskResult r;
  r.set_task_id(t.id());
  r.set_attempt(t.attempt());
  r.set_worker_id(worker);
  r.set_outcome(v1::TaskResult::OUTCOME_OK);
  v1::VerifyResult* v = r.mutable_verify();
  for (double s : {0.9, 0.3, 0.5, 0.4}) v->add_step_seconds(s);
  v->set_median_iteration_s(0.4);
  for (int i = 0; i < 4; ++i) v->add_losses(5.0 - 0.1 * i);
  v->set_first_rank(t.verify().first_rank());
  for (int64_t i = 0; i < t.verify().rank_count(); ++i) {
    v->add_peak_bytes_per_rank((10 + t.verify().first_rank() + i) << 20);
  }
  return r;
}

TEST_F(JobManagerTest, VerifySplitsALayoutOverTwoWorkersAndReportsMeasuredNextToPredicted) {
  Open(":memory:", [](const JobSpec&) -> absl::StatusOr<PlanResult> { return VerifyPlan(); });
  const std::string a = RegisterCpuWorker(2);
  const std::string b = RegisterCpuWorker(2);
  const std::string id = SubmitSpec(VerifySpec(2));
  v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_VERIFYING) << job.error();
  // Layout 1 (world 4): two parts of two ranks; layout 2 (world 2): one task.
  EXPECT_EQ(job.progress().tasks_total(), 3);
  // The ranking is readable while verifying.
  EXPECT_EQ(Results(id).ranked(0).verification().status(), "verifying");

  std::vector<std::pair<std::string, v1::ProfileTask>> leased;
  for (int i = 0; i < 3; ++i) {
    const std::string& w = i % 2 == 0 ? a : b;
    std::optional<v1::ProfileTask> t = Lease(w);
    ASSERT_TRUE(t.has_value()) << i;
    ASSERT_TRUE(t->has_verify());
    leased.emplace_back(w, *t);
  }
  const v1::VerifyTask& p0 = leased[0].second.verify();
  const v1::VerifyTask& p1 = leased[1].second.verify();
  const v1::VerifyTask& solo = leased[2].second.verify();
  EXPECT_EQ(p0.layout_rank(), 1);
  EXPECT_EQ(p0.world_size(), 4);
  EXPECT_EQ(p0.first_rank(), 0);
  EXPECT_EQ(p0.rank_count(), 2);
  EXPECT_EQ(p1.first_rank(), 2);
  EXPECT_EQ(p1.rank_count(), 2);
  EXPECT_FALSE(p0.rendezvous_namespace().empty());
  EXPECT_EQ(p0.rendezvous_namespace(), p1.rendezvous_namespace());
  EXPECT_EQ(p0.rendezvous_timeout_ms(), 7000);
  EXPECT_EQ(p0.steps(), 4);
  EXPECT_EQ(p0.num_micro_batches(), 8 / (1 * 2));
  EXPECT_EQ(solo.layout_rank(), 2);
  EXPECT_EQ(solo.rank_count(), 2);
  EXPECT_TRUE(solo.rendezvous_namespace().empty());  // in-process rendezvous

  for (const auto& [w, t] : leased) EXPECT_TRUE(Report(w, VerifyResultFor(t, w)).accepted());
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  const v1::PlanResult plan = Results(id);
  const v1::Verification& v = plan.ranked(0).verification();
  EXPECT_EQ(v.status(), "verified");
  EXPECT_DOUBLE_EQ(v.measured_iteration_time_s(), 0.4);
  EXPECT_DOUBLE_EQ(v.predicted_iteration_time_s(), 0.20);
  EXPECT_DOUBLE_EQ(v.predicted_peak_gib(), plan.ranked(0).memory().peak_gib());
  EXPECT_DOUBLE_EQ(v.predicted_peak_gib(), 0.5);
  ASSERT_EQ(v.measured_peak_gib_per_rank_size(), 4);
  for (int r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(v.measured_peak_gib_per_rank(r), (10 + r) / 1024.0);
  EXPECT_DOUBLE_EQ(v.measured_peak_gib(), 13 / 1024.0);
  EXPECT_EQ(v.measured_losses_size(), 4);
  EXPECT_EQ(plan.ranked(1).verification().measured_peak_gib_per_rank_size(), 2);
  EXPECT_EQ(plan.ranked(1).verification().status(), "verified");
  EXPECT_EQ(plan.ranked(2).verification().status(), "");  // beyond verify_top_k
  // The two verified layouts measured the same steps: the better-ranked counts as fastest.
  const v1::VerificationSummary& summary = plan.verification_summary();
  EXPECT_EQ(summary.verified(), 2);
  EXPECT_EQ(summary.predicted_best_rank(), 1);
  EXPECT_EQ(summary.measured_best_rank(), 1);
  EXPECT_EQ(summary.pairs(), 1);
  EXPECT_EQ(summary.verdict(),
            "confirmed: rank 1 measured fastest of the 2 verified layouts; 1 of 1 pairs in the "
            "predicted order");
}

TEST_F(JobManagerTest, AGangPartThatFailsRestartsTheWholeGangUntilAttemptsRunOut) {
  Open(":memory:", [](const JobSpec&) -> absl::StatusOr<PlanResult> { return VerifyPlan(); });
  const std::string a = RegisterCpuWorker(2);
  const std::string b = RegisterCpuWorker(2);
  const std::string id = SubmitSpec(VerifySpec(1));
  std::optional<v1::ProfileTask> t0 = Lease(a);
  std::optional<v1::ProfileTask> t1 = Lease(b);
  ASSERT_TRUE(t0 && t1);
  const std::string ns = t0->verify().rendezvous_namespace();
  // Part 0 could not meet its peers: part 1's lease is taken back (its worker is told to
  // stop) and both go back to the queue under a fresh namespace.
  v1::TaskResult failed;
  failed.set_task_id(t0->id());
  failed.set_attempt(t0->attempt());
  failed.set_outcome(v1::TaskResult::OUTCOME_FAILED);
  failed.set_message("ranks [0, 2) could not meet their peers: key 'x' was not set");
  EXPECT_TRUE(Report(a, failed).accepted());
  v1::HeartbeatRequest hb;
  hb.set_worker_id(b);
  hb.add_task_ids(t1->id());
  v1::HeartbeatResponse stop = *manager_->Heartbeat(hb);
  ASSERT_EQ(stop.cancel_task_ids_size(), 1);
  EXPECT_EQ(stop.cancel_task_ids(0), t1->id());
  EXPECT_FALSE(Report(b, VerifyResultFor(*t1, b)).accepted());  // a stale generation
  std::optional<v1::ProfileTask> r0 = Lease(a);
  std::optional<v1::ProfileTask> r1 = Lease(b);
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r0->attempt(), 2);
  EXPECT_NE(r0->verify().rendezvous_namespace(), ns);
  EXPECT_EQ(r0->verify().rendezvous_namespace(), r1->verify().rendezvous_namespace());
  // Second failure (max_attempts = 2): the layout is not verified, the job still succeeds.
  failed.set_task_id(r1->id());
  failed.set_attempt(r1->attempt());
  EXPECT_TRUE(Report(b, failed).accepted());
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  const v1::Verification v = Results(id).ranked(0).verification();
  EXPECT_EQ(v.status(),
            "not verified: worker " + b +
                ": ranks [0, 2) could not meet their peers: key 'x' was not set; gave up after 2 "
                "attempts");
  EXPECT_DOUBLE_EQ(v.predicted_iteration_time_s(), 0.20);
  EXPECT_EQ(v.measured_iteration_time_s(), 0);
}

TEST_F(JobManagerTest, LayoutsNoWorkersCanHostSayWhyAndSmallWorkersGetNoLargeParts) {
  Open(":memory:", [](const JobSpec&) -> absl::StatusOr<PlanResult> { return VerifyPlan(); });
  const std::string small = RegisterCpuWorker(1);
  const std::string id = SubmitSpec(VerifySpec(3));
  // World 4 and 2 do not fit one 1-device worker; world 1 does.
  v1::PlanResult plan = Results(id);
  EXPECT_EQ(plan.ranked(0).verification().status(),
            "not verified: needs 4 ranks, workers offer 1");
  EXPECT_EQ(plan.ranked(1).verification().status(),
            "not verified: needs 2 ranks, workers offer 1");
  EXPECT_EQ(plan.ranked(2).verification().status(), "verifying");
  std::optional<v1::ProfileTask> t = Lease(small);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->verify().rank_count(), 1);
  EXPECT_TRUE(Report(small, VerifyResultFor(*t, small)).accepted());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Results(id).ranked(2).verification().status(), "verified");

  // Another device kind has no workers at all.
  v1::JobSpec gpu = VerifySpec(1);
  gpu.mutable_cluster()->set_gpu("a100-80gb");
  gpu.mutable_cluster()->set_gpus_per_node(8);
  gpu.mutable_cluster()->set_num_gpus(8);
  const std::string on_gpu = SubmitSpec(gpu);
  EXPECT_EQ(Get(on_gpu).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Results(on_gpu).ranked(0).verification().status(),
            "not verified: needs 4 ranks, no worker of device kind a100-80gb is registered");

  // bf16 trains on CUDA workers only; only CPU workers are registered: said, not run.
  v1::JobSpec bf16 = VerifySpec(1);
  bf16.mutable_training()->set_precision("bf16");
  const std::string other = SubmitSpec(bf16);
  EXPECT_EQ(Get(other).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Results(other).ranked(0).verification().status(),
            "not verified: kernels/training trains bf16 on CUDA workers only; the 1 registered "
            "worker(s) are CPU workers");

  // A 2-rank part waits for a 2-device worker; the 1-device one is not offered it.
  v1::JobSpec two = VerifySpec(2);
  const std::string big = RegisterCpuWorker(2);
  const std::string third = SubmitSpec(two);
  EXPECT_EQ(Get(third).state(), v1::JOB_STATE_VERIFYING);
  EXPECT_FALSE(Lease(small).has_value());
  std::optional<v1::ProfileTask> part = Lease(big);
  ASSERT_TRUE(part.has_value());
  EXPECT_EQ(part->verify().rank_count(), 2);
}

// A bf16 spec trains on CUDA workers: the parts carry the dtype and the backend, and a
// CPU worker of the same device kind is not offered them.
TEST_F(JobManagerTest, ASixteenBitVerifyRunsOnCudaWorkersOnly) {
  Open(":memory:", [](const JobSpec&) -> absl::StatusOr<PlanResult> { return VerifyPlan(); });
  v1::JobSpec spec = VerifySpec(1);
  spec.mutable_training()->set_precision("bf16");
  spec.mutable_cluster()->set_gpu("h100-sxm-80gb");
  v1::RegisterRequest cpu;
  cpu.mutable_worker()->set_device_kind("h100-sxm-80gb");
  cpu.mutable_worker()->set_backend("cpu");
  cpu.mutable_worker()->set_memory_bytes(int64_t{64} << 30);
  for (int i = 0; i < 4; ++i) cpu.mutable_worker()->add_devices()->set_index(i);
  const std::string host = manager_->Register(cpu)->worker_id();
  v1::RegisterRequest gpu = cpu;
  gpu.mutable_worker()->set_backend("cuda");
  for (v1::Device& d : *gpu.mutable_worker()->mutable_devices()) {
    d.set_memory_bytes(int64_t{80} << 30);
  }
  const std::string cuda = manager_->Register(gpu)->worker_id();
  const std::string id = SubmitSpec(spec);
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_VERIFYING) << Get(id).error();
  EXPECT_FALSE(Lease(host).has_value());
  std::optional<v1::ProfileTask> t = Lease(cuda);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->verify().backend(), "cuda");
  EXPECT_EQ(t->verify().dtype(), "bf16");
  EXPECT_EQ(t->verify().rank_count(), 4);
  EXPECT_TRUE(Report(cuda, VerifyResultFor(*t, cuda)).accepted());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Results(id).ranked(0).verification().status(), "verified");
}

TEST_F(JobManagerTest, ACoordinatorRestartWhileVerifyingRestartsTheGangUnderANewNamespace) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("paratune_jm_verify_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "verify.db").string();
  std::filesystem::remove(db);
  auto plan = [](const JobSpec&) -> absl::StatusOr<PlanResult> { return VerifyPlan(); };
  Open(db, plan);
  std::string a = RegisterCpuWorker(2);
  std::string b = RegisterCpuWorker(2);
  const std::string id = SubmitSpec(VerifySpec(1));
  std::optional<v1::ProfileTask> t0 = Lease(a);
  ASSERT_TRUE(t0.has_value());
  const std::string ns = t0->verify().rendezvous_namespace();
  manager_.reset();  // part 0 in flight, part 1 queued

  Open(db, plan);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_VERIFYING);
  a = RegisterCpuWorker(2);
  b = RegisterCpuWorker(2);
  std::optional<v1::ProfileTask> r0 = Lease(a);
  std::optional<v1::ProfileTask> r1 = Lease(b);
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r0->verify().first_rank(), 0);
  EXPECT_EQ(r0->attempt(), 2);  // the lease before the restart counts
  EXPECT_EQ(r1->attempt(), 1);
  EXPECT_NE(r0->verify().rendezvous_namespace(), ns);
  EXPECT_EQ(r0->verify().rendezvous_namespace(), r1->verify().rendezvous_namespace());
  EXPECT_TRUE(Report(a, VerifyResultFor(*r0, a)).accepted());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_VERIFYING);
  EXPECT_TRUE(Report(b, VerifyResultFor(*r1, b)).accepted());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Results(id).ranked(0).verification().measured_peak_gib_per_rank_size(), 4);
  manager_.reset();
  std::filesystem::remove_all(dir);
}


// --- Finished jobs' rankings: capped, stored, cached -------------------------------------

TEST(RejectionRuleTest, PlannerReasonsLoseTheirNumbers) {
  EXPECT_EQ(RejectionRule("out of memory by 3.2 GiB (peak 83.2 of 80.0 GiB)"),
            "out of memory by N GiB");
  EXPECT_EQ(RejectionRule("tp (3) must divide model.num_attention_heads (96)"),
            "tp must divide model.num_attention_heads");
  EXPECT_EQ(RejectionRule("micro_batch_size*dp (4*2 = 8) must divide "
                          "training.global_batch_size (12)"),
            "micro_batch_size*dp must divide training.global_batch_size");
  EXPECT_EQ(RejectionRule("recompute_num_layers (3) must be in [0, layers per stage = 12] "
                          "(0 = all)"),
            "recompute_num_layers must be in [N, layers per stage = N]");
  // Names with digits stay.
  EXPECT_EQ(RejectionRule("tp2 needs a100 (x)"), "tp2 needs a100");
}

// 500 rejected layouts under three rules: 167 out of memory (i % 3 == 0), 167 tp (i % 3 ==
// 1), 166 pp (i % 3 == 2).
PlanResult PlanWithRejected() {
  PlanResult p = FakePlan();
  for (int i = 0; i < 500; ++i) {
    ParallelConfig c;
    c.tp = 1 + i % 7;
    c.pp = 1 + i / 7;
    c.dp = 1;
    std::string reason =
        i % 3 == 0 ? absl::StrFormat("out of memory by %d.5 GiB (peak %d.5 of 80.0 GiB)", i, 80 + i)
        : i % 3 == 1 ? absl::StrFormat("tp (%d) must divide model.num_attention_heads (4)", i)
                     : absl::StrFormat("pp (%d) must divide model.num_layers (4)", i);
    p.rejected.push_back({c, reason});
  }
  p.candidates_considered = 503;
  return p;
}

void ExpectCapped(const v1::PlanResult& plan) {
  ASSERT_EQ(plan.rejected_size(), kMaxRejectedListed);
  EXPECT_EQ(plan.rejected_total(), 500);
  // The first ones, in the planner's order.
  EXPECT_EQ(plan.rejected(0).reason(), "out of memory by 0.5 GiB (peak 80.5 of 80.0 GiB)");
  EXPECT_EQ(plan.rejected(199).reason(), "tp (199) must divide model.num_attention_heads (4)");
  EXPECT_EQ(plan.rejected(199).config().tp(), 1 + 199 % 7);
  ASSERT_EQ(plan.rejected_reasons_size(), 3);
  int64_t sum = 0;
  for (const v1::RejectedReason& r : plan.rejected_reasons()) sum += r.count();
  EXPECT_EQ(sum, plan.rejected_total());
  // Most frequent first; the tie (167) by rule name.
  EXPECT_EQ(plan.rejected_reasons(0).reason(), "out of memory by N GiB");
  EXPECT_EQ(plan.rejected_reasons(0).count(), 167);
  EXPECT_EQ(plan.rejected_reasons(1).reason(), "tp must divide model.num_attention_heads");
  EXPECT_EQ(plan.rejected_reasons(1).count(), 167);
  EXPECT_EQ(plan.rejected_reasons(2).reason(), "pp must divide model.num_layers");
  EXPECT_EQ(plan.rejected_reasons(2).count(), 166);
}

// The CLI's table of a coordinator's results counts every rejected layout, not the
// listed ones.
TEST(CapRejectedTest, TheDomainFormCarriesTheTotalOfACappedList) {
  absl::StatusOr<PlanResult> back = PlanResultFromProto(ToProto(PlanWithRejected()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rejected.size(), static_cast<size_t>(kMaxRejectedListed));
  EXPECT_EQ(back->rejected_total, 500);
}

TEST(CapRejectedTest, AnOldUncappedRankingGetsItsCountsOnce) {
  v1::PlanResult old = ToProto(PlanWithRejected(), /*max_rejected=*/1'000'000);
  ASSERT_EQ(old.rejected_size(), 500);
  old.clear_rejected_total();
  old.clear_rejected_reasons();
  CapRejected(old);
  ExpectCapped(old);
  const std::string once = old.SerializeAsString();
  CapRejected(old);
  EXPECT_EQ(old.SerializeAsString(), once);
}

TEST_F(JobManagerTest, FinishedJobsKeepAtMostTheCacheBoundOfRankingsAndReadBackFromTheStore) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("paratune_jm_cache_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "cache.db").string();
  std::filesystem::remove(db);
  results_cache_size_ = 2;
  Open(db, [](const JobSpec&) -> absl::StatusOr<PlanResult> { return PlanWithRejected(); });

  std::vector<std::string> ids;
  std::vector<std::string> first_reads;  // Serialized, read while still cached.
  for (int i = 0; i < 6; ++i) {
    ids.push_back(Submit("model"));
    ASSERT_EQ(Get(ids.back()).state(), v1::JOB_STATE_SUCCEEDED);
    const v1::PlanResult plan = Results(ids.back());
    ExpectCapped(plan);
    first_reads.push_back(plan.SerializeAsString());
    EXPECT_LE(manager_->resident_results(), 2) << "after job " << i;
  }
  // A profile job: the composed ranking keeps the modelled ranking's counts.
  const std::string profile_id = Submit("profile");
  EXPECT_EQ(manager_->resident_results(), 3);  // Its modelled ranking, while it runs.
  RunAllTasks(RegisterWorker());
  ASSERT_EQ(Get(profile_id).state(), v1::JOB_STATE_SUCCEEDED);
  const v1::PlanResult composed = Results(profile_id);
  EXPECT_EQ(composed.ranked(0).source(), "measured");
  ExpectCapped(composed);
  EXPECT_LE(manager_->resident_results(), 2);

  // Evicted long ago: read back from the store, identical.
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(Results(ids[i]).SerializeAsString(), first_reads[i]) << ids[i];
    EXPECT_LE(manager_->resident_results(), 2);
  }
  // A restart loads no finished ranking; they still read back identical.
  manager_.reset();
  Open(db, [](const JobSpec&) -> absl::StatusOr<PlanResult> { return PlanWithRejected(); });
  EXPECT_EQ(manager_->resident_results(), 0);
  EXPECT_EQ(Results(ids[0]).SerializeAsString(), first_reads[0]);
  EXPECT_EQ(manager_->resident_results(), 1);
  // A finished job without a ranking still says why.
  v1::GetResultsRequest none;
  none.set_id("job-unknown");
  EXPECT_EQ(manager_->GetResults(none).status().code(), absl::StatusCode::kNotFound);
}


// --- Specs no layout satisfies, work finished across a restart, co-located workers -------

TEST_F(JobManagerTest, ASpecNoLayoutSatisfiesFailsWithTheSpecLevelReason) {
  Open(":memory:", [](const JobSpec& spec) { return Plan(spec); });
  v1::JobSpec spec = TinySpec("model");
  spec.mutable_cluster()->set_num_gpus(8);
  spec.mutable_cluster()->set_gpus_per_node(8);
  spec.mutable_search()->add_tp(3);
  const std::string id = SubmitSpec(spec);
  ASSERT_FALSE(id.empty());
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.error(),
            "no layout satisfies the spec: search.tp [3]: no value divides "
            "cluster.num_gpus (8)");
  // The same in profile mode: no task is created.
  spec.mutable_search()->set_mode("profile");
  const v1::Job profile = Get(SubmitSpec(spec));
  EXPECT_EQ(profile.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(profile.progress().tasks_total(), 0);
}

TEST_F(JobManagerTest, AnEmptyRankingOfEnumeratedLayoutsFailsNamingTheRejections) {
  Open(":memory:", [](const JobSpec&) -> absl::StatusOr<PlanResult> {
    PlanResult p;
    p.candidates_considered = 3;
    for (int i = 0; i < 3; ++i) {
      RejectedConfig r;
      r.config.tp = 1;
      r.reason = i < 2 ? "out of memory by 1.0 GiB (peak 9.0 of 8.0 GiB)" : "tp too large";
      p.rejected.push_back(r);
    }
    return p;
  });
  const std::string id = Submit("model");
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.error(),
            "no layout satisfies the spec: all 3 candidate layouts were rejected; most "
            "often: out of memory by 1.0 GiB (peak 9.0 of 8.0 GiB) (2), tp too large (1)");
  // The rejected layouts stay readable.
  EXPECT_EQ(Results(id).rejected_size(), 3);
}

TEST_F(JobManagerTest, AResultFinishedWhileTheCoordinatorWasDownIsAcceptedAfterRestart) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("paratune_jm_down_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "down.db").string();
  std::filesystem::remove(db);
  Open(db);
  const std::string w = RegisterWorker();
  const std::string id = Submit("profile");
  std::optional<v1::ProfileTask> running = Lease(w);
  ASSERT_TRUE(running.has_value());
  manager_.reset();  // The worker finishes `running` meanwhile.

  Open(db);
  EXPECT_EQ(RegisterWorker("cpu", w), w);
  v1::ReportResultResponse r = Report(w, ResultFor(*running, w));
  EXPECT_TRUE(r.accepted()) << r.reason();
  EXPECT_EQ(Get(id).progress().tasks_done(), 1);
  // A second report of the same result is a duplicate.
  EXPECT_FALSE(Report(w, ResultFor(*running, w)).accepted());
  // The task is not handed out again: the other seven remain.
  EXPECT_EQ(RunAllTasks(w), 7);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(manager_->leases_granted(), 7);
  std::filesystem::remove_all(dir);
}

TEST_F(JobManagerTest, AStaleAttemptAfterRestartIsStillRefused) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("paratune_jm_stale_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "stale.db").string();
  std::filesystem::remove(db);
  Open(db);
  const std::string w = RegisterWorker();
  Submit("profile");
  std::optional<v1::ProfileTask> running = Lease(w);
  ASSERT_TRUE(running.has_value());
  manager_.reset();
  Open(db);
  EXPECT_EQ(RegisterWorker("cpu", w), w);
  v1::TaskResult older = ResultFor(*running, w);
  older.set_attempt(running->attempt() - 1);
  EXPECT_FALSE(Report(w, older).accepted());
  std::filesystem::remove_all(dir);
}

TEST_F(JobManagerTest, ACancelledJobsEtaStopsAtZero) {
  Open();
  const std::string w = RegisterWorker();
  const std::string id = Submit("profile");
  clock_.AdvanceMs(2000);
  std::optional<v1::ProfileTask> t = Lease(w);
  ASSERT_TRUE(Report(w, ResultFor(*t, w)).accepted());
  // One of eight measured in 2 s: 14 s to go.
  EXPECT_DOUBLE_EQ(Get(id).progress().eta_s(), 14.0);
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  EXPECT_EQ(manager_->CancelJob(cancel)->progress().eta_s(), 0.0);
  clock_.AdvanceMs(60'000);
  EXPECT_EQ(Get(id).progress().eta_s(), 0.0);
}

TEST_F(JobManagerTest, WorkersOnOneHostDoNotProfileAtTheSameTime) {
  Open();
  const auto register_on = [&](const std::string& host) {
    v1::RegisterRequest req;
    req.mutable_worker()->set_device_kind("cpu");
    req.mutable_worker()->set_hostname(host);
    return manager_->Register(req)->worker_id();
  };
  const std::string a1 = register_on("node-a");
  const std::string a2 = register_on("node-a");
  const std::string b1 = register_on("node-b");
  int on_a = 0;
  const v1::ListWorkersResponse workers = *manager_->ListWorkers(v1::ListWorkersRequest());
  for (const v1::WorkerInfo& w : workers.workers()) on_a += w.hostname() == "node-a";
  EXPECT_EQ(on_a, 2);
  Submit("profile");
  std::optional<v1::ProfileTask> first = Lease(a1);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(Lease(a2).has_value());  // a1 measures on node-a
  EXPECT_TRUE(Lease(b1).has_value());   // node-b measures at the same time
  ASSERT_TRUE(Report(a1, ResultFor(*first, a1)).accepted());
  std::optional<v1::ProfileTask> second = Lease(a2);
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(Lease(a1).has_value());
  // a2 goes silent: its lease expires and node-a is free for a1 again.
  clock_.AdvanceMs(500);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a1);
  ASSERT_TRUE(manager_->Heartbeat(hb).ok());
  hb.set_worker_id(b1);
  ASSERT_TRUE(manager_->Heartbeat(hb).ok());
  clock_.AdvanceMs(501);
  manager_->ReapNow();
  EXPECT_TRUE(Lease(a1).has_value());
}

TEST_F(JobManagerTest, RequestsWithoutAJobIdOrWithAnUnknownStateAreInvalid) {
  Open();
  v1::GetJobRequest get;
  absl::StatusOr<v1::Job> job = manager_->GetJob(get);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), "id is required (the job's id)");
  EXPECT_EQ(manager_->CancelJob(v1::CancelJobRequest()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->GetResults(v1::GetResultsRequest()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->WatchJob(v1::WatchJobRequest(), [](const v1::Job&) { return true; })
                .code(),
            absl::StatusCode::kInvalidArgument);
  v1::ListJobsRequest list;
  list.set_state(static_cast<v1::JobState>(99));
  absl::StatusOr<v1::ListJobsResponse> jobs = manager_->ListJobs(list);
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs.status().message(), "state (99) is not a JobState value");
}

// --- Finished jobs beyond the in-memory bound ---------------------------------------------

// What a client can read of a job: GetJob, GetResults and CancelJob, serialized so that
// two readings compare exactly.
struct JobReading {
  std::string job;
  std::string results;  // The plan, or the status code and message.
  std::string cancel;   // The status code and message.
};

class FinishedJobBoundTest : public JobManagerTest {
 protected:
  JobReading Read(const std::string& id) {
    JobReading out;
    out.job = Get(id).SerializeAsString();
    v1::GetResultsRequest results;
    results.set_id(id);
    absl::StatusOr<v1::JobResults> r = manager_->GetResults(results);
    out.results = r.ok() ? r->SerializeAsString() : r.status().ToString();
    v1::CancelJobRequest cancel;
    cancel.set_id(id);
    out.cancel = manager_->CancelJob(cancel).status().ToString();
    return out;
  }
  void ExpectSameReading(const std::string& id, const JobReading& before) {
    const JobReading now = Read(id);
    EXPECT_EQ(now.job, before.job) << id;
    EXPECT_EQ(now.results, before.results) << id;
    EXPECT_EQ(now.cancel, before.cancel) << id;
  }
  // Every page of ListJobs with `state` (UNSPECIFIED: all) and `page_size`, the job
  // messages serialized.
  std::vector<std::string> ListAll(v1::JobState state, int page_size) {
    std::vector<std::string> out;
    v1::ListJobsRequest req;
    req.set_state(state);
    req.set_page_size(page_size);
    for (;;) {
      absl::StatusOr<v1::ListJobsResponse> page = manager_->ListJobs(req);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) return out;
      for (const v1::Job& j : page->jobs()) out.push_back(j.SerializeAsString());
      if (page->next_page_token().empty()) return out;
      req.set_page_token(page->next_page_token());
    }
  }
  v1::JobSpec ProfileSpec(int64_t vocab_size) {
    v1::JobSpec spec = TinySpec("profile");
    spec.mutable_model()->set_vocab_size(vocab_size);
    return spec;
  }
};

TEST_F(FinishedJobBoundTest, OnlyTheNewestFinishedStayWholeAndOlderOnesReadBackIdentically) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("paratune_jm_bound_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "bound.db").string();
  std::filesystem::remove(db);
  max_finished_jobs_ = 3;
  Open(db);
  const std::string worker = RegisterWorker();

  // Oldest first: FAILED (every task broke), SUCCEEDED profile job with tasks, CANCELLED
  // profile job, four model jobs; then one left PROFILING.
  std::vector<std::string> ids;
  std::map<std::string, JobReading> readings;  // Taken while the job is held whole.
  ids.push_back(SubmitSpec(ProfileSpec(128)));
  while (std::optional<v1::ProfileTask> t = Lease(worker)) {
    ASSERT_TRUE(Report(worker, Outcome(*t, v1::TaskResult::OUTCOME_FAILED, "segfault")).accepted());
  }
  manager_->WaitIdle();
  ASSERT_EQ(Get(ids.back()).state(), v1::JOB_STATE_FAILED);
  readings[ids.back()] = Read(ids.back());

  ids.push_back(SubmitSpec(ProfileSpec(128)));
  EXPECT_GT(RunAllTasks(worker), 0);
  ASSERT_EQ(Get(ids.back()).state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_GT(Get(ids.back()).progress().tasks_done(), 0);
  readings[ids.back()] = Read(ids.back());

  ids.push_back(SubmitSpec(ProfileSpec(256)));
  ASSERT_EQ(Get(ids.back()).state(), v1::JOB_STATE_PROFILING);
  v1::CancelJobRequest cancel;
  cancel.set_id(ids.back());
  ASSERT_TRUE(manager_->CancelJob(cancel).ok());
  readings[ids.back()] = Read(ids.back());

  for (int i = 0; i < 4; ++i) {
    ids.push_back(Submit("model"));
    ASSERT_EQ(Get(ids.back()).state(), v1::JOB_STATE_SUCCEEDED);
    readings[ids.back()] = Read(ids.back());
    EXPECT_EQ(manager_->whole_finished_jobs(), std::min<int64_t>(3, ids.size())) << i;
  }
  const std::string running = SubmitSpec(ProfileSpec(512));
  ASSERT_EQ(Get(running).state(), v1::JOB_STATE_PROFILING);

  // Seven finished, three held whole; the four oldest read back from the store.
  EXPECT_EQ(manager_->whole_finished_jobs(), 3);
  for (const std::string& id : ids) ExpectSameReading(id, readings[id]);

  // A compacted job's watch sends its final state once and ends.
  std::vector<std::string> seen;
  v1::WatchJobRequest watch;
  watch.set_id(ids[1]);
  const auto watch_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(manager_->WatchJob(watch, [&](const v1::Job& j) {
    seen.push_back(j.SerializeAsString());
    return true;
  }).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - watch_start, std::chrono::milliseconds(900));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], readings[ids[1]].job);

  // ListJobs pages newest first over held and compacted jobs alike, and filters by state.
  std::vector<std::string> newest_first = {Get(running).SerializeAsString()};
  std::vector<std::string> succeeded;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    newest_first.push_back(readings[*it].job);
    v1::Job j;
    ASSERT_TRUE(j.ParseFromString(readings[*it].job));
    if (j.state() == v1::JOB_STATE_SUCCEEDED) succeeded.push_back(readings[*it].job);
  }
  ASSERT_EQ(succeeded.size(), 5u);
  for (int page_size : {1, 3, 100}) {
    EXPECT_EQ(ListAll(v1::JOB_STATE_UNSPECIFIED, page_size), newest_first) << page_size;
    EXPECT_EQ(ListAll(v1::JOB_STATE_SUCCEEDED, page_size), succeeded) << page_size;
  }
  v1::ListJobsRequest cancelled;
  cancelled.set_state(v1::JOB_STATE_CANCELLED);
  ASSERT_EQ(manager_->ListJobs(cancelled)->jobs_size(), 1);
  EXPECT_EQ(manager_->ListJobs(cancelled)->jobs(0).SerializeAsString(), readings[ids[2]].job);

  // The gauges count compacted jobs too.
  manager_->ReapNow();
  const std::string text = metrics_.Serialize();
  EXPECT_NE(text.find("paratune_jobs{state=\"succeeded\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("paratune_jobs{state=\"failed\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("paratune_jobs{state=\"cancelled\"} 1"), std::string::npos) << text;

  // A restart holds the same bound and answers the same.
  manager_.reset();
  Open(db);
  EXPECT_EQ(manager_->whole_finished_jobs(), 3);
  for (const std::string& id : ids) ExpectSameReading(id, readings[id]);
  EXPECT_EQ(ListAll(v1::JOB_STATE_SUCCEEDED, 2), succeeded);
  std::filesystem::remove_all(dir);
}

TEST_F(JobManagerTest, TheFinishedJobBoundMustBePositive) {
  auto store = OpenSqliteStore(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  JobManagerOptions options = Options();
  options.max_finished_jobs_in_memory = 0;
  auto m = JobManager::Create(*std::move(store), &clock_, options);
  EXPECT_EQ(m.status(),
            absl::InvalidArgumentError("max_finished_jobs_in_memory (0) must be at least 1"));
}

}  // namespace
}  // namespace paratune::server
