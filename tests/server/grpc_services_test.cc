// The gRPC services over a real channel (in-process server on 127.0.0.1): status codes
// cross the wire unchanged, WatchJob streams to the terminal state, tokens are enforced
// per role, and the health service answers.
#include "server/grpc_services.h"

#include <condition_variable>
#include <mutex>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "server/clock.h"
#include "server/convert.h"
#include "server/job_manager.h"
#include "server/limits.h"

namespace paratune::server {
namespace {

v1::JobSpec TinySpec() {
  nlohmann::json j = {
      {"model",
       {{"name", "tiny"}, {"num_layers", 4}, {"hidden_size", 64},
        {"num_attention_heads", 4}, {"vocab_size", 128}}},
      {"training", {{"seq_length", 32}, {"global_batch_size", 8}}},
      {"cluster", {{"gpu", "cpu"}, {"num_gpus", 2}, {"gpus_per_node", 2}}}};
  return *SpecProtoFromJson(j);
}

class GrpcServicesTest : public ::testing::Test {
 protected:
  // `in_process`: no port; the stubs use the server's in-process channel.
  void Start(const Authenticator* auth, bool in_process = false) {
    JobManagerOptions o;
    o.plan = [](const JobSpec&) -> absl::StatusOr<PlanResult> {
      PlanResult p;
      RankedConfig r;
      r.rank = 1;
      r.iteration_time_s = 0.25;
      p.ranked.push_back(r);
      return p;
    };
    manager_ = *JobManager::Create(*OpenSqliteStore(":memory:"), &clock_, o);
    GrpcServerOptions g;
    g.address = in_process ? "" : "127.0.0.1:0";
    g.auth = auth;
    server_ = *GrpcServer::Start(manager_.get(), manager_.get(), g);
    channel_ = in_process ? server_->InProcessChannel()
                          : grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                                grpc::InsecureChannelCredentials());
    stub_ = v1::Autotuner::NewStub(channel_);
    hub_ = v1::WorkerHub::NewStub(channel_);
  }
  void TearDown() override {
    if (manager_) manager_->Shutdown();
    if (server_) server_->Shutdown(100);
  }

  SystemClock clock_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Autotuner::Stub> stub_;
  std::unique_ptr<v1::WorkerHub::Stub> hub_;
};

TEST_F(GrpcServicesTest, SubmitWatchAndResultsOverTheWire) {
  Start(nullptr);
  EXPECT_GT(server_->port(), 0);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = TinySpec();
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->SubmitJob(&ctx, req, &job).ok());
  }
  grpc::ClientContext watch_ctx;
  v1::WatchJobRequest watch;
  watch.set_id(job.id());
  auto reader = stub_->WatchJob(&watch_ctx, watch);
  v1::Job update;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&update)) last = update.state();
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last, v1::JOB_STATE_SUCCEEDED);
  grpc::ClientContext rctx;
  v1::GetResultsRequest rreq;
  rreq.set_id(job.id());
  v1::JobResults results;
  ASSERT_TRUE(stub_->GetResults(&rctx, rreq, &results).ok());
  ASSERT_EQ(results.plan().ranked_size(), 1);
  EXPECT_EQ(results.plan().ranked(0).iteration_time_s(), 0.25);
}

