// The MoE layer step runner: per-expert rows, stored activation bytes and the auxiliary
// loss against hand derivations; out of memory as a status.
#include "kernels/moe_step.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace paratune::kernels {
namespace {

MoeStepConfig Balanced() {
  MoeStepConfig c;
  c.layer.hidden = 16;
  c.layer.num_experts = 4;
  c.layer.topk = 2;
  c.layer.ffn_hidden = 8;
  c.layer.num_shared_experts = 1;
  c.layer.shared_ffn_hidden = 8;
  c.layer.routing = ExpertRouting::kBalanced;
  c.layer.aux_loss_coeff = 0.01;
  c.layer.ep = 2;
  c.tokens = 8;
  c.warmup = 1;
  c.iters = 2;
  return c;
}

// fp32, T = 8 tokens per rank, h = 16, E = 4, k = 2, f = 8, one shared expert of 8,
// ep = 2, balanced: each rank's 2 experts receive T·k = 16 rows. Stored between forward
// and backward: x T·h = 128, scores T·E = 32, selected (int32) T·k = 16, probs 16,
// permutation (int32) 16, expert input 16·h = 256, fc1 output 16·2f = 256, SwiGLU output
// 16·f = 128, combined outputs T·k·h = 256, shared fc1 output T·2·8 = 128, shared SwiGLU
// output T·8 = 64: 1296 elements of 4 bytes = 5184 bytes.
TEST(MoeStepTest, BalancedRunReportsHandDerivedCountsAndActivationBytes) {
  auto r = RunMoeLayerStep(Balanced());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens_per_expert, std::vector<int64_t>(4, 8));
  EXPECT_EQ(r->activation_bytes, 5184);
  EXPECT_NEAR(r->aux_loss, 0.01, 1e-9);
  ASSERT_EQ(r->peak_bytes_per_rank.size(), 2u);
  // Weights and gradients alone: 2·(E·h + 2·(2f·h + h·f) + 2·8·h + h·8)·4 bytes.
  const int64_t weights_and_grads = 2 * (64 + 2 * (256 + 128) + 256 + 128) * 4;
  for (int64_t peak : r->peak_bytes_per_rank) EXPECT_GT(peak, weights_and_grads + 5184);
  std::set<std::string> names;
  for (const PhaseTiming& p : r->phases) {
    names.insert(p.phase);
    EXPECT_LE(p.min_s, p.median_s);
    EXPECT_LE(p.median_s, p.max_s);
  }
  EXPECT_EQ(names, (std::set<std::string>{"forward", "backward", "total",
                                          "dispatch_combine_forward", "dispatch_combine_backward",
                                          "experts_forward", "experts_backward"}));
}

TEST(MoeStepTest, TooSmallCapacityIsResourceExhausted) {
  MoeStepConfig c = Balanced();
  c.layer.etp = 2;
  c.capacity_bytes_per_rank = 4096;
  auto r = RunMoeLayerStep(c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TEST(MoeStepTest, RulesNameTheField) {
  MoeStepConfig c = Balanced();
  c.tokens = 0;
  EXPECT_EQ(c.Validate().message(), "tokens (0) must be >= 1");
  c = Balanced();
  c.dtype = DType::kBF16;
  EXPECT_EQ(c.Validate().message(), "dtype (bf16) must be fp32 or fp64 for the MoE layer on cpu");
  c.backend = BackendKind::kCuda;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.dtype = DType::kF64;
  EXPECT_EQ(c.Validate().message(),
            "dtype (fp64) must be fp32, bf16 or fp16 for the MoE layer on cuda");
}

}  // namespace
}  // namespace paratune::kernels
