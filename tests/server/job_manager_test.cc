#include "server/job_manager.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "server/clock.h"
#include "server/convert.h"
#include "server/metrics.h"

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
                           double fwd_s, double bwd_s) {
  v1::TaskResult r;
  r.set_task_id(task.id());
  r.set_attempt(task.attempt());
  r.set_worker_id(worker);
  r.set_outcome(v1::TaskResult::OUTCOME_OK);
  v1::PhaseTiming* f = r.mutable_layer()->add_phases();
  f->set_phase("forward");
  f->set_median_s(fwd_s);
  v1::PhaseTiming* b = r.mutable_layer()->add_phases();
  b->set_phase("backward");
  b->set_median_s(bwd_s);
  return r;
}

// A collective sweep measured at 2.5 GB/s bus bandwidth, or a layer (10 ms fwd, 20 ms bwd).
v1::TaskResult ResultFor(const v1::ProfileTask& task, const std::string& worker) {
  if (!task.has_collective()) return LayerResult(task, worker, 0.010, 0.020);
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

class JobManagerTest : public ::testing::Test {
 protected:
  void Open(const std::string& db = ":memory:") {
    auto store = OpenSqliteStore(db);
    ASSERT_TRUE(store.ok()) << store.status();
    JobManagerOptions options = Options();
    options.metrics = &metrics_;
    auto m = JobManager::Create(*std::move(store), &clock_, options);
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = *std::move(m);
  }
  std::string Submit(const std::string& mode) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = TinySpec(mode);
    absl::StatusOr<v1::Job> job = manager_->SubmitJob(req);
    EXPECT_TRUE(job.ok()) << job.status();
    manager_->WaitIdle();
    return job->id();
  }
  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_id(id);
    return *manager_->GetJob(req);
  }
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
  v1::PlanResult Results(const std::string& id) {
    v1::GetResultsRequest req;
    req.set_id(id);
    absl::StatusOr<v1::JobResults> r = manager_->GetResults(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->plan();
  }

  FakeClock clock_;
  Metrics metrics_;
  std::unique_ptr<JobManager> manager_;
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
  // Verification runs are not built: refused, not silently ignored.
  *req.mutable_spec() = TinySpec("model");
  req.mutable_spec()->mutable_search()->set_verify_top_k(2);
  EXPECT_EQ(manager_->SubmitJob(req).status().code(), absl::StatusCode::kUnimplemented);
  v1::ListJobsRequest list;
  EXPECT_EQ(manager_->ListJobs(list)->jobs_size(), 0);
}

TEST_F(JobManagerTest, ProfileModeComposesMeasuredLayersAndSecondJobIsServedFromCache) {
  Open();
  const std::string worker = RegisterWorker();
  const std::string id = Submit("profile");
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PROFILING);
  // Two layer shapes (tp1 shared by two layouts, tp2) and the dp=2 all-reduce sweep.
  EXPECT_EQ(job.progress().tasks_total(), 3);
  EXPECT_EQ(RunAllTasks(worker), 3);
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(job.progress().tasks_done(), 3);
  EXPECT_EQ(job.progress().tasks_cached(), 0);

  v1::PlanResult plan = Results(id);
  ASSERT_EQ(plan.ranked_size(), 3);
  for (const v1::RankedConfig& r : plan.ranked()) EXPECT_EQ(r.source(), "measured");
  // tp1 pp1 dp2: m = 8 / (1 * 2) = 4 micro-batches, 4 layers x 30 ms per micro-batch,
  // logits keep their FLOP share of the modelled 0.6 s: 2bshV / (2bshV + 4 * layer) = 1/27.
  // iteration = 1.0 - 0.6 + 4 * 4 * 0.030 + 0.6 / 27.
  const double expect_a = 1.0 - 0.6 + 0.48 + 0.6 / 27.0;
  // tp1 pp2 dp1: m = 8, 2 layers per stage (60 ms), bubble 1 stage slot, share 1/14.
  const double expect_b = 1.1 - 0.6 + 8 * 0.060 + 0.6 / 14.0 + 0.060;
  bool found_a = false, found_b = false;
  for (const v1::RankedConfig& r : plan.ranked()) {
    if (r.config().tp() == 1 && r.config().pp() == 1) {
      EXPECT_NEAR(r.iteration_time_s(), expect_a, 1e-9);
      found_a = true;
    }
    if (r.config().pp() == 2) {
      EXPECT_NEAR(r.iteration_time_s(), expect_b, 1e-9);
      EXPECT_NEAR(r.time().pp_bubble(), 0.060, 1e-12);
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
  EXPECT_EQ(second.progress().tasks_total(), 3);
  EXPECT_EQ(second.progress().tasks_cached(), 3);
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
  EXPECT_EQ(others, 2);
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
  EXPECT_EQ(RunAllTasks(w3), 2);
  v1::Job job = Get(id);
  EXPECT_EQ(job.progress().tasks_failed(), 1);
  EXPECT_EQ(job.progress().tasks_done(), 2);
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
  EXPECT_EQ(RunAllTasks(w), 1);  // the third task
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

}  // namespace
}  // namespace paratune::server
