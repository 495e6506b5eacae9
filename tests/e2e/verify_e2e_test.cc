// The verify stage end to end: the coordinator, two CPU workers (2 devices each) and the
// CLI as real processes on 127.0.0.1.
//   - a profile job with search.verify_top_k = 1 on a tiny fp32 model: its best layout is
//     trained end to end on one worker; the results carry measured and predicted time and
//     peak, one peak per rank, and a loss curve equal to RunTrainingInProcess of the same
//     model, layout and data in this process (the same results over gRPC and REST);
//     `paratune results` prints measured vs predicted with the error in %;
//   - a layout of world 4 (tp1 pp2 dp2) that no single worker holds: two parts, one per
//     worker, meet through the coordinator's rendezvous store, and the losses again equal
//     the in-process run (a tied-embeddings model: the embedding group spans the workers);
//   - a mixture-of-experts model (three expert layers of four experts) at pp2 dp2 ep2: its
//     expert layers train on both workers and the losses equal the in-process run.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "kernels/training/training.h"
#include "tests/e2e/fault_harness.h"

namespace {

namespace fs = std::filesystem;
namespace kt = paratune::kernels::training;
using nlohmann::json;
using paratune::e2e::Coordinator;
using paratune::e2e::Output;
using paratune::e2e::Process;
using paratune::e2e::ReadFile;
using paratune::e2e::RunCommand;

constexpr int kVerifySteps = 3;

class VerifyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = paratune::e2e::BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    dir_ = paratune::e2e::TestDir(
        "paratune_verify_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    err_ = dir_ / "cli.log";
  }
  /// The coordinator (verify runs of kVerifySteps steps) and two CPU workers of 2 devices.
  void Start(const std::string& rendezvous_timeout_ms = "30000",
             const std::string& max_attempts = "3",
             const std::string& lease_timeout_ms = "5000") {
    coordinator_ = std::make_unique<Coordinator>(
        bin_, dir_, dir_ / "coordinator.db",
        std::vector<std::string>{"--lease-timeout-ms", lease_timeout_ms,
                                 "--heartbeat-interval-ms", "300",
                                 "--profile-warmup", "1", "--profile-iters", "2",
                                 "--verify-steps", std::to_string(kVerifySteps),
                                 "--verify-rendezvous-timeout-ms", rendezvous_timeout_ms,
                                 "--max-attempts", max_attempts});
    std::string error;
    ASSERT_TRUE(coordinator_->Start(&error)) << error;
    // Both workers registered before the job: the verify stage places on the workers it
    // sees when the ranking is ready.
    ASSERT_TRUE(paratune::e2e::StartCpuWorkers(
        bin_, coordinator_->address(), dir_, {"cpu-a", "cpu-b"},
        [&](const std::string& args) { return Cli(args); }, &workers_, &error))
        << error;
  }
  void TearDown() override {
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  Output Cli(const std::string& args) {
    return RunCommand((bin_ / "paratune").string() + " " + args + " --coordinator " +
                          coordinator_->address(),
                      err_);
  }
  /// Submits `spec_text`, waits for a terminal state; the job id.
  std::string RunJob(const std::string& spec_text) {
    const fs::path spec = dir_ / "spec.yaml";
    std::ofstream(spec) << spec_text;
    Output o = Cli("submit --spec " + spec.string());
    EXPECT_EQ(o.exit_code, 0) << ReadFile(err_);
    std::string id = o.out;
    id.erase(id.find_last_not_of('\n') + 1);
    Output w = Cli("watch " + id);
    EXPECT_EQ(w.exit_code, 0) << w.out << ReadFile(err_) << ReadFile(coordinator_->log());
    return id;
  }
  json Results(const std::string& id) {
    Output o = Cli("results " + id + " --json");
    EXPECT_EQ(o.exit_code, 0) << ReadFile(err_);
    return json::parse(o.out, nullptr, false);
  }
  static int64_t Int(const json& j, const char* key) {
    if (!j.contains(key)) return 0;
    return j[key].is_string() ? std::stoll(j[key].get<std::string>()) : j[key].get<int64_t>();
  }

  /// The tiny model of the specs below under the layout of `config` (results JSON), built
  /// here from the spec's numbers rather than from the coordinator's task.
  static kt::TrainConfig TinyModel(const json& config, bool tie_embeddings, bool moe) {
    kt::TrainConfig c;
    if (moe) {  // kMoeSpec's experts
      c.moe.num_experts = 4;
      c.moe.topk = 2;
      c.moe.ffn_hidden = 64;
      c.moe.routing = paratune::kernels::ExpertRouting::kDropless;
      c.first_k_dense_layers = 1;
      c.parallel.ep = std::max<int64_t>(1, Int(config, "ep"));
      c.parallel.etp = std::max<int64_t>(1, Int(config, "etp"));
    }
    c.tie_embeddings = tie_embeddings;
    c.shape.hidden_size = 64;
    c.shape.num_attention_heads = 4;
    c.shape.num_query_groups = 4;
    // An MoE model's dense layers default to the experts' width.
    c.shape.ffn_hidden_size = moe ? 64 : 4 * 64;
    c.shape.vocab_size = 256;  // a multiple of 128·tp for tp <= 2: no padding
    c.num_layers = 4;
    c.seq_length = 64;
    // The spec's positions are learned (the default) with max_position_embeddings 0, which
    // is seq_length rows.
    c.position_rows = 64;
    c.parallel.tp = std::max<int64_t>(1, Int(config, "tp"));
    c.parallel.pp = std::max<int64_t>(1, Int(config, "pp"));
    c.parallel.dp = std::max<int64_t>(1, Int(config, "dp"));
    c.parallel.vp = std::max<int64_t>(1, Int(config, "vp"));
    c.parallel.micro_batch_size = std::max<int64_t>(1, Int(config, "micro_batch_size"));
    c.num_micro_batches = 8 / (c.parallel.micro_batch_size * c.parallel.dp);  // global batch 8
    c.parallel.sequence_parallel = config.value("sequence_parallel", false);
    if (config.value("distributed_optimizer", false)) {
      c.parallel.data_parallel_sharding = paratune::DataParallelSharding::kOptimizer;
    }
    const std::string rc = config.value("recompute", std::string("none"));
    c.parallel.recompute = rc == "full"        ? paratune::Recompute::kFull
                           : rc == "selective" ? paratune::Recompute::kSelective
                                               : paratune::Recompute::kNone;
    c.steps = kVerifySteps;
    c.seed = 1234;
    return c;
  }

  /// Checks the verification of ranked entry `r`: measured and predicted, one peak per
  /// rank, and losses equal to the in-process run of the same config. Returns the world size.
  int64_t ExpectVerified(const json& r, bool tie_embeddings = false, bool moe = false) {
    const json& c = r["config"];
    const json& v = r["verification"];
    EXPECT_EQ(v.value("status", std::string()), "verified") << r.dump(1);
    EXPECT_GT(v.value("measured_iteration_time_s", 0.0), 0.0);
    EXPECT_GT(v.value("predicted_iteration_time_s", 0.0), 0.0);
    EXPECT_DOUBLE_EQ(v.value("predicted_iteration_time_s", 0.0), r["iteration_time_s"].get<double>());
    EXPECT_GT(v.value("measured_peak_gib", 0.0), 0.0);
    EXPECT_GT(v.value("predicted_peak_gib", 0.0), 0.0);
    EXPECT_DOUBLE_EQ(v.value("predicted_peak_gib", 0.0), r["memory"]["peak_gib"].get<double>());
    // "cpu" in FP32: the trainer's allocator sees the whole modelled peak, but for its loss
    // buffers: the logits and their gradient in FP32 (8 bytes per logit) where the model
    // counts Megatron's 6.
    const double loss_buffers = r["memory"].value("loss_buffers", 0.0);
    if (Int(c, "pp") <= 1) {
      EXPECT_GT(loss_buffers, 0.0) << r.dump(1);  // the last stage holds the peak
    }
    EXPECT_NEAR(v.value("predicted_tracked_peak_gib", 0.0),
                v.value("predicted_peak_gib", 0.0) + loss_buffers * (8.0 / 6.0 - 1.0),
                1e-9 * v.value("predicted_peak_gib", 0.0));
    const kt::TrainConfig config = TinyModel(c, tie_embeddings, moe);
    const int64_t world = config.world_size();
    const json peaks = v.value("measured_peak_gib_per_rank", json::array());
    EXPECT_EQ(static_cast<int64_t>(peaks.size()), world);
    double max_peak = 0;
    for (const json& p : peaks) {
      EXPECT_GT(p.get<double>(), 0.0);
      max_peak = std::max(max_peak, p.get<double>());
    }
    EXPECT_DOUBLE_EQ(max_peak, v.value("measured_peak_gib", 0.0));

    absl::StatusOr<kt::TrainResult> local = kt::RunTrainingInProcess(config);
    EXPECT_TRUE(local.ok()) << local.status();
    if (!local.ok()) return world;
    const json losses = v.value("measured_losses", json::array());
    EXPECT_EQ(losses.size(), local->losses.size());
    EXPECT_EQ(static_cast<int>(losses.size()), kVerifySteps);
    for (size_t i = 0; i < losses.size() && i < local->losses.size(); ++i) {
      const double got = losses[i].get<double>(), want = local->losses[i];
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << "step " << i;
    }
    // The same per-rank tracking-allocator peaks as in this process (same buffers).
    for (size_t i = 0; i < peaks.size() && i < local->ranks.size(); ++i) {
      EXPECT_NEAR(peaks[i].get<double>() * 1024 * 1024 * 1024,
                  static_cast<double>(local->ranks[i].peak_bytes), 1.0)
          << "rank " << i;
    }
    return world;
  }

  fs::path bin_, dir_, err_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(VerifyE2eTest, ProfileJobVerifiesItsBestLayoutOnOneWorker) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string id = RunJob(R"(name: tiny-verify
model: {name: tiny, num_layers: 4, hidden_size: 64, num_attention_heads: 4, vocab_size: 256}
training: {seq_length: 64, global_batch_size: 8, precision: fp32, flash_attention: false}
cluster: {gpu: cpu, num_gpus: 2, gpus_per_node: 2}
search: {mode: profile, top_k: 3, verify_top_k: 1}
)");
  json results = Results(id);
  ASSERT_FALSE(results.is_discarded());
  EXPECT_EQ(results["state"], "JOB_STATE_SUCCEEDED");
  const json& ranked = results["plan"]["ranked"];
  ASSERT_GE(ranked.size(), 2u);
  EXPECT_EQ(ranked[0]["source"], "measured");
  EXPECT_EQ(ExpectVerified(ranked[0]), 2);
  // Only the top 1 is verified: nothing to compare it with.
  EXPECT_FALSE(ranked[1].contains("verification")) << ranked[1].dump();
  const json& summary = results["plan"]["verification_summary"];
  EXPECT_EQ(Int(summary, "verified"), 1) << summary.dump();
  EXPECT_EQ(summary.value("verdict", std::string()),
            "one layout verified (rank 1): nothing to compare it with");

  // The table: measured next to predicted with the error in %.
  Output table = Cli("results " + id);
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("# verification"), std::string::npos) << table.out;
  // The timed steps' range: the steps after the first, as --json has them.
  const std::vector<double> steps =
      ranked[0]["verification"]["measured_step_seconds"].get<std::vector<double>>();
  ASSERT_EQ(steps.size(), static_cast<size_t>(kVerifySteps));
  const auto [lo, hi] = std::minmax_element(steps.begin() + 1, steps.end());
  EXPECT_NE(table.out.find(absl::StrFormat("s measured (steps %.4g-%.4g s), ", *lo, *hi)),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("GiB predicted as the trainer allocates ("), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("GiB with the framework); 2 ranks"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("# verification ranking: one layout verified (rank 1)"),
            std::string::npos)
      << table.out;

  // REST serves the same verification.
  httplib::Client http("127.0.0.1", coordinator_->http_port());
  http.set_read_timeout(60, 0);  // httplib's 5 s: too short on a loaded machine
  auto res = http.Get(("/v1/jobs/" + id + "/results").c_str());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json rest = json::parse(res->body, nullptr, false);
  ASSERT_FALSE(rest.is_discarded());
  EXPECT_EQ(rest["plan"]["ranked"][0]["verification"], ranked[0]["verification"]);
  // One dialect: REST and the CLI's --json both print the fields at their defaults too.
  EXPECT_EQ(rest["plan"]["verification_summary"]["verdict"], summary["verdict"]);
  EXPECT_EQ(rest["plan"]["verification_summary"]["pairs"], "0");
}

// World 4 (tp1 pp2 dp2): more ranks than one 2-device worker has.
// Tied embeddings (GPT's default): the first stage (ranks 0-1, one worker) and the last
// (ranks 2-3, the other) sum the table's and its copy's gradients across the workers.
constexpr char kGangSpec[] = R"(name: tiny-verify-gang
model: {name: tiny, num_layers: 4, hidden_size: 64, num_attention_heads: 4, vocab_size: 256, tie_embeddings: true}
training: {seq_length: 64, global_batch_size: 8, precision: fp32, flash_attention: false}
cluster: {gpu: cpu, num_gpus: 4, gpus_per_node: 4}
search: {mode: model, top_k: 1, verify_top_k: 1, tp: [1], pp: [2], dp: [2], vp: [1], micro_batch_size: [1]}
)";

