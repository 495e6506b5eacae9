// Finite-difference gradient checks of every CPU twin in double precision, plus flash
// attention against a direct O(s²) reference. L = Σ out·w for a fixed random w, central
// differences with eps = 1e-6; tolerance 1e-6 + 1e-5·|ref| (norm statistics are stored in
// fp32 even for double tensors, which bounds the agreement at ~1e-7 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vocab.h"
#include "tests/kernels/layer_harness.h"

namespace paratune::kernels {
namespace {

using testing::RandomVector;
using Vec = std::vector<double>;

constexpr double kEps = 1e-6;

// Checks d(Σ f(v)·w)/dv[i] against `analytic` for every i of v (in place perturbation).
void ExpectGradient(Vec& v, const Vec& analytic, const std::function<Vec()>& f, const Vec& w,
                    const char* what, int64_t max_checks = 1 << 30) {
  ASSERT_EQ(v.size(), analytic.size()) << what;
  const int64_t n = static_cast<int64_t>(v.size());
  const int64_t step = std::max<int64_t>(1, n / std::min<int64_t>(n, max_checks));
  for (int64_t i = 0; i < n; i += step) {
    const double keep = v[i];
    auto loss = [&]() {
      Vec out = f();
      double l = 0;
      for (size_t j = 0; j < out.size(); ++j) l += out[j] * w[j];
      return l;
    };
    v[i] = keep + kEps;
    const double lp = loss();
    v[i] = keep - kEps;
    const double lm = loss();
    v[i] = keep;
    const double numeric = (lp - lm) / (2 * kEps);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

TEST(OpsGradTest, LayerNorm) {
  const int64_t rows = 4, cols = 8;
  Vec x = RandomVector(rows * cols, 1), g = RandomVector(cols, 2), b = RandomVector(cols, 3);
  Vec w = RandomVector(rows * cols, 4);
  std::vector<float> mean(rows), rstd(rows);
  auto f = [&]() {
    Vec y(rows * cols);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows,
                           cols, 1e-5f, 1);
    return y;
  };
  f();
  Vec dx(rows * cols), dg(cols, 0), db(cols, 0);
  cpu::layernorm_backward(dx.data(), dg.data(), db.data(), w.data(), x.data(), g.data(),
                          mean.data(), rstd.data(), rows, cols, 2);
  ExpectGradient(x, dx, f, w, "dx");
  ExpectGradient(g, dg, f, w, "dgamma");
  ExpectGradient(b, db, f, w, "dbeta");
}

TEST(OpsGradTest, RmsNorm) {
  const int64_t rows = 4, cols = 8;
  Vec x = RandomVector(rows * cols, 5), g = RandomVector(cols, 6), w = RandomVector(rows * cols, 7);
  std::vector<float> rstd(rows);
  auto f = [&]() {
    Vec y(rows * cols);
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), rows, cols, 1e-5f, 1);
    return y;
  };
  f();
  Vec dx(rows * cols), dg(cols, 0);
  cpu::rmsnorm_backward(dx.data(), dg.data(), w.data(), x.data(), g.data(), rstd.data(), rows,
                        cols, 2);
  ExpectGradient(x, dx, f, w, "dx");
  ExpectGradient(g, dg, f, w, "dgamma");
}

TEST(OpsGradTest, CausalSoftmax) {
  const int64_t batch = 2, seq = 5;
  Vec x = RandomVector(batch * seq * seq, 8), w = RandomVector(batch * seq * seq, 9);
  auto f = [&]() {
    Vec p = x;
    cpu::causal_softmax_forward(p.data(), batch, seq, 0.7f, 0, 1);
    return p;
  };
  Vec p = f();
  // Row i sums to 1 over j <= i and is 0 beyond.
  for (int64_t i = 0; i < seq; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < seq; ++j) sum += p[i * seq + j];
    EXPECT_NEAR(sum, 1.0, 1e-12);
    if (i + 1 < seq) {
      EXPECT_EQ(p[i * seq + seq - 1], 0.0);
    }
  }
  Vec dx(x.size());
  cpu::causal_softmax_backward(dx.data(), p.data(), w.data(), batch, seq, 0.7f, 1);
  ExpectGradient(x, dx, f, w, "dx");
}

