// Bad input against the real coordinator and CLI: every case of tests/data/bad_specs/
// (manifest.tsv) is refused with INVALID_ARGUMENT over REST (HTTP 400) and gRPC, and by
// `paratune plan --spec FILE` (exit 2), each time with a message naming the field the
// manifest gives; a 10 MB body, deeply nested input and repeated rounds leave the server
// up with its resident memory within a stated bound.
#include <httplib.h>

#include <map>
#include <string>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "paratune/v1/service.grpc.pb.h"
#include "tests/e2e/fault_harness.h"

namespace paratune::e2e {
namespace {

using nlohmann::json;

struct Case {
  std::string file;        // relative to tests/data/bad_specs/
  std::string transports;  // r, g, p
  std::string expect;      // substring of the message: the field it names
};

/// True when `message` contains one of the '|'-separated alternatives of `expect`.
bool Names(const std::string& message, const std::string& expect) {
  std::istringstream alternatives(expect);
  for (std::string a; std::getline(alternatives, a, '|');) {
    if (!a.empty() && message.find(a) != std::string::npos) return true;
  }
  return false;
}

std::vector<Case> LoadManifest(const fs::path& dir) {
  std::vector<Case> cases;
  std::istringstream in(ReadFile(dir / "manifest.tsv"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::istringstream fields(line);
    for (std::string c; std::getline(fields, c, '\t');) cols.push_back(c);
    if (cols.size() >= 3) cases.push_back({cols[0], cols[1], cols[2]});
  }
  return cases;
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    const char* src = std::getenv("PARATUNE_SOURCE_DIR");
    ASSERT_NE(src, nullptr);
    data_ = fs::path(src) / "tests" / "data" / "bad_specs";
    cases_ = LoadManifest(data_);
    dir_ = TestDir("paratune_bad_", "input");
    coordinator_ = std::make_unique<Coordinator>(bin_, dir_, dir_ / "db.sqlite",
                                                 std::vector<std::string>{});
    std::string error;
    ASSERT_TRUE(coordinator_->Start(&error)) << error;
    http_ = std::make_unique<httplib::Client>("127.0.0.1", coordinator_->http_port());
    http_->set_read_timeout(60, 0);
    http_->set_write_timeout(60, 0);
    stub_ = v1::Autotuner::NewStub(
        grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  /// POST /v1/jobs; (HTTP status, parsed body).
  std::pair<int, json> Post(const std::string& body) {
    auto res = http_->Post("/v1/jobs", body, "application/json");
    if (!res) return {-1, json::object()};
    json parsed = json::parse(res->body, nullptr, false);
    return {res->status, parsed.is_object() ? parsed : json{{"raw", res->body.substr(0, 300)}}};
  }
  grpc::Status Submit(const v1::JobSpec& spec) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::Job job;
    return stub_->SubmitJob(&ctx, request, &job);
  }
  /// One round of the corpus over REST and gRPC; returns the number of checks run.
  int NetworkRound() {
    int checks = 0;
    for (const Case& c : cases_) {
      const std::string text = ReadFile(data_ / c.file);
      if (c.transports.find('r') != std::string::npos) {
        auto [status, body] = Post(text);
        EXPECT_EQ(status, 400) << c.file << ": " << body.dump();
        EXPECT_EQ(body.value("status", ""), "INVALID_ARGUMENT") << c.file;
        EXPECT_TRUE(Names(body.value("message", ""), c.expect))
            << c.file << ": the REST message does not name '" << c.expect
            << "': " << body.value("message", "");
        ++checks;
      }
      if (c.transports.find('g') != std::string::npos) {
        v1::JobSpec spec;
        const auto parsed = google::protobuf::util::JsonStringToMessage(text, &spec);
        EXPECT_TRUE(parsed.ok()) << c.file << " is marked g but is not a JobSpec: "
                                 << parsed.ToString();
        const grpc::Status s = Submit(spec);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << c.file << ": " << s.error_message();
        EXPECT_TRUE(Names(s.error_message(), c.expect))
            << c.file << ": the gRPC message does not name '" << c.expect
            << "': " << s.error_message();
        ++checks;
      }
    }
    return checks;
  }

  fs::path bin_, data_, dir_;
  std::vector<Case> cases_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<v1::Autotuner::Stub> stub_;
};

TEST_F(BadInputTest, TheCorpusHasAtLeast300CasesAndTheBaseSpecIsValid) {
  EXPECT_GE(cases_.size(), 300u);
  std::map<char, int> per_transport;
  for (const Case& c : cases_) {
    ASSERT_TRUE(fs::exists(data_ / c.file)) << c.file;
    ASSERT_FALSE(c.expect.empty()) << c.file;
    for (char t : c.transports) ++per_transport[t];
  }
  EXPECT_GE(per_transport['r'], 300);
  EXPECT_GE(per_transport['g'], 180);
  EXPECT_GE(per_transport['p'], 300);
  // The control: the unmutated spec is accepted everywhere (so each case fails for its one
  // mutation, not for something else).
  const std::string base = ReadFile(data_ / "base.json");
  EXPECT_EQ(Post(base).first, 200);
  v1::JobSpec spec;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(base, &spec).ok());
  EXPECT_TRUE(Submit(spec).ok());
  const Output plan = RunCommand(
      (bin_ / "paratune").string() + " plan --spec " + (data_ / "base.json").string(),
      dir_ / "plan.err");
  EXPECT_EQ(plan.exit_code, 0) << ReadFile(dir_ / "plan.err");
}

TEST_F(BadInputTest, EverySpecFileIsRefusedByPlanWithExit2NamingTheField) {
  int checked = 0;
  for (const Case& c : cases_) {
    if (c.transports.find('p') == std::string::npos) continue;
    const fs::path err = dir_ / "plan.err";
    fs::remove(err);
    const Output o = RunCommand(
        (bin_ / "paratune").string() + " plan --spec " + (data_ / c.file).string(), err);
    const std::string message = ReadFile(err);
    EXPECT_EQ(o.exit_code, 2) << c.file << ": " << message;
    EXPECT_TRUE(Names(message, c.expect))
        << c.file << ": the message does not name '" << c.expect << "': " << message;
    ++checked;
  }
  EXPECT_GE(checked, 300);
}

TEST_F(BadInputTest, RestAndGrpcRefuseEveryCaseAndMemoryStaysBounded) {
  const pid_t pid = coordinator_->process()->pid();
  const int checks = NetworkRound();
  EXPECT_GE(checks, 480);
  const long rss_after_first = RssKib(pid);
  ASSERT_GT(rss_after_first, 0);
  // Five more rounds: about 1,000 refused requests. The bound: 16 MiB over the first
  // round (allocator caches and gRPC's per-connection buffers; a leak of the request
  // bodies alone would be over 1 MiB per round).
  for (int round = 0; round < 5; ++round) NetworkRound();
  const long rss_after = RssKib(pid);
  std::cerr << "coordinator VmRSS: " << rss_after_first << " KiB after round 1, " << rss_after
            << " KiB after round 6\n";
  EXPECT_LT(rss_after - rss_after_first, 16 * 1024);
  EXPECT_TRUE(coordinator_->process()->Alive());
  auto health = http_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(BadInputTest, OversizedAndDeeplyNestedBodiesAreRefusedAndTheServerStaysUp) {
  // 10 MB body over REST: 413 naming the 1 MiB limit (the gateway's payload limit).
  const std::string big = "{\"spec\": {\"name\": \"" + std::string(10 << 20, 'x') + "\"}}";
  auto [status, body] = Post(big);
  EXPECT_EQ(status, 413) << body.dump();
  EXPECT_EQ(body.value("status", ""), "RESOURCE_EXHAUSTED");
  EXPECT_NE(body.value("message", "").find("1048576"), std::string::npos) << body.dump();

  // 10 MB over gRPC (in model.hf_config_json): gRPC's 4 MiB receive limit refuses it with
  // RESOURCE_EXHAUSTED before the service sees it.
  v1::JobSpec huge;
  huge.mutable_model()->set_hf_config_json(std::string(10 << 20, ' '));
  const grpc::Status too_big = Submit(huge);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << too_big.error_message();

  // 100,000 levels of nesting (200 KB, under the body limit), in several places.
  const int depth = 100000;
  const std::string arrays = std::string(depth, '[') + std::string(depth, ']');
  std::string objects;
  for (int i = 0; i < depth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(depth, '}');
  for (const std::string& b :
       {arrays, "{\"spec\": " + arrays + "}", "{\"model\": " + objects + "}",
        "{\"spec\": {\"model\": {\"name\": " + arrays + "}}}"}) {
    auto [s, j] = Post(b);
    EXPECT_EQ(s, 400) << b.substr(0, 40) << ": " << j.dump().substr(0, 300);
    EXPECT_EQ(j.value("status", ""), "INVALID_ARGUMENT");
  }
  // Deep JSON inside the Hugging Face config text (parsed by the spec reader, not by
  // protobuf): gRPC, REST, and the CLI.
  for (const std::string& hf :
       {arrays, "{\"num_hidden_layers\": " + arrays + "}", "{\"hidden_act\": " + objects + "}"}) {
    v1::JobSpec spec;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    ReadFile(data_ / "base.json"), &spec)
                    .ok());
    spec.mutable_model()->Clear();
    spec.mutable_model()->set_hf_config_json(hf);
    const grpc::Status s = Submit(spec);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("hf_config"), std::string::npos) << s.error_message();
    EXPECT_LT(s.error_message().size(), 2000u);  // the value is not echoed in full
  }
  // Spec files: deep JSON and deep YAML through `paratune plan` (exit 2, no crash).
  const fs::path deep_json = dir_ / "deep.json";
  std::ofstream(deep_json) << "{\"model\": " << arrays << "}";
  const fs::path deep_yaml = dir_ / "deep.yaml";
  std::ofstream(deep_yaml) << "model: " << arrays << "\n";
  const fs::path deep_flow = dir_ / "deep_flow.yaml";
  std::ofstream(deep_flow) << "model: " << objects << "\n";
  for (const fs::path& f : {deep_json, deep_yaml, deep_flow}) {
    const Output o = RunCommand((bin_ / "paratune").string() + " plan --spec " + f.string(),
                                dir_ / "deep.err");
    EXPECT_EQ(o.exit_code, 2) << f << ": " << ReadFile(dir_ / "deep.err").substr(0, 500);
  }
  EXPECT_TRUE(coordinator_->process()->Alive()) << ReadFile(coordinator_->log());
  auto health = http_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

}  // namespace
}  // namespace paratune::e2e
