// paratune-serve-bench run tiny (2 ranks, Poisson arrivals): its JSON accounts for every
// request and token.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string RunCommand(const std::string& cmd, int* status) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

TEST(ServeBench, TinyPoissonRunAccountsForEveryRequestAndToken) {
  const char* bin_dir = std::getenv("PARATUNE_BIN_DIR");
  ASSERT_NE(bin_dir, nullptr);
  constexpr int kRequests = 6, kIsl = 10, kOsl = 4;
  int status = -1;
  const std::string out = RunCommand(
      std::string(bin_dir) +
          "/paratune-serve-bench --tp 2 --layers 1 --hidden 64 --heads 4 --groups 2 --ffn 128 "
          "--vocab 256 --isl 10 --osl 4 --num_requests 6 --rate 2000 --max_batch_size 3 "
          "--max_num_tokens 16 --kv_block_size 4 --kv_blocks 32 --json --requests",
      &status);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["summary"]["wrong"], 0);
  EXPECT_EQ(j["trace"]["mode"], "rate");
  const nlohmann::json& round = j["rounds"][0];
  EXPECT_EQ(round["output_tokens"], kRequests * kOsl);
  EXPECT_EQ(round["prefill_tokens"], kRequests * kIsl);
  EXPECT_EQ(round["decode_tokens"], kRequests * (kOsl - 1));
  EXPECT_LE(round["max_step_tokens"].get<int>(), 16);
  EXPECT_LE(round["max_step_sequences"].get<int>(), 3);
  ASSERT_EQ(round["requests"].size(), static_cast<size_t>(kRequests));
  for (const nlohmann::json& r : round["requests"]) {
    EXPECT_EQ(r["output_tokens"], kOsl);
    EXPECT_LE(r["ttft_ms"].get<double>(), r["e2e_ms"].get<double>());
    // e2e = TTFT + (osl − 1)·TPOT by definition of TPOT.
    EXPECT_NEAR(r["e2e_ms"].get<double>(),
                r["ttft_ms"].get<double>() + (kOsl - 1) * r["tpot_ms"].get<double>(),
                1e-6 * r["e2e_ms"].get<double>());
  }
}

}  // namespace
