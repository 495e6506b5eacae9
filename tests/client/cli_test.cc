// The `paratune` binary run as a subprocess on spec files: plan, estimate and export, and
// invalid specs exit 2 naming the field.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <unistd.h>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace {

using ::testing::HasSubstr;
using nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string Source(const std::string& relative) {
  return Env("PARATUNE_SOURCE_DIR", PARATUNE_DEFAULT_SOURCE_DIR) + "/" + relative;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `paratune ARGS`, capturing stdout, stderr and the exit code.
Result Paratune(const std::string& args) {
  // Per-process names: CTest runs the tests of this file in parallel processes.
  const std::string base =
      absl::StrCat(::testing::TempDir(), "/paratune_cli_", ::getpid());
  const std::string out = base + ".out";
  const std::string err = base + ".err";
  const std::string cmd = absl::StrCat("'", Env("PARATUNE_BIN_DIR", PARATUNE_DEFAULT_BIN_DIR), "/paratune' ",
                                       args, " >'", out, "' 2>'", err, "'");
  const int status = std::system(cmd.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

TEST(CliTest, HelpListsTheSubcommands) {
  Result r = Paratune("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* sub : {"plan", "estimate", "export"}) EXPECT_THAT(r.out, HasSubstr(sub));
  r = Paratune("plan --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--top"));
  EXPECT_THAT(r.out, HasSubstr("gpt3-175b"));      // presets in the footer
  EXPECT_THAT(r.out, HasSubstr("h100-sxm-80gb"));  // device kinds
}

/// An int64 field of the --json output: the proto JSON mapping writes it as a decimal string.
int64_t Int(const json& v) {
  EXPECT_TRUE(v.is_string()) << v.dump();
  return v.is_string() ? std::stoll(v.get<std::string>()) : -1;
}

json PlanJson(const std::string& spec, const std::string& extra = "") {
  Result r = Paratune(absl::StrCat("plan --spec ", spec, " --json ", extra));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

TEST(CliTest, PlanJsonIsRankedBestFirst) {
  const json j = PlanJson(Source("deploy/examples/llama3-8b-h100.yaml"));
  ASSERT_TRUE(j.contains("ranked"));
  const json& ranked = j["ranked"];
  ASSERT_FALSE(ranked.empty());
  EXPECT_LE(ranked.size(), 10u);  // top_k
  EXPECT_TRUE(ranked[0]["fits"].get<bool>());
  bool seen_misfit = false;
  double previous = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const json& r = ranked[i];
    EXPECT_EQ(Int(r["rank"]), static_cast<int64_t>(i + 1));
    const json& c = r["config"];
    EXPECT_EQ(Int(c["tp"]) * Int(c["pp"]) * Int(c["cp"]) * Int(c["dp"]),
              8);
    const bool fits = r["fits"].get<bool>();
    EXPECT_FALSE(fits && seen_misfit) << "a fitting layout ranked after one that does not fit";
    seen_misfit = seen_misfit || !fits;
    if (fits) {
      // Objective throughput: iteration time never decreases down the ranking.
      EXPECT_GE(r["iteration_time_s"].get<double>(), previous) << r.dump();
      previous = r["iteration_time_s"].get<double>();
      EXPECT_LE(r["memory"]["peak_gib"].get<double>(), r["memory"]["capacity_gib"].get<double>());
    }
    EXPECT_GT(r["tokens_per_sec_per_gpu"].get<double>(), 0);
    EXPECT_GT(r["mfu"].get<double>(), 0);
    EXPECT_LT(r["mfu"].get<double>(), 1);
    EXPECT_GT(r["time_to_train_days"].get<double>(), 0);  // the spec gives total_tokens
    // tokens/s/GPU = B * s / (iteration time * N).
    EXPECT_NEAR(r["tokens_per_sec_per_gpu"].get<double>(),
                128.0 * 8192 / (r["iteration_time_s"].get<double>() * 8),
                1e-6 * r["tokens_per_sec_per_gpu"].get<double>());
  }
  EXPECT_GE(Int(j["candidates_considered"]), static_cast<int64_t>(ranked.size()));
  EXPECT_TRUE(j.contains("feasible"));
  EXPECT_TRUE(j.contains("elapsed_ms"));
  EXPECT_TRUE(j["rejected"].is_array());

  const json top3 = PlanJson(Source("deploy/examples/llama3-8b-h100.yaml"), "--top 3");
  ASSERT_EQ(top3["ranked"].size(), 3u);
  EXPECT_EQ(top3["ranked"][0]["config"], ranked[0]["config"]);
}

TEST(CliTest, PlanJsonAndTheCoordinatorsResultsPrintTheSameRankedConfigs) {
  // `tune --json` prints the JobResults a coordinator serves to `results --json` (the plan
  // converted to the wire form, stored and read back); `plan --json` prints the planner's
  // result. One dialect: each ranked layout is the same JSON, key for key and type for type.
  const std::string spec = Source("deploy/examples/llama3-8b-h100.yaml");
  const json plan = PlanJson(spec);
  const std::string db = absl::StrCat(::testing::TempDir(), "/paratune_cli_tune_", ::getpid(),
                                      ".db");
  Result r = Paratune(absl::StrCat("tune --json --db ", db, " --spec ", spec));
  std::remove(db.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json results = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(results.is_discarded()) << r.out;
  const json& ranked = results["plan"]["ranked"];
  ASSERT_EQ(ranked.size(), plan["ranked"].size());
  ASSERT_FALSE(ranked.empty());
  for (size_t i = 0; i < ranked.size(); ++i) {
    EXPECT_EQ(ranked[i].dump(), plan["ranked"][i].dump()) << "rank " << i + 1;
  }
  for (const char* key : {"candidates_considered", "feasible", "rejected", "rejected_total",
                          "rejected_reasons"}) {
    EXPECT_EQ(results["plan"][key].dump(), plan[key].dump()) << key;
  }
}

TEST(CliTest, PlanTableAndCsv) {
  Result r = Paratune("plan " + Source("tests/data/specs/small.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rank TP PP"));
  EXPECT_THAT(r.out, HasSubstr("candidates"));
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) EXPECT_LE(line.size(), 80u) << line;

  r = Paratune("plan --csv --spec " + Source("tests/data/specs/small.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_TRUE(lines[0].starts_with("rank,tp,pp,dp,cp,vp,micro_batch_size"));
  EXPECT_TRUE(lines[1].starts_with("1,"));

  r = Paratune("plan --json --csv " + Source("tests/data/specs/small.yaml"));
  EXPECT_EQ(r.exit_code, 2);  // mutually exclusive
}

TEST(CliTest, Gpt3ExampleUsedByTheDemoPlans) {
  const json j = PlanJson(Source("deploy/examples/gpt3-175b.yaml"));
  ASSERT_FALSE(j["ranked"].empty());
  EXPECT_EQ(Int(j["ranked"][0]["config"]["tp"]) * Int(j["ranked"][0]["config"]["pp"]) *
                Int(j["ranked"][0]["config"]["cp"]) * Int(j["ranked"][0]["config"]["dp"]),
            1024);
}

TEST(CliTest, HfConfigSpecPlans) {
  const json j = PlanJson(Source("deploy/examples/tinyllama-hf.yaml"));
  ASSERT_FALSE(j["ranked"].empty());
  EXPECT_LE(j["ranked"].size(), 5u);
}

TEST(CliTest, InvalidSpecsExitTwoNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"bad_heads.yaml",
       "model.num_attention_heads (32) must be divisible by model.num_query_groups (5)"},
      {"zero_layers.yaml", "model.num_layers (0) must be positive"},
      {"unknown_gpu.yaml", "cluster.gpu ('v100-32gb') is not a known device kind"},
      {"negative_batch.yaml", "training.global_batch_size (-256) must be positive"},
      {"huge_hidden.yaml", "model.hidden_size (1000000000000) must be at most 1048576"},
      {"unknown_field.yaml", "unknown field 'model.hiden_size'"},
      {"truncated.yaml", "is not valid YAML: line "},
      {"truncated.json", "is not valid JSON"},
      {"hf_mixtral.yaml", "search.ep value 3 must divide model.num_experts (8)"},
  };
  for (const auto& [file, message] : cases) {
    for (const char* command : {"plan", "estimate", "export --format megatron"}) {
      Result r = Paratune(absl::StrCat(command, " --spec ", Source("tests/data/specs/"), file));
      EXPECT_EQ(r.exit_code, 2) << command << " " << file << ": " << r.err;
      EXPECT_THAT(r.err, HasSubstr(message)) << command << " " << file;
      EXPECT_TRUE(r.out.empty()) << r.out;
    }
  }
  Result r = Paratune("plan --spec /nonexistent/spec.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read '/nonexistent/spec.yaml'"));
  r = Paratune("plan");
  EXPECT_EQ(r.exit_code, 2);  // --spec is required
}

TEST(CliTest, ASpecNoLayoutSatisfiesExitsOneSayingWhy) {
  const std::string spec = Source("tests/data/specs/no_layout_tp3.yaml");
  for (const char* command : {"plan", "plan --json", "export --format megatron"}) {
    Result r = Paratune(absl::StrCat(command, " --spec ", spec));
    EXPECT_EQ(r.exit_code, 1) << command << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("no layout satisfies the spec: search.tp [3]")) << command;
    EXPECT_THAT(r.err, HasSubstr("cluster.num_gpus (8)")) << command;
  }
}

TEST(CliTest, EstimateNeedsAPinnedLayout) {
  Result r = Paratune("estimate --spec " + Source("tests/data/specs/unpinned.yaml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("search.tp is not pinned"));

  r = Paratune("estimate --json --spec " + Source("deploy/examples/llama3-8b-pinned.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(Int(j["config"]["tp"]), 2);
  EXPECT_EQ(Int(j["config"]["dp"]), 4);
  EXPECT_EQ(j["config"]["recompute"], "selective");
  EXPECT_GT(j["iteration_time_s"].get<double>(), 0);
  EXPECT_GT(j["memory"]["peak_gib"].get<double>(), 0);

  r = Paratune("estimate " + Source("deploy/examples/llama3-8b-pinned.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("memory (GiB)"));
}

TEST(CliTest, ExportMatchesTheRankedLayout) {
  const std::string spec = Source("deploy/examples/llama3-8b-h100.yaml");
  const json plan = PlanJson(spec);
  ASSERT_GE(plan["ranked"].size(), 2u);
  for (int rank : {1, 2}) {
    const json& c = plan["ranked"][rank - 1]["config"];
    Result r = Paratune(absl::StrCat("export --format megatron --rank ", rank, " --spec ", spec));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("--tensor-model-parallel-size ", Int(c["tp"]),
                                              " \\\n")));
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("--pipeline-model-parallel-size ",
                                              Int(c["pp"]), " \\\n")));
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("--micro-batch-size ",
                                              Int(c["micro_batch_size"]), " \\\n")));
    EXPECT_THAT(r.out, HasSubstr("--num-layers 32 \\\n"));
    EXPECT_THAT(r.out, HasSubstr("--swiglu"));

    r = Paratune(absl::StrCat("export --format nemo --rank ", rank, " --spec ", spec));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("  tensor_model_parallel_size: ",
                                              Int(c["tp"]), "\n")));
  }
  // Default rank 1 = the plan's best.
  Result r = Paratune("export --format megatron --spec " + spec);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("--tensor-model-parallel-size ",
                                            Int(plan["ranked"][0]["config"]["tp"]))));
  // A fully pinned spec exports its own layout.
  r = Paratune("export --format megatron --spec " +
               Source("deploy/examples/llama3-8b-pinned.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--tensor-model-parallel-size 2 \\\n"));
  EXPECT_THAT(r.out, HasSubstr("--sequence-parallel \\\n"));
  EXPECT_THAT(r.out, HasSubstr("--use-distributed-optimizer \\\n"));

  r = Paratune("export --format torch --spec " + spec);
  EXPECT_EQ(r.exit_code, 2);
  r = Paratune("export --format megatron --rank 100000 --spec " +
               Source("tests/data/specs/small.yaml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--rank 100000"));
}

