// The CUDA backend against its CPU twins (label `gpu`; skipped with the reason where no
// CUDA device or no CUDA backend exists). Tolerance tol + |ref|·eps: fp32 1e-4, bf16 3e-2.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/backend.h"
#include "kernels/step_runner.h"
#include "tests/kernels/layer_harness.h"

namespace paratune::kernels {
namespace {

using testing::RandomVector;

std::unique_ptr<Backend> CudaOrSkipReason(std::string* reason) {
  auto be = MakeCudaBackend(0, 0);
  if (!be.ok()) {
    *reason = std::string(be.status().message());
    return nullptr;
  }
  return std::move(*be);
}

#define SKIP_WITHOUT_CUDA(var)                     \
  std::string reason_;                             \
  std::unique_ptr<Backend> var = CudaOrSkipReason(&reason_); \
  if (var == nullptr) GTEST_SKIP() << reason_

void ExpectClose(const std::vector<double>& got, const std::vector<double>& ref, double eps,
                 const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], eps + eps * std::abs(ref[i])) << what << "[" << i << "]";
  }
}

// Runs `op` on both backends with the same host inputs; compares every output tensor.
void CompareOp(Backend& gpu, DType gpu_dtype, double eps, const char* what,
               const std::vector<std::vector<int64_t>>& in_shapes,
               const std::vector<std::vector<int64_t>>& out_shapes,
               const std::function<absl::Status(Backend&, DType, const std::vector<Tensor>&,
                                                const std::vector<Tensor>&)>& op) {
  auto cpu = MakeCpuBackend(0, 1);
  std::vector<std::vector<double>> results[2];
  for (int side = 0; side < 2; ++side) {
    Backend& be = side == 0 ? *cpu : gpu;
    const DType dt = side == 0 ? DType::kF32 : gpu_dtype;
    std::vector<Tensor> ins, outs;
    for (size_t i = 0; i < in_shapes.size(); ++i) {
      auto t = be.Empty(in_shapes[i], dt, MemoryTag::kWorkspace);
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(be.CopyFromHost(*t, RandomVector(t->numel(), 31 + i)).ok());
      ins.push_back(*t);
    }
    for (const auto& s : out_shapes) {
      auto t = be.Zeros(s, dt, MemoryTag::kWorkspace);
      ASSERT_TRUE(t.ok());
      outs.push_back(*t);
    }
    ASSERT_TRUE(op(be, dt, ins, outs).ok()) << what;
    for (const Tensor& t : outs) results[side].push_back(*be.CopyToHost(t));
  }
  for (size_t i = 0; i < results[0].size(); ++i) ExpectClose(results[1][i], results[0][i], eps, what);
}

TEST(CudaBackendTest, ElementwiseKernelsMatchCpuTwins) {
  SKIP_WITHOUT_CUDA(gpu);
  for (auto [dt, eps] : {std::pair{DType::kF32, 1e-4}, std::pair{DType::kBF16, 3e-2}}) {
    CompareOp(*gpu, dt, eps, "gelu", {{1000}}, {{1000}, {1000}},
              [](Backend& be, DType d, auto& in, auto& out) {
                if (auto s = be.GeluForward(d, out[0].data(), in[0].data(), 1000); !s.ok()) return s;
                return be.GeluBackward(d, out[1].data(), in[0].data(), in[0].data(), 1000);
              });
    CompareOp(*gpu, dt, eps, "swiglu", {{8, 64}}, {{8, 32}, {8, 64}},
              [](Backend& be, DType d, auto& in, auto& out) {
                if (auto s = be.SwigluForward(d, out[0].data(), in[0].data(), 8, 32); !s.ok()) return s;
                return be.SwigluBackward(d, out[1].data(), out[0].data(), in[0].data(), 8, 32);
              });
    CompareOp(*gpu, dt, eps, "geglu", {{8, 64}}, {{8, 32}, {8, 64}},
              [](Backend& be, DType d, auto& in, auto& out) {
                if (auto s = be.GegluForward(d, out[0].data(), in[0].data(), 8, 32); !s.ok())
                  return s;
                return be.GegluBackward(d, out[1].data(), out[0].data(), in[0].data(), 8, 32);
              });
    CompareOp(*gpu, dt, eps, "squared relu", {{1000}}, {{1000}, {1000}},
              [](Backend& be, DType d, auto& in, auto& out) {
                if (auto s = be.SquaredReluForward(d, out[0].data(), in[0].data(), 1000); !s.ok()) {
                  return s;
                }
                return be.SquaredReluBackward(d, out[1].data(), in[0].data(), in[0].data(), 1000);
              });
    CompareOp(*gpu, dt, eps, "softmax", {{2, 9, 9}}, {{2, 9, 9}},
              [](Backend& be, DType d, auto& in, auto& out) {
                if (auto s = be.Copy(out[0], in[0]); !s.ok()) return s;
                return be.CausalSoftmaxForward(d, out[0].data(), 2, 9, 0.5f, 4);
              });
    CompareOp(*gpu, dt, eps, "dropout+add", {{4096}, {4096}}, {{4096}, {4096}},
              [](Backend& be, DType d, auto& in, auto& out) {
                auto mask = be.Empty({4096}, DType::kU8, MemoryTag::kWorkspace);
                if (!mask.ok()) return mask.status();
                if (auto s = be.DropoutForward(d, out[0].data(), mask->template data_as<uint8_t>(),
                                               in[0].data(), 4096, 0.3f, 5, 100);
                    !s.ok()) {
                  return s;
                }
                return be.Add(d, out[1].data(), out[0].data(), in[1].data(), 4096);
              });
  }
}

