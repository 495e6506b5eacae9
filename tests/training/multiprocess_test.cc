// paratune-train as two processes (ranks 0–1 and 2–3 of TP2 × PP2, Gloo over TCP with a
// FileStore rendezvous) trains the same model as the single-rank run in this process:
// equal losses within 1e-5 relative over 3 steps.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/training/training.h"
#include "nlohmann/json.hpp"

namespace paratune::kernels::training {
namespace {

std::string Bin() {
  const char* dir = std::getenv("PARATUNE_BIN_DIR");
  return absl::StrCat(dir ? dir : "bin", "/paratune-train");
}

TEST(MultiProcessTrainingTest, TwoProcessesEqualSingleRank) {
  char tmpl[] = "/tmp/paratune-train-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string flags = absl::StrCat(
      " --hidden 32 --heads 4 --vocab 64 --layers 4 --seq 16 --micro-batch 2"
      " --micro-batches 4 --tp 2 --pp 2 --steps 3 --lr 0.01 --store ", dir);
  const std::string out0 = absl::StrCat(dir, "/out0.json");
  const std::string out1 = absl::StrCat(dir, "/out1.json");
  const std::string cmd = absl::StrCat("(", Bin(), flags, " --ranks 2:2 > ", out1, " & ", Bin(),
                                       flags, " --ranks 0:2 > ", out0, "; wait)");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto read = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
  };
  const nlohmann::json a = read(out0), b = read(out1);
  std::filesystem::remove_all(dir);

  TrainConfig c;
  c.shape.hidden_size = 32;
  c.shape.num_attention_heads = 4;
  c.shape.vocab_size = 64;
  c.num_layers = 4;
  c.seq_length = 16;
  c.parallel.micro_batch_size = 2;
  c.num_micro_batches = 4;
  c.steps = 3;
  c.lr = 0.01f;
  absl::StatusOr<TrainResult> ref = RunTrainingInProcess(c);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(a["losses"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const double want = ref->losses[i];
    EXPECT_NEAR(a["losses"][i].get<double>(), want, 1e-5 * want) << "step " << i;
    EXPECT_NEAR(b["losses"][i].get<double>(), want, 1e-5 * want) << "step " << i;
  }
  // Each process reports its own two ranks.
  ASSERT_EQ(a["ranks"].size(), 2u);
  EXPECT_EQ(a["ranks"][0]["rank"].get<int>(), 0);
  EXPECT_EQ(b["ranks"][1]["rank"].get<int>(), 3);
  EXPECT_GT(b["ranks"][0]["peak_bytes"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace paratune::kernels::training
