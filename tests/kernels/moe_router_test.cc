// The router and permutation CPU ops (kernels/cpu/moe_router.h, moe_permute.h), the
// twins the CUDA kernels are checked against, on cases derived by hand.
#include "kernels/cpu/moe_router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/moe_permute.h"

namespace paratune::kernels {
namespace {

// Scores (0.1, 0.4,
// 0.2, 0.3) pick experts 1 and 3; normalised, 0.4/0.7 and 0.3/0.7. With token 0 on experts
// (1, 3) and token 1 on (3, 0), the rows sorted by expert are assignment 3 (expert 0), 0
// (expert 1), then 1 and 2 (expert 3, in token order).
TEST(MoeCpuTwinTest, TopKAndPermutationByHand) {
  const std::vector<double> scores = {0.1, 0.4, 0.2, 0.3};
  std::vector<int32_t> selected(2);
  cpu::moe_router_select(selected.data(), scores.data(), 1, 4, 2, false, 0);
  EXPECT_EQ(selected, (std::vector<int32_t>{1, 3}));
  std::vector<double> probs(2);
  cpu::moe_router_probs(probs.data(), scores.data(), selected.data(), 1, 4, 2, true, 1.0);
  EXPECT_NEAR(probs[0], 0.4 / 0.7, 1e-15);
  EXPECT_NEAR(probs[1], 0.3 / 0.7, 1e-15);
  const std::vector<int32_t> two_tokens = {1, 3, 3, 0};
  std::vector<int32_t> perm(4);
  std::vector<int64_t> counts(4);
  cpu::moe_permutation(perm.data(), counts.data(), two_tokens.data(), 4, 4);
  EXPECT_EQ(counts, (std::vector<int64_t>{1, 1, 0, 2}));
  EXPECT_EQ(perm, (std::vector<int32_t>{3, 0, 1, 2}));
}

// Sigmoid scores of logits (0, ln 3): (1/2, 3/4); for the auxiliary loss they are
// normalised over the experts: (2/5, 3/5).
TEST(MoeCpuTwinTest, SigmoidScoresAndAuxProbabilitiesByHand) {
  const std::vector<double> logits = {0.0, std::log(3.0)};
  std::vector<double> scores(2), p_aux(2);
  cpu::moe_router_scores(scores.data(), logits.data(), 1, 2, true);
  EXPECT_NEAR(scores[0], 0.5, 1e-15);
  EXPECT_NEAR(scores[1], 0.75, 1e-15);
  cpu::moe_aux_probs(p_aux.data(), scores.data(), 1, 2, true);
  EXPECT_NEAR(p_aux[0], 0.4, 1e-15);
  EXPECT_NEAR(p_aux[1], 0.6, 1e-15);
}

// Three tokens, top-1, all on expert 0 with probabilities 0.9, 0.5, 0.7 and one on
// expert 1: a capacity of 2 keeps tokens 0 and 2 on expert 0 and drops token 1.
TEST(MoeCpuTwinTest, CapacityKeepsTheHighestProbabilities) {
  const std::vector<int32_t> selected = {0, 0, 0, 1};
  const std::vector<double> probs = {0.9, 0.5, 0.7, 0.1};
  std::vector<int32_t> routed(4);
  cpu::moe_capacity_routes(routed.data(), probs.data(), selected.data(), 4, 2, 1, 2);
  EXPECT_EQ(routed, (std::vector<int32_t>{0, -1, 0, 1}));
  std::vector<int32_t> perm(4);
  std::vector<int64_t> counts(2);
  EXPECT_EQ(cpu::moe_permutation(perm.data(), counts.data(), routed.data(), 4, 2), 3);
  EXPECT_EQ(counts, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(std::vector<int32_t>(perm.begin(), perm.begin() + 3), (std::vector<int32_t>{0, 2, 3}));
}

// Balanced routing: slot j of global token g goes to expert (g·k + j) mod E.
TEST(MoeCpuTwinTest, BalancedAssignmentIsRoundRobinOverGlobalSlots) {
  std::vector<int32_t> selected(6);
  const std::vector<double> scores(3 * 4, 0.0);
  cpu::moe_router_select(selected.data(), scores.data(), 3, 4, 2, true, 5);
  EXPECT_EQ(selected, (std::vector<int32_t>{2, 3, 0, 1, 2, 3}));
}

}  // namespace
}  // namespace paratune::kernels
