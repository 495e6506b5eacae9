// A coordinator owns its ports and its database: a second one on ports already in use, or
// on a database another one serves, refuses to start with a message naming the port or
// the database (two coordinators once both listened, and clients and workers were split
// between them at random). Without a client token it listens on loopback only, unless
// --bind is given, and then it warns. And one oversized request is refused at the edge
// instead of being stored for every later ListJobs to carry.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <tuple>
#include <vector>

#include "paratune/v1/service.grpc.pb.h"
#include "tests/e2e/fault_harness.h"

namespace paratune::e2e {
namespace {

class CoordinatorOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    dir_ =
        TestDir("paratune_own_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  /// Runs a coordinator with `args` (after the binary) until it exits or `timeout_ms`;
  /// its exit code (-2 when still running, then killed) and its log.
  std::pair<int, std::string> RunToExit(const std::vector<std::string>& args,
                                        const std::string& name, int timeout_ms = 20000) {
    std::vector<std::string> argv = {(bin_ / "paratune-coordinator").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const fs::path log = dir_ / (name + ".log");
    Process p(argv, log);
    const bool exited = PollUntil([&] { return !p.Alive(); }, timeout_ms);
    if (!exited) {
      p.Kill();
      return {-2, ReadFile(log)};
    }
    const int status = p.exit_status();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(log)};
  }

  fs::path bin_, dir_;
};

TEST_F(CoordinatorOwnershipTest, ASecondCoordinatorOnTheSamePortsRefusesToStart) {
  Coordinator first(bin_, dir_, dir_ / "first.db", {});
  std::string error;
  ASSERT_TRUE(first.Start(&error)) << error;

  // Same gRPC port, another database: refused naming the gRPC address.
  auto [code, log] =
      RunToExit({"--bind", "127.0.0.1", "--grpc-port", std::to_string(first.grpc_port()),
                 "--http-port", "0", "--db", (dir_ / "second.db").string()},
                "second_grpc");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("cannot listen for gRPC on 127.0.0.1:" + std::to_string(first.grpc_port())),
            std::string::npos)
      << log;

  // A free gRPC port, the first one's HTTP port: refused naming the HTTP address.
  std::tie(code, log) =
      RunToExit({"--bind", "127.0.0.1", "--grpc-port", "0", "--http-port",
                 std::to_string(first.http_port()), "--db", (dir_ / "third.db").string()},
                "second_http");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(
      log.find("cannot bind the REST gateway to 127.0.0.1:" + std::to_string(first.http_port())),
      std::string::npos)
      << log;

