// The parallel transformer layer: finite-difference gradients of the whole layer (fp64),
// TP = 2 and 4 against TP = 1, SP against non-SP, flash against naive attention, the
// three recompute modes against each other, and the activation bytes each mode stores.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/layer_harness.h"

namespace paratune::kernels {
namespace {

using testing::LayerRun;
using testing::RandomVector;
using testing::RunLayer;
using testing::ToleranceRatio;

LayerConfig TinyConfig() {
  LayerConfig c;
  c.shape.hidden_size = 32;
  c.shape.num_attention_heads = 4;
  c.shape.num_query_groups = 4;
  c.shape.ffn_hidden_size = 64;
  c.seq_length = 16;
  c.parallel.micro_batch_size = 2;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

// fp32 layouts are compared with |a − b| <= 2e-5 + 1e-4·|b| (different summation orders).
constexpr double kAtol = 2e-5, kRtol = 1e-4;

void ExpectSameRun(const LayerRun& a, const LayerRun& b, const std::string& what) {
  EXPECT_LE(ToleranceRatio(a.y, b.y, kAtol, kRtol), 1.0) << what << " y";
  EXPECT_LE(ToleranceRatio(a.dx, b.dx, kAtol, kRtol), 1.0) << what << " dx";
  ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
  for (const auto& [name, g] : b.grads) {
    EXPECT_LE(ToleranceRatio(a.grads.at(name), g, kAtol, kRtol), 1.0) << what << " " << name;
  }
}

LayerRun MustRun(const LayerConfig& c) {
  const int64_t n = c.seq_length * c.parallel.micro_batch_size * c.shape.hidden_size;
  auto run = RunLayer(c, RandomVector(n, 101), RandomVector(n, 202));
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *run : LayerRun{};
}

TEST(LayerTest, TensorParallelTwoAndFourEqualOne) {
  for (Activation act :
       {Activation::kGelu, Activation::kSwiglu, Activation::kGeglu, Activation::kSquaredRelu}) {
    LayerConfig c = TinyConfig();
    c.shape.activation = act;
    c.shape.normalization =
        act == Activation::kGelu ? Normalization::kLayerNorm : Normalization::kRmsNorm;
    const LayerRun base = MustRun(c);
    for (int64_t t : {2, 4}) {
      c.parallel.tp = t;
      ExpectSameRun(MustRun(c), base, absl::StrCat("tp=", t));
    }
  }
}

TEST(LayerTest, GroupedQueryAttentionTensorParallel) {
  LayerConfig c = TinyConfig();
  c.shape.num_query_groups = 2;
  const LayerRun base = MustRun(c);
  c.parallel.tp = 2;
  ExpectSameRun(MustRun(c), base, "gqa tp=2");
}

TEST(LayerTest, SequenceParallelEqualsNonSequenceParallel) {
  LayerConfig c = TinyConfig();
  c.parallel.tp = 2;
  const LayerRun tp = MustRun(c);
  c.parallel.sequence_parallel = true;
  const LayerRun sp = MustRun(c);
  ExpectSameRun(sp, tp, "sp");
  // SP shards the norm/dropout region: rank storage is smaller.
  EXPECT_LT(sp.saved_bytes[0], tp.saved_bytes[0]);
}

TEST(LayerTest, FlashAttentionEqualsNaive) {
  LayerConfig c = TinyConfig();
  c.shape.num_query_groups = 2;
  c.seq_length = 24;
  const LayerRun naive = MustRun(c);
  c.flash_attention = true;
  const LayerRun flash = MustRun(c);
  ExpectSameRun(flash, naive, "flash");
  c.parallel.tp = 2;
  c.parallel.sequence_parallel = true;
  ExpectSameRun(MustRun(c), naive, "flash tp=2 sp");
}

// Sliding-window attention over more than one 128-row flash tile: the flash kernel skips
// the key tiles left of a query tile's window and equals the naive path's masked softmax,
// on one rank and over TP = 2 with SP; a window as long as the sequence is causal attention.
TEST(LayerTest, SlidingWindowFlashEqualsNaiveAcrossTiles) {
  LayerConfig c = TinyConfig();
  c.shape.num_query_groups = 2;
  c.seq_length = 300;
  c.parallel.micro_batch_size = 1;
  c.attention_window = 100;
  const LayerRun naive = MustRun(c);
  c.flash_attention = true;
  ExpectSameRun(MustRun(c), naive, "window flash");
  c.parallel.tp = 2;
  c.parallel.sequence_parallel = true;
  ExpectSameRun(MustRun(c), naive, "window flash tp=2 sp");
  // The window changes the output: a full-context run differs.
  c.attention_window = 0;
  const LayerRun full = MustRun(c);
  EXPECT_GT(ToleranceRatio(full.y, naive.y, kAtol, kRtol), 1.0);
  c.attention_window = 300;
  ExpectSameRun(MustRun(c), full, "window = seq");
  c.attention_window = -1;
  EXPECT_FALSE(c.Validate().ok());
}

// A head dimension of its own (kv_channels, as Qwen3 and GLM-4.5 have): the projections are
// h x (a + 2g)d and ad x h with ad != h, hidden_size need not divide by the heads, and the
// layer splits over TP and runs flash attention as with d = h / a.
TEST(LayerTest, HeadDimensionOfItsOwnSplitsLikeTheLayer) {
  LayerConfig c = TinyConfig();
  c.shape.hidden_size = 30;  // 30 / 4 heads is not an integer
  c.shape.kv_channels = 8;
  c.shape.num_query_groups = 2;
  c.shape.activation = Activation::kSwiglu;
  c.shape.normalization = Normalization::kRmsNorm;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const LayerRun naive = MustRun(c);
  const int64_t h = 30, a = 4, g = 2, d = 8;
  EXPECT_EQ(naive.grads.at("qkv.weight").size(), static_cast<size_t>(h * (a + 2 * g) * d));
  EXPECT_EQ(naive.grads.at("proj.weight").size(), static_cast<size_t>(a * d * h));
  c.parallel.tp = 2;
  ExpectSameRun(MustRun(c), naive, "kv_channels tp=2");
  c.flash_attention = true;
  c.parallel.sequence_parallel = true;
  ExpectSameRun(MustRun(c), naive, "kv_channels flash tp=2 sp");
  c.shape.kv_channels = 0;
  EXPECT_FALSE(c.Validate().ok());  // without it, 4 heads must divide 30
}

TEST(LayerTest, RecomputeModesGiveSameGradientsAndStoreLess) {
  LayerConfig c = TinyConfig();
  const LayerRun none = MustRun(c);
  c.parallel.recompute = Recompute::kSelective;
  const LayerRun selective = MustRun(c);
  c.parallel.recompute = Recompute::kFull;
  const LayerRun full = MustRun(c);
  ExpectSameRun(selective, none, "selective");
  ExpectSameRun(full, none, "full");
  const int64_t s = c.seq_length, b = c.parallel.micro_batch_size, h = c.shape.hidden_size;
  const int64_t a = c.shape.num_attention_heads;
  // Attention core with dropout: probs (4 B) + mask (1 B) + dropped probs (4 B) per a·s²·b.
  EXPECT_EQ(none.saved_bytes[0] - selective.saved_bytes[0], 9 * a * s * s * b);
  // Full keeps only the fp32 layer input.
  EXPECT_EQ(full.saved_bytes[0], 4 * s * b * h);
  // The tracking allocator sees the same drop: activation bytes held after forward are the
  // kept tensors plus the layer output y (x is one of the kept tensors).
  const int64_t y_bytes = 4 * s * b * h;
  EXPECT_EQ(none.activation_bytes_after_forward[0], none.saved_bytes[0] + y_bytes);
  EXPECT_EQ(selective.activation_bytes_after_forward[0], selective.saved_bytes[0] + y_bytes);
  EXPECT_EQ(full.activation_bytes_after_forward[0], 2 * y_bytes);
}

TEST(LayerTest, StoredBytesFollowKorthikantiPerTensor) {
  // fp32 tensors are 4 bytes, masks 1 byte, norm statistics 2 (LayerNorm) fp32 per row.
  LayerConfig c = TinyConfig();
  c.parallel.tp = 2;
  const LayerRun run = MustRun(c);
  const int64_t s = c.seq_length, b = c.parallel.micro_batch_size, h = c.shape.hidden_size;
  const int64_t a = c.shape.num_attention_heads, t = 2, f = c.ffn_hidden_size();
  const int64_t sbh = s * b * h;
  const int64_t expected = 4 * sbh * 4            // x, ln1_out, h1, ln2_out
                           + 4 * 3 * sbh / t       // qkv
                           + 9 * a * s * s * b / t // probs, mask, dropped probs
                           + 4 * sbh / t           // ctx
                           + 2 * sbh               // two dropout masks
                           + 4 * 2 * s * b * f / t // fc1 out, act
                           + 4 * 4 * s * b;        // two norms x (mean, rstd)
  EXPECT_EQ(run.saved_bytes[0], expected);
}

// Whole-layer finite differences in fp64 on one rank: L = Σ y·w.
TEST(LayerTest, WholeLayerGradientMatchesFiniteDifferences) {
  // Naive attention with a GeLU MLP, flash with SwiGLU, and flash with the MLP block the
  // identity (the attention part of an expert layer); naive and flash over a 3-key sliding
  // window; flash with GeGLU and with squared ReLU.
  struct Case {
    bool flash, mlp;
    int64_t window;
    Activation activation;
  };
  for (auto [flash, mlp, window, activation] :
       {Case{false, true, 0, Activation::kGelu}, Case{true, true, 0, Activation::kSwiglu},
        Case{true, false, 0, Activation::kSwiglu}, Case{false, true, 3, Activation::kGelu},
        Case{true, true, 3, Activation::kSwiglu}, Case{true, true, 0, Activation::kGeglu},
        Case{true, true, 0, Activation::kSquaredRelu}}) {
    LayerConfig c = TinyConfig();
    c.mlp = mlp;
    c.attention_window = window;
    c.shape.hidden_size = 16;
    c.shape.num_query_groups = 2;
    c.shape.ffn_hidden_size = 32;
    c.seq_length = 8;
    c.dtype = DType::kF64;
    c.flash_attention = flash;
    c.shape.activation = activation;
    c.shape.normalization = flash ? Normalization::kRmsNorm : Normalization::kLayerNorm;
    const int64_t n = c.seq_length * c.parallel.micro_batch_size * c.shape.hidden_size;
    auto backend = MakeCpuBackend(0, 1);
    auto comm = MakeSelfCommunicator();
    ParallelContext ctx{backend.get(), comm.get(), nullptr};
    auto layer = TransformerLayer::Create(c, ctx);
    ASSERT_TRUE(layer.ok()) << layer.status();
    const std::vector<double> xv = RandomVector(n, 7), w = RandomVector(n, 8);
    auto x = backend->Empty({n / c.shape.hidden_size, c.shape.hidden_size}, DType::kF64,
                            MemoryTag::kActivations);
    auto dy = backend->Empty(x->shape(), DType::kF64, MemoryTag::kWorkspace);
    ASSERT_TRUE(backend->CopyFromHost(*x, xv).ok());
    ASSERT_TRUE(backend->CopyFromHost(*dy, w).ok());
    auto loss = [&]() {
      auto y = (*layer)->Forward(*x);
      auto yh = backend->CopyToHost(*y);
      double l = 0;
      for (int64_t i = 0; i < n; ++i) l += (*yh)[i] * w[i];
      return l;
    };
    loss();
    auto dx = (*layer)->Backward(*dy);
    ASSERT_TRUE(dx.ok()) << dx.status();
    const std::vector<double> dxh = *backend->CopyToHost(*dx);
    constexpr double eps = 1e-6;
    auto check = [&](const Tensor& t, const std::vector<double>& analytic, const char* what) {
      std::vector<double> v = *backend->CopyToHost(t);
      for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / 12)) {
        const double keep = v[i];
        v[i] = keep + eps;
        ASSERT_TRUE(backend->CopyFromHost(t, v).ok());
        const double lp = loss();
        v[i] = keep - eps;
        ASSERT_TRUE(backend->CopyFromHost(t, v).ok());
        const double lm = loss();
        v[i] = keep;
        ASSERT_TRUE(backend->CopyFromHost(t, v).ok());
        const double numeric = (lp - lm) / (2 * eps);
        EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-5 * std::abs(numeric))
            << (flash ? "flash " : "naive ") << (mlp ? "" : "no-mlp ") << "window " << window << " "
            << what << "[" << i << "]";
      }
    };
    check(*x, dxh, "dx");
    for (Parameter* p : (*layer)->Parameters()) {
      check(p->value, *backend->CopyToHost(p->grad), p->name.c_str());
    }
  }
}