TEST(CudaBackendTest, GroupedGemmMatchesCpuTwin) {
  SKIP_WITHOUT_CUDA(gpu);
  // Three GEMMs of different shapes and transposes in one grouped call (one cuBLAS grouped
  // launch on the GPU, Gemm after Gemm on the CPU): A·Bᵀ, Aᵀ·B and 0.5·A·B.
  for (auto [dt, eps] : {std::pair{DType::kF32, 1e-4}, std::pair{DType::kBF16, 3e-2}}) {
    CompareOp(*gpu, dt, eps, "grouped gemm", {{5, 16}, {24, 16}, {9, 5}, {9, 12}, {6, 8}, {8, 10}},
              {{5, 24}, {5, 12}, {6, 10}}, [](Backend& be, DType d, auto& in, auto& out) {
                std::vector<GemmArgs> g(3);
                g[0].trans_b = true;
                g[0].m = 5, g[0].n = 24, g[0].k = 16;
                g[0].a = in[0].data(), g[0].lda = 16, g[0].b = in[1].data(), g[0].ldb = 16;
                g[0].c = out[0].data(), g[0].ldc = 24;
                g[1].trans_a = true;
                g[1].m = 5, g[1].n = 12, g[1].k = 9;
                g[1].a = in[2].data(), g[1].lda = 5, g[1].b = in[3].data(), g[1].ldb = 12;
                g[1].c = out[1].data(), g[1].ldc = 12;
                g[2].alpha = 0.5f;
                g[2].m = 6, g[2].n = 10, g[2].k = 8;
                g[2].a = in[4].data(), g[2].lda = 8, g[2].b = in[5].data(), g[2].ldb = 10;
                g[2].c = out[2].data(), g[2].ldc = 10;
                return be.GroupedGemm(d, g);
              });
  }
}

TEST(CudaBackendTest, NormsMatchCpuTwins) {
  SKIP_WITHOUT_CUDA(gpu);
  for (auto [dt, eps] : {std::pair{DType::kF32, 1e-4}, std::pair{DType::kBF16, 5e-2}}) {
    CompareOp(*gpu, dt, eps, "layernorm", {{16, 96}, {96}, {96}, {16, 96}},
              {{16, 96}, {16, 96}, {96}, {96}},
              [](Backend& be, DType d, auto& in, auto& out) {
                auto stats = be.Empty({2, 16}, DType::kF32, MemoryTag::kWorkspace);
                if (!stats.ok()) return stats.status();
                float* mean = stats->template data_as<float>();
                if (auto s = be.LayerNormForward(d, out[0].data(), mean, mean + 16, in[0].data(),
                                                 in[1].data(), in[2].data(), 16, 96, 1e-5f);
                    !s.ok()) {
                  return s;
                }
                return be.LayerNormBackward(d, out[1].data(), out[2].data(), out[3].data(),
                                            in[3].data(), in[0].data(), in[1].data(), mean,
                                            mean + 16, 16, 96);
              });
  }
}