// Without --format a training spec exports in its training.framework's format.
TEST(CliTest, ExportWithoutFormatUsesTheFrameworksFormat) {
  Result r = Paratune("export --spec " + Source("deploy/examples/llama3-8b-pinned.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--tensor-model-parallel-size 2 \\\n"));

  const std::string dir = ::testing::TempDir();
  const auto write = [&dir](const std::string& name, const std::string& framework) {
    const std::string path = absl::StrCat(dir, "/", name, "_", ::getpid(), ".yaml");
    std::ofstream(path) << "name: " << name << "\nmodel: {preset: llama3-8b}\n"
                        << "training: {seq_length: 8192, global_batch_size: 128, precision: "
                           "bf16, framework: "
                        << framework << "}\ncluster: {gpu: h100-sxm-80gb, num_gpus: 8}\n"
                        << "search: {tp: 1, pp: 1, cp: 1, dp: 8, micro_batch_size: 1, "
                           "sequence_parallel: false, recompute: full, recompute_num_layers: 1, "
                           "data_parallel_sharding: full}\n";
    return path;
  };
  r = Paratune("export --spec " + write("titan", "torchtitan"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[parallelism]"));
  r = Paratune("export --spec " + write("ds", "deepspeed"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"stage\": 3"));
  r = Paratune("export --spec " + write("automodel", "nemo-automodel"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("distributed:\n  strategy: fsdp2\n"));
  r = Paratune("export --spec " + write("foundry", "llm-foundry"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("training.framework llm-foundry has no export format"));
  r = Paratune("export --format torchtitan --spec " + write("foundry2", "llm-foundry"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