  // The first still answers every request (none went to a second listener).
  httplib::Client http("127.0.0.1", first.http_port());
  for (int i = 0; i < 20; ++i) {
    auto res = http.Get("/healthz");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
  EXPECT_TRUE(first.process()->Alive());
}

TEST_F(CoordinatorOwnershipTest, ASecondCoordinatorOnTheSameDatabaseRefusesToStart) {
  const fs::path db = dir_ / "shared.db";
  Coordinator first(bin_, dir_, db, {});
  std::string error;
  ASSERT_TRUE(first.Start(&error)) << error;
  auto [code, log] = RunToExit(
      {"--bind", "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--db", db.string()},
      "second_db");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("database " + db.string() + " is in use by another coordinator (pid " +
                     std::to_string(first.process()->pid()) + ")"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(db.string() + ".lock"), std::string::npos) << log;

  // Once the first is gone (even by SIGKILL: the kernel drops the lock), the next starts.
  first.Kill();
  Coordinator next(bin_, dir_, db, {});
  ASSERT_TRUE(next.Start(&error)) << error;
  EXPECT_TRUE(next.process()->Alive());
}

TEST_F(CoordinatorOwnershipTest, WithoutAClientTokenItListensOnLoopbackUnlessBindIsGiven) {
  const fs::path ports = dir_ / "ports";
  // No --bind, no token: 127.0.0.1, no warning.
  {
    Process p({(bin_ / "paratune-coordinator").string(), "--grpc-port", "0", "--http-port", "0",
               "--db", (dir_ / "a.db").string(), "--port-file", ports.string()},
              dir_ / "a.log");
    ASSERT_TRUE(PollUntil([&] { return !ReadFile(ports).empty() || !p.Alive(); }, 30000));
    const std::string log = ReadFile(dir_ / "a.log");
    EXPECT_NE(log.find("gRPC on 127.0.0.1:"), std::string::npos) << log;
    EXPECT_NE(log.find("HTTP on 127.0.0.1:"), std::string::npos) << log;
    EXPECT_EQ(log.find("WARNING"), std::string::npos) << log;
  }
  // --bind 0.0.0.0 without a token: it listens there, and says what that means.
  fs::remove(ports);
  {
    Process p({(bin_ / "paratune-coordinator").string(), "--bind", "0.0.0.0", "--grpc-port", "0",
               "--http-port", "0", "--db", (dir_ / "b.db").string(), "--port-file", ports.string()},
              dir_ / "b.log");
    ASSERT_TRUE(PollUntil([&] { return !ReadFile(ports).empty() || !p.Alive(); }, 30000));
    const std::string log = ReadFile(dir_ / "b.log");
    EXPECT_NE(log.find("gRPC on 0.0.0.0:"), std::string::npos) << log;
    EXPECT_NE(log.find("WARNING: listening on 0.0.0.0 without --client-token-file: anyone who "
                       "can reach this address can submit and cancel jobs"),
              std::string::npos)
        << log;
  }
  // A client token and no --bind: every interface, no warning.
  fs::remove(ports);
  std::ofstream(dir_ / "client.token") << "0123456789abcdef0123456789abcdef\n";
  {
    Process p({(bin_ / "paratune-coordinator").string(), "--grpc-port", "0", "--http-port", "0",
               "--db", (dir_ / "c.db").string(), "--port-file", ports.string(),
               "--client-token-file", (dir_ / "client.token").string()},
              dir_ / "c.log");
    ASSERT_TRUE(PollUntil([&] { return !ReadFile(ports).empty() || !p.Alive(); }, 30000));
    const std::string log = ReadFile(dir_ / "c.log");
    EXPECT_NE(log.find("gRPC on 0.0.0.0:"), std::string::npos) << log;
    EXPECT_EQ(log.find("WARNING"), std::string::npos) << log;
  }
}

TEST_F(CoordinatorOwnershipTest, AThreeMegabyteNameIsRefusedAndListJobsStaysSmall) {
  Coordinator c(bin_, dir_, dir_ / "db.sqlite", {});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  auto stub =
      v1::Autotuner::NewStub(grpc::CreateChannel(c.address(), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  spec->set_name(std::string(3 << 20, 'n'));
  spec->mutable_model()->set_num_layers(4);
  spec->mutable_model()->set_hidden_size(64);
  spec->mutable_model()->set_num_attention_heads(4);
  spec->mutable_model()->set_vocab_size(256);
  spec->mutable_cluster()->set_gpu("a100-80gb");
  spec->mutable_cluster()->set_num_gpus(8);
  spec->mutable_training()->set_seq_length(64);
  spec->mutable_training()->set_global_batch_size(8);
  v1::Job job;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = stub->SubmitJob(&ctx, request, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(s.error_message(), "name is 3145728 bytes; the limit is 256 bytes");
  }
  // The same over REST.
  httplib::Client http("127.0.0.1", c.http_port());
  const std::string body =
      "{\"name\": \"" + std::string(300, 'n') +
      "\", \"model\": {\"num_layers\": 4, \"hidden_size\": 64, \"num_attention_heads\": 4, "
      "\"vocab_size\": 256}, \"cluster\": {\"gpu\": \"a100-80gb\", \"num_gpus\": 8}, "
      "\"training\": {\"seq_length\": 64, \"global_batch_size\": 8}}";
  auto res = http.Post("/v1/jobs", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(res->body.find("name is 300 bytes; the limit is 256 bytes"), std::string::npos)
      << res->body;

  // Nothing was stored; the valid job at the bound is.
  spec->set_name(std::string(256, 'n'));
  {
    grpc::ClientContext ctx;
    const grpc::Status s = stub->SubmitJob(&ctx, request, &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).name().size(), 256u);

  // The ListJobs request bounds: page_size, an unknown state; an empty id.
  for (const auto& [page_size, state, expect] : std::vector<std::tuple<int, int, std::string>>{
           {101, 0, "page_size (101) must be between 0 and 100 (0 = 100)"},
           {0, 99, "state (99) is not a JobState"}}) {
    grpc::ClientContext lctx;
    v1::ListJobsRequest lreq;
    lreq.set_page_size(page_size);
    lreq.set_state(static_cast<v1::JobState>(state));
    const grpc::Status s = stub->ListJobs(&lctx, lreq, &list);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find(expect), std::string::npos) << s.error_message();
  }
  grpc::ClientContext gctx;
  const grpc::Status s = stub->GetJob(&gctx, v1::GetJobRequest(), &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(), "id is empty; a job id is required");
}

}  // namespace
}  // namespace paratune::e2e
