// Mixture-of-experts time (search/time_model.h): the dispatch bytes per layer by hand, the
// link an EP group uses, and the pieces an expert layer adds to a dense one.
#include <gtest/gtest.h>

#include <cmath>

#include "search/collectives.h"
#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/presets.h"
#include "search/time_model.h"

namespace paratune {
namespace {

JobSpec DeepSeekV3Spec() {
  JobSpec spec;
  spec.model = *FindPreset("deepseek-v3");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 8192;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 1024;
  return spec;
}

ParallelConfig Layout(int64_t ep, MoeTokenDispatcher d = MoeTokenDispatcher::kAllToAll) {
  ParallelConfig c;
  c.pp = 16;
  c.dp = 64;
  c.ep = ep;
  c.split_counts_embedding_and_loss = true;
  c.moe_token_dispatcher = d;
  return c;
}

// EP 64 on one stage, so that the critical stage holds expert layers.
ParallelConfig OneStageLayout() {
  ParallelConfig c = Layout(64);
  c.pp = 1;
  c.dp = 1024;
  c.split_counts_embedding_and_loss = false;
  return c;
}

TEST(MoeTimeTest, DispatchBytesPerLayerByHand) {
  const JobSpec spec = DeepSeekV3Spec();
  // One rank's 4096 tokens, top-8 copies of h = 7168 BF16 values: 469,762,048 bytes.
  const double total = 4096.0 * 8 * 7168 * 2;
  const DispatchBytes ep8 = ExpertDispatchBytes(spec, Layout(8));
  EXPECT_DOUBLE_EQ(ep8.total, total);
  // EP 8 inside an 8-GPU NVLink domain: 7/8 to the other ranks over NVLink, none leaves.
  EXPECT_DOUBLE_EQ(ep8.over_nvlink, total * 7 / 8);
  EXPECT_DOUBLE_EQ(ep8.over_nic, 0);
  // EP 64 over 8 domains: 56/64 of the copies go to other domains over the NIC.
  const DispatchBytes ep64 = ExpertDispatchBytes(spec, Layout(64));
  EXPECT_DOUBLE_EQ(ep64.over_nvlink, total * 7 / 64);
  EXPECT_DOUBLE_EQ(ep64.over_nic, total * 56 / 64);
  // The flex dispatcher sends a token once per remote domain. DeepSeek-V3 routes inside 4
  // of 8 expert groups, one per 8-GPU domain at EP 64: a token reaches 4 domains, so of
  // its 8 copies bound for 7 other domains out of 8, 4/8 per copy are needed.
  const DispatchBytes flex = ExpertDispatchBytes(spec, Layout(64, MoeTokenDispatcher::kFlex));
  EXPECT_NEAR(flex.over_nic, total * 56 / 64 * 4 / 8, 1e-3);
  // Routed freely, its 8 experts fall in 8 (1 - (7/8)^8) of the 8 domains.
  JobSpec free = spec;
  free.model.moe_router_num_groups = 0;
  free.model.moe_router_group_topk = 0;
  EXPECT_NEAR(ExpertDispatchBytes(free, Layout(64, MoeTokenDispatcher::kFlex)).over_nic,
              total * 56 / 64 * (1 - std::pow(7.0 / 8, 8)), 1e-3);
  // A 72-GPU NVLink domain (NVL72) keeps EP 64 off the NIC.
  JobSpec rack = spec;
  rack.cluster.nvlink_domain = 64;
  EXPECT_DOUBLE_EQ(ExpertDispatchBytes(rack, Layout(64)).over_nic, 0);
}

// Domains a token's experts fall in, by hand: free choice N (1 - (1 - 1/N)^k); 4 of 8
// groups, one per domain: 8 (1 - C(7,4)/C(8,4)) = 4; 4 of 16 groups, two per domain:
// 8 (1 - C(14,4)/C(16,4)) = 8 (1 - 1001/1820) = 3.6; 2 of 4 groups, each over two domains:
// the 8 experts fall in 4 domains, 4 (1 - (3/4)^8).
TEST(MoeTimeTest, DomainsPerTokenUnderGroupLimitedRouting) {
  EXPECT_NEAR(DomainsPerToken(8, 8, 0, 0), 8 * (1 - std::pow(7.0 / 8, 8)), 1e-12);
  EXPECT_NEAR(DomainsPerToken(8, 8, 8, 4), 4.0, 1e-12);
  EXPECT_NEAR(DomainsPerToken(8, 8, 16, 4), 8 * (1 - 1001.0 / 1820), 1e-12);
  EXPECT_NEAR(DomainsPerToken(8, 8, 4, 2), 4 * (1 - std::pow(3.0 / 4, 8)), 1e-12);
  // Every group chosen, or groups that do not line up with the domains: free choice.
  EXPECT_NEAR(DomainsPerToken(8, 8, 8, 8), DomainsPerToken(8, 8, 0, 0), 1e-12);
  EXPECT_NEAR(DomainsPerToken(8, 8, 12, 4), DomainsPerToken(8, 8, 0, 0), 1e-12);
  // Fewer experts than chosen groups: never more domains than free choice reaches.
  EXPECT_NEAR(DomainsPerToken(2, 8, 8, 4), DomainsPerToken(2, 8, 0, 0), 1e-12);
}

TEST(MoeTimeTest, LowPrecisionExpertGemmsCastTheirInputsByHand) {
  // Mixtral 8x7B, one rank, s 4096, b 1: 8192 routed rows, h 4096, f 14336 (SwiGLU FC1
  // 28672 wide); 16-bit activations cast to 1 byte.
  JobSpec spec;
  spec.model = *FindPreset("mixtral-8x7b");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 8;
  spec.training.precision = Precision::kFp8;
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  const ParallelConfig c;
  const double rows = 8192, h = 4096, f = 14336;
  const ExpertCasts fp8 = ExpertCastBytes(spec, c, h100);
  // Forward: FC1's input (rows x h) and FC2's (rows x f), read at 2 bytes, written at 1.
  EXPECT_DOUBLE_EQ(fp8.forward, 3 * rows * (h + f));
  // Backward: the output gradients (rows x 2f of FC1, rows x h of FC2) read and written
  // twice at 1 byte, the saved inputs transposed (1 byte in and out).
  EXPECT_DOUBLE_EQ(fp8.backward, 4 * rows * (2 * f + h) + 2 * rows * (h + f));
  spec.training.precision = Precision::kBf16;
  EXPECT_EQ(ExpertCastBytes(spec, c, h100).forward, 0.0);
  // A100 has no FP8 GEMMs to cast for.
  spec.training.precision = Precision::kFp8;
  EXPECT_EQ(ExpertCastBytes(spec, c, *FindDevice("a100-80gb")).backward, 0.0);
}

TEST(MoeTimeTest, AllToAllUsesTheSlowestLinkTheGroupSpans) {
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  const double bytes = 1 << 30;
  const double inside = AllToAllSeconds(bytes, 8, 1, h100, 8);
  EXPECT_NEAR(inside, bytes * 7 / 8 / h100.nvlink_bandwidth + h100.nvlink_latency_s, 1e-12);
  const double across = AllToAllSeconds(bytes, 64, 1, h100, 8);
  EXPECT_NEAR(across, bytes * 56 / 64 / h100.network_bandwidth + h100.network_latency_s, 1e-12);
  EXPECT_EQ(AllToAllSeconds(bytes, 1, 1, h100, 8), 0);
}

TEST(MoeTimeTest, ExpertLayerAddsDispatchAndExpertCompute) {
  const JobSpec spec = DeepSeekV3Spec();
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  const LayerTime ep8 = EstimateExpertLayerTime(spec, Layout(8), h100);
  const LayerTime ep64 = EstimateExpertLayerTime(spec, Layout(64), h100);
  const LayerTime ep1 = EstimateExpertLayerTime(spec, Layout(1), h100);
  EXPECT_EQ(ep1.forward_ep_comm, 0);
  EXPECT_GT(ep8.forward_ep_comm, 0);
  // Crossing the NIC costs more than NVLink for the same bytes.
  EXPECT_GT(ep64.forward_ep_comm, 4 * ep8.forward_ep_comm);
  // The same FLOPs in 4 local experts instead of 32: fewer, larger GEMMs are not slower.
  EXPECT_LE(ep64.forward_compute, ep8.forward_compute * 1.001);
  // The backward dispatches the combine's gradient and combines the dispatch's: the same
  // transfers, exposed (training's DeepEP kernels have no zero-SM overlap); flex sends a
  // token once per remote node, so fewer bytes cross the NIC than with the all-to-all.
  const LayerTime flex = EstimateExpertLayerTime(spec, Layout(64, MoeTokenDispatcher::kFlex), h100);
  EXPECT_DOUBLE_EQ(flex.backward_ep_comm, flex.forward_ep_comm);
  EXPECT_DOUBLE_EQ(ep64.backward_ep_comm, ep64.forward_ep_comm);
  EXPECT_LT(flex.backward_ep_comm, ep64.backward_ep_comm);
}

TEST(MoeTimeTest, SelectiveRecomputeOfTheExpertBlockRerunsItsForward) {
  JobSpec spec = DeepSeekV3Spec();
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  ParallelConfig c = Layout(8);
  c.recompute = Recompute::kSelective;
  const LayerTime core_attn = EstimateExpertLayerTime(spec, c, h100);
  EXPECT_EQ(core_attn.recompute_ep_comm, 0);
  spec.training.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kMoe};
  const LayerTime moe = EstimateExpertLayerTime(spec, c, h100);
  // The dispatch and combine again, and the router, permutation and experts' forward: the
  // expert layer's forward less its dense part's.
  EXPECT_DOUBLE_EQ(moe.recompute_ep_comm, moe.forward_ep_comm);
  ModelSpec dense_part = spec.model;
  dense_part.ffn_hidden_size = spec.model.num_shared_experts * SharedExpertFfn(spec.model);
  const LayerTime dense = EstimateLayerTime(dense_part, spec.training, c, h100, 8);
  EXPECT_NEAR(moe.recompute - core_attn.recompute,
              moe.forward_compute - dense.forward_compute, 1e-12);
  // moe_act alone reruns only the activation function: far less than the block.
  spec.training.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kMoeAct};
  const LayerTime act = EstimateExpertLayerTime(spec, c, h100);
  EXPECT_GT(act.recompute, core_attn.recompute);
  EXPECT_LT(act.recompute - core_attn.recompute, 0.2 * (moe.recompute - core_attn.recompute));
}

