// The trainer on the CUDA backend against the CPU trainer: same model, data and seed.
// fp32 on one GPU follows the CPU's losses (cuBLAS sums in another order); bf16 with fp32
// master weights trains the same model with 8-bit mantissas; layouts over several GPUs
// (NCCL groups, host-staged point-to-point) equal one GPU. Label gpu: every test skips,
// naming the reason, where the binary has no CUDA backend or the machine too few devices.
#include <cmath>

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
  c.micro_batch_size = 2;
  c.num_micro_batches = 4;
  c.steps = 5;
  c.lr = 1e-2f;
  c.flash_attention = true;
  return c;
}

#define SKIP_WITHOUT_GPUS(n)                                                   \
  if (absl::Status s = CheckCudaDevicesForRanks(n); !s.ok()) GTEST_SKIP() << s

absl::StatusOr<TrainResult> Train(const TrainConfig& c) { return RunTrainingInProcess(c); }

TEST(CudaTrainingTest, Fp32OnOneGpuFollowsTheCpuLosses) {
  SKIP_WITHOUT_GPUS(1);
  TrainConfig c = Small();
  auto cpu = Train(c);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  c.backend = BackendKind::kCuda;
  auto gpu = Train(c);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(gpu->losses[i], cpu->losses[i], 1e-3 * cpu->losses[i]) << "step " << i;
  }
  EXPECT_LT(gpu->losses[4], gpu->losses[0] - 0.5);
  // The same tensors are allocated, so the tracked peaks agree within the backends'
  // workspaces (the CUDA attention and norm scratch buffers).
  EXPECT_GT(gpu->ranks[0].peak_bytes, 0);
  EXPECT_EQ(gpu->ranks[0].parameter_count, cpu->ranks[0].parameter_count);
}

TEST(CudaTrainingTest, Bf16WithFp32MasterWeightsTrainsTheSameModel) {
  SKIP_WITHOUT_GPUS(1);
  TrainConfig c = Small();
  c.backend = BackendKind::kCuda;
  auto fp32 = Train(c);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  c.dtype = DType::kBF16;
  auto bf16 = Train(c);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(bf16->losses[i], fp32->losses[i], 0.03 * fp32->losses[i]) << "step " << i;
  }
  // Without the master copy, bf16 updates of lr·1e-2-sized steps on O(1) weights would
  // round away; the loss falls as in fp32.
  EXPECT_LT(bf16->losses[4], bf16->losses[0] - 0.5);
  // 16-bit weights, gradients and activations, plus a 4-byte master copy: static bytes
  // per parameter 2 + 2 + 4 + 8 = 16, as fp32's 4 + 4 + 8; activations halve.
  EXPECT_LT(bf16->ranks[0].peak_bytes, fp32->ranks[0].peak_bytes);
}

TEST(CudaTrainingTest, DistributedOptimizerOnOneGpuEqualsThePlainOne) {
  SKIP_WITHOUT_GPUS(1);
  // fp32: in bf16, run-to-run differences of the embedding gradient's atomic adds flip
  // roundings of the 16-bit weights and show in the loss (seen on an H100: beyond 1e-5).
  TrainConfig c = Small();
  c.backend = BackendKind::kCuda;
  auto plain = Train(c);
  ASSERT_TRUE(plain.ok()) << plain.status();
  c.distributed_optimizer = true;
  auto dist = Train(c);
  ASSERT_TRUE(dist.ok()) << dist.status();
  // dp = 1: the reduce-scatter and all-gather are in place, so the steps are the same
  // kernels (atomic adds in the embedding gradient may reorder sums between runs).
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(dist->losses[i], plain->losses[i], 1e-4 * plain->losses[i]) << i;
  }
}

TEST(CudaTrainingTest, Tp2Pp2OnFourGpusEqualsOneGpu) {
  SKIP_WITHOUT_GPUS(4);
  TrainConfig c = Small();
  c.backend = BackendKind::kCuda;
  auto one = Train(c);
  ASSERT_TRUE(one.ok()) << one.status();
  c.tp = 2;
  c.pp = 2;
  c.sequence_parallel = true;
  auto four = Train(c);
  ASSERT_TRUE(four.ok()) << four.status();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(four->losses[i], one->losses[i], 1e-3 * one->losses[i]) << "step " << i;
  }
}

TEST(CudaTrainingTest, Dp2OnTwoGpusEqualsOneGpu) {
  SKIP_WITHOUT_GPUS(2);
  TrainConfig c = Small();
  c.backend = BackendKind::kCuda;
  c.num_micro_batches = 8;
  auto one = Train(c);
  ASSERT_TRUE(one.ok()) << one.status();
  c.num_micro_batches = 4;
  c.dp = 2;
  c.distributed_optimizer = true;
  auto two = Train(c);
  ASSERT_TRUE(two.ok()) << two.status();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(two->losses[i], one->losses[i], 1e-3 * one->losses[i]) << "step " << i;
  }
}

}  // namespace
}  // namespace paratune::kernels::training
