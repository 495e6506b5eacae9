// The trainer tests' tiny model and comparison of runs: the losses of an in-process run,
// and equality of two loss curves within the layouts' summation-order bound.
#ifndef PARATUNE_TESTS_TRAINING_LOSS_HARNESS_H_
#define PARATUNE_TESTS_TRAINING_LOSS_HARNESS_H_

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/training/training.h"

namespace paratune::kernels::training {

/// fp32 layouts only reorder sums (TP partial sums, DP and micro-batch accumulation, the
/// experts' rows): the losses agree to ~1e-8 relative (measured); the bound asserted.
inline constexpr double kRelTol = 1e-5;

/// A 4-layer GPT (h 32, 4 heads, V 64, s 16), micro-batch 2, 4 micro-batches, 5 AdamW
/// steps at lr 1e-2: one rank unless a test sets a layout.
inline TrainConfig Tiny() {
  TrainConfig c;
  c.shape.hidden_size = 32;
  c.shape.num_attention_heads = 4;
  c.shape.vocab_size = 64;
  c.num_layers = 4;
  c.seq_length = 16;
  c.parallel.micro_batch_size = 2;
  c.num_micro_batches = 4;
  c.steps = 5;
  c.lr = 1e-2f;
  return c;
}

/// The losses of `c` run in process (empty, with a failure, if it does not run).
inline std::vector<double> Losses(const TrainConfig& c) {
  auto r = RunTrainingInProcess(c);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ(r->losses.size(), static_cast<size_t>(c.steps));
  return r->losses;
}

inline void ExpectSame(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], kRelTol * std::abs(want[i])) << "step " << i;
  }
}

}  // namespace paratune::kernels::training

#endif  // PARATUNE_TESTS_TRAINING_LOSS_HARNESS_H_