// A 2-key window: row i sums to 1 over j in {i - 1, i} and is 0 elsewhere; the backward
// (which has no window: p is 0 outside it) is the gradient of the windowed forward.
TEST(OpsGradTest, SlidingWindowSoftmax) {
  const int64_t batch = 2, seq = 5, window = 2;
  Vec x = RandomVector(batch * seq * seq, 10), w = RandomVector(batch * seq * seq, 11);
  auto f = [&]() {
    Vec p = x;
    cpu::causal_softmax_forward(p.data(), batch, seq, 0.7f, window, 1);
    return p;
  };
  Vec p = f();
  for (int64_t i = 0; i < seq; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < seq; ++j) {
      const bool inside = j <= i && j > i - window;
      if (!inside) {
        EXPECT_EQ(p[i * seq + j], 0.0) << i << "," << j;
      }
      sum += p[i * seq + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  // Row 3 by hand: softmax of scale·x over its columns 2 and 3.
  const double scale = 0.7f;
  const double e2 = std::exp(scale * x[3 * seq + 2]), e3 = std::exp(scale * x[3 * seq + 3]);
  EXPECT_NEAR(p[3 * seq + 2], e2 / (e2 + e3), 1e-12);
  Vec dx(x.size());
  cpu::causal_softmax_backward(dx.data(), p.data(), w.data(), batch, seq, 0.7f, 1);
  ExpectGradient(x, dx, f, w, "dx");
}

TEST(OpsGradTest, GeluAndSwiglu) {
  const int64_t rows = 3, f = 4;
  Vec x = RandomVector(rows * f, 10), w = RandomVector(rows * f, 11);
  for (double& v : x) v *= 3;
  auto gelu = [&]() {
    Vec y(x.size());
    cpu::gelu_forward(y.data(), x.data(), static_cast<int64_t>(x.size()), 1);
    return y;
  };
  // GeLU(1) with the tanh approximation (hand-computed): 0.841191990...
  Vec one = {1.0}, out(1);
  cpu::gelu_forward(out.data(), one.data(), 1, 1);
  EXPECT_NEAR(out[0], 0.8411919906082768, 1e-12);
  Vec dx(x.size());
  cpu::gelu_backward(dx.data(), w.data(), x.data(), static_cast<int64_t>(x.size()), 1);
  ExpectGradient(x, dx, gelu, w, "gelu dx");

  Vec xs = RandomVector(rows * 2 * f, 12), ws = RandomVector(rows * f, 13);
  auto swiglu = [&]() {
    Vec y(rows * f);
    cpu::swiglu_forward(y.data(), xs.data(), rows, f, 1);
    return y;
  };
  Vec dxs(xs.size());
  cpu::swiglu_backward(dxs.data(), ws.data(), xs.data(), rows, f, 1);
  ExpectGradient(xs, dxs, swiglu, ws, "swiglu dx");
}

TEST(OpsGradTest, DropoutKeepsExpectedFractionAndScales) {
  const int64_t n = 100000;
  Vec x(n, 1.0), y(n);
  std::vector<uint8_t> mask(n);
  cpu::dropout_forward(y.data(), mask.data(), x.data(), n, 0.25f, 77, 0, 2);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += mask[i];
    EXPECT_NEAR(y[i], mask[i] ? 1.0 / 0.75 : 0.0, 1e-12);
  }
  // Binomial(1e5, 0.75): sd = 137; 5 sd = 685.
  EXPECT_NEAR(static_cast<double>(kept), 75000.0, 685.0);
  // Same global index, same decision: an offset view draws the tail of the same mask.
  Vec y2(10);
  std::vector<uint8_t> mask2(10);
  cpu::dropout_forward(y2.data(), mask2.data(), x.data(), 10, 0.25f, 77, 500, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(mask2[i], mask[500 + i]);
  Vec dy = RandomVector(n, 14), dx(n);
  cpu::dropout_backward(dx.data(), dy.data(), mask.data(), n, 0.25f, 2);
  for (int64_t i = 0; i < n; i += 997) EXPECT_NEAR(dx[i], mask[i] ? dy[i] / 0.75 : 0.0, 1e-12);
}

TEST(OpsGradTest, AdamWOneStepByHand) {
  float param = 1.0f, m = 0.0f, v = 0.0f;
  const double grad = 0.5;
  cpu::adamw(&param, &grad, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1);
  // m̂ = 0.5, v̂ = 0.25 → step 0.5/0.5 = 1; decay 0.01·1 → 1 − 0.1·1.01 = 0.899.
  EXPECT_NEAR(param, 0.899f, 1e-6);
  EXPECT_NEAR(m, 0.05f, 1e-7);
  EXPECT_NEAR(v, 0.00025f, 1e-8);
}

TEST(OpsGradTest, VocabParallelCrossEntropy) {
  const int64_t rows = 3, v = 6;
  Vec logits = RandomVector(rows * v, 15);
  std::vector<int32_t> targets = {0, 5, 2};
  // Loss per row (single rank holds the whole vocabulary).
  auto loss = [&]() {
    std::vector<float> mx(rows), se(rows), tg(rows);
    cpu::row_max(mx.data(), logits.data(), rows, v);
    cpu::cross_entropy_partials(se.data(), tg.data(), logits.data(), mx.data(), targets.data(),
                                rows, v, 0);
    Vec out(rows);
    for (int64_t r = 0; r < rows; ++r) out[r] = std::log(double(se[r])) + mx[r] - tg[r];
    return out;
  };
  Vec l = loss();
  // Direct: −log softmax(target).
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < v; ++c) s += std::exp(logits[r * v + c]);
    EXPECT_NEAR(l[r], std::log(s) - logits[r * v + targets[r]], 1e-6);
  }
  std::vector<float> mx(rows), se(rows), tg(rows);
  cpu::row_max(mx.data(), logits.data(), rows, v);
  cpu::cross_entropy_partials(se.data(), tg.data(), logits.data(), mx.data(), targets.data(), rows,
                              v, 0);
  Vec w = {1.0, 1.0, 1.0}, d(rows * v);
  cpu::cross_entropy_backward(d.data(), logits.data(), mx.data(), se.data(), targets.data(), rows,
                              v, 0, 1.0f);
  // Statistics are fp32: looser tolerance than the other ops.
  for (int64_t i = 0; i < rows * v; ++i) {
    const double keep = logits[i];
    logits[i] = keep + 1e-4;
    Vec lp = loss();
    logits[i] = keep - 1e-4;
    Vec lm = loss();
    logits[i] = keep;
    const double numeric = (lp[i / v] - lm[i / v]) / 2e-4;
    EXPECT_NEAR(d[i], numeric, 2e-3) << i;
  }
}

