// A mixture-of-experts training job in profile mode through the job manager, measured for
// real by the CPU worker's kernels executor: the modelled ranking turns into dense layer
// tasks (the attention part of the expert layers), one MoE layer task per expert layout
// and the DP sweeps; the ranking is composed from what the worker measured (each ranked
// layout's source says so, its notes name the measured MoE layer); a second identical job
// finds every task in the profile cache and leases nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "search/planner.h"
#include "server/clock.h"
#include "server/convert.h"
#include "server/job_manager.h"
#include "worker/kernels_executor.h"

namespace paratune::server {
namespace {

namespace fs = std::filesystem;

// A tiny Mixtral-like model: 2 layers of h 64, 4 experts, top-2, on the cpu device kind,
// with the all-to-all dispatcher (the one the MoE layer task runs).
constexpr char kTinyMoeSpec[] = R"({
  "name": "tiny-moe",
  "model": {"name": "tiny-moe", "num_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "num_query_groups": 4, "ffn_hidden_size": 224,
            "vocab_size": 256, "activation": "swiglu", "normalization": "rmsnorm",
            "position_embedding": "rope", "num_experts": 4, "moe_router_topk": 2,
            "moe_ffn_hidden_size": 224},
  "training": {"seq_length": 32, "global_batch_size": 4, "precision": "fp32"},
  "cluster": {"gpu": "cpu", "num_gpus": 2, "gpus_per_node": 2},
  "search": {"mode": "profile", "top_k": 4, "moe_token_dispatcher": ["alltoall"]}
})";

class MoeProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("paratune-moe-profile-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    worker::DeviceInventory inventory;
    inventory.backend = "cpu";
    inventory.device_kind = "cpu";
    for (int i = 0; i < 2; ++i) inventory.devices.emplace_back().set_index(i);
    inventory.cpu_cores = 2;
    inventory.memory_bytes = int64_t{4} << 30;
    executor_ = worker::CreateKernelsExecutor(inventory);
  }
  void TearDown() override {
    manager_.reset();
    fs::remove_all(dir_);
  }
  void Open() {
    manager_.reset();
    auto store = OpenSqliteStore((dir_ / "paratune.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    JobManagerOptions o;
    o.lease_timeout_ms = 600'000;
    o.heartbeat_interval_ms = 1'000;
    o.plan = Plan;
    o.profile.warmup = 1;
    o.profile.iters = 2;
    o.profile.max_candidates = 3;
    auto m = JobManager::Create(*std::move(store), &clock_, o);
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = *std::move(m);
  }
  std::string Submit() {
    v1::SubmitJobRequest req;
    absl::StatusOr<v1::JobSpec> spec = SpecProtoFromJson(nlohmann::json::parse(kTinyMoeSpec));
    EXPECT_TRUE(spec.ok()) << spec.status();
    *req.mutable_spec() = *spec;
    absl::StatusOr<v1::Job> job = manager_->SubmitJob(req);
    EXPECT_TRUE(job.ok()) << job.status();
    manager_->WaitIdle();
    return job.ok() ? job->id() : "";
  }
  std::string RegisterWorker() {
    v1::RegisterRequest req;
    req.mutable_worker()->set_name("cpu");
    req.mutable_worker()->set_device_kind("cpu");
    req.mutable_worker()->set_backend("cpu");
    req.mutable_worker()->set_memory_bytes(int64_t{4} << 30);
    for (int i = 0; i < 2; ++i) req.mutable_worker()->add_devices()->set_index(i);
    return manager_->Register(req)->worker_id();
  }
  // Leases every queued task and runs it on the kernels executor; returns the tasks run,
  // counting the MoE layer tasks in `moe_tasks`.
  int RunTasks(const std::string& worker, int* moe_tasks) {
    int n = 0;
    for (;;) {
      v1::LeaseTaskRequest req;
      req.set_worker_id(worker);
      req.set_wait_ms(0);
      absl::StatusOr<v1::LeaseTaskResponse> lease = manager_->LeaseTask(req);
      EXPECT_TRUE(lease.ok()) << lease.status();
      if (!lease.ok() || !lease->has_task()) break;
      if (lease->task().has_moe_layer()) ++*moe_tasks;
      v1::ReportResultRequest report;
      report.set_worker_id(worker);
      worker::CancelFlag cancel;
      *report.mutable_result() = executor_->Execute(lease->task(), cancel);
      report.mutable_result()->set_task_id(lease->task().id());
      report.mutable_result()->set_attempt(lease->task().attempt());
      report.mutable_result()->set_worker_id(worker);
      EXPECT_EQ(report.result().outcome(), v1::TaskResult::OUTCOME_OK)
          << lease->task().key() << ": " << report.result().message();
      EXPECT_TRUE(manager_->ReportResult(report)->accepted());
      ++n;
    }
    manager_->WaitIdle();
    return n;
  }
  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_id(id);
    return *manager_->GetJob(req);
  }
  PlanResult Results(const std::string& id) {
    v1::GetResultsRequest req;
    req.set_id(id);
    absl::StatusOr<v1::JobResults> r = manager_->GetResults(req);
    EXPECT_TRUE(r.ok()) << r.status();
    absl::StatusOr<PlanResult> plan = PlanResultFromProto(r->plan());
    EXPECT_TRUE(plan.ok()) << plan.status();
    return *plan;
  }

  fs::path dir_;
  FakeClock clock_;
  std::shared_ptr<worker::TaskExecutor> executor_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(MoeProfileTest, MeasuresTheMoeLayersComposesAndASecondJobIsAllCached) {
  Open();
  const std::string id = Submit();
  v1::Job job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_PROFILING) << job.error();
  const int64_t total = job.progress().tasks_total();
  EXPECT_EQ(job.progress().tasks_cached(), 0);
  const std::string worker = RegisterWorker();
  int moe_tasks = 0;
  EXPECT_EQ(RunTasks(worker, &moe_tasks), total);
  EXPECT_GE(moe_tasks, 1);
  job = Get(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.error();
  const PlanResult plan = Results(id);
  int measured = 0;
  for (const RankedConfig& r : plan.ranked) {
    if (r.source != ResultSource::kMeasured) continue;
    ++measured;
    ASSERT_FALSE(r.notes.empty());
    // Every profiled layout's expert layers come from a measured MoE layer (ep·etp ranks
    // fit the worker's two).
    EXPECT_NE(r.notes.back().find("MoE layer measured (ep " + std::to_string(r.config.ep)),
              std::string::npos)
        << r.notes.back();
    EXPECT_NE(r.notes.back().find(", moe (the rest"), std::string::npos) << r.notes.back();
    EXPECT_GT(r.time.ep_comm, 0);
    EXPECT_GT(r.iteration_time_s, 0);
  }
  EXPECT_EQ(measured, 3);  // max_candidates.
  // Ranked again: fitting layouts first, each group by iteration time.
  for (size_t i = 1; i < plan.ranked.size(); ++i) {
    const RankedConfig& a = plan.ranked[i - 1];
    const RankedConfig& b = plan.ranked[i];
    EXPECT_TRUE(a.fits > b.fits || (a.fits == b.fits && a.iteration_time_s <= b.iteration_time_s))
        << "rank " << i;
  }

  const std::string again = Submit();
  const v1::Job second = Get(again);
  EXPECT_EQ(second.state(), v1::JOB_STATE_SUCCEEDED) << second.error();
  EXPECT_EQ(second.progress().tasks_total(), total);
  EXPECT_EQ(second.progress().tasks_cached(), total);
  int none = 0;
  EXPECT_EQ(RunTasks(worker, &none), 0);  // Nothing was queued.
  const PlanResult cached = Results(again);
  ASSERT_EQ(cached.ranked.size(), plan.ranked.size());
  for (size_t i = 0; i < plan.ranked.size(); ++i) {
    EXPECT_EQ(cached.ranked[i].config, plan.ranked[i].config);
    EXPECT_DOUBLE_EQ(cached.ranked[i].iteration_time_s, plan.ranked[i].iteration_time_s);
  }
}

}  // namespace
}  // namespace paratune::server