// Blocked flash attention against the CPU kernel with many query blocks: s = 200 with
// 64-row blocks (the last one 8 rows), GQA (4 heads, 2 groups: head-in-group r = 0, 1),
// b = 2 and attention dropout; o, lse, dq, dk and dv all compared.
TEST(CudaBackendTest, BlockedFlashAttentionMatchesCpuAcrossBlocks) {
  // [groups 2, rows 64, s 200] fp32 = 102400 bytes: 64-row blocks. Read once per process,
  // so it is set before the first attention call of this test binary.
  setenv("PARATUNE_CUDA_ATTENTION_BUFFER_BYTES", "102400", 1);
  SKIP_WITHOUT_CUDA(gpu);
  constexpr int64_t b = 2, s = 200, heads = 4, groups = 2, d = 32;
  constexpr int64_t W = (heads + 2 * groups) * d;
  // Whole-context attention, and a 90-key sliding window (blocks start at their first row's
  // first key; dK and dV accumulate from zero).
  for (int64_t window : {0, 90}) {
    const std::string what = "blocked flash attention window " + std::to_string(window);
    CompareOp(*gpu, DType::kF32, 2e-4, what.c_str(), {{s * b, W}, {s * b, heads * d}},
              {{s * b, heads * d}, {b * heads * s}, {s * b, W}},
              [&](Backend& be, DType dt, auto& in, auto& out) {
                AttentionArgs a;
                a.batch = b, a.seq = s, a.heads = heads, a.groups = groups, a.head_dim = d;
                a.q = in[0].data(), a.k = in[0].at(heads * d);
                a.v = in[0].at((heads + groups) * d);
                a.ld_qkv = W;
                a.o = out[0].data(), a.ld_o = heads * d;
                a.scale = 0.17f, a.dropout = 0.1f, a.seed = 77, a.global_heads = 8;
                a.head_offset = 4, a.window = window;
                float* lse = out[1].template data_as<float>();
                if (auto st = be.FlashAttentionForward(dt, a, lse); !st.ok()) return st;
                return be.FlashAttentionBackward(dt, a, lse, in[1].data(), out[2].data(),
                                                 out[2].at(heads * d),
                                                 out[2].at((heads + groups) * d));
              });
  }
}

TEST(CudaBackendTest, LayerOnGpuEqualsCpuFp32) {
  SKIP_WITHOUT_CUDA(gpu);
  for (auto [flash, window] :
       {std::pair<bool, int64_t>{false, 0}, {true, 0}, {false, 12}, {true, 12}}) {
    LayerConfig c;
    c.attention_window = window;
    c.shape.hidden_size = 128;  // head_dim 32 for the flash kernel
    c.shape.num_attention_heads = 4;
    c.shape.num_query_groups = 2;
    c.seq_length = 32;
    c.parallel.micro_batch_size = 2;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    c.flash_attention = flash;
    const int64_t n = c.seq_length * c.parallel.micro_batch_size * c.shape.hidden_size;
    const auto x = RandomVector(n, 3), dy = RandomVector(n, 4);
    auto ref = testing::RunLayer(c, x, dy);
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto comm = MakeSelfCommunicator(*gpu);
    ParallelContext ctx{gpu.get(), comm.get(), nullptr};
    auto layer = TransformerLayer::Create(c, ctx);
    ASSERT_TRUE(layer.ok()) << layer.status();
    auto xt = gpu->Empty({n / 128, 128}, DType::kF32, MemoryTag::kActivations);
    auto dyt = gpu->Empty({n / 128, 128}, DType::kF32, MemoryTag::kWorkspace);
    ASSERT_TRUE(gpu->CopyFromHost(*xt, x).ok());
    ASSERT_TRUE(gpu->CopyFromHost(*dyt, dy).ok());
    auto y = (*layer)->Forward(*xt);
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectClose(*gpu->CopyToHost(*y), ref->y, 1e-3, "y");
    auto dx = (*layer)->Backward(*dyt);
    ASSERT_TRUE(dx.ok()) << dx.status();
    ExpectClose(*gpu->CopyToHost(*dx), ref->dx, 1e-3, "dx");
  }
}