TEST(MoeTimeTest, IterationNeedsTheExpertLayerAndExplainsThePlacement) {
  const JobSpec spec = DeepSeekV3Spec();
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  const ParallelConfig c = OneStageLayout();
  const LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, h100, 8);
  const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, h100, 8);
  EXPECT_EQ(
      EstimateIteration(spec, c, h100, layer, edge, PipelineMode::kClosedForm).status().code(),
      absl::StatusCode::kInvalidArgument);
  const LayerTime expert = EstimateExpertLayerTime(spec, c, h100);
  absl::StatusOr<IterationEstimate> it =
      EstimateIteration(spec, c, h100, layer, edge, PipelineMode::kSimulated, nullptr, &expert);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_GT(it->time.ep_comm, 0);
  bool spans = false;
  for (const std::string& note : it->notes) {
    spans = spans || note.find("spans 8 NVLink domains") != std::string::npos;
  }
  EXPECT_TRUE(spans);
  // With the flex dispatcher the note says how many domains a token reaches: 4 of 8 under
  // DeepSeek-V3's group-limited routing (4 of 8 groups, one per domain).
  ParallelConfig flex = c;
  flex.moe_token_dispatcher = MoeTokenDispatcher::kFlex;
  const LayerTime flex_expert = EstimateExpertLayerTime(spec, flex, h100);
  it = EstimateIteration(spec, flex, h100, layer, edge, PipelineMode::kSimulated, nullptr,
                         &flex_expert);
  ASSERT_TRUE(it.ok()) << it.status();
  bool reach = false;
  for (const std::string& note : it->notes) {
    reach = reach || (note.find("flex dispatcher") != std::string::npos &&
                      note.find("each token reaches 4.0 of the 8 domains, routed inside 4 of "
                                "8 expert groups") != std::string::npos);
  }
  EXPECT_TRUE(reach);
}