// Direct reference: materialises the s×s probabilities per (batch, head).
Vec NaiveAttention(const AttentionArgs& a, const Vec& qkv) {
  const int64_t s = a.seq, d = a.head_dim, W = a.ld_qkv, pg = a.heads / a.groups;
  Vec o(s * a.batch * a.heads * d, 0.0);
  for (int64_t bi = 0; bi < a.batch; ++bi) {
    for (int64_t hh = 0; hh < a.heads; ++hh) {
      const int64_t gg = hh / pg;
      for (int64_t i = 0; i < s; ++i) {
        Vec p(i + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += qkv[(i * a.batch + bi) * W + hh * d + c] *
                   qkv[(j * a.batch + bi) * W + (a.heads + gg) * d + c];
          }
          p[j] = dot * a.scale;
          mx = std::max(mx, p[j]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j) {
          double pj = p[j] / sum;
          if (a.dropout > 0) {
            const uint64_t idx = AttentionDropoutIndex(bi, a.head_offset + hh, i, j, a.global_heads, s);
            pj = DropoutKeep(a.seed, idx, a.dropout) ? pj / (1.0 - double(a.dropout)) : 0.0;
          }
          for (int64_t c = 0; c < d; ++c) {
            o[(i * a.batch + bi) * a.heads * d + hh * d + c] +=
                pj * qkv[(j * a.batch + bi) * W + (a.heads + a.groups + gg) * d + c];
          }
        }
      }
    }
  }
  return o;
}

TEST(OpsGradTest, FlashAttentionMatchesNaiveAndGradients) {
  // s = 150 crosses the 128-row tile boundary; 4 heads over 2 kv groups (GQA); dropout on.
  AttentionArgs a;
  a.batch = 2, a.seq = 150, a.heads = 4, a.groups = 2, a.head_dim = 4;
  a.ld_qkv = (a.heads + 2 * a.groups) * a.head_dim;
  a.ld_o = a.heads * a.head_dim;
  a.scale = 0.5f;
  a.dropout = 0.2f;
  a.seed = 99;
  a.global_heads = 8;
  a.head_offset = 4;  // as rank 1 of TP = 2
  const int64_t tokens = a.seq * a.batch;
  Vec qkv = RandomVector(tokens * a.ld_qkv, 16);
  Vec w = RandomVector(tokens * a.ld_o, 17);
  std::vector<float> lse(a.batch * a.heads * a.seq);
  auto flash = [&]() {
    Vec o(tokens * a.ld_o);
    AttentionArgs b = a;
    b.q = qkv.data();
    b.k = qkv.data() + a.heads * a.head_dim;
    b.v = qkv.data() + (a.heads + a.groups) * a.head_dim;
    b.o = o.data();
    cpu::flash_attention_forward<double>(b, lse.data(), 2);
    return o;
  };
  Vec o = flash();
  Vec ref = NaiveAttention(a, qkv);
  ASSERT_EQ(o.size(), ref.size());
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], ref[i], 1e-12) << i;

  Vec dqkv(qkv.size(), 0.0);
  AttentionArgs b = a;
  b.q = qkv.data();
  b.k = qkv.data() + a.heads * a.head_dim;
  b.v = qkv.data() + (a.heads + a.groups) * a.head_dim;
  b.o = o.data();
  cpu::flash_attention_backward<double>(b, lse.data(), w.data(), dqkv.data(),
                                        dqkv.data() + a.heads * a.head_dim,
                                        dqkv.data() + (a.heads + a.groups) * a.head_dim, 2);
  ExpectGradient(qkv, dqkv, flash, w, "dqkv", 60);
}

}  // namespace
}  // namespace paratune::kernels
