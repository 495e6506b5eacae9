// RestGateway over real HTTP on 127.0.0.1, against a fake AutotunerHandler.
#include "server/rest_gateway.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "search/device_catalog.h"
#include "search/exporters.h"
#include "search/planner.h"
#include "search/presets.h"
#include "search/spec_io.h"
#include "server/auth.h"
#include "server/convert.h"
#include "server/http_status.h"
#include "server/metrics.h"

namespace paratune::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// In-memory jobs; `forced_error` makes GetJob fail with a given status.
class FakeAutotuner : public AutotunerHandler {
 public:
  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request) override {
    if (request.spec().name() == "refused") {
      return absl::ResourceExhaustedError("too many jobs queued (refused)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    v1::Job job;
    job.set_id("job-" + std::to_string(++next_id_));
    job.set_name(request.spec().name());
    job.set_state(v1::JOB_STATE_PENDING);
    *job.mutable_spec() = request.spec();
    jobs_[job.id()] = job;
    last_submit_ = request;
    return job;
  }
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (forced_error_) return *forced_error_;
    auto it = jobs_.find(request.id());
    if (it == jobs_.end()) return absl::NotFoundError("job '" + request.id() + "' not found");
    return it->second;
  }
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_list_ = request;
    v1::ListJobsResponse response;
    for (const auto& [id, job] : jobs_) {
      if (request.state() != v1::JOB_STATE_UNSPECIFIED && job.state() != request.state()) continue;
      if (request.page_size() > 0 && response.jobs_size() == request.page_size()) {
        response.set_next_page_token(id);
        break;
      }
      *response.add_jobs() = job;
    }
    return response;
  }
  absl::Status WatchJob(const v1::WatchJobRequest&,
                        const std::function<bool(const v1::Job&)>&) override {
    return absl::UnimplementedError("not used by REST");
  }
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(request.id());
    if (it == jobs_.end()) return absl::NotFoundError("job '" + request.id() + "' not found");
    if (it->second.state() == v1::JOB_STATE_SUCCEEDED) {
      return absl::FailedPreconditionError("job '" + request.id() + "' already succeeded");
    }
    it->second.set_state(v1::JOB_STATE_CANCELLED);
    return it->second;
  }
  absl::StatusOr<v1::JobResults> GetResults(const v1::GetResultsRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(request.id());
    if (it == jobs_.end()) return absl::NotFoundError("job '" + request.id() + "' not found");
    v1::JobResults results;
    results.set_job_id(request.id());
    results.set_state(it->second.state());
    if (auto plan = plans_.find(request.id()); plan != plans_.end()) {
      *results.mutable_plan() = plan->second;
    }
    return results;
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(const v1::ListWorkersRequest&) override {
    v1::ListWorkersResponse response;
    v1::WorkerInfo* w = response.add_workers();
    w->set_id("w1");
    w->set_device_kind("h100-sxm-80gb");
    w->set_memory_bytes(85899345920);  // 80 GiB: above 2^32, must survive as a JSON string
    w->set_state("idle");
    return response;
  }

  void SetState(const std::string& id, v1::JobState state) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[id].set_state(state);
  }
  void SetPlan(const std::string& id, v1::PlanResult plan) {
    std::lock_guard<std::mutex> lock(mu_);
    plans_[id] = std::move(plan);
  }
  void ForceError(std::optional<absl::Status> status) {
    std::lock_guard<std::mutex> lock(mu_);
    forced_error_ = std::move(status);
  }
  v1::SubmitJobRequest last_submit() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_submit_;
  }
  v1::ListJobsRequest last_list() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_list_;
  }

 private:
  std::mutex mu_;
  int next_id_ = 0;
  std::map<std::string, v1::Job> jobs_;
  std::map<std::string, v1::PlanResult> plans_;
  std::optional<absl::Status> forced_error_;
  v1::SubmitJobRequest last_submit_;
  v1::ListJobsRequest last_list_;
};

constexpr char kSpec[] =
    R"({"name": "gpt3", "model": {"preset": "gpt3-175b"},
        "training": {"seq_length": 2048, "global_batch_size": 1536},
        "cluster": {"gpu": "a100-80gb", "num_gpus": 1024, "gpus_per_node": 8}})";

class RestGatewayTest : public ::testing::Test {
 protected:
  void StartGateway(const Authenticator* auth = nullptr, RestGatewayOptions options = {}) {
    options.threads = 4;
    gateway_ = std::make_unique<RestGateway>(&fake_, auth, &metrics_, options);
    absl::StatusOr<int> port = gateway_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    if (gateway_) gateway_->Stop();
  }

  static json Body(const httplib::Result& res) { return json::parse(res->body); }

