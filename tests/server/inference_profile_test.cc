// Inference jobs in profile mode through the job manager: the modelled serving plan turns
// into serving_step and all-reduce tasks, a worker answers them, the ranking is composed
// from the measurements (each figure's source says so), a second identical job finds
// every task in the profile cache, and a restart while profiling resumes the tasks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "inference/planner.h"
#include "server/convert.h"
#include "server/convert_inference.h"
#include "server/job_manager.h"
#include "tests/inference/small_cpu_serving_spec.h"
#include "tests/server/job_manager_fixture.h"

namespace paratune::server {
namespace {

v1::JobSpec SmallCpuServingSpec() {
  absl::StatusOr<v1::JobSpec> spec =
      SpecProtoFromJson(nlohmann::json::parse(paratune::test_specs::kSmallCpuServingSpec));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A worker's answer: a step of r rows costs 1 ms + 20 us per row in GEMMs (the tp 2 shape
// half of that), 50 us per row in TP communication at tp 2; an all-reduce 10 us + 1 ns per
// byte.
v1::TaskResult ResultFor(const v1::ProfileTask& task) {
  v1::TaskResult r;
  r.set_outcome(v1::TaskResult::OUTCOME_OK);
  if (task.has_collective()) {
    for (int64_t size : task.collective().sizes_bytes()) {
      v1::CommSample* s = r.mutable_comm()->add_samples();
      s->set_size_bytes(size);
      s->set_time_s(10e-6 + 1e-9 * static_cast<double>(size));
    }
    return r;
  }
  const v1::ServingStepTask& t = task.serving_step();
  const bool prefill = t.phase() == v1::ServingStepTask::PHASE_PREFILL;
  const double rows = static_cast<double>(prefill ? t.batch() * t.seq_length() : t.batch());
  const double gemm = (1e-3 + 20e-6 * rows) / static_cast<double>(t.tp());
  const double comm = t.tp() > 1 ? 50e-6 * rows : 0;
  for (auto [phase, seconds] :
       {std::pair<const char*, double>{"total", gemm + comm}, {"gemm", gemm}, {"tp_comm", comm}}) {
    v1::PhaseTiming* p = r.mutable_serving_step()->add_phases();
    p->set_phase(phase);
    p->set_median_s(seconds);
  }
  return r;
}

class InferenceProfileTest : public JobManagerFixture {
 protected:
  InferenceProfileTest() : JobManagerFixture("inference-profile") {}

  void Open() {
    JobManagerOptions o;
    o.lease_timeout_ms = 60'000;
    o.heartbeat_interval_ms = 1'000;
    o.plan = [](const JobSpec&) -> absl::StatusOr<PlanResult> {
      return absl::InternalError("no training jobs here");
    };
    o.plan_inference = inference::PlanInference;
    OpenManager(o, DatabasePath());
  }
  std::string Submit() { return SubmitSpec(SmallCpuServingSpec()); }
  std::string RegisterWorker() { return RegisterCpuWorker(2); }
  // Leases and answers up to `limit` tasks; returns how many.
  int RunTasks(const std::string& worker, int limit = 1 << 30) {
    return AnswerTasks(worker, ResultFor, limit);
  }
  inference::InferencePlanResult Results(const std::string& id) {
    absl::StatusOr<inference::InferencePlanResult> plan =
        InferencePlanResultFromProto(ResultsProto(id).plan().inference());
    EXPECT_TRUE(plan.ok()) << plan.status();
    return *plan;
  }
};

TEST_F(InferenceProfileTest, ProfilesComposesRanksAndASecondJobIsAllCached) {
  Open();
  const std::string id = Submit();
  v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_PROFILING) << job.error();
  // 11 serving_step tasks per shape (tp 1, tp 2) and one all-reduce sweep for tp 2
  // (inference/serving_profile.h).
  EXPECT_EQ(job.progress().tasks_total(), 23);
  EXPECT_EQ(job.progress().tasks_cached(), 0);
  const std::string worker = RegisterWorker();
  EXPECT_EQ(RunTasks(worker), 23);
  job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  const inference::InferencePlanResult plan = Results(id);
  ASSERT_EQ(plan.ranked.size(), 4u);
  for (const inference::InferenceRankedConfig& r : plan.ranked) {
    EXPECT_EQ(r.decode_step.source, "measured") << r.config.ToString();
    EXPECT_EQ(r.prefill_step.source, "measured");
    ASSERT_FALSE(r.notes.empty());
    EXPECT_EQ(r.notes.front().rfind("measured steps (11 serving_step tasks on cpu)", 0), 0u)
        << r.notes.front();
    // The measured prefill step of one 64-token prompt: 1 ms + 64 x 20 us of GEMMs (halved
    // at tp 2) + 64 x 50 us of TP communication at tp 2, plus the engine's overheads.
    const double tp = static_cast<double>(r.config.tp);
    const double measured_ms = (1 + 64 * 0.020) / tp + (r.config.tp > 1 ? 64 * 0.050 : 0);
    EXPECT_NEAR(r.prefill_step.total - r.prefill_step.overhead, measured_ms, 1e-9);
    if (r.config.tp == 2) {
      EXPECT_NE(r.notes.back().find("TP all-reduce of 1024 bytes measured 11.0 us"),
                std::string::npos)
          << r.notes.back();
    }
  }
  // Measured: tp 1 steps (1 + 0.02 r ms) beat tp 2's (0.5 + 0.06 r ms) per GPU.
  EXPECT_EQ(plan.ranked.front().config.tp, 1);

  const std::string again = Submit();
  const v1::Job second = Get(again);
  EXPECT_EQ(second.state(), v1::JOB_STATE_SUCCEEDED) << second.error();
  EXPECT_EQ(second.progress().tasks_total(), 23);
  EXPECT_EQ(second.progress().tasks_cached(), 23);
  EXPECT_EQ(RunTasks(worker), 0);  // Nothing was queued.
  const inference::InferencePlanResult cached = Results(again);
  ASSERT_EQ(cached.ranked.size(), plan.ranked.size());
  for (size_t i = 0; i < plan.ranked.size(); ++i) {
    EXPECT_EQ(cached.ranked[i].config, plan.ranked[i].config);
    EXPECT_DOUBLE_EQ(cached.ranked[i].tpot_ms.p50, plan.ranked[i].tpot_ms.p50);
  }
}

TEST_F(InferenceProfileTest, ARestartWhileProfilingResumesTheRemainingTasks) {
  Open();
  const std::string id = Submit();
  std::string worker = RegisterWorker();
  EXPECT_EQ(RunTasks(worker, 5), 5);
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_PROFILING);
  Open();  // The coordinator restarts on the same database.
  v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_PROFILING) << job.error();
  EXPECT_EQ(job.progress().tasks_done(), 5);
  worker = RegisterWorker();
  EXPECT_EQ(RunTasks(worker), 18);
  job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  EXPECT_EQ(Results(id).ranked.front().decode_step.source, "measured");
}

