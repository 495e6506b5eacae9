// `paratune plan|estimate|export` on specs of kind: inference, run as a subprocess.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace paratune::client {
namespace {

using ::testing::HasSubstr;

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

struct Result {
  int exit_code = 0;
  std::string out, err;
};

// Names with the pid: ctest runs this suite's tests as concurrent processes sharing TempDir().
std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/inference_cli_" + std::to_string(::getpid()) + "_" + name;
}

Result Paratune(const std::string& args) {
  const std::string err_path = TempPath("err.txt");
  const std::string cmd =
      Env("PARATUNE_BIN_DIR", PARATUNE_DEFAULT_BIN_DIR) + "/paratune " + args + " 2>" + err_path;
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

std::string Spec() {
  return Env("PARATUNE_SOURCE_DIR", PARATUNE_DEFAULT_SOURCE_DIR) +
         "/tests/data/inference/llama3.1-70b-h100.yaml";
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

TEST(InferenceCliTest, PlanJsonRanksBestFirstInTheContractsFields) {
  Result r = Paratune("plan --json --spec " + Spec());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["ranked"].empty());
  const auto& best = j["ranked"][0];
  EXPECT_EQ(best["rank"], 1);
  EXPECT_TRUE(best["meets_limits"].get<bool>());
  EXPECT_TRUE(best["ttft_ms"].contains("p99"));
  EXPECT_TRUE(best["cost_per_million_output_tokens"].is_number());
  EXPECT_LE(best["config"]["num_gpus"].get<int>(), 8);
  for (size_t i = 1; i < j["ranked"].size(); ++i) {
    EXPECT_GE(j["ranked"][i - 1]["output_tokens_per_sec_per_gpu"].get<double>(),
              j["ranked"][i]["output_tokens_per_sec_per_gpu"].get<double>());
  }
}

TEST(InferenceCliTest, PlanTableAndCsv) {
  Result r = Paratune("plan " + Spec());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Recommendation: "));
  EXPECT_THAT(r.out, HasSubstr("rejected (memory)"));
  r = Paratune("plan --csv --spec " + Spec());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("rank,tp,pp,ep,replicas,", 0), 0u);
  EXPECT_THAT(r.out, HasSubstr(",memory,\"does not fit by "));
}

TEST(InferenceCliTest, EstimateAndExportOfAPinnedLayout) {
  const std::string pinned = Write("pinned.yaml", R"(kind: inference
model: {preset: llama3.1-8b}
cluster: {gpu: h100-sxm-80gb, num_gpus: 2}
serving: {engine: vllm, isl: 1000, osl: 200, concurrency: 32, num_requests: 200}
search: {tp: 1, pp: 1, weight_precision: fp8, kv_cache_precision: fp8, max_batch_size: 64}
)");
  Result r = Paratune("estimate --json --spec " + pinned);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["replicas"], 2);
  EXPECT_EQ(j["config"]["max_batch_size"], 64);
  r = Paratune("export --format vllm --spec " + pinned);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("vllm serve $MODEL --tensor-parallel-size 1 "
                               "--pipeline-parallel-size 1 --max-num-seqs 64 "));
  EXPECT_THAT(r.out, HasSubstr("--data-parallel-size 2\n"));
}

TEST(InferenceCliTest, InvalidSpecsExitTwoNamingTheField) {
  Result r = Paratune("plan --spec " + Write("bad_osl.yaml", R"(kind: inference
model: {preset: llama3.1-70b}
cluster: {gpu: h100-sxm-80gb, num_gpus: 8}
serving: {isl: 128, osl: 0}
)"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("serving.osl (0) must be > 0"));
  r = Paratune("plan --spec " + Write("bad_tp.yaml", R"(kind: inference
model: {preset: llama3.1-70b}
cluster: {gpu: h100-sxm-80gb, num_gpus: 8}
serving: {isl: 128, osl: 128}
search: {tp: [3]}
)"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("tp (3) must divide model.num_attention_heads (64)"));
  r = Paratune("plan --spec " + Write("too_big.yaml", R"(kind: inference
model: {preset: llama3.1-405b}
cluster: {gpu: l40s-48gb, num_gpus: 1}
serving: {isl: 128, osl: 128}
)"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("does not fit on l40s-48gb at any layout"));
}

}  // namespace
}  // namespace paratune::client