TEST_F(VerifyE2eTest, ALayoutLargerThanOneWorkerRunsAsAGangOverBothWorkers) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string id = RunJob(kGangSpec);
  json results = Results(id);
  ASSERT_FALSE(results.is_discarded());
  const json& ranked = results["plan"]["ranked"];
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_EQ(ExpectVerified(ranked[0], /*tie_embeddings=*/true), 4);
  // Each worker ran one part of two ranks.
  const std::string a = ReadFile(dir_ / "cpu-a.log"), b = ReadFile(dir_ / "cpu-b.log");
  const bool a_first = a.find("ranks 0..1 of 4") != std::string::npos;
  EXPECT_NE((a_first ? a : b).find("ranks 0..1 of 4"), std::string::npos) << a << b;
  EXPECT_NE((a_first ? b : a).find("ranks 2..3 of 4"), std::string::npos) << a << b;
}

// Three expert layers of four experts (top-2, dropless) after one dense layer, EP over the
// two DP ranks of each stage; the two stages run on the two workers.
constexpr char kMoeSpec[] = R"(name: tiny-moe-verify
model: {name: tiny-moe, num_layers: 4, hidden_size: 64, num_attention_heads: 4, vocab_size: 256, num_experts: 4, moe_router_topk: 2, moe_ffn_hidden_size: 64, first_k_dense_layers: 1}
training: {seq_length: 64, global_batch_size: 8, precision: fp32, flash_attention: false, moe_routing: dropless}
cluster: {gpu: cpu, num_gpus: 4, gpus_per_node: 4}
search: {mode: model, top_k: 1, verify_top_k: 1, tp: [1], pp: [2], dp: [2], vp: [1], micro_batch_size: [1], ep: [2], etp: [1], moe_token_dispatcher: [alltoall]}
)";