TEST(LayerTest, AttentionPartHasNoMlpWeightsAndSplitsLikeTheLayer) {
  LayerConfig c = TinyConfig();
  c.mlp = false;
  const LayerRun base = MustRun(c);
  EXPECT_EQ(base.grads.count("fc1.weight"), 0u);
  EXPECT_EQ(base.grads.count("fc2.weight"), 0u);
  EXPECT_EQ(base.grads.count("qkv.weight"), 1u);
  EXPECT_EQ(base.grads.count("norm2.weight"), 1u);
  c.parallel.tp = 2;
  ExpectSameRun(MustRun(c), base, "no mlp, tp=2");
  c.parallel.sequence_parallel = true;
  ExpectSameRun(MustRun(c), base, "no mlp, tp=2 sp");
}

TEST(LayerTest, RejectsAnExpertLayerWithoutItsMlpBlock) {
  LayerConfig c = TinyConfig();
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.hidden = c.shape.hidden_size;
  c.moe.ffn_hidden = 16;
  c.mlp = false;
  EXPECT_EQ(c.Validate().message(),
            "mlp must be true in a mixture-of-experts layer (the experts are its MLP block)");
}

TEST(LayerTest, RejectsIndivisibleTensorParallel) {
  LayerConfig c = TinyConfig();
  c.parallel.tp = 3;
  EXPECT_EQ(c.Validate().message(), "tp (3) must divide num_attention_heads (4)");
}

TEST(LayerTest, RefusesContextParallelismAsUnimplemented) {
  LayerConfig c = TinyConfig();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  c.parallel.cp = 2;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(c.Validate().message(), "context parallelism (cp 2) is not implemented by the kernels");
  // The pipeline and data-parallel fields of the layout are not the layer's.
  c.parallel.cp = 1;
  c.parallel.pp = 4;
  c.parallel.dp = 3;
  c.parallel.vp = 2;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

}  // namespace
}  // namespace paratune::kernels
