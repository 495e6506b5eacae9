// An inference job in profile mode with verification, end to end: the coordinator, two CPU
// workers (2 devices each) and the CLI as real processes on 127.0.0.1. A small model's
// serving layouts (tp 1 and 2) are profiled (serving_step tasks and an all-reduce sweep),
// composed and ranked; the top 2 are run with the serving loop on a worker. The results
// carry, per verified layout, the measured TTFT, TPOT and output tokens/s next to the
// predicted ones (from measured steps), and `paratune results` prints both.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/fault_harness.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using paratune::e2e::Coordinator;
using paratune::e2e::Output;
using paratune::e2e::Process;
using paratune::e2e::ReadFile;
using paratune::e2e::RunCommand;

// Small enough that the 15 profile tasks and two serving runs take seconds. The first layer
// attends to an 8-token window, the second to the whole context.
constexpr char kSpec[] = R"(kind: inference
name: tiny-serving-verify
model: {num_layers: 2, hidden_size: 128, num_attention_heads: 4, num_query_groups: 2,
        ffn_hidden_size: 256, vocab_size: 512, activation: swiglu, normalization: rmsnorm,
        position_embedding: rope, sliding_window: 8, window_attn_skip_freq: 2}
cluster: {gpu: cpu, num_gpus: 2, gpus_per_node: 2}
serving: {engine: trtllm, isl: 16, osl: 4, concurrency: 2, num_requests: 6}
search: {tp: [1, 2], pp: [1], replicas: [1], max_batch_size: [2], max_num_tokens: [64],
         weight_precision: [int8], kv_cache_precision: [bf16], disaggregated: [false],
         mode: profile, top_k: 2,
         verify_top_k: 2}
)";

class InferenceVerifyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = paratune::e2e::BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    dir_ = paratune::e2e::TestDir("paratune_inference_verify_",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    err_ = dir_ / "cli.log";
  }
  void TearDown() override {
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  Output Cli(const std::string& args) {
    return RunCommand(
        (bin_ / "paratune").string() + " " + args + " --coordinator " + coordinator_->address(),
        err_);
  }
  // kSpec with each (from, to) replaced once.
  static std::string EditedSpec(const std::vector<std::pair<std::string, std::string>>& edits) {
    std::string spec_text = kSpec;
    for (const auto& [from, to] : edits) {
      const size_t at = spec_text.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) spec_text.replace(at, from.size(), to);
    }
    return spec_text;
  }
  // Writes `spec_text` and submits it: the job id ("" with a failure when refused).
  std::string Submit(const std::string& spec_text) {
    const fs::path spec = dir_ / "spec.yaml";
    std::ofstream(spec) << spec_text;
    Output submitted = Cli("submit --spec " + spec.string());
    EXPECT_EQ(submitted.exit_code, 0) << ReadFile(err_);
    if (submitted.exit_code != 0) return "";
    std::string id = submitted.out;
    id.erase(id.find_last_not_of('\n') + 1);
    return id;
  }

  // Submits `spec_text`, watches the job to its end and returns `paratune results --json`
  // (null, with a failure, when a step fails).
  json SubmitAndWatch(const std::string& spec_text) {
    const std::string id = Submit(spec_text);
    if (id.empty()) return json();
    Output watched = Cli("watch " + id);
    EXPECT_EQ(watched.exit_code, 0)
        << watched.out << ReadFile(err_) << ReadFile(coordinator_->log());
    if (watched.exit_code != 0) return json();
    json results = json::parse(Cli("results " + id + " --json").out, nullptr, false);
    EXPECT_FALSE(results.is_discarded());
    return results.is_discarded() ? json() : results;
  }
  // The coordinator (short profile runs) and two CPU workers of 2 devices, both registered
  // before a job: verification places on the workers it sees when the ranking is ready.
  void StartWithWorkers() {
    coordinator_ = std::make_unique<Coordinator>(
        bin_, dir_, dir_ / "coordinator.db",
        std::vector<std::string>{"--lease-timeout-ms", "10000", "--heartbeat-interval-ms", "300",
                                 "--profile-warmup", "1", "--profile-iters", "2"});
    std::string error;
    ASSERT_TRUE(coordinator_->Start(&error)) << error;
    ASSERT_TRUE(paratune::e2e::StartCpuWorkers(
        bin_, coordinator_->address(), dir_, {"cpu-a", "cpu-b"},
        [&](const std::string& args) { return Cli(args); }, &workers_, &error))
        << error;
  }
  // Every ranked layout ran on measured steps and was verified with the serving loop: the
  // measured TTFT, TPOT and output tokens/s beside the predicted ones.
  void ExpectMeasuredAndVerified(const json& ranked) {
    for (const json& r : ranked) {
      EXPECT_EQ(r["decode_step"]["source"], "measured") << r.dump(1);
      EXPECT_EQ(r["prefill_step"]["source"], "measured");
      const json& v = r["verification"];
      ASSERT_EQ(v.value("status", std::string()), "verified") << r.dump(1);
      EXPECT_EQ(v["measured_requests"], 6);
      for (const char* stat : {"measured_ttft_ms", "measured_tpot_ms", "measured_e2e_latency_ms"}) {
        EXPECT_GT(v[stat]["p50"].get<double>(), 0.0) << stat;
        EXPECT_LE(v[stat]["p50"].get<double>(), v[stat]["p99"].get<double>()) << stat;
      }
      EXPECT_GT(v["measured_output_tokens_per_sec"].get<double>(), 0.0);
      EXPECT_GT(r["tpot_ms"]["p50"].get<double>(), 0.0);
      EXPECT_GT(r["ttft_ms"]["p50"].get<double>(), 0.0);
      EXPECT_GT(r["output_tokens_per_sec"].get<double>(), 0.0);
    }
  }

  fs::path bin_, dir_, err_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(InferenceVerifyE2eTest, ProfiledServingLayoutsCarryMeasuredNextToPredicted) {
  StartWithWorkers();
  if (HasFatalFailure()) return;
  const std::string id = Submit(kSpec);
  ASSERT_FALSE(id.empty());
  Output watched = Cli("watch " + id);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << ReadFile(err_) << ReadFile(coordinator_->log());

  Output o = Cli("results " + id + " --json");
  ASSERT_EQ(o.exit_code, 0) << ReadFile(err_);
  const json results = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(results.is_discarded()) << o.out;
  EXPECT_EQ(results["state"], "JOB_STATE_SUCCEEDED");
  // 7 serving_step tasks per shape (prefill of 1, 2, 4 prompts; decode of 1, 2 sequences at
  // 16 and 20 cached tokens), an all-reduce sweep for tp 2, and the two serving runs.
  const json jobs = json::parse(Cli("jobs --json").out, nullptr, false);
  ASSERT_FALSE(jobs.is_discarded());
  ASSERT_EQ(jobs["jobs"].size(), 1u);
  EXPECT_EQ(jobs["jobs"][0]["progress"]["tasks_total"], "17") << jobs.dump(1);
  const json& ranked = results["plan"]["inference"]["ranked"];
  ASSERT_EQ(ranked.size(), 2u) << o.out;
  ExpectMeasuredAndVerified(ranked);

  Output table = Cli("results " + id);
  ASSERT_EQ(table.exit_code, 0) << ReadFile(err_);
  EXPECT_NE(table.out.find("measured steps"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("verified (6 requests): TTFT p50"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("measured vs"), std::string::npos) << table.out;
}

// Two replicas of tp 1 on the 2 devices: one replica runs its half of the load (1 of the 2
// clients, 3 of the 6 requests) and the instance's output tokens/s is twice that replica's.
TEST_F(InferenceVerifyE2eTest, AReplicatedLayoutIsVerifiedOnOneReplicasShare) {
  StartWithWorkers();
  if (HasFatalFailure()) return;
  const json results = SubmitAndWatch(EditedSpec({{"tp: [1, 2]", "tp: [1]"},
                                                  {"replicas: [1]", "replicas: [2]"},
                                                  {"mode: profile, top_k: 2", "top_k: 1"},
                                                  {"verify_top_k: 2", "verify_top_k: 1"}}));
  ASSERT_FALSE(results.is_null());
  const json& ranked = results["plan"]["inference"]["ranked"];
  ASSERT_EQ(ranked.size(), 1u) << results.dump(1);
  EXPECT_EQ(ranked[0]["config"]["replicas"], 2);
  const json& v = ranked[0]["verification"];
  ASSERT_EQ(v.value("status", std::string()), "verified") << ranked[0].dump(1);
  EXPECT_EQ(v["measured_requests"], 3);
  // The replica's one client sends its 3 requests of 4 output tokens one after another, so
  // the replica makes at most 12 tokens per 3 mean e2e latencies; the instance's figure is
  // twice the replica's: above what one replica can make, at most twice it.
  const double one_replica_bound =
      12.0 / (3 * v["measured_e2e_latency_ms"]["mean"].get<double>() * 1e-3);
  EXPECT_GT(v["measured_output_tokens_per_sec"].get<double>(), 1.2 * one_replica_bound);
  EXPECT_LE(v["measured_output_tokens_per_sec"].get<double>(), 2.0 * one_replica_bound * 1.001);
}

// Disaggregated pools at tp 1, one prefill and one decode instance on the 2 devices: the
// layout is profiled (its steps are the aggregated shape's) and verified with the serving
// loop's prefill and decode instances, each request's KV cache moved between them; every
// request completes with its TTFT below its end-to-end latency.
TEST_F(InferenceVerifyE2eTest, ADisaggregatedLayoutIsVerifiedWithPrefillAndDecodeInstances) {
  StartWithWorkers();
  if (HasFatalFailure()) return;
  const json results =
      SubmitAndWatch(EditedSpec({{"tp: [1, 2]", "tp: [1]"},
                                 {"replicas: [1], ", ""},
                                 {"disaggregated: [false]", "disaggregated: [true]"},
                                 {"top_k: 2", "top_k: 1"},
                                 {"verify_top_k: 2", "verify_top_k: 1"}}));
  ASSERT_FALSE(results.is_null());
  const json& ranked = results["plan"]["inference"]["ranked"];
  ASSERT_EQ(ranked.size(), 1u) << results.dump(1);
  EXPECT_EQ(ranked[0]["config"]["disaggregated"], true);
  EXPECT_EQ(ranked[0]["config"]["prefill_replicas"], 1);
  EXPECT_EQ(ranked[0]["config"]["decode_replicas"], 1);
  ExpectMeasuredAndVerified(ranked);
  // The decode instance produces osl - 1 = 3 tokens after the prefill's first: the mean
  // e2e latency is at least the mean TTFT plus 3 mean TPOTs (per request e2e = TTFT +
  // (osl - 1) x TPOT; the means add up).
  const json& v = ranked[0]["verification"];
  EXPECT_NEAR(
      v["measured_e2e_latency_ms"]["mean"].get<double>(),
      v["measured_ttft_ms"]["mean"].get<double>() + 3 * v["measured_tpot_ms"]["mean"].get<double>(),
      1e-6 * v["measured_e2e_latency_ms"]["mean"].get<double>());
}

// Two pipeline stages of tp 1 (one layer each) on the 2 devices: the layout's steps are
// composed from the tp 1 shape's measured grid (every layer on one rank) and it is verified
// with the serving loop's two stages, two micro-batch engines in flight.
TEST_F(InferenceVerifyE2eTest, APipelineLayoutIsProfiledAndVerifiedOnItsStages) {
  StartWithWorkers();
  if (HasFatalFailure()) return;
  const json results = SubmitAndWatch(EditedSpec({{"tp: [1, 2], pp: [1]", "tp: [1], pp: [2]"},
                                                  {"top_k: 2", "top_k: 1"},
                                                  {"verify_top_k: 2", "verify_top_k: 1"}}));
  ASSERT_FALSE(results.is_null());
  const json& ranked = results["plan"]["inference"]["ranked"];
  ASSERT_EQ(ranked.size(), 1u) << results.dump(1);
  EXPECT_EQ(ranked[0]["config"]["pp"], 2);
  ExpectMeasuredAndVerified(ranked);
  EXPECT_GT(ranked[0]["decode_step"]["pp_comm_ms"].get<double>(), 0.0) << ranked[0].dump(1);
}

// A mixture-of-experts model (the second layer's 4 experts of 128, top-2, each split over
// the tp ranks, then over 2 expert-parallel ranks, then with attention data parallelism) is
// profiled on its expert layers and its top layouts verified with the serving loop, as a
// dense one is.
TEST_F(InferenceVerifyE2eTest, AMixtureOfExpertsModelIsProfiledAndVerified) {
  StartWithWorkers();
  if (HasFatalFailure()) return;
  std::string spec_text = kSpec;
  const std::string dense = "window_attn_skip_freq: 2}";
  spec_text.replace(spec_text.find(dense), dense.size(),
                    "window_attn_skip_freq: 2, num_experts: 4, moe_router_topk: 2, "
                    "moe_ffn_hidden_size: 128, first_k_dense_layers: 1}");
  spec_text.replace(spec_text.find("pp: [1],"), std::string("pp: [1],").size(),
                    "pp: [1], ep: [1],");
  const std::string id = Submit(spec_text);
  ASSERT_FALSE(id.empty());
  Output watched = Cli("watch " + id);
  ASSERT_EQ(watched.exit_code, 0) << watched.out << ReadFile(err_) << ReadFile(coordinator_->log());
  const json results = json::parse(Cli("results " + id + " --json").out, nullptr, false);
  ASSERT_FALSE(results.is_discarded());
  EXPECT_EQ(results["state"], "JOB_STATE_SUCCEEDED");
  const json& ranked = results["plan"]["inference"]["ranked"];
  ASSERT_EQ(ranked.size(), 2u) << results.dump(1);
  ExpectMeasuredAndVerified(ranked);

  // With the experts spread over 2 expert-parallel ranks inside tp 2 (each rank holds two
  // experts whole), the steps are measured and the layouts verified the same way.
  spec_text.replace(spec_text.find("ep: [1],"), std::string("ep: [1],").size(), "ep: [2],");
  spec_text.replace(spec_text.find("tp: [1, 2]"), std::string("tp: [1, 2]").size(), "tp: [2]");
  const std::string ep2 = Submit(spec_text);
  ASSERT_FALSE(ep2.empty());
  ASSERT_EQ(Cli("watch " + ep2).exit_code, 0) << ReadFile(err_);
  const json ep2_results = json::parse(Cli("results " + ep2 + " --json").out, nullptr, false);
  ASSERT_FALSE(ep2_results.is_discarded());
  EXPECT_EQ(ep2_results["state"], "JOB_STATE_SUCCEEDED");
  const json& ep2_ranked = ep2_results["plan"]["inference"]["ranked"];
  ASSERT_FALSE(ep2_ranked.empty()) << ep2_results.dump(1);
  for (const json& r : ep2_ranked) EXPECT_EQ(r["config"]["ep"], 2) << r.dump(1);
  ExpectMeasuredAndVerified(ep2_ranked);

  // With attention data parallelism (each rank its own requests and sequences, the experts
  // behind an all-to-all) the steps are measured and the layouts verified as well.
  spec_text.replace(spec_text.find("ep: [2],"), std::string("ep: [2],").size(),
                    "ep: [2], attention_dp: [true],");
  const std::string adp = Submit(spec_text);
  ASSERT_FALSE(adp.empty());
  ASSERT_EQ(Cli("watch " + adp).exit_code, 0) << ReadFile(err_);
  const json adp_results = json::parse(Cli("results " + adp + " --json").out, nullptr, false);
  ASSERT_FALSE(adp_results.is_discarded());
  const json& adp_ranked = adp_results["plan"]["inference"]["ranked"];
  ASSERT_FALSE(adp_ranked.empty()) << adp_results.dump(1);
  for (const json& r : adp_ranked) EXPECT_EQ(r["config"]["attention_dp"], true) << r.dump(1);
  ExpectMeasuredAndVerified(adp_ranked);
}

}  // namespace
