// Inference jobs (`kind: inference`) through the coordinator, as training jobs go: gRPC and
// REST submit Llama 3.1 8B on 8 H100 and read back the planner's ranking (the same result
// inference::PlanInference gives for the spec); a restarted coordinator serves it from the
// SQLite store and plans an unfinished one again; cancel, bad fields (400 /
// INVALID_ARGUMENT naming the field), the API limits and the metrics by kind.
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "inference/exporters.h"
#include "inference/planner.h"
#include "inference/spec_io.h"
#include "search/planner.h"
#include "server/clock.h"
#include "server/convert.h"
#include "server/convert_inference.h"
#include "server/grpc_services.h"
#include "server/job_manager.h"
#include "server/metrics.h"
#include "server/rest_gateway.h"
#include "server/store.h"

namespace paratune::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kLlama8bOn8H100[] = R"({
  "kind": "inference",
  "name": "llama3.1-8b serving",
  "model": {"preset": "llama3.1-8b"},
  "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
  "serving": {"engine": "trtllm", "isl": 2048, "osl": 128, "concurrency": 64,
              "num_requests": 200, "ttft_ms": {"p99": 2000}, "tpot_ms": {"p99": 50}},
  "search": {"tp": [1, 2, 4, 8], "pp": [1], "weight_precision": ["bf16", "fp8"],
             "kv_cache_precision": ["bf16", "fp8"], "disaggregated": [false],
             "objective": "throughput", "top_k": 5}})";

v1::JobSpec Llama8bSpec() { return *SpecProtoFromJson(json::parse(kLlama8bOn8H100)); }

/// The result with the planner's own timing cleared: two runs of the same search differ
/// only in elapsed_ms.
v1::InferencePlanResult WithoutTiming(v1::InferencePlanResult r) {
  r.set_elapsed_ms(0);
  return r;
}

/// Equal messages (a map's serialized order is unspecified, so bytes are not compared).
bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

class InferenceJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("paratune-inference-jobs-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "paratune.db").string();
  }
  void TearDown() override {
    Stop();
    fs::remove_all(dir_);
  }

  // The coordinator on `db_`: gRPC on the in-process channel, REST on a free port.
  void Start(std::function<
                 absl::StatusOr<inference::InferencePlanResult>(const inference::InferenceJobSpec&)>
                 plan_inference = inference::PlanInference) {
    JobManagerOptions o;
    o.plan = [](const JobSpec& spec) { return Plan(spec); };
    o.plan_inference = std::move(plan_inference);
    o.metrics = &metrics_;
    absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::unique_ptr<JobManager>> manager =
        JobManager::Create(*std::move(store), &clock_, o);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = *std::move(manager);
    GrpcServerOptions g;
    g.address = "";
    server_ = *GrpcServer::Start(manager_.get(), manager_.get(), g);
    stub_ = v1::Autotuner::NewStub(server_->InProcessChannel());
    gateway_ = std::make_unique<RestGateway>(manager_.get(), nullptr, &metrics_);
    absl::StatusOr<int> port = gateway_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    http_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }
  void Stop() {
    if (gateway_) gateway_->Stop();
    if (manager_) manager_->Shutdown();
    if (server_) server_->Shutdown(100);
    http_.reset();
    gateway_.reset();
    stub_.reset();
    server_.reset();
    manager_.reset();
  }

  grpc::Status Submit(const v1::JobSpec& spec, v1::Job* job) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    return stub_->SubmitJob(&ctx, req, job);
  }
  v1::Job GetJob(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job job;
    EXPECT_TRUE(stub_->GetJob(&ctx, req, &job).ok());
    return job;
  }
  grpc::Status Results(const std::string& id, v1::JobResults* results) {
    grpc::ClientContext ctx;
    v1::GetResultsRequest req;
    req.set_id(id);
    return stub_->GetResults(&ctx, req, results);
  }

  fs::path dir_;
  std::string db_;
  SystemClock clock_;
  Metrics metrics_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Autotuner::Stub> stub_;
  std::unique_ptr<RestGateway> gateway_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(InferenceJobsTest, GrpcAndRestRankServingLayoutsAndARestartServesThemFromTheStore) {
  Start();
  v1::Job job;
  ASSERT_TRUE(Submit(Llama8bSpec(), &job).ok());
  EXPECT_EQ(job.name(), "llama3.1-8b serving");
  EXPECT_EQ(job.spec().kind(), "inference");
  EXPECT_EQ(job.resolved_spec().model().num_layers(), 32);  // the preset, expanded
  manager_->WaitIdle();
  EXPECT_EQ(GetJob(job.id()).state(), v1::JOB_STATE_SUCCEEDED) << GetJob(job.id()).error();

  v1::JobResults results;
  ASSERT_TRUE(Results(job.id(), &results).ok());
  ASSERT_TRUE(results.plan().has_inference());
  const v1::InferencePlanResult& inf = results.plan().inference();
  EXPECT_EQ(results.plan().ranked_size(), 0);
  ASSERT_GE(inf.ranked_size(), 1);
  EXPECT_LE(inf.ranked_size(), 5);
  EXPECT_GE(inf.pareto_front_size(), 1);
  EXPECT_GE(inf.candidates_considered(), inf.feasible());
  EXPECT_EQ(results.plan().candidates_considered(), inf.candidates_considered());
  for (int i = 0; i < inf.ranked_size(); ++i) {
    const v1::InferenceRankedConfig& r = inf.ranked(i);
    EXPECT_EQ(r.rank(), i + 1);
    EXPECT_LE(r.config().num_gpus(), 8);
    EXPECT_EQ(8 % r.config().tp(), 0);
    EXPECT_TRUE(r.config().weight_precision() == "bf16" || r.config().weight_precision() == "fp8");
    EXPECT_FALSE(r.config().disaggregated());
    EXPECT_LE(r.memory().peak(), r.memory().capacity());
    // Layouts meeting the limits rank first; those within them hold the TTFT and TPOT p99.
    if (i > 0) {
      EXPECT_GE(inf.ranked(i - 1).meets_limits(), r.meets_limits());
    }
    if (r.meets_limits()) {
      EXPECT_LE(r.ttft_ms().p99(), 2000);
      EXPECT_LE(r.tpot_ms().p99(), 50);
    }
  }

  // The coordinator's answer is the planner's for the same spec.
  absl::StatusOr<inference::InferencePlanResult> direct =
      inference::PlanInference(*inference::InferenceJobSpecFromJson(json::parse(kLlama8bOn8H100)));
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(SameMessage(WithoutTiming(ToProto(*direct)), WithoutTiming(inf)));

  // REST serves the same results in the proto JSON mapping, and submits the same way.
  httplib::Result res = http_->Get("/v1/jobs/" + job.id() + "/results");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body), json::parse(WireJson(results)));
  res = http_->Post("/v1/jobs", json({{"spec", json::parse(kLlama8bOn8H100)}}).dump(),
                    "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json rest_job = json::parse(res->body);
  EXPECT_EQ(rest_job["spec"]["kind"], "inference");
  EXPECT_EQ(rest_job["resolved_spec"]["serving"]["isl"], "2048");
  // A job's spec as GET /v1/jobs/{id} prints it (every wire field, training ones at their
  // defaults) submits again to the same resolved spec; a training field with a value does not.
  res = http_->Get("/v1/jobs/" + job.id());
  ASSERT_TRUE(res);
  json printed = json::parse(res->body)["spec"];
  EXPECT_EQ(printed["search"]["dp"], json::array());
  res = http_->Post("/v1/jobs", json({{"spec", printed}}).dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["resolved_spec"], json::parse(WireJson(job.resolved_spec())));
  printed["search"]["dp"] = json::array({2});
  res = http_->Post("/v1/jobs", json({{"spec", printed}}).dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("search.dp"), std::string::npos) << res->body;
  manager_->WaitIdle();
  v1::JobResults rest_results;
  ASSERT_TRUE(Results(rest_job["id"].get<std::string>(), &rest_results).ok());
  EXPECT_TRUE(SameMessage(WithoutTiming(rest_results.plan().inference()), WithoutTiming(inf)));

  // Exports of the best layout: the engine command inference/exporters.h renders for the
  // job's spec, and the layout's JSON; training formats are refused naming the kind.
  const std::string export_path = "/v1/jobs/" + job.id() + "/results/1:export?format=";
  for (const char* format : {"trtllm", "vllm", "sglang"}) {
    res = http_->Get(export_path + format);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << format << ": " << res->body;
    absl::StatusOr<std::string> expected =
        inference::FormatServingCommand(*InferenceSpecFromProto(job.resolved_spec()),
                                        *ServingConfigFromProto(inf.ranked(0).config()), format);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ(res->body, *expected) << format;
    EXPECT_NE(res->get_header_value("Content-Disposition").find("-rank1-" + std::string(format)),
              std::string::npos);
  }
  res = http_->Get(export_path + "vllm");
  EXPECT_NE(res->body.find("--tensor-parallel-size " + std::to_string(inf.ranked(0).config().tp())),
            std::string::npos)
      << res->body;
  res = http_->Get(export_path + "json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body), json::parse(WireJson(inf.ranked(0))));
  res = http_->Get(export_path + "megatron");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("is an inference job: use trtllm, vllm, sglang or json"),
            std::string::npos)
      << res->body;

  // Metrics count the jobs and the scored layouts by kind.
  manager_->ReapNow();
  const std::string text = metrics_.Serialize();
  EXPECT_NE(text.find("paratune_jobs_by_kind{kind=\"inference\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("paratune_candidates_scored_total{kind=\"inference\"} " +
                      std::to_string(3 * inf.candidates_considered()) + "\n"),
            std::string::npos)
      << text;

  // A restarted coordinator reads the jobs and their results back from the database.
  Stop();
  Start();
  v1::JobResults after;
  ASSERT_TRUE(Results(job.id(), &after).ok());
  EXPECT_TRUE(SameMessage(after, results));
  const v1::Job reloaded = GetJob(job.id());
  EXPECT_EQ(reloaded.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(reloaded.resolved_spec().serving().osl(), 128);
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 3);
  for (const v1::Job& j : list.jobs()) EXPECT_TRUE(IsInferenceSpec(j.resolved_spec()));
}

TEST_F(InferenceJobsTest, BadFieldsGet400AndInvalidArgumentNamingTheField) {
  Start();
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* field;
  };
  const Case cases[] = {
      {"osl 0", [](json& j) { j["serving"]["osl"] = 0; }, "serving.osl"},
      {"unknown engine", [](json& j) { j["serving"]["engine"] = "tgi"; }, "serving.engine"},
      {"misspelt field", [](json& j) { j["serving"]["isll"] = 10; }, "serving.isll"},
      {"unknown mode", [](json& j) { j["search"]["mode"] = "measure"; }, "search.mode"},
      {"unknown kind", [](json& j) { j["kind"] = "serving"; }, "kind"},
  };
  for (const Case& c : cases) {
    json body = json::parse(kLlama8bOn8H100);
    c.edit(body);
    httplib::Result res = http_->Post("/v1/jobs", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << c.what << ": " << res->body;
    EXPECT_NE(json::parse(res->body)["message"].get<std::string>().find(c.field), std::string::npos)
        << c.what << ": " << res->body;
  }
  // Over gRPC: a wire message with a bad serving field.
  v1::JobSpec spec = Llama8bSpec();
  spec.mutable_serving()->set_osl(0);
  v1::Job job;
  grpc::Status status = Submit(spec, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("serving.osl"), std::string::npos)
      << status.error_message();
  // The API's list bound applies to the new lists.
  spec = Llama8bSpec();
  for (int i = 0; i < 65; ++i) spec.mutable_search()->add_weight_precision("fp8");
  status = Submit(spec, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "search.weight_precision has 67 entries; the limit is 64");
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(InferenceJobsTest, CancelWhilePlanningKeepsTheJobCancelled) {
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  Start([&started, released](const inference::InferenceJobSpec& spec) {
    started.set_value();
    released.wait();
    return inference::PlanInference(spec);
  });
  v1::Job job;
  ASSERT_TRUE(Submit(Llama8bSpec(), &job).ok());
  started.get_future().wait();
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  v1::Job cancelled;
  ASSERT_TRUE(stub_->CancelJob(&ctx, cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  release.set_value();
  manager_->WaitIdle();
  EXPECT_EQ(GetJob(job.id()).state(), v1::JOB_STATE_CANCELLED);
  v1::JobResults results;
  EXPECT_EQ(Results(job.id(), &results).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(InferenceJobsTest, AnUnfinishedJobIsPlannedAgainAfterARestart) {
  {
    // A job the previous coordinator stored while planning it.
    absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    JobRecord record;
    record.job.set_id("job-planning");
    record.job.set_state(v1::JOB_STATE_PLANNING);
    *record.job.mutable_spec() = Llama8bSpec();
    *record.job.mutable_resolved_spec() = Llama8bSpec();
    ASSERT_TRUE((*store)->PutJob(record).ok());
  }
  Start();
  manager_->WaitIdle();
  EXPECT_EQ(GetJob("job-planning").state(), v1::JOB_STATE_SUCCEEDED);
  v1::JobResults results;
  ASSERT_TRUE(Results("job-planning", &results).ok());
  EXPECT_GE(results.plan().inference().ranked_size(), 1);
}

TEST_F(InferenceJobsTest, ACoordinatorWithoutAnInferencePlannerFailsTheJobSayingSo) {
  Start(nullptr);
  v1::Job job;
  ASSERT_TRUE(Submit(Llama8bSpec(), &job).ok());
  manager_->WaitIdle();
  const v1::Job failed = GetJob(job.id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.error(), "planning failed: this coordinator has no inference planner");
}

}  // namespace
}  // namespace paratune::server
