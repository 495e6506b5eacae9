// An inference job (`kind: inference`) through the real binaries on 127.0.0.1: `paratune
// submit`, `watch` and `results` against paratune-coordinator for Llama 3.1 8B on 8 H100;
// `results --json` ranks the layouts `paratune plan --json` ranks for the spec (one JSON
// dialect); the coordinator killed with SIGKILL and restarted on its database serves the
// same results; a bad field exits 2 from the CLI and gets HTTP 400 naming it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/fault_harness.h"

namespace paratune::e2e {
namespace {

using nlohmann::json;

json Llama8bServingSpec() {
  return json::parse(R"({
    "kind": "inference",
    "name": "llama3.1-8b e2e",
    "model": {"preset": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "serving": {"engine": "vllm", "isl": 2048, "osl": 128, "concurrency": 64,
                "num_requests": 200, "ttft_ms": {"p99": 2000}, "tpot_ms": {"p99": 50}},
    "search": {"tp": [1, 2, 4, 8], "weight_precision": ["bf16", "fp8"], "top_k": 5}})");
}

/// `j` without its null members, at every depth (ToJson writes an unset optional as null,
/// the proto JSON mapping leaves it out).
json WithoutNulls(const json& j) {
  if (j.is_array()) {
    json out = json::array();
    for (const json& e : j) out.push_back(WithoutNulls(e));
    return out;
  }
  if (!j.is_object()) return j;
  json out = json::object();
  for (const auto& [key, value] : j.items()) {
    if (!value.is_null()) out[key] = WithoutNulls(value);
  }
  return out;
}

class InferenceServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (BinDir().empty()) GTEST_SKIP() << "PARATUNE_BIN_DIR is not set (ctest sets it)";
    dir_ = TestDir("paratune_inference_e2e_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    spec_ = dir_ / "spec.json";
    std::ofstream(spec_) << Llama8bServingSpec().dump(2);
    coordinator_ = std::make_unique<Coordinator>(BinDir(), dir_, dir_ / "paratune.db",
                                                 std::vector<std::string>{});
    std::string error;
    ASSERT_TRUE(coordinator_->Start(&error)) << error;
  }
  void TearDown() override {
    if (coordinator_) coordinator_->Kill();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  Output Cli(const std::string& args) {
    return RunCommand(
        (BinDir() / "paratune").string() + " " + args + " --coordinator " + coordinator_->address(),
        dir_ / "cli.err");
  }

  fs::path dir_, spec_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(InferenceServiceTest, SubmitWatchResultsAndARestartedCoordinatorServeTheRanking) {
  Output submitted = Cli("submit --spec " + spec_.string());
  ASSERT_EQ(submitted.exit_code, 0) << ReadFile(dir_ / "cli.err");
  std::string id = submitted.out;
  id.erase(id.find_last_not_of(" \n") + 1);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(Cli("watch " + id).exit_code, 0) << ReadFile(dir_ / "cli.err");

  Output results = Cli("results " + id + " --json");
  ASSERT_EQ(results.exit_code, 0) << ReadFile(dir_ / "cli.err");
  const json served = json::parse(results.out);
  const json& ranked = served["plan"]["inference"]["ranked"];
  ASSERT_GE(ranked.size(), 1u) << results.out;

  // The planner run by `paratune plan` ranks the same layouts, in the same JSON.
  Output planned = RunCommand(
      (BinDir() / "paratune").string() + " plan --json --spec " + spec_.string(), dir_ / "cli.err");
  ASSERT_EQ(planned.exit_code, 0) << ReadFile(dir_ / "cli.err");
  const json plan = WithoutNulls(json::parse(planned.out));
  ASSERT_EQ(ranked.size(), plan["ranked"].size());
  for (size_t i = 0; i < ranked.size(); ++i) {
    EXPECT_EQ(ranked[i], plan["ranked"][i]) << "rank " << i + 1;
  }
  EXPECT_EQ(served["plan"]["inference"]["pareto_front"], plan["pareto_front"]);
  EXPECT_EQ(served["plan"]["inference"]["rejected_reasons"], plan["rejected_reasons"]);

  // The table names the best layout as its row 1.
  Output table = Cli("results " + id);
  ASSERT_EQ(table.exit_code, 0) << ReadFile(dir_ / "cli.err");
  EXPECT_NE(table.out.find("tok/s/gpu"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\n1    "), std::string::npos) << table.out;

  // Killed and restarted on the same database: the same results.
  coordinator_->Kill();
  std::string error;
  ASSERT_TRUE(coordinator_->Start(&error)) << error;
  Output again = Cli("results " + id + " --json");
  ASSERT_EQ(again.exit_code, 0) << ReadFile(dir_ / "cli.err");
  EXPECT_EQ(json::parse(again.out), served);
  Output jobs = Cli("jobs --json");
  ASSERT_EQ(jobs.exit_code, 0);
  EXPECT_EQ(json::parse(jobs.out)["jobs"][0]["resolved_spec"]["kind"], "inference");
}

TEST_F(InferenceServiceTest, ABadFieldExits2FromTheCliAndGets400OverRest) {
  json bad = Llama8bServingSpec();
  bad["serving"]["osl"] = 0;
  const fs::path bad_path = dir_ / "bad.json";
  std::ofstream(bad_path) << bad.dump();
  Output submitted = Cli("submit --spec " + bad_path.string());
  EXPECT_EQ(submitted.exit_code, 2);
  EXPECT_NE(ReadFile(dir_ / "cli.err").find("serving.osl"), std::string::npos)
      << ReadFile(dir_ / "cli.err");

  httplib::Client http("127.0.0.1", coordinator_->http_port());
  httplib::Result res = http.Post("/v1/jobs", json{{"spec", bad}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(json::parse(res->body)["message"].get<std::string>().find("serving.osl"),
            std::string::npos)
      << res->body;
  res = http.Post("/v1/jobs", json{{"spec", Llama8bServingSpec()}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

}  // namespace
}  // namespace paratune::e2e
