// Fine-grained activation offload (training.offload_modules, search.activation_offload):
// the bytes each module's input moves to the host, by hand; what the device and the host
// hold; the exposed copy time; the planner, the spec rules and the exports.
#include <gtest/gtest.h>

#include <algorithm>

#include "search/exporters.h"
#include "search/memory_model.h"
#include "search/planner.h"
#include "search/presets.h"
#include "search/sharded_data_parallel.h"
#include "search/spec_io.h"
#include "search/time_model.h"

namespace paratune {
namespace {

// GPT-3 1.7B (h 2304, 24 heads, MHA, f 9216, GeLU), tp 2 with SP, s 2048, b 1, BF16, flash
// attention, no dropout, on one 8-GPU H100 node.
JobSpec Gpt17bSpec() {
  JobSpec spec;
  spec.model = *FindPreset("gpt3-1.7b");
  spec.training.seq_length = 2048;
  spec.training.global_batch_size = 64;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 8;
  spec.cluster.gpus_per_node = 8;
  return spec;
}

ParallelConfig Tp2(bool offload) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.sequence_parallel = true;
  c.activation_offload = offload;
  return c;
}

constexpr double kX = 2048.0 * 2304.0;  // Elements of one [s, b, h] tensor.

TEST(ActivationOffloadTest, DefaultModulesMoveQkvAndTheProjectionInputByHand) {
  const JobSpec spec = Gpt17bSpec();
  // core_attn: Q, K and V (3x, MHA), attn_proj: the output projection's input (x), all
  // inside TP, 2 bytes each: 4 * 2 * x / t.
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, Tp2(true), false), 4.0 * 2.0 * kX / 2.0);
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, Tp2(false), false), 0.0);
  const double kept =
      LayerActivationBytes(spec.model, ActivationParamsFor(spec.model, spec.training, Tp2(false)));
  const double offloaded =
      LayerActivationBytes(spec.model, ActivationParamsFor(spec.model, spec.training, Tp2(true)));
  EXPECT_DOUBLE_EQ(kept - offloaded, 4.0 * 2.0 * kX / 2.0);
}

TEST(ActivationOffloadTest, EachModuleMovesItsInput) {
  JobSpec spec = Gpt17bSpec();
  const ParallelConfig c = Tp2(true);
  const auto moved = [&](OffloadModule m) {
    spec.training.offload_modules = {m};
    return LayerOffloadedBytes(spec, c, false);
  };
  // The norms' inputs and the QKV input are split over tp by SP; 2 bytes per element.
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kAttnNorm), 2.0 * kX / 2.0);
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kQkvLinear), 2.0 * kX / 2.0);
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kMlpNorm), 2.0 * kX / 2.0);
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kCoreAttn), 3.0 * 2.0 * kX / 2.0);
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kAttnProj), 2.0 * kX / 2.0);
  // A dense layer has no routed experts.
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kExpertFc1), 0.0);
  EXPECT_DOUBLE_EQ(moved(OffloadModule::kMoeAct), 0.0);
}

TEST(ActivationOffloadTest, WhatRecomputeDropsIsNotOffloaded) {
  JobSpec spec = Gpt17bSpec();
  spec.training.offload_modules = {OffloadModule::kQkvLinear};
  ParallelConfig c = Tp2(true);
  c.recompute = Recompute::kSelective;
  spec.training.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kLayernorm};
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, c, false), 0.0);  // the norm's output is rerun
  spec.training.recompute_modules = {RecomputeModule::kCoreAttn};
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, c, false), 2.0 * kX / 2.0);
  // Full recompute stores only the layer input: nothing is offloaded.
  c.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, c, false), 0.0);
}

TEST(ActivationOffloadTest, ExpertModulesMoveTheRoutedRows) {
  // Mixtral 8x7B on one rank: 4096 tokens, top-2, h 4096, f 14336 (SwiGLU: FC1 2f wide).
  JobSpec spec;
  spec.model = *FindPreset("mixtral-8x7b");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 8;
  ParallelConfig c;
  c.activation_offload = true;
  spec.training.offload_modules = {OffloadModule::kExpertFc1};
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, c, true), 4096.0 * 2 * 2 * 4096);
  spec.training.offload_modules = {OffloadModule::kMoeAct};
  EXPECT_DOUBLE_EQ(LayerOffloadedBytes(spec, c, true), 4096.0 * 2 * 2 * 2 * 14336);
}

TEST(ActivationOffloadTest, TheHostHoldsEveryInFlightLayerAndTheDeviceTwoReloadBuffers) {
  const JobSpec spec = Gpt17bSpec();
  const double capacity = 80.0 * (1 << 30);
  const MemoryBreakdown kept = EstimateMemory(spec, Tp2(false), capacity);
  const MemoryBreakdown moved = EstimateMemory(spec, Tp2(true), capacity);
  const double per_layer = 4.0 * 2.0 * kX / 2.0;
  // pp 1: one micro-batch in flight, 24 layers.
  EXPECT_DOUBLE_EQ(moved.host, 24 * per_layer);
  EXPECT_DOUBLE_EQ(kept.activations - moved.activations, 24 * per_layer);
  // Two layers' reload buffers, and the allocator's fragmentation share of the activations
  // no longer on the device.
  const double fragmentation = FrameworkMemory().fragmentation_fraction;
  EXPECT_NEAR(moved.other - kept.other, 2 * per_layer - fragmentation * 24 * per_layer, 1.0);
  EXPECT_LT(moved.Peak(), kept.Peak());
}

