// The trainer on the CUDA backend against the CPU trainer: same model, data and seed.
// fp32 on one GPU follows the CPU's losses (cuBLAS sums in another order); bf16 with fp32
// master weights trains the same model with 8-bit mantissas; layouts over several GPUs
// (NCCL groups, host-staged point-to-point) equal one GPU. Label gpu: every test skips,
// naming the reason, where the binary has no CUDA backend or the machine too few devices.
#include <algorithm>
#include <cmath>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/training/training.h"

namespace paratune::kernels::training {
namespace {

// A model big enough that the GEMMs, flash attention blocks and the vocabulary split are
// not degenerate, small enough for any GPU.
TrainConfig Small() {
  TrainConfig c;
  c.shape.hidden_size = 128;
  c.shape.num_attention_heads = 4;
  c.shape.vocab_size = 256;
  c.num_layers = 4;
  c.seq_length = 64;
  c.parallel.micro_batch_size = 2;
  c.num_micro_batches = 4;
  c.steps = 5;
  c.lr = 1e-2f;
  c.flash_attention = true;
  return c;
}

#define SKIP_WITHOUT_GPUS(n)                                                   \
  if (absl::Status s = CheckCudaDevicesForRanks(n); !s.ok()) GTEST_SKIP() << s

// Trains `a` and `b` and expects their losses to agree within `rel` (relative) at every
// step; returns both runs (empty where one failed).
std::pair<TrainResult, TrainResult> ExpectSameLosses(const TrainConfig& a, const TrainConfig& b,
                                                     double rel) {
  absl::StatusOr<TrainResult> ra = RunTrainingInProcess(a), rb = RunTrainingInProcess(b);
  EXPECT_TRUE(ra.ok()) << ra.status();
  EXPECT_TRUE(rb.ok()) << rb.status();
  if (!ra.ok() || !rb.ok()) return {};
  EXPECT_EQ(ra->losses.size(), static_cast<size_t>(a.steps));
  EXPECT_EQ(rb->losses.size(), ra->losses.size());
  for (size_t i = 0; i < std::min(ra->losses.size(), rb->losses.size()); ++i) {
    EXPECT_NEAR(rb->losses[i], ra->losses[i], rel * ra->losses[i]) << "step " << i;
  }
  return {*std::move(ra), *std::move(rb)};
}

TrainConfig OnGpu(TrainConfig c) {
  c.backend = BackendKind::kCuda;
  return c;
}

TEST(CudaTrainingTest, Fp32OnOneGpuFollowsTheCpuLosses) {
  SKIP_WITHOUT_GPUS(1);
  auto [cpu, gpu] = ExpectSameLosses(Small(), OnGpu(Small()), 1e-3);
  ASSERT_EQ(gpu.losses.size(), 5u);
  EXPECT_LT(gpu.losses[4], gpu.losses[0] - 0.5);
  EXPECT_GT(gpu.ranks[0].peak_bytes, 0);
  EXPECT_EQ(gpu.ranks[0].parameter_count, cpu.ranks[0].parameter_count);
}

// Small() with three expert layers of 8 SwiGLU experts (top-2, dropless) after one dense.
TrainConfig SmallMoe() {
  TrainConfig c = Small();
  c.shape.activation = Activation::kSwiglu;
  c.moe.num_experts = 8;
  c.moe.topk = 2;
  c.moe.ffn_hidden = 128;
  c.moe.routing = ExpertRouting::kDropless;
  c.first_k_dense_layers = 1;
  return c;
}

TEST(CudaTrainingTest, MixtureOfExpertsFp32OnOneGpuFollowsTheCpuLosses) {
  SKIP_WITHOUT_GPUS(1);
  auto [cpu, gpu] = ExpectSameLosses(SmallMoe(), OnGpu(SmallMoe()), 1e-3);
  ASSERT_EQ(gpu.losses.size(), 5u);
  EXPECT_EQ(gpu.ranks[0].expert_parameter_count, cpu.ranks[0].expert_parameter_count);
  // bf16 trains the same model (the router in fp32).
  TrainConfig bf16 = OnGpu(SmallMoe());
  bf16.dtype = DType::kBF16;
  ExpectSameLosses(OnGpu(SmallMoe()), bf16, 0.03);
}

TEST(CudaTrainingTest, ExpertParallelOverTwoGpusEqualsOneGpu) {
  SKIP_WITHOUT_GPUS(2);
  TrainConfig two = OnGpu(SmallMoe());
  two.parallel.dp = two.parallel.ep = 2;
  TrainConfig one = OnGpu(SmallMoe());
  one.num_micro_batches *= 2;
  ExpectSameLosses(one, two, 1e-3);
}

TEST(CudaTrainingTest, Bf16WithFp32MasterWeightsTrainsTheSameModel) {
  SKIP_WITHOUT_GPUS(1);
  TrainConfig bf16 = OnGpu(Small());
  bf16.dtype = DType::kBF16;
  auto [fp32_run, bf16_run] = ExpectSameLosses(OnGpu(Small()), bf16, 0.03);
  ASSERT_EQ(bf16_run.losses.size(), 5u);
  // Without the master copy, bf16 updates of lr·1e-2-sized steps on O(1) weights would
  // round away; the loss falls as in fp32.
  EXPECT_LT(bf16_run.losses[4], bf16_run.losses[0] - 0.5);
  // 16-bit weights, gradients and activations, plus a 4-byte master copy: static bytes
  // per parameter 2 + 2 + 4 + 8 = 16, as fp32's 4 + 4 + 8; activations halve.
  EXPECT_LT(bf16_run.ranks[0].peak_bytes, fp32_run.ranks[0].peak_bytes);
}

// dp = 1: the reduce-scatter and all-gather are in place, so the steps are the same
// kernels. fp32, 1e-4: atomic adds in the embedding gradient reorder sums between runs,
// and in bf16 that flips roundings of the weights (seen on an H100: beyond 1e-5).
TEST(CudaTrainingTest, DistributedOptimizerOnOneGpuEqualsThePlainOne) {
  SKIP_WITHOUT_GPUS(1);
  TrainConfig dist = OnGpu(Small());
  dist.parallel.data_parallel_sharding = DataParallelSharding::kOptimizer;
  ExpectSameLosses(OnGpu(Small()), dist, 1e-4);
}

TEST(CudaTrainingTest, Tp2Pp2OnFourGpusEqualsOneGpu) {
  SKIP_WITHOUT_GPUS(4);
  TrainConfig four = OnGpu(Small());
  four.parallel.tp = 2;
  four.parallel.pp = 2;
  four.parallel.sequence_parallel = true;
  ExpectSameLosses(OnGpu(Small()), four, 1e-3);
}

TEST(CudaTrainingTest, Dp2OnTwoGpusEqualsOneGpu) {
  SKIP_WITHOUT_GPUS(2);
  TrainConfig one = OnGpu(Small());
  one.num_micro_batches = 8;
  TrainConfig two = OnGpu(Small());
  two.parallel.dp = 2;
  two.parallel.data_parallel_sharding = DataParallelSharding::kOptimizer;
  ExpectSameLosses(one, two, 1e-3);
}

}  // namespace
}  // namespace paratune::kernels::training
