// The served model on a CUDA device against the same model on the CPU: a prefill, a
// chunked prefill and decodes over a paged cache give the CPU's logits and tokens in fp32
// (dense, sliding-window and expert layers) and the CPU's logits within bf16's precision
// in bf16; the worker's serving step runs on the device with the weights and cache it
// reports, and the serving loop serves a trace with the CPU's tokens. Skips without a
// device (and in builds without CUDA).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_model.h"
#include "kernels/serving/serving_step_runner.h"
#include "tests/kernels/serving_harness.h"

namespace paratune::kernels::serving {
namespace {

using testing::Prompt;
using testing::SmallExpertModel;
using testing::SmallModel;
using testing::ToleranceRatio;

bool HaveDevice() {
  absl::StatusOr<int> n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

// Logits (then tokens, as floats) of five steps: seq 0's prompt of `prompt` tokens with
// seq 1's first 6 of 10 prompt tokens, then seq 0's first decode with seq 1's last 4 prompt
// tokens, then three decodes of both. A prompt of 64 tokens or more runs through the
// device's flash attention, the rest through the paged kernel.
absl::StatusOr<std::vector<float>> RunSteps(const ServingConfig& config, Backend& backend,
                                            int64_t prompt) {
  std::unique_ptr<Communicator> self = MakeSelfCommunicator(backend);
  ParallelContext ctx{&backend, self.get(), nullptr};
  absl::StatusOr<std::unique_ptr<ServingModel>> made = ServingModel::Create(config, ctx);
  if (!made.ok()) return made.status();
  ServingModel& m = **made;
  const int64_t V = config.shape.vocab_size;
  const std::vector<int32_t> p0 = Prompt(0, prompt, V), p1 = Prompt(1, 10, V);
  std::vector<float> logits, tokens;
  const auto step = [&](const std::vector<int32_t>& in,
                        const std::vector<SeqChunk>& chunks) -> absl::StatusOr<StepOutput> {
    absl::StatusOr<StepOutput> out = m.Step(in, chunks, true);
    if (!out.ok()) return out.status();
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
    for (int32_t t : out->next_tokens) tokens.push_back(static_cast<float>(t));
    return out;
  };
  std::vector<int32_t> in = p0;
  in.insert(in.end(), p1.begin(), p1.begin() + 6);
  absl::StatusOr<StepOutput> out = step(in, {{0, 0, prompt, true}, {1, 0, 6, false}});
  if (!out.ok()) return out.status();
  int32_t t0 = out->next_tokens[0];
  in = {t0};
  in.insert(in.end(), p1.begin() + 6, p1.end());
  out = step(in, {{0, prompt, 1, true}, {1, 6, 4, true}});
  if (!out.ok()) return out.status();
  for (int64_t i = 0; i < 3; ++i) {
    out = step({out->next_tokens[0], out->next_tokens[1]},
               {{0, prompt + 1 + i, 1, true}, {1, 10 + i, 1, true}});
    if (!out.ok()) return out.status();
  }
  logits.insert(logits.end(), tokens.begin(), tokens.end());
  return logits;
}

absl::StatusOr<std::vector<float>> OnCpu(const ServingConfig& config, int64_t prompt) {
  auto backend = MakeCpuBackend(0, 1);
  return RunSteps(config, *backend, prompt);
}

absl::StatusOr<std::vector<float>> OnCuda(const ServingConfig& config, int64_t prompt) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeCudaBackend(0, 0);
  if (!backend.ok()) return backend.status();
  return RunSteps(config, **backend, prompt);
}

TEST(ServingCudaModel, Fp32StepsGiveTheCpuLogitsAndTokens) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  ServingConfig windowed = SmallModel(1, 4);
  windowed.attention_window = 6;
  windowed.window_attn_skip_freq = 2;
  ServingConfig bf16_cache = SmallModel(1);
  bf16_cache.kv_dtype = DType::kBF16;
  // The CPU's E4M3 conversion rounds as the device's, so both read the same cache. (A
  // flash prompt attends to its K and V unrounded, as engines prefill, where the CPU reads
  // them back from the cache: the 16- and 8-bit caches run paged prompts here.)
  ServingConfig fp8_cache = SmallModel(1);
  fp8_cache.kv_dtype = DType::kFp8E4M3;
  struct Case {
    const char* name;
    ServingConfig config;
    int64_t prompt;
  };
  const std::vector<Case> cases = {
      {"dense", SmallModel(1), 9},         {"dense, flash prompt", SmallModel(1), 80},
      {"sliding window", windowed, 9},     {"sliding window, flash prompt", windowed, 80},
      {"bf16 cache", bf16_cache, 9},       {"fp8 cache", fp8_cache, 9},
      {"experts", SmallExpertModel(1), 80}};
  for (const auto& [name, config, prompt] : cases) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::vector<float>> cpu = OnCpu(config, prompt);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    absl::StatusOr<std::vector<float>> gpu = OnCuda(config, prompt);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    // 9 sampled rows of logits, then their 9 tokens.
    ASSERT_EQ(cpu->size(), 9u * (config.shape.vocab_size + 1));
    const size_t tokens = 9, n = cpu->size() - tokens;
    EXPECT_LE(ToleranceRatio({gpu->begin(), gpu->begin() + n}, {cpu->begin(), cpu->begin() + n},
                             1e-4, 1e-3),
              1.0);
    EXPECT_EQ(std::vector<float>(gpu->begin() + n, gpu->end()),
              std::vector<float>(cpu->begin() + n, cpu->end()));
  }
}