TEST(CudaBackendTest, StepRunnerBf16FlashReportsBf16ActivationBytes) {
  SKIP_WITHOUT_CUDA(gpu);
  StepConfig c;
  c.backend = BackendKind::kCuda;
  c.layer.shape.hidden_size = 256;
  c.layer.shape.num_attention_heads = 4;
  c.layer.seq_length = 128;
  c.layer.parallel.micro_batch_size = 2;
  c.layer.dtype = DType::kBF16;
  c.layer.flash_attention = true;
  c.iters = 2;
  auto r = RunLayerStep(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->Find("total")->median_s, 0.0);
  // bf16 activations: x, ln1_out, h1, ln2_out (2 B) + qkv 3sbh + ctx sbh + fc1/act 8sbh
  // (2 B each) + lse 4·a·s·b + norm statistics 16 B per token; no dropout.
  const int64_t s = 128, b = 2, h = 256, a = 4;
  EXPECT_EQ(r->activation_bytes, 2 * (4 + 3 + 1 + 8) * s * b * h + 4 * a * s * b + 16 * s * b);
}

// A last pipeline stage at tp = 1: the vocab-parallel output all-gathers its row maxima
// through the one-rank group, which copies device buffers (a host memmove crashed here).
TEST(CudaBackendTest, StepRunnerLastStageExtrasAtTp1MatchCpuActivationBytes) {
  SKIP_WITHOUT_CUDA(gpu);
  for (StageExtras extras : {StageExtras::kFirst, StageExtras::kLast}) {
    StepConfig c;
    c.layer.shape.hidden_size = 128;
    c.layer.shape.num_attention_heads = 4;
    c.layer.shape.vocab_size = 512;
    c.layer.seq_length = 64;
    c.layer.parallel.micro_batch_size = 2;
    c.layer.flash_attention = true;
    c.extras = extras;
    c.iters = 2;
    auto cpu = RunLayerStep(c);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    c.backend = BackendKind::kCuda;
    auto r = RunLayerStep(c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->Find("total")->median_s, 0.0);
    EXPECT_EQ(r->activation_bytes, cpu->activation_bytes);
  }
}

// Scale and Cast, the mixed-precision optimizer's steps, against their exact values.
TEST(CudaBackendTest, ScaleAndCastBetweenFloatTypes) {
  SKIP_WITHOUT_CUDA(gpu);
  const std::vector<double> x = {1.0, -2.5, 0.375, 3072.0, 1.0 + 1.0 / 1024};
  const int64_t n = static_cast<int64_t>(x.size());
  auto f32 = gpu->Empty({n}, DType::kF32, MemoryTag::kWorkspace);
  auto b16 = gpu->Empty({n}, DType::kBF16, MemoryTag::kWorkspace);
  auto back = gpu->Empty({n}, DType::kF32, MemoryTag::kWorkspace);
  ASSERT_TRUE(f32.ok() && b16.ok() && back.ok());
  ASSERT_TRUE(gpu->CopyFromHost(*f32, x).ok());
  ASSERT_TRUE(gpu->Scale(DType::kF32, f32->data(), 0.5f, n).ok());
  ASSERT_TRUE(gpu->Cast(DType::kBF16, b16->data(), DType::kF32, f32->data(), n).ok());
  ASSERT_TRUE(gpu->Cast(DType::kF32, back->data(), DType::kBF16, b16->data(), n).ok());
  const std::vector<double> got = *gpu->CopyToHost(*back);
  // Halved values; bf16 keeps 8 significant bits, so 0.5 + 1/2048 rounds to 0.5.
  const std::vector<double> want = {0.5, -1.25, 0.1875, 1536.0, 0.5};
  for (int64_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << i;
  EXPECT_FALSE(gpu->Cast(DType::kF64, back->data(), DType::kF32, f32->data(), n).ok());
}

}  // namespace
}  // namespace paratune::kernels
