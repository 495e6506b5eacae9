// The trainer tests' comparison of runs: the losses of an in-process run, and equality of
// two loss curves within the layouts' summation-order bound.
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