TEST(ActivationOffloadTest, TheCopiesAreExposedOnlyBeyondTheLayersCompute) {
  const JobSpec spec = Gpt17bSpec();
  DeviceProfile device = *FindDevice("h100-sxm-80gb");
  const LayerTime fast = EstimateLayerTime(spec.model, spec.training, Tp2(true), device, 8);
  const LayerTime none = EstimateLayerTime(spec.model, spec.training, Tp2(false), device, 8);
  // PCIe 5 (~50 GB/s) moves 18.9 MB in well under the layer's compute.
  EXPECT_EQ(fast.forward_offload, 0.0);
  EXPECT_EQ(fast.backward_offload, 0.0);
  EXPECT_DOUBLE_EQ(fast.Forward(), none.Forward());
  // A 1 GB/s link: the copy outlasts the compute by the difference.
  device.host_link_bandwidth = 1e9;
  const LayerTime slow = EstimateLayerTime(spec.model, spec.training, Tp2(true), device, 8);
  const double copy = 4.0 * 2.0 * kX / 2.0 / (1e9 * kHostLinkEfficiency);
  EXPECT_DOUBLE_EQ(slow.forward_offload, copy - slow.forward_compute);
  EXPECT_DOUBLE_EQ(slow.backward_offload, copy - slow.backward_compute);
  EXPECT_DOUBLE_EQ(slow.Forward() - none.Forward(), copy - slow.forward_compute);
}

TEST(ActivationOffloadTest, ThePlannerTriesOffloadBesideRecomputeAndExplainsIt) {
  JobSpec spec = Gpt17bSpec();
  spec.search.tp = {2};
  spec.search.dp = {4};
  spec.search.micro_batch_size = {1};
  spec.search.recompute = {Recompute::kNone, Recompute::kFull};
  spec.search.activation_offload = {false, true};
  spec.search.top_k = 10;
  absl::StatusOr<PlanResult> plan = Plan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int offloaded = 0;
  for (const RankedConfig& r : plan->ranked) {
    // Full recompute is never offloaded.
    EXPECT_FALSE(r.config.activation_offload && r.config.recompute == Recompute::kFull);
    if (!r.config.activation_offload) continue;
    ++offloaded;
    EXPECT_GT(r.memory.host, 0.0);
    EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
      return n.find("activation offload") != std::string::npos;
    }));
  }
  EXPECT_GT(offloaded, 0);
}

TEST(ActivationOffloadTest, SpecRulesNameTheField) {
  JobSpec spec = Gpt17bSpec();
  spec.search.activation_offload = {true};
  spec.search.recompute = {Recompute::kFull};
  absl::Status s = spec.Validate();
  EXPECT_NE(s.message().find("search.activation_offload [true] with search.recompute [full]"),
            std::string::npos)
      << s;
  spec.search.recompute = {};
  spec.training.framework = Framework::kTorchtitan;
  s = spec.Validate();
  EXPECT_NE(s.message().find("search.activation_offload [true] needs training.framework "
                             "megatron-core or nemo (torchtitan has no fine-grained activation "
                             "offload)"),
            std::string::npos)
      << s;
  spec.training.framework = Framework::kMegatronCore;
  spec.training.offload_modules = {OffloadModule::kCoreAttn, OffloadModule::kCoreAttn};
  s = spec.Validate();
  EXPECT_NE(s.message().find("training.offload_modules[1] (core_attn) repeats"),
            std::string::npos)
      << s;
  nlohmann::json j = JobSpecToJson(Gpt17bSpec());
  j["training"]["offload_modules"] = {"core_attn", "mlp"};
  absl::StatusOr<JobSpec> bad = JobSpecFromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training.offload_modules[1]"), std::string::npos)
      << bad.status();
}

TEST(ActivationOffloadTest, TheSpecFieldsRoundTripThroughJson) {
  JobSpec spec = Gpt17bSpec();
  spec.training.offload_modules = {OffloadModule::kMlpNorm, OffloadModule::kExpertFc1};
  spec.search.activation_offload = {true, false};
  absl::StatusOr<JobSpec> back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training.offload_modules, spec.training.offload_modules);
  EXPECT_EQ(back->search.activation_offload, spec.search.activation_offload);
}

TEST(ActivationOffloadTest, MegatronAndNemoExportItDeepSpeedRefuses) {
  const JobSpec spec = Gpt17bSpec();
  absl::StatusOr<std::vector<CommandLineFlag>> args = MegatronArgs(spec, Tp2(true));
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_NE(std::find(args->begin(), args->end(),
                      CommandLineFlag{"--fine-grained-activation-offloading", ""}),
            args->end());
  EXPECT_NE(std::find(args->begin(), args->end(),
                      CommandLineFlag{"--offload-modules", "core_attn attn_proj expert_fc1"}),
            args->end());
  absl::StatusOr<std::string> nemo = NemoConfigOverride(spec, Tp2(true));
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_NE(nemo->find("  offload_modules: [core_attn, attn_proj, expert_fc1]\n"),
            std::string::npos)
      << *nemo;
  absl::StatusOr<std::string> ds = DeepSpeedConfig(spec, Tp2(true));
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("activation_offload has no DeepSpeed form"),
            std::string::npos);
}

}  // namespace
}  // namespace paratune