// Verification on CUDA workers: an aggregated layout with pp 1 is leased to a CUDA worker
// of the spec's device kind; a pipelined one, which the serving loop runs on CPU workers
// only, is not verified and says why.
TEST_F(InferenceProfileTest, CudaWorkersVerifyAggregatedLayoutsWithOneStage) {
  Open();
  v1::JobSpec spec = SmallCpuServingSpec();
  spec.mutable_cluster()->set_gpu("h100-sxm-80gb");
  v1::SearchSpec* search = spec.mutable_search();
  search->clear_tp();
  search->add_tp(1);
  search->add_pp(2);
  search->clear_weight_precision();
  search->add_weight_precision("bf16");
  search->clear_max_batch_size();
  search->add_max_batch_size(16);  // two layouts: one stage, and two
  search->set_mode("model");
  search->set_top_k(2);
  search->set_verify_top_k(2);
  v1::RegisterRequest gpu;
  gpu.mutable_worker()->set_name("gpu");
  gpu.mutable_worker()->set_device_kind("h100-sxm-80gb");
  gpu.mutable_worker()->set_backend("cuda");
  gpu.mutable_worker()->set_memory_bytes(int64_t{64} << 30);
  for (int i = 0; i < 2; ++i) {
    v1::Device* d = gpu.mutable_worker()->add_devices();
    d->set_index(i);
    d->set_memory_bytes(int64_t{80} << 30);
  }
  absl::StatusOr<v1::RegisterResponse> registered = manager_->Register(gpu);
  ASSERT_TRUE(registered.ok()) << registered.status();
  const std::string worker = registered->worker_id();
  const std::string id = SubmitSpec(spec);
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_VERIFYING) << Get(id).error();
  v1::LeaseTaskRequest req;
  req.set_worker_id(worker);
  req.set_wait_ms(0);
  absl::StatusOr<v1::LeaseTaskResponse> lease = manager_->LeaseTask(req);
  ASSERT_TRUE(lease.ok() && lease->has_task()) << lease.status();
  const v1::ServingVerifyTask& t = lease->task().serving_verify();
  EXPECT_LE(t.pp(), 1);
  EXPECT_EQ(t.weight_precision(), "bf16");
  int not_verified = 0;
  const v1::JobResults results = ResultsProto(id);
  for (const v1::InferenceRankedConfig& r : results.plan().inference().ranked()) {
    if (r.config().pp() < 2) continue;
    ++not_verified;
    EXPECT_EQ(r.verification().status(),
              "not verified: needs 2 ranks on one worker of device kind h100-sxm-80gb (CPU, "
              "or CUDA for aggregated layouts with pp 1), the largest registered offers 0");
  }
  EXPECT_EQ(not_verified, 1);
}

}  // namespace
}  // namespace paratune::server
