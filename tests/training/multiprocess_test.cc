// paratune-train as two processes (ranks 0–1 and 2–3 of TP2 × PP2, Gloo over TCP with a
// FileStore rendezvous) trains the same model as the single-rank run in this process:
// equal losses within 1e-5 relative over 3 steps; and a mixture-of-experts model whose EP
// group spans the two processes (its all-to-alls cross them).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/training/training.h"
#include "nlohmann/json.hpp"
#include "tests/training/loss_harness.h"

namespace paratune::kernels::training {
namespace {

std::string Bin() {
  const char* dir = std::getenv("PARATUNE_BIN_DIR");
  return absl::StrCat(dir ? dir : "bin", "/paratune-train");
}

// Runs paratune-train with `flags` as two processes, ranks [0, half) and [half, 2·half);
// their JSON outputs.
std::pair<nlohmann::json, nlohmann::json> RunTwoProcesses(const std::string& flags, int half) {
  char tmpl[] = "/tmp/paratune-train-test-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string all = absl::StrCat(flags, " --store ", dir);
  const std::string out0 = absl::StrCat(dir, "/out0.json");
  const std::string out1 = absl::StrCat(dir, "/out1.json");
  const std::string cmd =
      absl::StrCat("(", Bin(), all, " --ranks ", half, ":", half, " > ", out1, " & ", Bin(), all,
                   " --ranks 0:", half, " > ", out0, "; wait)");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto read = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str(), nullptr, false);
  };
  std::pair<nlohmann::json, nlohmann::json> out = {read(out0), read(out1)};
  std::filesystem::remove_all(dir);
  return out;
}

// The model both tests train: its paratune-train flags and, as one rank, its config (the
// harness's tiny model, three steps).
constexpr char kModelFlags[] =
    " --hidden 32 --heads 4 --vocab 64 --layers 4 --seq 16 --micro-batch 2 --steps 3"
    " --lr 0.01";
TrainConfig SingleRankModel() {
  TrainConfig c = Tiny();
  c.steps = 3;
  return c;
}

// Both processes report the losses of `reference` run in this process.
void ExpectLossesOf(const TrainConfig& reference, const nlohmann::json& a,
                    const nlohmann::json& b) {
  const std::vector<double> want = Losses(reference);
  ExpectSame(a["losses"].get<std::vector<double>>(), want);
  ExpectSame(b["losses"].get<std::vector<double>>(), want);
}

TEST(MultiProcessTrainingTest, TwoProcessesEqualSingleRank) {
  const auto [a, b] =
      RunTwoProcesses(absl::StrCat(kModelFlags, " --micro-batches 4 --tp 2 --pp 2"), 2);
  ASSERT_FALSE(a.is_discarded() || b.is_discarded());
  ExpectLossesOf(SingleRankModel(), a, b);
  // Each process reports its own two ranks.
  ASSERT_EQ(a["ranks"].size(), 2u);
  EXPECT_EQ(a["ranks"][0]["rank"].get<int>(), 0);
  EXPECT_EQ(b["ranks"][1]["rank"].get<int>(), 3);
  EXPECT_GT(b["ranks"][0]["peak_bytes"].get<int64_t>(), 0);
}

// DP 2 × EP 2, one rank per process: every expert layer's dispatch and combine cross the
// processes; the losses equal one rank's (dropless routing, the same global batch).
TEST(MultiProcessTrainingTest, AnExpertGroupAcrossTwoProcessesEqualsSingleRank) {
  const std::string experts =
      " --experts 4 --topk 2 --expert-ffn 16 --first-k-dense 1 --routing dropless";
  const auto [a, b] =
      RunTwoProcesses(absl::StrCat(kModelFlags, experts, " --micro-batches 2 --dp 2 --ep 2"), 1);
  ASSERT_FALSE(a.is_discarded() || b.is_discarded());
  TrainConfig c = SingleRankModel();  // the same global batch on one rank
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden = 16;
  c.moe.routing = ExpertRouting::kDropless;
  c.first_k_dense_layers = 1;
  ExpectLossesOf(c, a, b);
  // Each process holds half of every expert layer's routed experts.
  EXPECT_EQ(a["ranks"][0]["expert_parameters"].get<int64_t>(), 3 * 2 * 3 * 16 * 32);
  EXPECT_EQ(b["ranks"][0]["expert_parameters"].get<int64_t>(), 3 * 2 * 3 * 16 * 32);
}

}  // namespace
}  // namespace paratune::kernels::training