// The routed experts' gradient reduce runs after the dense gradients' in the same backward:
// when the dense reduce outlasts that backward, none of the experts' is hidden, and adding
// E seconds of expert reduce adds exactly E to the iteration's dp_comm. The reduce times are
// given as measured terms, in the order the stage issues them: the dense gradients' total
// and last bucket, then the experts' total and last bucket.
TEST(MoeTimeTest, ExpertGradientReduceSharesTheBackwardWithTheDenseOne) {
  const JobSpec spec = DeepSeekV3Spec();
  const DeviceProfile h100 = *FindDevice("h100-sxm-80gb");
  ParallelConfig c = OneStageLayout();
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  const LayerTime layer = EstimateLayerTime(spec.model, spec.training, c, h100, 8);
  const EdgeTime edge = EstimateEdgeTime(spec.model, spec.training, c, h100, 8);
  const LayerTime expert = EstimateExpertLayerTime(spec, c, h100);
  auto dp_comm = [&](double expert_seconds) {
    int calls = 0;
    MeasuredTerms measured;
    measured.dp_gather_seconds = [](double) { return 0.0; };
    measured.dp_reduce_seconds = [&calls, expert_seconds](double) {
      const double seconds[] = {1e4, 1.0, expert_seconds, 0.1 * expert_seconds};
      return seconds[std::min(calls++, 3)];
    };
    absl::StatusOr<IterationEstimate> it = EstimateIteration(
        spec, c, h100, layer, edge, PipelineMode::kSimulated, &measured, &expert);
    EXPECT_TRUE(it.ok()) << it.status();
    EXPECT_EQ(calls, 4);
    return it->time.dp_comm;
  };
  const double none = dp_comm(0.0);
  EXPECT_NEAR(dp_comm(2.0) - none, 2.0, 1e-6);
  EXPECT_NEAR(dp_comm(5.0) - none, 5.0, 1e-6);
}

}  // namespace
}  // namespace paratune
