// VocabParallelEmbedding and the vocab-parallel output (logits + cross entropy) give the
// same results at TP = 2 (with and without SP) as at TP = 1, with and without the
// embedding dropout, whose gradient goes through its mask.
#include "kernels/vocab_parallel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/layer_harness.h"

namespace paratune::kernels {
namespace {

struct VocabRun {
  std::vector<double> embedded;  // [s·b, h]
  double loss = 0;
  std::vector<double> dy;        // [s·b, h]
  std::vector<double> table_grad;  // [V, h]: the embedding's gradient for dout = y
  std::vector<int32_t> ids;
  std::vector<double> y;           // [s·b, h]: the output block's input, the embedding's dout
};

VocabRun RunVocab(const LayerConfig& c) {
  const int t = static_cast<int>(c.parallel.tp);
  const int64_t n = c.seq_length * c.parallel.micro_batch_size, h = c.shape.hidden_size;
  const int64_t n_sp = c.parallel.sequence_parallel ? n / t : n;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((7 * i + 3) % c.shape.vocab_size);
  const std::vector<double> y = testing::RandomVector(n * h, 5);
  VocabRun out;
  out.embedded.assign(n * h, 0);
  out.dy.assign(n * h, 0);
  out.table_grad.assign(c.shape.vocab_size * h, 0);
  out.ids = ids;
  out.y = y;
  auto rendezvous = MakeInProcessRendezvous();
  static int group = 0;
  const std::string prefix = absl::StrCat("vocab", group++);
  std::vector<std::thread> threads;
  for (int r = 0; r < t; ++r) {
    threads.emplace_back([&, r]() {
      std::unique_ptr<Communicator> comm =
          t == 1 ? MakeSelfCommunicator() : std::move(*MakeGlooCommunicator(rendezvous, prefix, r, t));
      auto be = MakeCpuBackend(0, 1);
      ParallelContext ctx{be.get(), comm.get(), nullptr};
      auto emb = VocabParallelEmbedding::Create(c, ctx);
      auto head = VocabParallelOutput::Create(c, ctx);
      ASSERT_TRUE(emb.ok() && head.ok());
      auto e = (*emb)->Forward(ids);
      ASSERT_TRUE(e.ok()) << e.status();
      const int64_t row0 = c.parallel.sequence_parallel ? r * n_sp : 0;
      auto eh = be->CopyToHost(*e);
      std::copy(eh->begin(), eh->end(), out.embedded.begin() + row0 * h);
      auto yt = be->Empty({n_sp, h}, c.dtype, MemoryTag::kActivations);
      ASSERT_TRUE(be->CopyFromHost(*yt, std::vector<double>(y.begin() + row0 * h,
                                                            y.begin() + (row0 + n_sp) * h)).ok());
      auto loss = (*head)->Forward(*yt, ids);
      ASSERT_TRUE(loss.ok()) << loss.status();
      if (r == 0) out.loss = *loss;
      auto dy = (*head)->Backward();
      ASSERT_TRUE(dy.ok()) << dy.status();
      auto dyh = be->CopyToHost(*dy);
      if (r == 0 || c.parallel.sequence_parallel)
        std::copy(dyh->begin(), dyh->end(), out.dy.begin() + row0 * h);
      // The embedding's backward for dout = y; rank r holds vocabulary rows [r·V/t, …).
      ASSERT_TRUE((*emb)->Backward(*yt).ok());
      auto gh = be->CopyToHost((*emb)->weight().grad);
      std::copy(gh->begin(), gh->end(), out.table_grad.begin() + r * gh->size());
    });
  }
  for (auto& th : threads) th.join();
  return out;
}

// V = 40, h = 16, s = 8, b = 2.
LayerConfig SmallConfig() {
  LayerConfig c;
  c.shape.hidden_size = 16;
  c.shape.num_attention_heads = 2;
  c.shape.vocab_size = 40;
  c.seq_length = 8;
  c.parallel.micro_batch_size = 2;
  return c;
}

TEST(VocabParallelTest, TensorAndSequenceParallelMatchSingleRank) {
  LayerConfig c = SmallConfig();
  const VocabRun base = RunVocab(c);
  // A random-init model is close to uniform: loss near log(V).
  EXPECT_NEAR(base.loss, std::log(40.0), 1.0);
  for (bool sp : {false, true}) {
    c.parallel.tp = 2;
    c.parallel.sequence_parallel = sp;
    const VocabRun r = RunVocab(c);
    EXPECT_NEAR(r.loss, base.loss, 1e-5) << "sp=" << sp;
    EXPECT_LE(testing::ToleranceRatio(r.embedded, base.embedded, 1e-6, 1e-5), 1.0) << sp;
    EXPECT_LE(testing::ToleranceRatio(r.dy, base.dy, 1e-6, 1e-4), 1.0) << sp;
  }
}

// Megatron's embedding dropout: each output element is dropped (0) or scaled by 1/(1−p),
// the mask is the same at TP = 2 with and without SP (a function of the global element
// index), and the table's gradient is Σ over tokens of dout·keep/(1−p), worked on the host.
TEST(VocabParallelTest, EmbeddingDropoutIsLayoutInvariantAndMasksTheGradient) {
  LayerConfig c = SmallConfig();
  const VocabRun plain = RunVocab(c);
  c.hidden_dropout = 0.1f;
  const VocabRun drop = RunVocab(c);
  const int64_t h = c.shape.hidden_size, n = static_cast<int64_t>(drop.ids.size());
  int64_t dropped = 0;
  std::vector<double> expected(drop.table_grad.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < h; ++j) {
      const double x = plain.embedded[i * h + j], y = drop.embedded[i * h + j];
      const bool keep = y != 0.0;
      dropped += keep ? 0 : 1;
      if (keep) {
        EXPECT_NEAR(y, x / 0.9, 1e-5 * (1 + std::abs(x))) << i << "," << j;
        expected[drop.ids[i] * h + j] += drop.y[i * h + j] / 0.9;
      }
    }
  }
  // 256 elements at p = 0.1: 25.6 expected dropped (σ ≈ 4.8).
  EXPECT_GT(dropped, 5);
  EXPECT_LT(dropped, 60);
  EXPECT_LE(testing::ToleranceRatio(drop.table_grad, expected, 1e-6, 1e-5), 1.0);
  EXPECT_GT(testing::ToleranceRatio(plain.table_grad, expected, 1e-6, 1e-5), 1.0);
  for (bool sp : {false, true}) {
    c.parallel.tp = 2;
    c.parallel.sequence_parallel = sp;
    const VocabRun r = RunVocab(c);
    EXPECT_LE(testing::ToleranceRatio(r.embedded, drop.embedded, 1e-6, 1e-5), 1.0) << sp;
    EXPECT_LE(testing::ToleranceRatio(r.table_grad, drop.table_grad, 1e-6, 1e-5), 1.0) << sp;
  }
}

// Learned positions: token t of the [s, b]-ordered micro-batch gets row t / b of the
// position table added to its word embedding, at TP 1 and, with SP, on each rank's shard
// of the sequence; its backward accumulates each row's tokens into that row.
TEST(VocabParallelTest, LearnedPositionsAddRowTOverBToTokenT) {
  const LayerConfig c = SmallConfig();  // s 8, b 2, h 16
  const int64_t n = c.seq_length * c.parallel.micro_batch_size, h = c.shape.hidden_size;
  auto be = MakeCpuBackend(0, 1);
  auto comm = MakeSelfCommunicator();
  ParallelContext ctx{be.get(), comm.get(), nullptr};
  auto plain = VocabParallelEmbedding::Create(c, ctx);
  auto with = VocabParallelEmbedding::Create(c, ctx, 10);
  ASSERT_TRUE(plain.ok() && with.ok());
  EXPECT_EQ((*with)->Parameters().size(), 2u);
  EXPECT_EQ(VocabParallelEmbedding::Create(c, ctx, 4).status().message(),
            "position_rows (4) must be 0 or at least seq_length (8)");
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((7 * i + 3) % c.shape.vocab_size);
  auto a = (*plain)->Forward(ids);
  auto b = (*with)->Forward(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<std::vector<double>> ah = be->CopyToHost(*a), bh = be->CopyToHost(*b);
  absl::StatusOr<std::vector<double>> table = be->CopyToHost((*with)->Parameters()[1]->value);
  ASSERT_TRUE(ah.ok() && bh.ok() && table.ok());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < h; ++j) {
      ASSERT_NEAR((*bh)[t * h + j] - (*ah)[t * h + j], (*table)[(t / 2) * h + j], 1e-6)
          << "token " << t << " element " << j;
    }
  }
  // Backward with dout = 1: row r's gradient is the count of its tokens (b = 2 for the s
  // rows in use, 0 for the two rows past s).
  auto ones = be->Empty({n, h}, c.dtype, MemoryTag::kActivations);
  ASSERT_TRUE(be->CopyFromHost(*ones, std::vector<double>(n * h, 1.0)).ok());
  ASSERT_TRUE((*with)->Backward(*ones).ok());
  absl::StatusOr<std::vector<double>> grad = be->CopyToHost((*with)->Parameters()[1]->grad);
  ASSERT_TRUE(grad.ok());
  for (int64_t r = 0; r < 10; ++r) {
    EXPECT_EQ((*grad)[r * h], r < c.seq_length ? 2.0 : 0.0) << "row " << r;
  }
}

