// The real paratune-coordinator with token files and TLS: gRPC and REST both demand the
// right token for the right API, health and /healthz stay open, plaintext clients are
// refused, and no token shows up in the coordinator's output.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "paratune/v1/service.grpc.pb.h"

namespace {

namespace fs = std::filesystem;

constexpr char kClientToken[] = "client-6f1d0c2a9b";
constexpr char kWorkerToken[] = "worker-83e7aa41c5";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CoordinatorSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // $PARATUNE_BIN_DIR when set, else the build's bin/ that CMake compiled in.
    const char* bin_dir = std::getenv("PARATUNE_BIN_DIR");
    const fs::path binary =
        fs::path(bin_dir != nullptr ? bin_dir : PARATUNE_DEFAULT_BIN_DIR) / "paratune-coordinator";
    ASSERT_TRUE(fs::exists(binary)) << binary;

    dir_ = fs::temp_directory_path() / ("paratune_sec_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cert_ = (dir_ / "cert.pem").string();
    const std::string key = (dir_ / "key.pem").string();
    const std::string openssl =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
        "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + key + " -out " + cert_ +
        " >/dev/null 2>&1";
    if (std::system(openssl.c_str()) != 0) GTEST_SKIP() << "the openssl CLI is not available";
    std::ofstream(dir_ / "client.token") << kClientToken << "\n";
    std::ofstream(dir_ / "worker.token") << kWorkerToken << "\n";

    const std::string ports = (dir_ / "ports").string();
    log_ = dir_ / "coordinator.log";
    const std::string args[] = {binary.string(),
                                "--bind=127.0.0.1",
                                "--grpc-port=0",
                                "--http-port=0",
                                "--db=" + (dir_ / "db.sqlite").string(),
                                "--port-file=" + ports,
                                "--client-token-file=" + (dir_ / "client.token").string(),
                                "--worker-token-file=" + (dir_ / "worker.token").string(),
                                "--tls-cert=" + cert_,
                                "--tls-key=" + key};
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      std::freopen(log_.c_str(), "w", stdout);
      std::freopen(log_.c_str(), "a", stderr);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Generous for a loaded machine (CI runs tests side by side on two cores).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      std::istringstream in(ReadFile(ports));
      if (in >> grpc_port_ >> http_port_) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "the coordinator did not start:\n" << ReadFile(log_);
  }

  void TearDown() override {
    StopCoordinator();
    fs::remove_all(dir_);
  }

  void StopCoordinator() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
  }

  std::shared_ptr<grpc::Channel> TlsChannel() {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(cert_);
    return grpc::CreateChannel("localhost:" + std::to_string(grpc_port_),
                               grpc::SslCredentials(ssl));
  }

  // Calls that should be answered at once; the deadline only bounds a hang, with room for
  // a TLS handshake on a loaded machine.
  static void Deadline(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  }

  fs::path dir_, log_;
  std::string cert_;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

TEST_F(CoordinatorSecurityTest, GrpcNeedsTheRightTokenForEachService) {
  auto channel = TlsChannel();
  auto autotuner = paratune::v1::Autotuner::NewStub(channel);
  auto hub = paratune::v1::WorkerHub::NewStub(channel);

  const auto list_jobs = [&](const std::string& token) {
    grpc::ClientContext context;
    Deadline(&context);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    paratune::v1::ListJobsResponse response;
    return autotuner->ListJobs(&context, paratune::v1::ListJobsRequest(), &response).error_code();
  };
  EXPECT_EQ(list_jobs(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list_jobs("wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list_jobs(kWorkerToken), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(list_jobs(kClientToken), grpc::StatusCode::OK);

  const auto heartbeat = [&](const std::string& token) {
    grpc::ClientContext context;
    Deadline(&context);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    paratune::v1::HeartbeatRequest request;
    request.set_worker_id("nobody");
    paratune::v1::HeartbeatResponse response;
    return hub->Heartbeat(&context, request, &response).error_code();
  };
  EXPECT_EQ(heartbeat(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(heartbeat(kClientToken), grpc::StatusCode::PERMISSION_DENIED);
  const grpc::StatusCode worker_code = heartbeat(kWorkerToken);
  EXPECT_NE(worker_code, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(worker_code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(worker_code, grpc::StatusCode::UNAVAILABLE);

  // A plaintext client cannot talk to the TLS port.
  auto plain = paratune::v1::Autotuner::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  context.AddMetadata("authorization", std::string("Bearer ") + kClientToken);
  paratune::v1::ListJobsResponse response;
  EXPECT_NE(plain->ListJobs(&context, paratune::v1::ListJobsRequest(), &response).error_code(),
            grpc::StatusCode::OK);
}

TEST_F(CoordinatorSecurityTest, RestNeedsTheClientTokenOverHttps) {
  httplib::SSLClient https("localhost", http_port_);
  https.set_read_timeout(60, 0);  // httplib's 5 s: too short on a loaded machine
  https.set_ca_cert_path(cert_.c_str());
  https.enable_server_certificate_verification(true);

  auto res = https.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);

  res = https.Get("/v1/jobs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(nlohmann::json::parse(res->body)["status"], "UNAUTHENTICATED");

  res = https.Get("/v1/jobs", {{"Authorization", std::string("Bearer ") + kWorkerToken}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);

  res = https.Get("/v1/jobs", {{"Authorization", std::string("Bearer ") + kClientToken}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(nlohmann::json::parse(res->body).contains("jobs")) << res->body;

  // The metrics count the refusals by code.
  res = https.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find(
                R"(paratune_requests_total{code="UNAUTHENTICATED",method="ListJobs",transport="rest"} 1)"),
            std::string::npos)
      << res->body;
}

TEST_F(CoordinatorSecurityTest, TokensNeverReachTheLog) {
  // Exercise both transports with good and bad tokens, then read everything it printed.
  auto autotuner = paratune::v1::Autotuner::NewStub(TlsChannel());
  for (const char* token : {kClientToken, kWorkerToken}) {
    grpc::ClientContext context;
    Deadline(&context);
    context.AddMetadata("authorization", std::string("Bearer ") + token);
    paratune::v1::ListJobsResponse response;
    autotuner->ListJobs(&context, paratune::v1::ListJobsRequest(), &response);
  }
  httplib::SSLClient https("localhost", http_port_);
  https.set_read_timeout(60, 0);  // httplib's 5 s: too short on a loaded machine
  https.set_ca_cert_path(cert_.c_str());
  https.Get("/v1/jobs", {{"Authorization", std::string("Bearer ") + kWorkerToken}});
  StopCoordinator();
  const std::string log = ReadFile(log_);
  EXPECT_FALSE(log.empty());
  EXPECT_EQ(log.find(kClientToken), std::string::npos) << log;
  EXPECT_EQ(log.find(kWorkerToken), std::string::npos) << log;
}

}  // namespace
