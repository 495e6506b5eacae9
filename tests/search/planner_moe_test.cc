// The planner on mixture-of-experts models: EP, ETP and the dispatcher searched with the
// rest, rejected expert layouts with their reasons, the winner's placement explained.
#include <gtest/gtest.h>

#include "search/planner.h"
#include "search/presets.h"

namespace paratune {
namespace {

JobSpec MixtralSpec() {
  JobSpec spec;
  spec.name = "mixtral";
  spec.model = *FindPreset("mixtral-8x7b");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 256;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 64;
  spec.search.pp = {4};
  spec.search.vp = {1};
  spec.search.micro_batch_size = {1};
  spec.search.recompute = {Recompute::kSelective};
  spec.search.top_k = 5;
  return spec;
}

// Both ways, so that layouts with TP and no SP are enumerated (and rejected).
JobSpec MixtralSpecWithSequenceParallelBothWays() {
  JobSpec spec = MixtralSpec();
  spec.search.sequence_parallel = {false, true};
  return spec;
}

TEST(PlannerMoeTest, SearchesExpertLayoutsAndExplainsTheWinner) {
  absl::StatusOr<PlanResult> plan = Plan(MixtralSpecWithSequenceParallelBothWays());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->ranked.empty());
  const RankedConfig& best = plan->ranked.front();
  EXPECT_TRUE(best.fits);
  EXPECT_GT(best.config.ep * best.config.etp, 1);
  bool placement = false;
  for (const std::string& note : best.notes) {
    placement = placement || note.find("NVLink domain") != std::string::npos;
  }
  EXPECT_TRUE(placement);
  // Layouts that break the folding rules are rejected with the rule.
  bool sequence_parallel_rule = false;
  for (const RejectedConfig& r : plan->rejected) {
    sequence_parallel_rule =
        sequence_parallel_rule || r.reason.find("search.sequence_parallel is required") == 0;
  }
  EXPECT_TRUE(sequence_parallel_rule);
}

TEST(PlannerMoeTest, PinnedExpertLayoutIsHonoured) {
  JobSpec spec = MixtralSpec();
  spec.search.ep = {4};
  spec.search.etp = {2};
  spec.search.moe_token_dispatcher = {MoeTokenDispatcher::kAllGather};
  absl::StatusOr<PlanResult> plan = Plan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const RankedConfig& r : plan->ranked) {
    EXPECT_EQ(r.config.ep, 4);
    EXPECT_EQ(r.config.etp, 2);
    EXPECT_EQ(r.config.moe_token_dispatcher, MoeTokenDispatcher::kAllGather);
  }
}

}  // namespace
}  // namespace paratune