TEST_F(VerifyE2eTest, AMixtureOfExpertsLayoutTrainsItsExpertLayersOnTheWorkers) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string id = RunJob(kMoeSpec);
  json results = Results(id);
  ASSERT_FALSE(results.is_discarded());
  const json& ranked = results["plan"]["ranked"];
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_EQ(Int(ranked[0]["config"], "ep"), 2) << ranked[0].dump(1);
  EXPECT_EQ(ExpectVerified(ranked[0], /*tie_embeddings=*/false, /*moe=*/true), 4);
}

TEST_F(VerifyE2eTest, AGangWhosePeerNeverComesIsNotVerifiedAndSaysWhy) {
  // The stopped worker must still count as registered when the ranking is ready (the
  // layout is placed on the workers not lost then): a worker is lost after a lease timeout
  // without a heartbeat, so that timeout is 60 s here, far longer than submitting and
  // planning take even on a loaded machine (with 5 s, a submit slower than that would find
  // the stopped worker lost and not place the gang on it, and the status would differ).
  ASSERT_NO_FATAL_FAILURE(Start(/*rendezvous_timeout_ms=*/"1500", /*max_attempts=*/"1",
                                /*lease_timeout_ms=*/"60000"));
  // Both workers are registered (the layout is placed on two), then one stops answering:
  // the other's part waits 1.5 s for ranks 2..3, fails, and with one attempt allowed the
  // layout is not verified; the job still succeeds with its ranking.
  workers_[1]->Send(SIGSTOP);
  const std::string id = RunJob(kGangSpec);
  json results = Results(id);
  ASSERT_FALSE(results.is_discarded());
  EXPECT_EQ(results["state"], "JOB_STATE_SUCCEEDED");
  const json& v = results["plan"]["ranked"][0]["verification"];
  const std::string status = v.value("status", std::string());
  EXPECT_EQ(status.rfind("not verified: worker ", 0), 0u) << status;
  EXPECT_NE(status.find("was not set within 1500 ms"), std::string::npos) << status;
  EXPECT_NE(status.find("gave up after 1 attempts"), std::string::npos) << status;
  EXPECT_GT(v.value("predicted_iteration_time_s", 0.0), 0.0);
  EXPECT_EQ(v.value("measured_iteration_time_s", 0.0), 0.0);
  EXPECT_EQ(v["measured_peak_gib_per_rank"], json::array());
  // Nothing was verified: nothing to summarise.
  EXPECT_FALSE(results["plan"].contains("verification_summary")) << results["plan"].dump();
}

}  // namespace
