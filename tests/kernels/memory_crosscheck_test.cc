// Cross-check: the bytes the real layer keeps for backward (kernels/) equal what the
// analytical memory model predicts (search/memory_model.h, LayerActivationBytes) for the
// same shape and mode.
//
// What both count, per rank, one layer, one micro-batch: norm1 input, QKV input, Q/K/V,
// softmax output, attention-dropout mask (1 B) and dropout output (naive path), flash's
// fp32 log-sum-exp (flash path), output-projection input, the two hidden-dropout masks
// (1 B), norm2 input, FC1 input, activation input (f or 2f per token), FC2 input — with
// SP dividing the norm/dropout region by t, TP dividing the rest, selective dropping the
// attention core, full keeping the layer input only.
// The kernels store fp32 on CPU, so the model is evaluated at bytes_per_element = 4 (masks
// stay 1 byte in both). Not in the model, and excluded here by name: the norms' fp32
// statistics (LayerNorm: mean and rstd, RMSNorm: rstd), 4 or 8 bytes per token per norm,
// which are checked separately against that formula.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "search/memory_model.h"
#include "tests/kernels/layer_harness.h"

namespace paratune::kernels {
namespace {

struct Case {
  int64_t tp;
  bool sp;
  Recompute recompute;
  bool flash;
  bool dropout;
  Activation act;
};

TEST(MemoryCrosscheckTest, StoredActivationBytesEqualTheModel) {
  std::vector<Case> cases;
  for (int64_t tp : {1, 2}) {
    for (bool sp : {false, true}) {
      if (tp == 1 && sp) continue;
      for (Recompute rc :
           {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        for (bool flash : {false, true}) {
          for (bool dropout : {true, false}) {
            cases.push_back({tp, sp, rc, flash, dropout,
                             dropout ? Activation::kGelu : Activation::kSwiglu});
          }
        }
      }
    }
  }
  cases.push_back({4, true, Recompute::kNone, false, true, Activation::kGelu});
  cases.push_back({4, false, Recompute::kNone, true, true, Activation::kSwiglu});
  for (const Case& k : cases) {
    LayerConfig c;
    c.shape.hidden_size = 32;
    c.shape.num_attention_heads = 4;
    c.shape.num_query_groups = k.tp == 4 ? 4 : 2;
    c.shape.ffn_hidden_size = 48;
    c.shape.activation = k.act;
    c.shape.normalization =
        k.act == Activation::kGelu ? Normalization::kLayerNorm : Normalization::kRmsNorm;
    c.seq_length = 16;
    c.parallel.micro_batch_size = 2;
    c.parallel.tp = k.tp;
    c.parallel.sequence_parallel = k.sp;
    c.parallel.recompute = k.recompute;
    c.flash_attention = k.flash;
    c.hidden_dropout = k.dropout ? 0.1f : 0.0f;
    c.attention_dropout = k.dropout ? 0.1f : 0.0f;
    const int64_t n = c.seq_length * c.parallel.micro_batch_size * c.shape.hidden_size;
    auto run = testing::RunLayer(c, testing::RandomVector(n, 1), testing::RandomVector(n, 2));
    ASSERT_TRUE(run.ok()) << run.status();

    ModelSpec model;
    model.hidden_size = c.shape.hidden_size;
    model.num_attention_heads = c.shape.num_attention_heads;
    model.num_query_groups = c.shape.num_query_groups;
    model.ffn_hidden_size = c.shape.ffn_hidden_size;
    model.activation = k.act;
    LayerActivationParams p;
    p.seq_length = c.seq_length;
    p.parallel = c.parallel;
    p.flash_attention = k.flash;
    p.dropout = k.dropout;
    p.bytes_per_element = 4;
    const double predicted = LayerActivationBytes(model, p);

    const std::string what =
        absl::StrCat("tp=", k.tp, " sp=", k.sp, " recompute=", ToString(k.recompute),
                     " flash=", k.flash, " dropout=", k.dropout);
    for (int r = 0; r < k.tp; ++r) {
      int64_t counted = 0, stats = 0;
      for (const auto& [name, bytes] : run->breakdown[r]) {
        if (absl::EndsWith(name, "_mean") || absl::EndsWith(name, "_rstd")) {
          stats += bytes;
        } else {
          counted += bytes;
        }
      }
      EXPECT_EQ(static_cast<double>(counted), predicted) << what << " rank " << r;
      const int64_t rows_sp = c.seq_length * c.parallel.micro_batch_size / (k.sp ? k.tp : 1);
      const int64_t per_norm = c.shape.normalization == Normalization::kLayerNorm ? 8 : 4;
      const int64_t expect_stats = k.recompute == Recompute::kFull ? 0 : 2 * per_norm * rows_sp;
      EXPECT_EQ(stats, expect_stats) << what;
    }
  }
}

}  // namespace
}  // namespace paratune::kernels