// Tied embeddings: the output layer computes with the embedding's own table (the same
// Parameter: its gradient lands there) or, on another stage, with a copy made as the table;
// both give the same loss, which differs from the untied output's. Misuse says why.
TEST(VocabParallelTest, TiedOutputComputesWithTheEmbeddingTable) {
  const LayerConfig c = SmallConfig();
  auto be = MakeCpuBackend(0, 1);
  auto comm = MakeSelfCommunicator();
  ParallelContext ctx{be.get(), comm.get(), nullptr};
  auto emb = VocabParallelEmbedding::Create(c, ctx);
  ASSERT_TRUE(emb.ok()) << emb.status();
  Parameter& table = (*emb)->weight();
  auto shared = VocabParallelOutput::Create(c, ctx, {true, &table});
  auto copy = VocabParallelOutput::Create(c, ctx, {true, nullptr});
  auto untied = VocabParallelOutput::Create(c, ctx);
  ASSERT_TRUE(shared.ok() && copy.ok() && untied.ok());
  EXPECT_EQ(&(*shared)->weight(), &table);
  for (Parameter* p : (*shared)->Parameters()) EXPECT_NE(p, &table);
  EXPECT_EQ((*shared)->Parameters().size() + 1, (*untied)->Parameters().size());
  absl::StatusOr<std::vector<double>> copy_values = be->CopyToHost((*copy)->weight().value);
  absl::StatusOr<std::vector<double>> table_values = be->CopyToHost(table.value);
  ASSERT_TRUE(copy_values.ok() && table_values.ok());
  EXPECT_EQ(*copy_values, *table_values);

  const int64_t n = c.seq_length * c.parallel.micro_batch_size, h = c.shape.hidden_size;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((7 * i + 3) % c.shape.vocab_size);
  auto y = be->Empty({n, h}, c.dtype, MemoryTag::kActivations);
  ASSERT_TRUE(be->CopyFromHost(*y, testing::RandomVector(n * h, 5)).ok());
  auto loss_shared = (*shared)->Forward(*y, ids);
  auto loss_copy = (*copy)->Forward(*y, ids);
  auto loss_untied = (*untied)->Forward(*y, ids);
  ASSERT_TRUE(loss_shared.ok() && loss_copy.ok() && loss_untied.ok());
  EXPECT_DOUBLE_EQ(*loss_shared, *loss_copy);
  EXPECT_GT(std::abs(*loss_shared - *loss_untied), 1e-3);
  ASSERT_TRUE((*shared)->Backward().ok());
  absl::StatusOr<std::vector<double>> grad = be->CopyToHost(table.grad);
  ASSERT_TRUE(grad.ok()) << grad.status();
  double grad_norm = 0;
  for (double g : *grad) grad_norm += g * g;
  EXPECT_GT(grad_norm, 0.0);

  EXPECT_EQ(VocabParallelOutput::Create(c, ctx, {false, &table}).status().message(),
            "weight.table needs weight.tied");
  LayerConfig wide = c;
  wide.shape.hidden_size = 32;
  wide.shape.num_attention_heads = 4;
  EXPECT_EQ(VocabParallelOutput::Create(wide, ctx, {true, &table}).status().message(),
            "the tied table is [40, 16]; the output layer needs [40, 32]");
}

}  // namespace
}  // namespace paratune::kernels