TEST(ServingCudaModel, Bf16StepsStayWithinBf16OfTheCpuLogits) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  const ServingConfig fp32 = SmallModel(1);
  ServingConfig bf16 = fp32;
  bf16.dtype = DType::kBF16;
  absl::StatusOr<std::vector<float>> cpu = OnCpu(fp32, 80);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<float>> gpu = OnCuda(bf16, 80);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  // The logits only (the tokens may differ where two logits are within bf16 of each other):
  // bf16 keeps 8 bits of mantissa, 2^-8 = 0.4 % per rounding, over two layers' GEMMs,
  // norms and residuals.
  const size_t n = cpu->size() - 9;
  EXPECT_LE(ToleranceRatio({gpu->begin(), gpu->begin() + n}, {cpu->begin(), cpu->begin() + n}, 5e-2,
                           5e-2),
            1.0);
}

TEST(ServingCudaModel, ServingStepRunsOnTheDeviceWithItsWeightsAndCache) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  ServingStepConfig c;
  c.model = SmallModel(1, 2);
  c.phase = ServingPhase::kDecode;
  c.batch = 4;
  c.context_length = 40;
  c.logits = true;
  c.iters = 3;
  absl::StatusOr<ServingStepResult> cpu = RunServingStep(c);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  c.backend = BackendKind::kCuda;
  absl::StatusOr<ServingStepResult> gpu = RunServingStep(c);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->weight_bytes, cpu->weight_bytes);
  EXPECT_EQ(gpu->kv_cache_bytes, cpu->kv_cache_bytes);
  ASSERT_EQ(gpu->phases.size(), 6u);
  for (const PhaseTiming& p : gpu->phases) {
    if (p.phase == "total" || p.phase == "gemm" || p.phase == "attention") {
      EXPECT_GT(p.median_s, 0) << p.phase;
    }
  }
  // bf16 halves every weight; a prefill runs too.
  c.model.dtype = DType::kBF16;
  c.phase = ServingPhase::kPrefill;
  c.seq_length = 24;
  absl::StatusOr<ServingStepResult> prefill = RunServingStep(c);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_EQ(2 * prefill->weight_bytes, cpu->weight_bytes);
}

TEST(ServingCudaModel, ServingLoopServesTheCpuTokens) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  ServeOptions o = testing::TinyServe(1);
  o.trace.concurrency = 3;
  o.keep_tokens = true;
  absl::StatusOr<ServeResult> cpu = RunServeLoop(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  o.backend = BackendKind::kCuda;
  absl::StatusOr<ServeResult> gpu = RunServeLoop(o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->requests.size(), cpu->requests.size());
  for (size_t i = 0; i < cpu->requests.size(); ++i) {
    EXPECT_EQ(gpu->requests[i].tokens, cpu->requests[i].tokens) << "request " << i;
    EXPECT_EQ(gpu->requests[i].output_tokens, gpu->requests[i].osl);
  }
  // Pipeline stages stay on the CPU.
  o.model.parallel.pp = 2;
  EXPECT_EQ(RunServeLoop(o).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace paratune::kernels::serving
