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