  FakeAutotuner fake_;
  Metrics metrics_;
  std::unique_ptr<RestGateway> gateway_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

// Stop() right after Start() returns: the listener thread may not have reached accept()
// yet, and httplib's stop() does nothing before it does. Every cycle must end (a hang here
// is the failure) and the gateway serves between Start and Stop.
TEST_F(RestGatewayTest, StopRightAfterStartEndsTheListener) {
  for (int i = 0; i < 50; ++i) {
    RestGateway gateway(&fake_, nullptr, &metrics_);
    absl::StatusOr<int> port = gateway.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    if (i == 0) {
      httplib::Client client("127.0.0.1", *port);
      client.set_read_timeout(10, 0);
      httplib::Result res = client.Get("/healthz");
      ASSERT_TRUE(res) << httplib::to_string(res.error());
      EXPECT_EQ(res->status, 200);
    }
    gateway.Stop();
  }
}

TEST_F(RestGatewayTest, SubmitRoundTripsSnakeCaseJson) {
  StartGateway();
  auto res = client_->Post("/v1/jobs", std::string(R"({"spec": )") + kSpec + "}",
                           "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8");
  json job = Body(res);
  EXPECT_EQ(job["id"], "job-1");
  EXPECT_EQ(job["state"], "JOB_STATE_PENDING");
  // proto field names, not lowerCamelCase; int64 as a string (proto3 JSON mapping).
  EXPECT_EQ(job["spec"]["cluster"]["gpus_per_node"], "8");
  EXPECT_EQ(job["spec"]["training"]["global_batch_size"], "1536");
  EXPECT_FALSE(job["spec"]["cluster"].contains("gpusPerNode"));
  // Default-valued fields are printed too.
  EXPECT_EQ(job["error"], "");
  EXPECT_EQ(fake_.last_submit().spec().cluster().num_gpus(), 1024);
  // The handler gets the spec as the CLI's reader resolves it: the preset's architecture
  // written out (GPT-3 175B: 96 layers, hidden 12288, 96 heads).
  EXPECT_EQ(fake_.last_submit().spec().model().preset(), "");
  EXPECT_EQ(fake_.last_submit().spec().model().name(), "gpt3-175b");
  EXPECT_EQ(fake_.last_submit().spec().model().num_layers(), 96);
  EXPECT_EQ(fake_.last_submit().spec().model().hidden_size(), 12288);
  EXPECT_EQ(job["spec"]["model"]["num_attention_heads"], "96");
}

TEST_F(RestGatewayTest, SubmitAcceptsBareJobSpec) {
  StartGateway();
  auto res = client_->Post("/v1/jobs", kSpec, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(fake_.last_submit().spec().training().seq_length(), 2048);
  EXPECT_EQ(fake_.last_submit().spec().name(), "gpt3");
}

TEST_F(RestGatewayTest, UnknownFieldIsRejectedNamingIt) {
  StartGateway();
  json spec = json::parse(kSpec);
  spec["cluster"]["num_gpu"] = 8;
  auto res = client_->Post("/v1/jobs", json{{"spec", spec}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  json error = Body(res);
  EXPECT_EQ(error["code"], 400);
  EXPECT_EQ(error["status"], "INVALID_ARGUMENT");
  EXPECT_NE(error["message"].get<std::string>().find("'cluster.num_gpu'"), std::string::npos)
      << error["message"];

  res = client_->Post("/v1/jobs", "{not json", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(Body(res)["message"].get<std::string>().find("not valid JSON"), std::string::npos);
}

TEST_F(RestGatewayTest, HandlerErrorsMapToHttpStatuses) {
  StartGateway();
  // The handler's own errors pass through with their message.
  json refused = json::parse(kSpec);
  refused["name"] = "refused";
  auto res = client_->Post("/v1/jobs", refused.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(Body(res)["message"], "too many jobs queued (refused)");

  res = client_->Get("/v1/jobs/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(Body(res), json({{"code", 404},
                             {"status", "NOT_FOUND"},
                             {"message", "job 'nope' not found"}}));

  const std::pair<absl::StatusCode, int> cases[] = {
      {absl::StatusCode::kInvalidArgument, 400},  {absl::StatusCode::kUnauthenticated, 401},
      {absl::StatusCode::kPermissionDenied, 403}, {absl::StatusCode::kNotFound, 404},
      {absl::StatusCode::kFailedPrecondition, 409}, {absl::StatusCode::kResourceExhausted, 429},
      {absl::StatusCode::kInternal, 500},         {absl::StatusCode::kUnavailable, 503},
      {absl::StatusCode::kDataLoss, 500},
  };
  for (const auto& [code, http] : cases) {
    fake_.ForceError(absl::Status(code, "forced"));
    res = client_->Get("/v1/jobs/any");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, http) << absl::StatusCodeToString(code);
    EXPECT_EQ(Body(res)["status"], absl::StatusCodeToString(code));
    EXPECT_EQ(Body(res)["code"], http);
  }
}

TEST_F(RestGatewayTest, GetCancelResultsAndWorkers) {
  StartGateway();
  ASSERT_EQ(client_->Post("/v1/jobs", kSpec, "application/json")->status, 200);
  ASSERT_EQ(client_->Post("/v1/jobs", kSpec, "application/json")->status, 200);

  auto res = client_->Get("/v1/jobs/job-1");
  ASSERT_TRUE(res);
  EXPECT_EQ(Body(res)["spec"]["cluster"]["num_gpus"], "1024");

  res = client_->Post("/v1/jobs/job-1:cancel", "", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Body(res)["state"], "JOB_STATE_CANCELLED");

  fake_.SetState("job-2", v1::JOB_STATE_SUCCEEDED);
  res = client_->Post("/v1/jobs/job-2:cancel", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_EQ(Body(res)["status"], "FAILED_PRECONDITION");

  res = client_->Post("/v1/jobs/job-2:cancel", R"({"id": "job-1"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);

  res = client_->Get("/v1/jobs/job-2/results");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(Body(res)["job_id"], "job-2");
  EXPECT_EQ(Body(res)["state"], "JOB_STATE_SUCCEEDED");

  res = client_->Get("/v1/workers");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(Body(res)["workers"][0]["memory_bytes"], "85899345920");
  EXPECT_EQ(Body(res)["workers"][0]["device_kind"], "h100-sxm-80gb");
}

TEST_F(RestGatewayTest, ListJobsQueryParameters) {
  StartGateway();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(client_->Post("/v1/jobs", kSpec, "application/json")->status, 200);
  }
  fake_.SetState("job-2", v1::JOB_STATE_SUCCEEDED);
  fake_.SetState("job-3", v1::JOB_STATE_SUCCEEDED);

  auto res = client_->Get("/v1/jobs?page_size=1&state=succeeded&page_token=abc");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(fake_.last_list().page_size(), 1);
  EXPECT_EQ(fake_.last_list().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(fake_.last_list().page_token(), "abc");
  EXPECT_EQ(Body(res)["jobs"].size(), 1u);
  EXPECT_EQ(Body(res)["jobs"][0]["id"], "job-2");
  EXPECT_EQ(Body(res)["next_page_token"], "job-3");

  res = client_->Get("/v1/jobs?state=JOB_STATE_PENDING");
  ASSERT_TRUE(res);
  EXPECT_EQ(Body(res)["jobs"].size(), 1u);

  res = client_->Get("/v1/jobs?page_size=-1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(Body(res)["message"].get<std::string>().find("page_size"), std::string::npos);

  res = client_->Get("/v1/jobs?state=sleeping");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);

  res = client_->Get("/v1/jobs?pagesize=3");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(Body(res)["message"].get<std::string>().find("'pagesize'"), std::string::npos);
}

TEST_F(RestGatewayTest, OversizedBodyGets413) {
  RestGatewayOptions options;
  options.max_body_bytes = 1 << 20;
  StartGateway(nullptr, options);
  // Exactly at the limit is read (and then rejected as JSON); one byte over is 413.
  std::string at_limit(1 << 20, ' ');
  auto res = client_->Post("/v1/jobs", at_limit, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);

  std::string over((1 << 20) + 1, ' ');
  res = client_->Post("/v1/jobs", over, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(Body(res)["code"], 413);
  EXPECT_EQ(Body(res)["status"], "RESOURCE_EXHAUSTED");
}

TEST_F(RestGatewayTest, UnknownRoutesAre404Json) {
  StartGateway();
  for (const char* path : {"/v1/nope", "/v1/jobs/a/b/c", "/v1/jobs/x:explode", "/"}) {
    auto res = client_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(Body(res)["status"], "NOT_FOUND") << path;
  }
  auto res = client_->Delete("/v1/jobs/job-1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(Body(res)["code"], 404);
}

TEST_F(RestGatewayTest, HealthzAndOpenApiDocumentListsEveryRoute) {
  StartGateway();
  auto res = client_->Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(Body(res)["status"], "ok");

  res = client_->Get("/openapi.json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  json doc = Body(res);
  EXPECT_EQ(doc["openapi"].get<std::string>().substr(0, 2), "3.");
  const std::pair<const char*, const char*> routes[] = {
      {"/v1/jobs", "post"},          {"/v1/jobs", "get"},
      {"/v1/jobs/{id}", "get"},      {"/v1/jobs/{id}/results", "get"},
      {"/v1/jobs/{id}:cancel", "post"}, {"/v1/workers", "get"},
      {"/v1/jobs/{id}/results/{rank}:export", "get"}, {"/v1/catalog", "get"},
      {"/healthz", "get"},           {"/metrics", "get"},
      {"/openapi.json", "get"},
  };
  for (const auto& [path, method] : routes) {
    EXPECT_TRUE(doc["paths"].contains(path) && doc["paths"][path].contains(method))
        << method << " " << path;
  }
  // Every $ref points at a schema that exists.
  std::function<void(const json&)> check_refs = [&](const json& node) {
    if (node.is_object()) {
      for (const auto& [key, value] : node.items()) {
        if (key == "$ref") {
          const std::string ref = value.get<std::string>();
          ASSERT_EQ(ref.rfind("#/components/schemas/", 0), 0u) << ref;
          EXPECT_TRUE(doc["components"]["schemas"].contains(ref.substr(21))) << ref;
        } else {
          check_refs(value);
        }
      }
    } else if (node.is_array()) {
      for (const auto& v : node) check_refs(v);
    }
  };
  check_refs(doc);
}

TEST_F(RestGatewayTest, BearerTokensGuardTheApiOnly) {
  absl::StatusOr<Authenticator> auth = Authenticator::FromTokens("client-secret", "worker-secret");
  ASSERT_TRUE(auth.ok());
  StartGateway(&*auth);

  auto res = client_->Get("/v1/workers");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(Body(res)["status"], "UNAUTHENTICATED");

  res = client_->Get("/v1/workers", {{"Authorization", "Bearer worker-secret"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(res->body.find("secret"), std::string::npos) << "token leaked: " << res->body;

  res = client_->Get("/v1/workers", {{"Authorization", "Bearer client-secret"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  // An unauthenticated POST with a body leaves the connection usable (keep-alive).
  httplib::Client keep_alive("127.0.0.1", port_);
  keep_alive.set_keep_alive(true);
  res = keep_alive.Post("/v1/jobs", kSpec, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = keep_alive.Get("/v1/workers", {{"Authorization", "Bearer client-secret"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  for (const char* open : {"/healthz", "/metrics", "/openapi.json"}) {
    res = client_->Get(open);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << open;
  }
}

TEST_F(RestGatewayTest, MetricsCountRequestsByMethodAndCode) {
  StartGateway();
  ASSERT_EQ(client_->Post("/v1/jobs", kSpec, "application/json")->status, 200);
  ASSERT_EQ(client_->Post("/v1/jobs", kSpec, "application/json")->status, 200);
  ASSERT_EQ(client_->Get("/v1/jobs/missing")->status, 404);
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = res->body;
  EXPECT_NE(text.find(R"(paratune_requests_total{code="OK",method="SubmitJob",transport="rest"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(R"(paratune_requests_total{code="NOT_FOUND",method="GetJob",transport="rest"} 1)"),
      std::string::npos);
  EXPECT_NE(
      text.find(R"(paratune_rpc_latency_seconds_count{method="SubmitJob",transport="rest"} 2)"),
      std::string::npos);
}

// httplib's compiled-in listen backlog is 5; the gateway raises it to SOMAXCONN so a burst
// of new connections (32 load clients, a browser opening 6) is not delayed by SYN retries.
TEST_F(RestGatewayTest, ListenBacklogIsRaised) {
  StartGateway();
  const std::string out = ::testing::TempDir() + "paratune_ss_" + std::to_string(::getpid());
  const std::string command =
      "ss -Hltn 'sport = :" + std::to_string(port_) + "' > " + out + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "ss (iproute2) is not available";
  std::ifstream in(out);
  std::string state;
  long recv_q = -1, send_q = -1;  // for a listening socket, Send-Q is the backlog
  in >> state >> recv_q >> send_q;
  std::remove(out.c_str());
  // The kernel caps the backlog at net.core.somaxconn.
  long kernel_max = SOMAXCONN;
  std::ifstream("/proc/sys/net/core/somaxconn") >> kernel_max;
  EXPECT_EQ(state, "LISTEN");
  EXPECT_EQ(send_q, std::min<long>(SOMAXCONN, kernel_max));
  EXPECT_GT(send_q, 5);
}

TEST_F(RestGatewayTest, BusyKeepAliveConnectionsDoNotStarveANewOne) {
  StartGateway();  // 4 threads.
  // As many keep-alive clients as threads, each polling every 50 ms (the load bench's REST
  // followers poll every 100 ms). A connection ends after 32 requests (1.6 s here) or 2 idle
  // seconds, so a new connection gets a thread within about that; with a limit of 1000
  // requests per connection it would wait ~50 s.
  constexpr int kClients = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0};
  std::vector<std::thread> pollers;
  for (int i = 0; i < kClients; ++i) {
    pollers.emplace_back([&] {
      httplib::Client c("127.0.0.1", port_);
      c.set_keep_alive(true);
      while (!stop) {
        if (auto r = c.Get("/healthz"); r && r->status == 200) ++polls;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  while (polls < 2 * kClients) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  httplib::Client fresh("127.0.0.1", port_);
  fresh.set_read_timeout(30, 0);
  fresh.set_connection_timeout(30, 0);
  const auto start = std::chrono::steady_clock::now();
  httplib::Result res = fresh.Get("/healthz");
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop = true;
  for (std::thread& t : pollers) t.join();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  // ~1.6 s expected on an idle machine. On a loaded one each poll takes longer, so the 32
  // requests of a busy connection last longer too (5 s was within reach); the bound leaves
  // that room and is still far from the ~50 s of a connection that is never ended.
  EXPECT_LT(waited_s, 20.0);
}

class DashboardTest : public RestGatewayTest {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("paratune_dash_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_ / "www" / "assets");
    Write(base_ / "www" / "index.html", "<!doctype html><title>ParaTune</title>");
    Write(base_ / "www" / "app.js", "console.log(1);");
    Write(base_ / "www" / "assets" / "style.css", "body{}");
    Write(base_ / "secret.txt", "TOP SECRET");
    fs::create_symlink(base_ / "secret.txt", base_ / "www" / "leak.txt");
    RestGatewayOptions options;
    options.dashboard_dir = (base_ / "www").string();
    StartGateway(nullptr, options);
  }
  void TearDown() override {
    RestGatewayTest::TearDown();
    fs::remove_all(base_);
  }
  static void Write(const fs::path& path, const std::string& content) {
    std::ofstream(path) << content;
  }
  fs::path base_;
};

TEST_F(DashboardTest, ServesFilesWithContentTypesAndSpaFallback) {
  auto res = client_->Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "<!doctype html><title>ParaTune</title>");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");

  res = client_->Get("/app.js");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "console.log(1);");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/javascript; charset=utf-8");

  res = client_->Get("/assets/style.css");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/css; charset=utf-8");

  // A client-side route: index.html. A missing asset: 404.
  res = client_->Get("/jobs/job-7");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "<!doctype html><title>ParaTune</title>");
  res = client_->Get("/missing.js");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  // The API still wins over the dashboard.
  res = client_->Get("/v1/workers");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("workers"), std::string::npos);
}

TEST_F(DashboardTest, LargeFilesGoOutGzippedAndCachedUntilChanged) {
  std::string script;
  for (int i = 0; i < 4000; ++i) {
    script += "series.push({name: 'layout " + std::to_string(i) + "'});\n";
  }
  Write(base_ / "www" / "big.js", script);

  // What browsers send: gzip is chosen, never br. httplib's client decompresses it.
  const httplib::Headers browser = {{"Accept-Encoding", "gzip, deflate, br"}};
  auto res = client_->Get("/big.js", browser);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, script);
  httplib::Client raw("127.0.0.1", port_);
  raw.set_decompress(false);
  res = raw.Get("/big.js", browser);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(res->get_header_value("Vary"), "Accept-Encoding");
  EXPECT_NE(res->body, script);

  // Without gzip in Accept-Encoding: the bytes as they are.
  res = raw.Get("/big.js", {{"Accept-Encoding", "identity"}});
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->has_header("Content-Encoding"));
  EXPECT_EQ(res->body, script);
  // Compressed bytes really are smaller (repetitive script: well under a quarter).
  res = raw.Get("/big.js", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(res->body.size(), script.size() / 4);

  // Small files and API answers are never compressed.
  res = raw.Get("/app.js", {{"Accept-Encoding", "gzip, br"}});
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->has_header("Content-Encoding"));
  res = raw.Get("/v1/workers", {{"Accept-Encoding", "gzip, br"}});
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->has_header("Content-Encoding"));
  EXPECT_EQ(json::parse(res->body)["workers"][0]["id"], "w1");

  // A new build of the file replaces the cached compression.
  const std::string rebuilt = script + "console.log('rebuilt');\n";
  Write(base_ / "www" / "big.js", rebuilt);
  res = client_->Get("/big.js", browser);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, rebuilt);
}

TEST_F(DashboardTest, TraversalIsBlocked) {
  for (const char* path : {"/../secret.txt", "/assets/../../secret.txt", "/%2e%2e/secret.txt",
                           "/assets/%2E%2E/%2E%2E/secret.txt", "/..%2fsecret.txt",
                           "/leak.txt"}) {
    auto res = client_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->body.find("TOP SECRET"), std::string::npos) << path;
    EXPECT_TRUE(res->status == 400 || res->status == 404) << path << " → " << res->status;
  }
}

// HTTPS with a self-signed certificate made by the openssl CLI (a dependency of the
// ca-certificates package that scripts/install-deps.sh installs).
TEST(RestGatewayTlsTest, ServesHttpsWithTheGivenCertificate) {
  const fs::path dir = fs::temp_directory_path() / ("paratune_tls_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + key + " -out " + cert +
      " >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "the openssl CLI is not available";

  FakeAutotuner fake;
  RestGatewayOptions options;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  options.threads = 2;
  RestGateway gateway(&fake, nullptr, nullptr, options);
  EXPECT_TRUE(gateway.tls());
  absl::StatusOr<int> port = gateway.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();

  httplib::SSLClient https("127.0.0.1", *port);
  https.set_ca_cert_path(cert.c_str());
  https.enable_server_certificate_verification(true);
  auto res = https.Get("/v1/workers");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["workers"][0]["id"], "w1");

  // Plain HTTP to the TLS port gets no HTTP answer.
  httplib::Client plain("127.0.0.1", *port);
  plain.set_read_timeout(2, 0);
  auto plain_res = plain.Get("/healthz");
  EXPECT_TRUE(!plain_res || plain_res->status != 200);
  gateway.Stop();

  // Only one of the two files: rejected before binding.
  RestGatewayOptions half;
  half.tls_cert_file = cert;
  RestGateway bad(&fake, nullptr, nullptr, half);
  EXPECT_EQ(bad.Start("127.0.0.1", 0).status().code(), absl::StatusCode::kInvalidArgument);
  // Unreadable files: InvalidArgument naming them.
  RestGatewayOptions missing;
  missing.tls_cert_file = (dir / "nope.pem").string();
  missing.tls_key_file = key;
  RestGateway bad2(&fake, nullptr, nullptr, missing);
  absl::Status s = bad2.Start("127.0.0.1", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("nope.pem"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

// --- Specs: one strict reader for every transport. REST refuses what the CLI refuses
// (JobSpecFromJson, which `paratune plan` runs on a spec file), with the same message.

// The REST dialect: the proto JSON mapping with proto field names, every field printed.
std::string ToJsonForTest(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(message, &out, options).ok());
  return out;
}

std::string CliMessage(const json& spec) {
  absl::StatusOr<JobSpec> read = JobSpecFromJson(spec);
  return read.ok() ? "" : std::string(read.status().message());
}

TEST_F(RestGatewayTest, SpecsGetTheCliReadersMessagesNamingTheField) {
  StartGateway();
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* field;
  };
  const Case cases[] = {
      {"a string for a bool", [](json& s) { s["training"]["flash_attention"] = "yes"; },
       "training.flash_attention"},
      {"a misspelt field", [](json& s) { s["training"]["seq_lenght"] = 2048; },
       "training.seq_lenght"},
      {"a fraction for an integer", [](json& s) { s["cluster"]["num_gpus"] = 8.5; },
       "cluster.num_gpus"},
      {"an unknown precision", [](json& s) { s["training"]["precision"] = "fp4"; },
       "training.precision"},
      {"an unknown device", [](json& s) { s["cluster"]["gpu"] = "z100"; }, "cluster.gpu"},
      {"a zero in a search list", [](json& s) { s["search"]["tp"] = json::array({0}); },
       "search.tp"},
      {"a missing section", [](json& s) { s.erase("training"); }, "training"},
      {"a model field of the wrong type", [](json& s) { s["model"]["hidden_size"] = "wide"; },
       "model.hidden_size"},
      {"a file path in model.hf_config (only the CLI reads files)",
       [](json& s) { s["model"] = {{"hf_config", "/etc/passwd"}}; }, "model.hf_config"},
  };
  for (const Case& c : cases) {
    json spec = json::parse(kSpec);
    c.mutate(spec);
    const std::string expected = CliMessage(spec);
    ASSERT_FALSE(expected.empty()) << c.what << ": the CLI reader accepts it";
    EXPECT_NE(expected.find(c.field), std::string::npos) << c.what << ": " << expected;
    for (const json& body : {json{{"spec", spec}}, spec}) {
      auto res = client_->Post("/v1/jobs", body.dump(), "application/json");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 400) << c.what;
      EXPECT_EQ(Body(res)["status"], "INVALID_ARGUMENT") << c.what;
      EXPECT_EQ(Body(res)["message"], expected) << c.what;
    }
  }
  // The misspelling gets the CLI's suggestion.
  json misspelt = json::parse(kSpec);
  misspelt["training"]["seq_lenght"] = 2048;
  EXPECT_NE(CliMessage(misspelt).find("did you mean 'training.seq_length'"), std::string::npos)
      << CliMessage(misspelt);
  EXPECT_EQ(fake_.last_submit().spec().name(), "") << "a refused spec reached the handler";
}

// What the CLI's reader accepts, REST accepts too, in the same forms: a scalar for a
// search list, int64 as a decimal string, a Hugging Face config as a parsed object.
TEST_F(RestGatewayTest, SpecsInTheCliReadersFormsAreAccepted) {
  StartGateway();
  json spec = json::parse(kSpec);
  spec["search"] = {{"tp", 8}, {"pp", "4"}};
  spec["model"] = {{"hf_config",
                    {{"model_type", "llama"}, {"num_hidden_layers", 32}, {"hidden_size", 4096},
                     {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                     {"intermediate_size", 14336}, {"vocab_size", 128256},
                     {"hidden_act", "silu"}, {"tie_word_embeddings", false}}}};
  auto res = client_->Post("/v1/jobs", json{{"spec", spec}}.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const v1::JobSpec sent = fake_.last_submit().spec();
  ASSERT_EQ(sent.search().tp_size(), 1);
  EXPECT_EQ(sent.search().tp(0), 8);
  ASSERT_EQ(sent.search().pp_size(), 1);
  EXPECT_EQ(sent.search().pp(0), 4);
  EXPECT_EQ(sent.model().num_layers(), 32);
  EXPECT_EQ(sent.model().num_query_groups(), 8);
  EXPECT_EQ(sent.model().ffn_hidden_size(), 14336);
}

TEST_F(RestGatewayTest, DuplicateKeysNestingAndNonJsonBodiesAreRefused) {
  StartGateway();
  const std::string twice =
      R"({"spec": {"model": {"preset": "gpt3-175b"},
          "training": {"seq_length": 2048, "global_batch_size": 1536, "seq_length": 4096},
          "cluster": {"gpu": "a100-80gb", "num_gpus": 1024}}})";
  auto res = client_->Post("/v1/jobs", twice, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Body(res)["message"],
            "request body: the key 'spec.training.seq_length' appears twice (each key may "
            "appear once); expected a SubmitJobRequest {\"spec\": {...}} or a JobSpec");

  const std::string garbage("\xff\xfe\x00\x01garbage\x80", 13);
  res = client_->Post("/v1/jobs", garbage, "application/octet-stream");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Body(res)["status"], "INVALID_ARGUMENT");
  EXPECT_EQ(Body(res)["message"].get<std::string>().rfind("request body: not valid JSON: ", 0),
            0u)
      << Body(res)["message"];

  res = client_->Post("/v1/jobs", "[1, 2]", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(Body(res)["message"].get<std::string>().find("must be a JSON object"),
            std::string::npos);

  res = client_->Post("/v1/jobs", std::string(100, '[') + std::string(100, ']'),
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(Body(res)["message"].get<std::string>().find("nested deeper than 64 levels"),
            std::string::npos)
      << Body(res)["message"];

  json extra = {{"spec", json::parse(kSpec)}, {"priority", 1}};
  res = client_->Post("/v1/jobs", extra.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Body(res)["message"],
            "unknown field 'priority' (a SubmitJobRequest has only 'spec')");
}

// Sends `request` on a new connection that stays open, and returns what arrives within
// 3 s: the answer must come without the client closing its side.
std::string RawExchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) ::close(fd);
    return "connect failed";
  }
  timeval timeout{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::send(fd, request.data(), request.size(), 0);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    answer.append(buffer, static_cast<size_t>(n));
    const size_t head_end = answer.find("\r\n\r\n");
    const size_t length_at = answer.find("Content-Length: ");
    if (head_end != std::string::npos && length_at != std::string::npos &&
        answer.size() >= head_end + 4 + std::stoul(answer.substr(length_at + 16))) {
      break;
    }
  }
  ::close(fd);
  return answer;
}

TEST_F(RestGatewayTest, CancelTakesNoBodyAndRefusesGarbageWithAMessage) {
  StartGateway();
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(client_->Post("/v1/jobs", kSpec, "application/json")->status, 200);
  }
  // No body and no Content-Length (what `curl -X POST URL` sends), on a connection the
  // client keeps open: the request has no body (RFC 9112 6.3), it is not read until EOF.
  const std::string raw = RawExchange(
      port_, "POST /v1/jobs/job-1:cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(raw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << raw;
  EXPECT_NE(raw.find("\"state\":\"JOB_STATE_CANCELLED\""), std::string::npos) << raw;
  // Content-Length: 0, no content type.
  auto res = client_->Post("/v1/jobs/job-2:cancel");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Body(res)["state"], "JOB_STATE_CANCELLED");
  res = client_->Post("/v1/jobs/job-2:cancel", "\n", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;

  res = client_->Post("/v1/jobs/job-3:cancel", std::string("\x01\xff{", 3), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const std::string message = Body(res)["message"];
  EXPECT_EQ(message.rfind("request body: not valid JSON: ", 0), 0u) << message;
  EXPECT_NE(message.find("expected an empty body, {} or {\"id\": \"<the job id>\"}"),
            std::string::npos)
      << message;

  res = client_->Post("/v1/jobs/job-3:cancel", R"({"reason": "done"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Body(res)["message"], "unknown field 'reason' (a CancelJobRequest has only 'id')");

  res = client_->Post("/v1/jobs/job-3:cancel", R"({"id": 3})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Body(res)["message"], "id must be a string (the job id)");

  res = client_->Post("/v1/jobs/job-4:cancel", R"({"id": "job-4"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

// --- Exports: the coordinator renders a ranked layout as `paratune export` does.

// GPT-3 175B on 1024 A100s pinned to tp 8, pp 4, vp 12 with full recompute of 2 layers
// per stage: Megatron's block method counts per model chunk, so 2 layers over 12 chunks
// round up to 1 per chunk (24 layers per stage; 2 < 24, so not "uniform").
constexpr char kPinnedSpec[] =
    R"({"name": "gpt3-pinned", "model": {"preset": "gpt3-175b"},
        "training": {"seq_length": 2048, "global_batch_size": 1536},
        "cluster": {"gpu": "a100-80gb", "num_gpus": 1024, "gpus_per_node": 8},
        "search": {"tp": [8], "pp": [4], "vp": [12], "cp": [1], "micro_batch_size": [1],
                   "sequence_parallel": [true], "recompute": ["full"],
                   "recompute_num_layers": [2], "distributed_optimizer": [true]}})";

class RestExportTest : public RestGatewayTest {
 protected:
  void SetUp() override {
    StartGateway();
    auto res = client_->Post("/v1/jobs", kPinnedSpec, "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(kPinnedSpec));
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    absl::StatusOr<PlanResult> plan = Plan(spec_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_FALSE(plan->ranked.empty());
    plan_ = *plan;
    fake_.SetPlan("job-1", ToProto(plan_));
    fake_.SetState("job-1", v1::JOB_STATE_SUCCEEDED);
  }
  httplib::Result Export(const std::string& rank, const std::string& query) {
    return client_->Get("/v1/jobs/job-1/results/" + rank + ":export" + query);
  }

  JobSpec spec_;
  PlanResult plan_;
};

TEST_F(RestExportTest, MegatronAndNemoAreTheExportersText) {
  const ParallelConfig& best = plan_.ranked[0].config;
  ASSERT_EQ(best.tp, 8);
  ASSERT_EQ(best.vp, 12);
  auto res = Export("1", "?format=megatron");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_EQ(res->get_header_value("Content-Disposition"),
            "attachment; filename=\"paratune-job-1-rank1-megatron.txt\"");
  EXPECT_EQ(res->body, *FormatMegatronArgs(spec_, best));
  EXPECT_NE(res->body.find("--num-layers-per-virtual-pipeline-stage 2 \\\n"), std::string::npos);
  EXPECT_NE(res->body.find("--recompute-granularity full \\\n--recompute-method block \\\n"
                           "--recompute-num-layers 1 \\\n"),
            std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("# note: recompute_num_layers 2 per stage rounded up to 1 per model "
                           "chunk x 12 chunks\n"),
            std::string::npos)
      << res->body;

  res = Export("1", "?format=nemo");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->body, *NemoConfigOverride(spec_, best));
  EXPECT_NE(res->body.find("  virtual_pipeline_model_parallel_size: 12\n"), std::string::npos);
  EXPECT_NE(res->body.find("  activations_checkpoint_method: block\n"
                           "  activations_checkpoint_num_layers: 1\n"),
            std::string::npos)
      << res->body;

  res = Export("1", "?format=json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Body(res), json::parse(ToJsonForTest(ToProto(plan_.ranked[0]))));
}

// Llama 3.1 405B at pp 8, vp 8: 126 layers split over 64 chunks only with the embedding and
// the loss counted as layers, a flag the stored ranking must carry for the export to say it.
TEST_F(RestGatewayTest, AnUnevenPipelineSplitExportsAsTheCliDoes) {
  StartGateway();
  constexpr char kSpec[] =
      R"({"model": {"preset": "llama3.1-405b"},
          "training": {"seq_length": 8192, "global_batch_size": 2048},
          "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16384, "gpus_per_node": 8},
          "search": {"tp": [8], "pp": [8], "vp": [8], "cp": [1], "micro_batch_size": [1],
                     "sequence_parallel": [true], "recompute": ["none"],
                     "distributed_optimizer": [true]}})";
  auto submitted = client_->Post("/v1/jobs", kSpec, "application/json");
  ASSERT_TRUE(submitted);
  ASSERT_EQ(submitted->status, 200) << submitted->body;
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(kSpec));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<PlanResult> plan = Plan(*spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->ranked.empty());
  const ParallelConfig& best = plan->ranked[0].config;
  ASSERT_TRUE(best.split_counts_embedding_and_loss);
  fake_.SetPlan("job-1", ToProto(*plan));
  fake_.SetState("job-1", v1::JOB_STATE_SUCCEEDED);
  auto res = client_->Get("/v1/jobs/job-1/results/1:export?format=megatron");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->body, *FormatMegatronArgs(*spec, best));
  EXPECT_NE(res->body.find("--account-for-embedding-in-pipeline-split"), std::string::npos);
  res = client_->Get("/v1/jobs/job-1/results/1:export?format=nemo");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->body, *NemoConfigOverride(*spec, best));
}

TEST_F(RestExportTest, BadFormatRankOrJobSayWhich) {
  struct Case {
    std::string rank, query;
    int status;
    std::string message;
  };
  const std::string count = std::to_string(plan_.ranked.size());
  const std::string past = std::to_string(plan_.ranked.size() + 1);
  const Case cases[] = {
      {"1", "?format=yaml", 400,
       "query parameter format must be one of megatron, nemo, deepspeed, torchtitan, "
       "automodel, json, trtllm, vllm, sglang, got 'yaml'"},
      {"1", "", 400,
       "query parameter format is required: one of megatron, nemo, deepspeed, torchtitan, "
       "automodel, json, trtllm, vllm, sglang"},
      {"1", "?format=vllm", 400,
       "format vllm exports serving layouts; job 'job-1' is a training job: use megatron, nemo, "
       "deepspeed, torchtitan, automodel or json"},
      {"1", "?format=nemo&format=json", 400, "query parameter format is given more than once"},
      {"1", "?format=nemo&top=2", 400,
       "unknown query parameter 'top' (an export accepts only format)"},
      {"0", "?format=nemo", 400, "rank '0' must be a positive integer (1 = the best layout)"},
      {"abc", "?format=nemo", 400, "rank 'abc' must be a positive integer (1 = the best layout)"},
      {"", "?format=nemo", 400, "rank '' must be a positive integer (1 = the best layout)"},
      {"-1", "?format=nemo", 400, "rank '-1' must be a positive integer (1 = the best layout)"},
      {past, "?format=megatron", 404,
       "job 'job-1' has " + count + " ranked layout(s); there is no rank " + past},
  };
  for (const Case& c : cases) {
    auto res = Export(c.rank, c.query);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, c.status) << c.rank << c.query;
    EXPECT_EQ(Body(res)["message"], c.message) << c.rank << c.query;
  }
  auto res = client_->Get("/v1/jobs/nope/results/1:export?format=nemo");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(Body(res)["message"], "job 'nope' not found");
}

// --- The catalog: what a spec can name, resolved by the domain's own tables.

TEST(RestCatalogTest, PresetsAndDevicesWithTheirResolvedFieldsWithoutAJobManager) {
  Metrics metrics;
  RestGateway gateway(/*handler=*/nullptr, /*authenticator=*/nullptr, &metrics);
  absl::StatusOr<int> port = gateway.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client client("127.0.0.1", *port);
  auto res = client.Get("/v1/catalog");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json catalog = json::parse(res->body);
  ASSERT_EQ(catalog["presets"].size(), PresetNames().size());
  for (const json& preset : catalog["presets"]) {
    absl::StatusOr<ModelSpec> model = FindPreset(preset["name"]);
    ASSERT_TRUE(model.ok()) << preset["name"];
    EXPECT_EQ(preset["model"]["num_layers"], std::to_string(model->num_layers));
    EXPECT_EQ(preset["model"]["hidden_size"], std::to_string(model->hidden_size));
    EXPECT_EQ(preset["model"]["num_query_groups"], std::to_string(model->num_query_groups));
    EXPECT_EQ(preset["model"]["activation"], ToString(model->activation));
  }
  // Published figures: GPT-3 175B has 96 layers, Llama 3.1 405B 126.
  std::map<std::string, std::string> layers;
  for (const json& p : catalog["presets"]) layers[p["name"]] = p["model"]["num_layers"];
  EXPECT_EQ(layers["gpt3-175b"], "96");
  EXPECT_EQ(layers["llama3.1-405b"], "126");

  ASSERT_EQ(catalog["devices"].size(), DeviceNames().size());
  for (const json& device : catalog["devices"]) {
    absl::StatusOr<DeviceProfile> profile = FindDevice(device["name"]);
    ASSERT_TRUE(profile.ok()) << device["name"];
    EXPECT_EQ(device["memory_bytes"].get<double>(), profile->memory_bytes);
    EXPECT_EQ(device["peak_bf16_tflops"].get<double>(), profile->peak_bf16_tflops);
    EXPECT_EQ(device["num_sms"].get<int>(), profile->num_sms);
    EXPECT_EQ(device["host_memory"].get<bool>(), profile->host_memory);
  }
  for (const json& precision : catalog["precisions"]) {
    EXPECT_TRUE(ParsePrecision(precision.get<std::string>()).ok()) << precision;
  }
  EXPECT_EQ(catalog["precisions"].size(), 6u);
  // Every framework a spec can name, with its default export (none for llm-foundry).
  ASSERT_EQ(catalog["frameworks"].size(), AllFrameworks().size());
  std::map<std::string, std::string> exports;
  for (const json& f : catalog["frameworks"]) {
    EXPECT_TRUE(ParseFramework(f["name"].get<std::string>()).ok()) << f;
    exports[f["name"]] = f["export_format"];
  }
  EXPECT_EQ(exports["nemo-automodel"], "automodel");
  EXPECT_EQ(exports["megatron-deepspeed"], "deepspeed");
  EXPECT_EQ(exports["llm-foundry"], "");

  // The OpenAPI schemas name exactly the keys the catalog carries.
  const json doc = json::parse(OpenApiJson());
  const json& schemas = doc["components"]["schemas"];
  auto keys = [](const json& object) {
    std::set<std::string> out;
    for (const auto& [key, unused] : object.items()) out.insert(key);
    return out;
  };
  EXPECT_EQ(keys(schemas["Catalog"]["properties"]), keys(catalog));
  EXPECT_EQ(keys(schemas["CatalogPreset"]["properties"]), keys(catalog["presets"][0]));
  EXPECT_EQ(keys(schemas["CatalogDevice"]["properties"]), keys(catalog["devices"][0]));
  EXPECT_EQ(keys(schemas["CatalogFramework"]["properties"]), keys(catalog["frameworks"][0]));

  // The job routes need the job manager this gateway does not have.
  res = client.Get("/v1/jobs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  res = client.Get("/v1/catalog?verbose=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  gateway.Stop();
}


// The checked-in schemas name exactly the fields of the messages they describe.
TEST(OpenApiTest, SchemasMatchProtoMessages) {
  const json doc = json::parse(OpenApiJson());
  int messages = 0;
  for (const auto& [name, schema] : doc["components"]["schemas"].items()) {
    const google::protobuf::Descriptor* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
            "paratune.v1." + name);
    if (descriptor == nullptr) continue;  // Error, enums
    ++messages;
    std::set<std::string> fields, properties;
    for (int i = 0; i < descriptor->field_count(); ++i) fields.insert(descriptor->field(i)->name());
    for (const auto& [property, unused] : schema["properties"].items()) properties.insert(property);
    EXPECT_EQ(properties, fields) << name;
    // A repeated field is a JSON array in the proto JSON mapping, a singular one (or a map,
    // an object) is not.
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const auto* field = descriptor->field(i);
      if (!schema["properties"].contains(field->name())) continue;
      const json& property = schema["properties"][field->name()];
      const bool array = property.contains("type") && property["type"] == "array";
      EXPECT_EQ(array, field->is_repeated() && !field->is_map()) << name << "." << field->name();
    }
  }
  EXPECT_GE(messages, 19);
  const google::protobuf::EnumDescriptor* state = v1::JobState_descriptor();
  EXPECT_EQ(doc["components"]["schemas"]["JobState"]["enum"].size(),
            static_cast<size_t>(state->value_count()));
}

TEST(HttpStatusTest, MappingTable) {
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kFailedPrecondition), 409);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFromCode(absl::StatusCode::kUnknown), 500);
  EXPECT_EQ(ErrorJson(absl::NotFoundError("job 'x' not found")),
            R"({"code":404,"message":"job 'x' not found","status":"NOT_FOUND"})");
}

}  // namespace
}  // namespace paratune::server