TEST_F(GrpcServicesTest, WithoutAnAddressTheServicesAnswerOnTheInProcessChannelOnly) {
  Start(nullptr, /*in_process=*/true);
  EXPECT_EQ(server_->port(), 0);
  v1::SubmitJobRequest req;
  req.mutable_spec()->mutable_model()->set_preset("llama3-8b");
  req.mutable_spec()->mutable_training()->set_seq_length(8192);
  req.mutable_spec()->mutable_training()->set_global_batch_size(128);
  req.mutable_spec()->mutable_cluster()->set_gpu("h100-sxm-80gb");
  req.mutable_spec()->mutable_cluster()->set_num_gpus(8);
  v1::Job job;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->SubmitJob(&ctx, req, &job).ok());
  // The job keeps the spec as submitted and, beside it, the preset expanded.
  EXPECT_EQ(job.spec().model().preset(), "llama3-8b");
  EXPECT_EQ(job.spec().model().num_layers(), 0);
  EXPECT_EQ(job.resolved_spec().model().preset(), "");
  EXPECT_EQ(job.resolved_spec().model().num_layers(), 32);
  EXPECT_EQ(job.resolved_spec().model().num_query_groups(), 8);
  EXPECT_EQ(job.resolved_spec().cluster().gpus_per_node(), 8);
  grpc::ClientContext hub_ctx;
  v1::LeaseTaskRequest lease;
  lease.set_worker_id("w-unknown");
  v1::LeaseTaskResponse leased;
  EXPECT_EQ(hub_->LeaseTask(&hub_ctx, lease, &leased).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServicesTest, StatusCodesCrossTheWireUnchanged) {
  Start(nullptr);
  v1::SubmitJobRequest bad;
  *bad.mutable_spec() = TinySpec();
  bad.mutable_spec()->mutable_cluster()->set_gpu("tpu-v9");
  grpc::ClientContext c1;
  v1::Job job;
  grpc::Status s = stub_->SubmitJob(&c1, bad, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("tpu-v9"), std::string::npos) << s.error_message();
  grpc::ClientContext c2;
  v1::GetJobRequest get;
  get.set_id("job-missing");
  EXPECT_EQ(stub_->GetJob(&c2, get, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext c3;
  v1::LeaseTaskRequest lease;
  lease.set_worker_id("w-unknown");
  v1::LeaseTaskResponse lr;
  EXPECT_EQ(hub_->LeaseTask(&c3, lease, &lr).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServicesTest, TheApiBoundsAreEnforcedBeforeTheHandler) {
  Start(nullptr);
  v1::Job job;
  // A 3 MB name (under the 4 MiB receive limit): refused, naming the field and the bound,
  // and not stored.
  v1::SubmitJobRequest big;
  *big.mutable_spec() = TinySpec();
  big.mutable_spec()->set_name(std::string(3 << 20, 'x'));
  {
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->SubmitJob(&ctx, big, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "name is 3145728 bytes; the limit is 256 bytes");
  }
  // Over the receive limit: gRPC refuses it before the service.
  big.mutable_spec()->set_name(std::string(kMaxGrpcReceiveBytes, 'x'));
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->SubmitJob(&ctx, big, &job).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse list;
    ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
    EXPECT_EQ(list.jobs_size(), 0);
  }
  // An empty job id, in each call that takes one.
  {
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->GetJob(&ctx, v1::GetJobRequest(), &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "id is empty; a job id is required");
  }
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->CancelJob(&ctx, v1::CancelJobRequest(), &job).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::JobResults results;
    EXPECT_EQ(stub_->GetResults(&ctx, v1::GetResultsRequest(), &results).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A worker with 100,000 devices.
  v1::RegisterRequest reg;
  reg.mutable_worker()->set_name("w");
  for (int i = 0; i < 100000; ++i) reg.mutable_worker()->add_devices()->set_index(i);
  {
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    const grpc::Status s = hub_->Register(&ctx, reg, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "worker.devices has 100000 entries; the limit is 1024");
  }
}

TEST(LimitsTest, AJobAtEveryBoundFitsAPageOfListJobsUnderFourMebibytes) {
  // Every text and list field of the spec at its bound.
  v1::Job job;
  job.set_id(std::string(kMaxIdBytes, 'i'));
  job.set_name(std::string(kMaxSpecNameBytes, 'n'));
  job.set_error(std::string(1024, 'e'));
  v1::JobSpec* spec = job.mutable_spec();
  spec->set_name(std::string(kMaxSpecNameBytes, 'n'));
  v1::ModelSpec* m = spec->mutable_model();
  m->set_name(std::string(kMaxSpecNameBytes, 'n'));
  m->set_hf_config_json(std::string(kMaxHfConfigJsonBytes, 'h'));
  for (std::string* s : {m->mutable_preset(), m->mutable_activation(),
                         m->mutable_normalization(), m->mutable_position_embedding(),
                         spec->mutable_training()->mutable_precision(),
                         spec->mutable_training()->mutable_optimizer(),
                         spec->mutable_cluster()->mutable_gpu(),
                         spec->mutable_search()->mutable_objective(),
                         spec->mutable_search()->mutable_mode()}) {
    *s = std::string(kMaxSpecKeywordBytes, 'k');
  }
  v1::SearchSpec* search = spec->mutable_search();
  for (size_t i = 0; i < kMaxSearchListEntries; ++i) {
    const int64_t big = int64_t{1} << 62;  // the longest varint a valid entry needs, and more
    for (auto* list : {search->mutable_tp(), search->mutable_pp(), search->mutable_dp(),
                       search->mutable_cp(), search->mutable_vp(),
                       search->mutable_micro_batch_size(),
                       search->mutable_recompute_num_layers()}) {
      list->Add(big);
    }
    search->add_sequence_parallel(true);
    search->add_distributed_optimizer(true);
    search->add_recompute(std::string(kMaxSpecKeywordBytes, 'r'));
  }
  ASSERT_TRUE(ValidateJobSpecBounds(*spec).ok());
  v1::ListJobsResponse page;
  for (int i = 0; i < kMaxListJobsPageSize; ++i) *page.add_jobs() = job;
  page.set_next_page_token(std::string(kMaxIdBytes, 't'));
  EXPECT_LT(page.ByteSizeLong(), static_cast<size_t>(kMaxGrpcReceiveBytes));
  // One byte more in any bounded field is refused, naming it.
  spec->mutable_model()->mutable_hf_config_json()->push_back('h');
  EXPECT_EQ(ValidateJobSpecBounds(*spec).message(),
            "model.hf_config_json is 24577 bytes; the limit is 24576 bytes");
  spec->mutable_model()->mutable_hf_config_json()->pop_back();
  spec->mutable_search()->add_tp(1);
  EXPECT_EQ(ValidateJobSpecBounds(*spec).message(), "search.tp has 65 entries; the limit is 64");
  spec->mutable_search()->mutable_tp()->RemoveLast();
  spec->mutable_cluster()->mutable_gpu()->push_back('k');
  EXPECT_EQ(ValidateJobSpecBounds(*spec).message(),
            "cluster.gpu is 65 bytes; the limit is 64 bytes");
}

TEST(LimitsTest, AnInferenceJobAtEveryBoundFitsAPageOfListJobsUnderFourMebibytes) {
  // The fields an inference spec may carry (its reader refuses the training-only lists),
  // each at its bound.
  v1::Job job;
  job.set_id(std::string(kMaxIdBytes, 'i'));
  job.set_name(std::string(kMaxSpecNameBytes, 'n'));
  job.set_error(std::string(1024, 'e'));
  v1::JobSpec* spec = job.mutable_spec();
  spec->set_name(std::string(kMaxSpecNameBytes, 'n'));
  v1::ModelSpec* m = spec->mutable_model();
  m->set_name(std::string(kMaxSpecNameBytes, 'n'));
  m->set_hf_config_json(std::string(kMaxHfConfigJsonBytes, 'h'));
  for (std::string* s :
       {m->mutable_preset(), m->mutable_activation(), m->mutable_normalization(),
        m->mutable_position_embedding(), spec->mutable_cluster()->mutable_gpu(),
        spec->mutable_search()->mutable_objective(), spec->mutable_search()->mutable_mode(),
        spec->mutable_kind(), spec->mutable_serving()->mutable_engine(),
        spec->mutable_serving()->mutable_batching()}) {
    *s = std::string(kMaxSpecKeywordBytes, 'k');
  }
  v1::SearchSpec* search = spec->mutable_search();
  for (size_t i = 0; i < kMaxSearchListEntries; ++i) {
    const int64_t big = int64_t{1} << 62;
    for (auto* list : {search->mutable_tp(), search->mutable_pp(), search->mutable_replicas(),
                       search->mutable_max_batch_size(), search->mutable_max_num_tokens(),
                       search->mutable_prefill_replicas(), search->mutable_decode_replicas()}) {
      list->Add(big);
    }
    search->add_disaggregated(true);
    search->add_weight_precision(std::string(kMaxSpecKeywordBytes, 'w'));
    search->add_kv_cache_precision(std::string(kMaxSpecKeywordBytes, 'c'));
  }
  ASSERT_TRUE(ValidateJobSpecBounds(*spec).ok());
  v1::ListJobsResponse page;
  for (int i = 0; i < kMaxListJobsPageSize; ++i) *page.add_jobs() = job;
  page.set_next_page_token(std::string(kMaxIdBytes, 't'));
  EXPECT_LT(page.ByteSizeLong(), static_cast<size_t>(kMaxGrpcReceiveBytes));
  spec->mutable_search()->add_kv_cache_precision("fp8");
  EXPECT_EQ(ValidateJobSpecBounds(*spec).message(),
            "search.kv_cache_precision has 65 entries; the limit is 64");
  spec->mutable_search()->mutable_kv_cache_precision()->RemoveLast();
  spec->mutable_search()->mutable_weight_precision(3)->push_back('w');
  EXPECT_EQ(ValidateJobSpecBounds(*spec).message(),
            "search.weight_precision[3] is 65 bytes; the limit is 64 bytes");
  spec->mutable_search()->mutable_weight_precision(3)->pop_back();
  spec->mutable_serving()->mutable_engine()->push_back('k');
  EXPECT_EQ(ValidateJobSpecBounds(*spec).message(),
            "serving.engine is 65 bytes; the limit is 64 bytes");
}

TEST(LimitsTest, ListJobsRequestBounds) {
  v1::ListJobsRequest r;
  EXPECT_TRUE(ValidateListJobsRequest(r).ok());
  r.set_page_size(kMaxListJobsPageSize);
  EXPECT_TRUE(ValidateListJobsRequest(r).ok());
  r.set_page_size(-1);
  EXPECT_EQ(ValidateListJobsRequest(r).message(),
            "page_size (-1) must be between 0 and 100 (0 = 100)");
  r.set_page_size(0);
  r.set_state(v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(ValidateListJobsRequest(r).ok());
  r.set_state(static_cast<v1::JobState>(99));
  EXPECT_EQ(ValidateListJobsRequest(r).message(),
            "state (99) is not a JobState (0 = all, 1 = PENDING ... 8 = CANCELLED)");
  r.set_state(v1::JOB_STATE_UNSPECIFIED);
  r.set_page_token(std::string(kMaxIdBytes + 1, '7'));
  EXPECT_EQ(ValidateListJobsRequest(r).message(),
            "page_token is 129 bytes; the limit is 128 bytes");
}

TEST_F(GrpcServicesTest, TokensAreCheckedPerRoleAndHealthAnswers) {
  absl::StatusOr<Authenticator> auth = Authenticator::FromTokens("client-tok", "worker-tok");
  ASSERT_TRUE(auth.ok());
  Start(&*auth);
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->ListWorkers(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer worker-tok");
    EXPECT_EQ(stub_->ListWorkers(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer client-tok");
    EXPECT_TRUE(stub_->ListWorkers(&ctx, req, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer worker-tok");
    v1::RegisterRequest reg;
    reg.mutable_worker()->set_device_kind("cpu");
    v1::RegisterResponse r;
    ASSERT_TRUE(hub_->Register(&ctx, reg, &r).ok());
    EXPECT_FALSE(r.worker_id().empty());
  }
  // grpc.health.v1.Health/Check with an empty request (service "" = the server).
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = s;
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status: SERVING (1)}: field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace paratune::server
