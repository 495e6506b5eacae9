// training.framework: the memory terms of each codebase against hand derivations, the
// overlap defaults against the same layout with the overlap pinned, the planner's sharding
// stages, and refusals that name the field.
#include "search/framework_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "search/collectives.h"
#include "search/device_catalog.h"
#include "search/exporters.h"
#include "search/memory_model.h"
#include "search/model_math.h"
#include "search/planner.h"
#include "search/presets.h"
#include "search/sharded_data_parallel.h"
#include "search/spec_io.h"

namespace paratune {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// Llama 2 13B on one DGX H100, BF16.
JobSpec Llama13b(Framework framework) {
  JobSpec spec;
  spec.name = "llama2-13b";
  spec.model = *FindPreset("llama2-13b");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 64;
  spec.training.precision = Precision::kBf16;
  spec.training.framework = framework;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 8;
  spec.cluster.gpus_per_node = 8;
  return spec;
}

ParallelConfig Layout(int64_t tp, int64_t dp, DataParallelSharding sharding) {
  ParallelConfig c;
  c.tp = tp;
  c.dp = dp;
  c.micro_batch_size = 1;
  c.recompute = Recompute::kSelective;
  c.data_parallel_sharding = sharding;
  return c;
}

MemoryBreakdown Memory(const JobSpec& spec, const ParallelConfig& c) {
  const DeviceProfile device = *FindDevice(spec.cluster.gpu);
  return EstimateMemory(spec, c, device.memory_bytes,
                        FrameworkMemoryFor(device, spec.training.framework));
}

// Pins `spec` to tp, pp, dp (cp 1, vp 1), micro-batch 1, SP as given, `recompute` and the
// distributed optimizer.
void PinLayout(JobSpec& spec, int64_t tp, int64_t pp, int64_t dp, bool sp, Recompute recompute) {
  spec.search.tp = {tp};
  spec.search.pp = {pp};
  spec.search.cp = {1};
  spec.search.dp = {dp};
  spec.search.vp = {1};
  spec.search.micro_batch_size = {1};
  spec.search.sequence_parallel = {sp};
  spec.search.recompute = {recompute};
  spec.search.data_parallel_sharding = {DataParallelSharding::kOptimizer};
}

void PinTp1Dp8(JobSpec& spec, Recompute recompute) { PinLayout(spec, 1, 1, 8, false, recompute); }

// Llama 2 7B on 8 GPUs pinned to tp 1, pp 1, dp 8 with full recompute.
JobSpec Llama7bTp1Dp8(Framework framework) {
  JobSpec spec = Llama13b(framework);
  spec.model = *FindPreset("llama2-7b");
  PinTp1Dp8(spec, Recompute::kFull);
  return spec;
}

// The one layout a pinned spec ranks.
RankedConfig PlanOne(const JobSpec& spec) {
  absl::StatusOr<PlanResult> result = Plan(spec);
  EXPECT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ranked.size(), 1u);
  return result->ranked.front();
}

TEST(FrameworkProfileTest, EveryFrameworkHasAProfileAndAName) {
  for (Framework f : {Framework::kMegatronCore, Framework::kNemo, Framework::kMegatronDeepspeed,
                      Framework::kDeepspeed, Framework::kTorchtitan, Framework::kLlmFoundry,
                      Framework::kNemoAutomodel}) {
    EXPECT_EQ(ProfileOf(f).framework, f) << ToString(f);
    EXPECT_EQ(*ParseFramework(ToString(f)), f);
  }
  EXPECT_THAT(std::string(ParseFramework("megatron-lm").status().message()),
              HasSubstr("expected megatron-core, nemo, megatron-deepspeed, deepspeed, "
                        "torchtitan, llm-foundry, nemo-automodel"));
}

// DeepSpeed's ZeRO keeps 16-bit gradients where Megatron keeps FP32 main grads: with ZeRO-1
// each rank holds all Ψ gradients, so the difference is (4 - 2)·Ψ; with ZeRO-2 the Ψ/N
// shard and the two 40M-parameter reduce-scatter buckets, (4 - 2)·(Ψ/N + 2·40M).
TEST(FrameworkProfileTest, DeepSpeedGradientsAreSixteenBitPerRank) {
  const ParallelConfig zero1 = Layout(1, 8, DataParallelSharding::kOptimizer);
  const double psi = MaxParamsPerGpu(Llama13b(Framework::kMegatronCore).model, zero1);
  const MemoryBreakdown megatron = Memory(Llama13b(Framework::kMegatronCore), zero1);
  const MemoryBreakdown deepspeed = Memory(Llama13b(Framework::kDeepspeed), zero1);
  EXPECT_DOUBLE_EQ(megatron.gradients - deepspeed.gradients, 2.0 * psi);
  EXPECT_DOUBLE_EQ(megatron.weights, deepspeed.weights);
  EXPECT_DOUBLE_EQ(megatron.optimizer, deepspeed.optimizer);

  const ParallelConfig zero2 = Layout(1, 8, DataParallelSharding::kOptimizerGrads);
  const double delta = Memory(Llama13b(Framework::kMegatronCore), zero2).gradients -
                       Memory(Llama13b(Framework::kDeepspeed), zero2).gradients;
  EXPECT_NEAR(delta, 2.0 * (psi / 8.0 + 2.0 * kReduceBucketParams), 1.0);
}

// FSDP mixed precision (llm-foundry, torchtitan): FP32 parameters sharded (4Ψ/N), which are
// Adam's master copy (8Ψ/N of state, not 12Ψ/N), and the gathered layers in 16-bit as
// Megatron-FSDP's: weights +2Ψ/N, optimizer −4Ψ/N, gradients (FP32 both) unchanged.
TEST(FrameworkProfileTest, FsdpKeepsFp32ParametersAsTheMasterCopy) {
  const ParallelConfig full = Layout(1, 8, DataParallelSharding::kFull);
  const double psi = MaxParamsPerGpu(Llama13b(Framework::kMegatronCore).model, full);
  const MemoryBreakdown megatron = Memory(Llama13b(Framework::kMegatronCore), full);
  for (Framework f : {Framework::kLlmFoundry, Framework::kTorchtitan}) {
    const MemoryBreakdown fsdp = Memory(Llama13b(f), full);
    EXPECT_NEAR(fsdp.weights - megatron.weights, 2.0 * psi / 8.0, 1.0) << ToString(f);
    EXPECT_NEAR(megatron.optimizer - fsdp.optimizer, 4.0 * psi / 8.0, 1.0) << ToString(f);
    EXPECT_DOUBLE_EQ(fsdp.gradients, megatron.gradients) << ToString(f);
  }
  // Without resharding after the forward (optimizer_grads) the 16-bit copy of every layer
  // stays beside the FP32 shard: 4Ψ/N + 2Ψ, against Megatron's 2Ψ.
  const ParallelConfig zero2 = Layout(1, 8, DataParallelSharding::kOptimizerGrads);
  EXPECT_NEAR(Memory(Llama13b(Framework::kTorchtitan), zero2).weights -
                  Memory(Llama13b(Framework::kMegatronCore), zero2).weights,
              4.0 * psi / 8.0, 1.0);
}

// NeMo AutoModel's BF16 models: parameters, gradients and Adam's m and v all in BF16,
// sharded by FSDP2 (2Ψ/N + 2Ψ/N + 4Ψ/N = 8Ψ/N per rank), against torchtitan's FP32
// parameters and gradients and FP32 m and v (4Ψ/N + 4Ψ/N + 8Ψ/N = 16Ψ/N): every term
// halves. The gathered 16-bit layers are the same.
TEST(FrameworkProfileTest, AutomodelKeepsEveryStateInBf16) {
  const ParallelConfig full = Layout(1, 8, DataParallelSharding::kFull);
  const double psi = MaxParamsPerGpu(Llama13b(Framework::kMegatronCore).model, full);
  const MemoryBreakdown titan = Memory(Llama13b(Framework::kTorchtitan), full);
  const MemoryBreakdown automodel = Memory(Llama13b(Framework::kNemoAutomodel), full);
  EXPECT_NEAR(titan.weights - automodel.weights, 2.0 * psi / 8.0, 1.0);
  EXPECT_NEAR(titan.optimizer - automodel.optimizer, 4.0 * psi / 8.0, 1.0);
  EXPECT_NEAR(automodel.optimizer, 4.0 * psi / 8.0, 1.0);
  // The shards halve; the layers' reduce buffers are FP32 in both (reduce_dtype).
  EXPECT_NEAR(titan.gradients - automodel.gradients, 2.0 * psi / 8.0, 1.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kNemoAutomodel, Precision::kBf16), 4.0);
  // Kept gathered with the sync deferred (optimizer): the 16-bit parameters whole beside
  // their shard (2Ψ + 2Ψ/N), the unsharded gradients accumulated in the FP32 reduce dtype
  // (4Ψ), Adam's state sharded (4Ψ/N).
  const ParallelConfig kept = Layout(1, 8, DataParallelSharding::kOptimizer);
  const MemoryBreakdown gathered = Memory(Llama13b(Framework::kNemoAutomodel), kept);
  EXPECT_NEAR(gathered.weights, 2.0 * psi + 2.0 * psi / 8.0, 1.0);
  EXPECT_NEAR(gathered.gradients, 4.0 * psi, 1.0);
  EXPECT_NEAR(gathered.optimizer, 4.0 * psi / 8.0, 1.0);
  // No ZeRO-2 form: refused, naming the framework and its stages.
  const ParallelConfig zero2 = Layout(1, 8, DataParallelSharding::kOptimizerGrads);
  EXPECT_THAT(
      std::string(ValidateParallelConfig(zero2, Llama13b(Framework::kNemoAutomodel)).message()),
      HasSubstr("is not a stage of training.framework nemo-automodel (it runs none, optimizer, "
                "full)"));
}

// torch.distributed.pipelining runs a pipelined FSDP2 stage kept gathered, its gradients
// accumulated unsharded and reduce-scattered after its last backward: under AutoModel with
// pp > 1 that is the optimizer stage without the gradient-reduce overlap, which is the
// default there; full sharding is refused naming the rule. Without a pipeline both exist.
TEST(FrameworkProfileTest, PipelinedFsdp2SyncsAfterTheLastBackward) {
  const Framework am = Framework::kNemoAutomodel;
  EXPECT_FALSE(DefaultOverlapGradReduce(am, DataParallelSharding::kOptimizer, 4));
  EXPECT_TRUE(DefaultOverlapGradReduce(am, DataParallelSharding::kOptimizer, 1));
  EXPECT_TRUE(DefaultOverlapGradReduce(am, DataParallelSharding::kNone, 4));
  EXPECT_FALSE(
      DefaultOverlapGradReduce(Framework::kTorchtitan, DataParallelSharding::kOptimizer, 4));
  EXPECT_TRUE(
      DefaultOverlapGradReduce(Framework::kMegatronCore, DataParallelSharding::kOptimizer, 4));
  ParallelConfig c;
  c.pp = 4;
  c.dp = 8;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  EXPECT_THAT(std::string(CheckLayoutForFramework(c, am).message()),
              HasSubstr("search.data_parallel_sharding full with search.pp (4) > 1: "
                        "training.framework nemo-automodel's pipeline keeps FSDP2's gathered "
                        "parameters"));
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  c.overlap_grad_reduce = true;
  EXPECT_THAT(std::string(CheckLayoutForFramework(c, am).message()),
              HasSubstr("search.overlap_grad_reduce (true) with search.pp (4) > 1"));
  c.overlap_grad_reduce = false;
  EXPECT_TRUE(CheckLayoutForFramework(c, am).ok());
  c.pp = 1;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.overlap_grad_reduce = true;
  EXPECT_TRUE(CheckLayoutForFramework(c, am).ok());
  // torchtitan: the same under its pipeline, where only the optimizer stage describes it;
  // without a pipeline it does not defer, so optimizer needs pp > 1 there (AutoModel's
  // defer_fsdp_grad_sync keeps it without one).
  const Framework titan = Framework::kTorchtitan;
  c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  EXPECT_EQ(CheckLayoutForFramework(c, titan).message(),
            "search.data_parallel_sharding optimizer with search.pp 1: training.framework "
            "torchtitan keeps FSDP2's gathered parameters and defers the gradient sync only "
            "under its pipeline (use optimizer_grads or full)");
  EXPECT_TRUE(CheckLayoutForFramework(c, am).ok());
  c.pp = 4;
  c.overlap_grad_reduce = false;
  EXPECT_TRUE(CheckLayoutForFramework(c, titan).ok());
  c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
  EXPECT_THAT(std::string(CheckLayoutForFramework(c, titan).message()),
              HasSubstr("search.data_parallel_sharding optimizer_grads with search.pp (4) > 1"));
  // Its memory kept gathered: the FP32 shard and the 16-bit layers whole (4Ψ/N + 2Ψ),
  // the unsharded FP32 gradients (4Ψ), Adam's FP32 m and v sharded (8Ψ/N).
  JobSpec titan_spec = Llama13b(titan);
  ParallelConfig kept = Layout(1, 8, DataParallelSharding::kOptimizer);
  kept.pp = 2;
  kept.dp = 4;
  kept.overlap_grad_reduce = false;
  // (Ψ of the stage that peaks: the first and last differ by the final norm's weights.)
  const double psi = MaxParamsPerGpu(titan_spec.model, kept);
  const MemoryBreakdown m = Memory(titan_spec, kept);
  EXPECT_NEAR(m.weights, 4.0 * psi / 4.0 + 2.0 * psi, 1e-5 * psi);
  EXPECT_NEAR(m.gradients, 4.0 * psi, 1e-5 * psi);
  EXPECT_NEAR(m.optimizer, 8.0 * psi / 4.0, 1e-5 * psi);
  // A pinned pipelined spec takes the deferred sync.
  JobSpec spec = Llama13b(am);
  spec.cluster.num_gpus = 32;
  PinLayout(spec, 1, 4, 8, false, Recompute::kFull);
  absl::StatusOr<ParallelConfig> pinned = PinnedLayout(spec);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_FALSE(pinned->overlap_grad_reduce);
  // Its notes say what the optimizer stage is there.
  absl::StatusOr<RankedConfig> estimate = Estimate(spec, *pinned);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_THAT(estimate->notes,
              Contains(HasSubstr("data_parallel_sharding optimizer (training.framework "
                                 "nemo-automodel): FSDP2 keeps every layer's gathered parameters "
                                 "and the unsharded gradients, and reduce-scatters them after each "
                                 "stage's last backward")));
}

// Expert layers: AutoModel has no expert TP and dispatches by all-gather or DeepEP;
// torchtitan by all-to-all or DeepEP. A pinned layout or an explicit search value outside
// them is refused naming the field; an open search tries only theirs.
TEST(FrameworkProfileTest, ExpertLayoutsFollowTheFramework) {
  JobSpec spec;
  spec.model = *FindPreset("qwen3-30b-a3b");
  spec.training.seq_length = 4096;
  spec.training.global_batch_size = 64;
  spec.training.framework = Framework::kNemoAutomodel;
  spec.cluster.gpu = "h100-sxm-80gb";
  spec.cluster.num_gpus = 8;
  ParallelConfig c;
  c.dp = 8;
  c.ep = 4;
  c.etp = 2;
  c.data_parallel_sharding = DataParallelSharding::kFull;
  c.moe_token_dispatcher = MoeTokenDispatcher::kFlex;
  EXPECT_EQ(CheckLayoutForFramework(c, Framework::kNemoAutomodel).message(),
            "search.etp (2) must be 1: training.framework nemo-automodel has no expert tensor "
            "parallelism");
  EXPECT_TRUE(CheckLayoutForFramework(c, Framework::kTorchtitan).ok());
  c.etp = 1;
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllToAll;
  EXPECT_EQ(CheckLayoutForFramework(c, Framework::kNemoAutomodel).message(),
            "search.moe_token_dispatcher alltoall is not a dispatcher of training.framework "
            "nemo-automodel (it runs allgather, flex)");
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllGather;
  EXPECT_TRUE(CheckLayoutForFramework(c, Framework::kNemoAutomodel).ok());
  EXPECT_THAT(std::string(CheckLayoutForFramework(c, Framework::kTorchtitan).message()),
              HasSubstr("(it runs alltoall, flex)"));
  c.ep = 1;  // nothing dispatched: the dispatcher does not matter
  c.moe_token_dispatcher = MoeTokenDispatcher::kAllToAll;
  EXPECT_TRUE(CheckLayoutForFramework(c, Framework::kNemoAutomodel).ok());
  SearchOptions o;
  o.etp = {1, 2};
  EXPECT_EQ(CheckSearchForFramework(o, Framework::kNemoAutomodel).message(),
            "search.etp [2]: training.framework nemo-automodel has no expert tensor "
            "parallelism (etp 1 only)");
  o.etp = {};
  o.moe_token_dispatcher = {MoeTokenDispatcher::kAllToAll};
  EXPECT_THAT(std::string(CheckSearchForFramework(o, Framework::kNemoAutomodel).message()),
              HasSubstr("search.moe_token_dispatcher alltoall is not a dispatcher"));
  // The open search's layouts: etp 1, and allgather or flex wherever EP > 1.
  spec.search.top_k = 1000;
  absl::StatusOr<PlanResult> plan = Plan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->ranked.empty());
  for (const RankedConfig& r : plan->ranked) {
    EXPECT_EQ(r.config.etp, 1) << r.config.ToString();
    if (r.config.ep > 1) {
      EXPECT_NE(r.config.moe_token_dispatcher, MoeTokenDispatcher::kAllToAll)
          << r.config.ToString();
    }
  }
}

// A PyTorch model's loss holds the full vocabulary on every TP rank: t times Megatron's
// vocab-parallel loss buffers.
TEST(FrameworkProfileTest, DeepSpeedLossBuffersHoldTheFullVocabulary) {
  const ParallelConfig tp2 = Layout(2, 4, DataParallelSharding::kOptimizer);
  EXPECT_DOUBLE_EQ(Memory(Llama13b(Framework::kDeepspeed), tp2).loss_buffers,
                   2.0 * Memory(Llama13b(Framework::kMegatronCore), tp2).loss_buffers);
}

// Megatron-DeepSpeed (Llama 2 7B) has no gradient-reduce overlap by default (ZeRO's overlap_comm is
// off below stage 3). In FP16 both codebases reduce 16-bit gradients and keep the same memory, so
// its default layout costs exactly what Megatron-Core's costs with the overlap pinned off, and more
// than Megatron-Core's default.
TEST(FrameworkProfileTest, MegatronDeepSpeedExposesTheGradientReduction) {
  const auto plan = [](Framework f, std::vector<bool> grad_overlap) {
    JobSpec spec = Llama7bTp1Dp8(f);
    spec.training.precision = Precision::kFp16;
    spec.search.overlap_grad_reduce = std::move(grad_overlap);
    return PlanOne(spec);
  };
  const RankedConfig deepspeed = plan(Framework::kMegatronDeepspeed, {});
  const RankedConfig pinned_off = plan(Framework::kMegatronCore, {false});
  const RankedConfig megatron = plan(Framework::kMegatronCore, {});
  EXPECT_FALSE(deepspeed.config.overlap_grad_reduce);
  EXPECT_TRUE(megatron.config.overlap_grad_reduce);
  EXPECT_DOUBLE_EQ(deepspeed.time.dp_comm, pinned_off.time.dp_comm);
  // The rest of the difference is FP16's gradient accumulation (below).
  EXPECT_NEAR(deepspeed.iteration_time_s - pinned_off.iteration_time_s,
              deepspeed.time.compute - pinned_off.time.compute, 1e-9);
  EXPECT_GT(deepspeed.time.dp_comm, megatron.time.dp_comm);
}

// Megatron-DeepSpeed adds every micro-batch's gradients into the accumulated ones after
// its backward: BF16_Optimizer.update_hp_grads copies the BF16 gradient to FP32 and adds
// it (2 + 4 + 4 + 4 + 4 = 18 bytes per parameter), FP16 runs add into the FP16 .grad
// (2 + 2 + 2 = 6). Megatron-Core accumulates inside the weight-gradient GEMM. Llama 2 7B
// at tp 1, pp 1, dp 8, micro-batch 1, global batch 64: 8 micro-batches, each a pass over
// the rank's 6.7B parameters at 80 % of H100's 3.35 TB/s.
TEST(FrameworkProfileTest, MegatronDeepSpeedAccumulatesGradientsBesideTheGemms) {
  const auto plan = [](Framework f, Precision precision) {
    JobSpec spec = Llama7bTp1Dp8(f);
    spec.training.precision = precision;
    spec.training.attention_kernel = AttentionKernel::kFlash2;
    spec.search.overlap_grad_reduce = {false};
    return PlanOne(spec);
  };
  const DeviceProfile device = *FindDevice("h100-sxm-80gb");
  for (const auto& [precision, bytes] : std::vector<std::pair<Precision, double>>{
           {Precision::kBf16, 18.0}, {Precision::kFp16, 6.0}}) {
    const RankedConfig deepspeed = plan(Framework::kMegatronDeepspeed, precision);
    const RankedConfig megatron = plan(Framework::kMegatronCore, precision);
    const double params = StageParamsPerGpu(*FindPreset("llama2-7b"), deepspeed.config, 0);
    EXPECT_GT(params, 6.5e9);
    const double pass = bytes * params / (device.memory_bandwidth * device.memory_efficiency);
    EXPECT_NEAR(deepspeed.time.compute - megatron.time.compute, 8 * pass, 1e-9);
    EXPECT_NEAR(deepspeed.iteration_time_s - megatron.iteration_time_s,
                8 * pass + deepspeed.time.dp_comm - megatron.time.dp_comm, 1e-9);
  }
  EXPECT_EQ(GradAccumulationBytesPerParam(Framework::kMegatronDeepspeed, Precision::kFp32), 0);
  EXPECT_EQ(GradAccumulationBytesPerParam(Framework::kMegatronDeepspeed, Precision::kFp8), 18);
  EXPECT_EQ(GradAccumulationBytesPerParam(Framework::kDeepspeed, Precision::kBf16), 0);
  EXPECT_EQ(GradAccumulationBytesPerParam(Framework::kTorchtitan, Precision::kBf16), 0);
}

// DeepSpeed's PipelineEngine sends a stage's output whole from every rank of its TP group
// (without sequence parallelism each holds a copy); Megatron sends 1/t per rank. Llama 2 7B
// on 8 GPUs at tp 2, pp 2, dp 2 (both stages on one node's NVLink), FP32 (no gradient
// accumulation pass), micro-batch 1, 32 micro-batches: each blocking transfer of the
// critical (first or last) stage moves s*h*4 bytes instead of s*h*4/2.
TEST(FrameworkProfileTest, DeepSpeedPipelineSendsTheWholeActivation) {
  const auto plan = [](Framework f, bool sp) {
    JobSpec spec = Llama13b(f);
    spec.model = *FindPreset("llama2-7b");
    spec.training.precision = Precision::kFp32;
    spec.training.attention_kernel = AttentionKernel::kFlash2;
    PinLayout(spec, 2, 2, 2, sp, Recompute::kFull);
    spec.search.overlap_grad_reduce = {false};
    spec.search.overlap_p2p_comm = {false};
    spec.search.overlap_param_gather = {false};
    return PlanOne(spec);
  };
  const DeviceProfile device = *FindDevice("h100-sxm-80gb");
  const double half = 4096.0 * 4096.0 * 4.0 / 2.0;  // s * h * 4 bytes over tp 2
  const RankedConfig deepspeed = plan(Framework::kMegatronDeepspeed, false);
  const RankedConfig megatron = plan(Framework::kMegatronCore, false);
  EXPECT_NEAR(deepspeed.time.pp_p2p - megatron.time.pp_p2p, 32 * half / device.nvlink_bandwidth,
              1e-9);
  EXPECT_NEAR(plan(Framework::kMegatronDeepspeed, true).time.pp_p2p,
              plan(Framework::kMegatronCore, true).time.pp_p2p, 1e-12);
}

// training.grad_reduce_in_fp32 false (NVIDIA's performance recipes: NeMo's FP8 scripts,
// Megatron-Bridge's perf configs; Megatron-LM's --grad-reduce-in-bf16) keeps Megatron-Core's
// gradient buffer and its reduction in BF16: half the gradient bytes of the default, the
// flag in the Megatron export, the same layout as the framework's default when true.
TEST(FrameworkProfileTest, GradReduceInFp32SetsTheGradientBuffer) {
  const auto plan = [](std::optional<bool> fp32) {
    JobSpec spec = Llama7bTp1Dp8(Framework::kNemo);
    spec.training.grad_reduce_in_fp32 = fp32;
    spec.search.overlap_grad_reduce = {false};
    return PlanOne(spec);
  };
  const RankedConfig unset = plan(std::nullopt);
  const RankedConfig fp32 = plan(true);
  const RankedConfig bf16 = plan(false);
  EXPECT_DOUBLE_EQ(fp32.memory.gradients, unset.memory.gradients);
  EXPECT_DOUBLE_EQ(fp32.iteration_time_s, unset.iteration_time_s);
  EXPECT_DOUBLE_EQ(bf16.memory.gradients, 0.5 * fp32.memory.gradients);
  EXPECT_LT(bf16.time.dp_comm, fp32.time.dp_comm);
  EXPECT_DOUBLE_EQ(bf16.time.compute, fp32.time.compute);

  JobSpec spec = Llama7bTp1Dp8(Framework::kMegatronCore);
  spec.training.grad_reduce_in_fp32 = false;
  const absl::StatusOr<std::string> args = FormatMegatronArgs(spec, bf16.config);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, HasSubstr("--grad-reduce-in-bf16"));
  spec.training.grad_reduce_in_fp32 = true;
  EXPECT_THAT(*FormatMegatronArgs(spec, bf16.config),
              ::testing::Not(HasSubstr("--grad-reduce-in-bf16")));

  // Written and read back; refused where it has no meaning.
  spec.training.grad_reduce_in_fp32 = false;
  absl::StatusOr<JobSpec> back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training.grad_reduce_in_fp32, std::optional<bool>(false));
  spec.training.grad_reduce_in_fp32.reset();
  back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->training.grad_reduce_in_fp32.has_value());
  spec.training.grad_reduce_in_fp32 = false;
  spec.training.framework = Framework::kTorchtitan;
  EXPECT_THAT(spec.Validate().message(),
              HasSubstr("training.grad_reduce_in_fp32 needs training.framework megatron-core"));
  spec.training.framework = Framework::kMegatronCore;
  spec.training.precision = Precision::kFp32;
  EXPECT_THAT(spec.Validate().message(), HasSubstr("training.grad_reduce_in_fp32 applies to"));
}

// FP8 training under Megatron-Core keeps each linear weight's FP8 copy and, on Hopper, its
// transpose through the step beside the BF16 weight (2 bytes per linear parameter; 1 on
// Blackwell, whose FP8 GEMMs take either layout); with FP8 parameters the weight is the
// FP8 copy (the BF16 weights' bytes) and the distributed optimizer gathers 1 byte per
// parameter instead of 2. NeMo's FP8 plugin holds FP8 parameters unless told otherwise.
TEST(FrameworkProfileTest, Fp8WeightsAreCachedOrHeldInFp8) {
  const auto plan = [](Framework f, Precision precision, std::optional<bool> fp8_params,
                       const char* gpu = "h100-sxm-80gb") {
    JobSpec spec = Llama7bTp1Dp8(f);
    spec.cluster.gpu = gpu;
    spec.training.precision = precision;
    spec.training.fp8_param_gather = fp8_params;
    spec.search.overlap_grad_reduce = {false};
    spec.search.overlap_param_gather = {false};
    return PlanOne(spec);
  };
  const ModelSpec llama = *FindPreset("llama2-7b");
  const RankedConfig bf16 = plan(Framework::kMegatronCore, Precision::kBf16, std::nullopt);
  const RankedConfig fp8 = plan(Framework::kMegatronCore, Precision::kFp8, std::nullopt);
  const RankedConfig fp8_params = plan(Framework::kMegatronCore, Precision::kFp8, true);
  const double linear = StageParamsSplit(llama, fp8.config, 0).linear;
  EXPECT_NEAR(linear, 32 * LayerMatmulParams(llama), 1.0);
  EXPECT_NEAR(fp8.memory.weights - bf16.memory.weights, 2.0 * linear, 1.0);
  EXPECT_NEAR(fp8_params.memory.weights, bf16.memory.weights, 1.0);
  const RankedConfig b200_bf16 =
      plan(Framework::kMegatronCore, Precision::kBf16, std::nullopt, "b200-192gb");
  const RankedConfig b200_fp8 =
      plan(Framework::kMegatronCore, Precision::kFp8, std::nullopt, "b200-192gb");
  EXPECT_NEAR(b200_fp8.memory.weights - b200_bf16.memory.weights, linear, 1.0);
  // NeMo: FP8 parameters by default, the cache only when they are turned off.
  EXPECT_NEAR(plan(Framework::kNemo, Precision::kFp8, std::nullopt).memory.weights,
              bf16.memory.weights, 1.0);
  EXPECT_NEAR(plan(Framework::kNemo, Precision::kFp8, false).memory.weights, fp8.memory.weights,
              1.0);
  // The parameter all-gather after the step, all exposed: 1 byte per parameter, not 2.
  const DeviceProfile device = *FindDevice("h100-sxm-80gb");
  const ShardedLinks links = ShardedDataParallelLinks(fp8.config, device, 8);
  const double psi = StageParamsSplit(llama, fp8.config, 0).dense;
  EXPECT_NEAR(fp8.time.dp_comm - fp8_params.time.dp_comm,
              AllGatherSeconds(2.0 * psi, 8, links.shard) - AllGatherSeconds(psi, 8, links.shard),
              1e-9);
  // Refusals.
  JobSpec spec = Llama7bTp1Dp8(Framework::kMegatronCore);
  spec.training.fp8_param_gather = true;
  EXPECT_THAT(spec.Validate().message(),
              HasSubstr("training.fp8_param_gather needs training.precision fp8 or mxfp8"));
  spec.training.precision = Precision::kFp8;
  spec.training.framework = Framework::kTorchtitan;
  EXPECT_THAT(spec.Validate().message(),
              HasSubstr("training.fp8_param_gather needs training.framework megatron-core"));
  spec.training.framework = Framework::kMegatronCore;
  EXPECT_THAT(*FormatMegatronArgs(spec, fp8.config), HasSubstr("--fp8-param-gather"));
  absl::StatusOr<JobSpec> back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training.fp8_param_gather, std::optional<bool>(true));
}

// training.optimizer_state_dtype is Megatron-Core's precision-aware optimizer: Transformer
// Engine's FusedAdam keeps Adam's two moments in the dtype and the main weights as the 16
// bits a BF16 parameter lacks of its FP32 value (whole FP32 ones over FP16 or FP8
// parameters). Per parameter, BF16 training with BF16 moments holds 2 + 2 + 2 = 6 bytes
// against the standard optimizer's 4 + 4 + 4 = 12, sharded alike; the step moves 36 bytes
// (unscale, norm and zeroing 16; gradient 4; parameter written 2; remainder and parameter
// read, remainder written 6; moments 8) against 50.
TEST(FrameworkProfileTest, PrecisionAwareOptimizerKeepsLowPrecisionState) {
  TrainingSpec t;
  t.precision = Precision::kBf16;
  t.optimizer_state_dtype = Precision::kBf16;
  EXPECT_DOUBLE_EQ(PrecisionAwareOptimizerBytes(t), 6.0);
  t.optimizer_state_dtype = Precision::kFp32;
  EXPECT_DOUBLE_EQ(PrecisionAwareOptimizerBytes(t), 2.0 + 4.0 + 4.0);
  t.optimizer_state_dtype = Precision::kFp8;
  EXPECT_DOUBLE_EQ(PrecisionAwareOptimizerBytes(t), 2.0 + 1.0 + 1.0);
  t.precision = Precision::kFp16;
  t.optimizer_state_dtype = Precision::kFp16;
  EXPECT_DOUBLE_EQ(PrecisionAwareOptimizerBytes(t), 4.0 + 2.0 + 2.0);
  t.precision = Precision::kFp8;
  t.optimizer_state_dtype = Precision::kBf16;
  EXPECT_DOUBLE_EQ(PrecisionAwareOptimizerBytes(t), 6.0);  // BF16 parameters, FP8 GEMMs.
  t.fp8_param_gather = true;
  EXPECT_DOUBLE_EQ(PrecisionAwareOptimizerBytes(t), 4.0 + 2.0 + 2.0);

  const auto plan = [](std::optional<Precision> moments) {
    JobSpec spec = Llama7bTp1Dp8(Framework::kMegatronCore);
    spec.training.optimizer_state_dtype = moments;
    spec.search.overlap_grad_reduce = {false};
    return PlanOne(spec);
  };
  const RankedConfig standard = plan(std::nullopt);
  const RankedConfig bf16 = plan(Precision::kBf16);
  EXPECT_DOUBLE_EQ(bf16.memory.optimizer, 0.5 * standard.memory.optimizer);
  EXPECT_DOUBLE_EQ(bf16.memory.weights, standard.memory.weights);
  EXPECT_DOUBLE_EQ(bf16.memory.gradients, standard.memory.gradients);
  EXPECT_DOUBLE_EQ(bf16.time.compute, standard.time.compute);
  const double launches = 20 * FindDevice("h100-sxm-80gb")->kernel_launch_s;
  EXPECT_NEAR((bf16.time.optimizer - launches) / (standard.time.optimizer - launches), 36.0 / 50.0,
              1e-9);

  // Exports, round trip, refusals.
  JobSpec spec = Llama7bTp1Dp8(Framework::kMegatronCore);
  spec.training.optimizer_state_dtype = Precision::kBf16;
  const absl::StatusOr<std::string> args = FormatMegatronArgs(spec, bf16.config);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, HasSubstr("--use-precision-aware-optimizer"));
  EXPECT_THAT(*args, HasSubstr("--exp-avg-dtype bf16"));
  EXPECT_THAT(*args, HasSubstr("--exp-avg-sq-dtype bf16"));
  EXPECT_THAT(*NemoConfigOverride(spec, bf16.config),
              HasSubstr("use_precision_aware_optimizer=True, exp_avg_dtype=torch.bfloat16"));
  EXPECT_THAT(*FormatMegatronArgs(Llama7bTp1Dp8(Framework::kMegatronCore), bf16.config),
              ::testing::Not(HasSubstr("precision-aware")));
  absl::StatusOr<JobSpec> back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training.optimizer_state_dtype, std::optional<Precision>(Precision::kBf16));
  nlohmann::json j = JobSpecToJson(spec);
  j["training"]["optimizer_state_dtype"] = "";
  back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->training.optimizer_state_dtype.has_value());
  j["training"]["optimizer_state_dtype"] = "mxfp8";
  EXPECT_THAT(std::string(JobSpecFromJson(j).status().message()),
              HasSubstr("training.optimizer_state_dtype: unknown optimizer state dtype 'mxfp8' "
                        "(expected fp32, bf16, fp16 or fp8)"));
  spec.training.framework = Framework::kDeepspeed;
  EXPECT_THAT(spec.Validate().message(),
              HasSubstr("training.optimizer_state_dtype needs training.framework megatron-core"));
  spec.training.framework = Framework::kNemo;
  EXPECT_TRUE(spec.Validate().ok());
  spec.training.precision = Precision::kFp32;
  EXPECT_THAT(spec.Validate().message(),
              HasSubstr("training.optimizer_state_dtype applies to 16-bit and low-precision"));
}

// When the winner recomputes only because of FP32 gradients and cached FP8 weights, its
// notes say what the performance recipes' numerics would give: Nemotron-340B on 128 H100 in
// FP8 (tp 8, pp 8, vp 12, the published NeMo layout) fits only with full recompute under
// Megatron-Core's defaults, and without recompute with BF16 gradients and FP8 parameters.
// A spec that states both gets no note.
TEST(FrameworkProfileTest, WinnerNotesLeanerNumericsThatAvoidRecompute) {
  JobSpec spec = Llama13b(Framework::kMegatronCore);  // 4k tokens on H100s, as NeMo's row.
  spec.model = *FindPreset("nemotron-340b");
  spec.training.global_batch_size = 32;
  spec.training.precision = Precision::kFp8;
  spec.cluster.num_gpus = 128;
  PinLayout(spec, 8, 8, 2, true, Recompute::kFull);
  spec.search.vp = {12};
  spec.search.recompute = {};
  const auto best = [](const JobSpec& s) {
    absl::StatusOr<PlanResult> plan = Plan(s);
    EXPECT_TRUE(plan.ok() && !plan->ranked.empty());
    return plan->ranked.front();
  };
  const RankedConfig winner = best(spec);
  EXPECT_EQ(winner.config.recompute, Recompute::kFull);
  EXPECT_THAT(winner.notes,
              Contains(HasSubstr("with training.grad_reduce_in_fp32: false and "
                                 "training.fp8_param_gather: true (as NVIDIA's performance "
                                 "recipes run) this layout fits without recompute")));
  spec.training.grad_reduce_in_fp32 = true;
  spec.training.fp8_param_gather = false;
  for (const std::string& note : best(spec).notes) {
    EXPECT_THAT(note, ::testing::Not(HasSubstr("fits without recompute")));
  }
}

// Where BF16 gradients are not enough, the note adds the precision-aware optimizer's BF16
// Adam moments: Llama 2 13B on 8 H100 at tp 2, dp 4, two 4k-token sequences per
// micro-batch fits only with full recompute (62.2 GiB; 92.5 without, 80.4 with BF16
// gradients) and without recompute with BF16 gradients and moments (71.3 GiB). The note's
// figures are the layout's own estimate under those settings. A spec that names the
// optimizer state dtype keeps it: with FP32 moments the precision-aware optimizer's main
// weights are the 2-byte remainders, and BF16 gradients alone then fit.
TEST(FrameworkProfileTest, WinnerNotesBf16AdamMomentsThatAvoidRecompute) {
  JobSpec spec = Llama13b(Framework::kMegatronCore);
  PinLayout(spec, 2, 1, 4, false, Recompute::kFull);
  spec.search.micro_batch_size = {2};
  spec.search.recompute = {Recompute::kNone, Recompute::kFull};
  absl::StatusOr<PlanResult> plan = Plan(spec);
  ASSERT_TRUE(plan.ok() && !plan->ranked.empty()) << plan.status();
  const RankedConfig& winner = plan->ranked.front();
  EXPECT_EQ(winner.config.recompute, Recompute::kFull);
  JobSpec lean = spec;
  lean.training.grad_reduce_in_fp32 = false;
  lean.training.optimizer_state_dtype = Precision::kBf16;
  ParallelConfig none = winner.config;
  none.recompute = Recompute::kNone;
  absl::StatusOr<RankedConfig> without = Estimate(lean, none);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->fits);
  EXPECT_THAT(winner.notes,
              Contains(absl::StrFormat(
                  "with training.grad_reduce_in_fp32: false and training.optimizer_state_dtype: "
                  "bf16 (Megatron-Core's precision-aware optimizer for the Adam moments) this "
                  "layout fits without recompute (peak %.1f GiB) and is %.1f%% faster",
                  without->memory.Peak() / (1024.0 * 1024.0 * 1024.0),
                  100.0 * (winner.iteration_time_s / without->iteration_time_s - 1.0))));
  lean.training.optimizer_state_dtype.reset();
  absl::StatusOr<RankedConfig> grads_only = Estimate(lean, none);
  ASSERT_TRUE(grads_only.ok()) << grads_only.status();
  EXPECT_FALSE(grads_only->fits);
  spec.training.optimizer_state_dtype = Precision::kFp32;
  absl::StatusOr<PlanResult> named = Plan(spec);
  ASSERT_TRUE(named.ok() && !named->ranked.empty()) << named.status();
  EXPECT_THAT(named->ranked.front().notes,
              Contains(HasSubstr("with training.grad_reduce_in_fp32: false (as NVIDIA's "
                                 "performance recipes run) this layout fits without recompute")));
  for (const std::string& note : named->ranked.front().notes) {
    EXPECT_THAT(note, ::testing::Not(HasSubstr("training.optimizer_state_dtype")));
  }
}

// --overlap-param-gather: the distributed optimizer's all-gather of the updated 16-bit
// parameters runs behind the next forward but its first 40M-parameter bucket. Pinned off it
// is all exposed: the step grows by exactly AllGather(2Ψ) − AllGather(2·40M) over the 8
// ranks' NVLink. Megatron-DeepSpeed (ZeRO-1's gather after the step) has it off and refuses
// it on.
TEST(FrameworkProfileTest, ParamGatherOverlapHidesAllButTheFirstBucket) {
  const auto plan = [](Framework f, std::vector<bool> gather_overlap) {
    JobSpec spec = Llama7bTp1Dp8(f);
    spec.search.overlap_param_gather = std::move(gather_overlap);
    return PlanOne(spec);
  };
  const RankedConfig on = plan(Framework::kMegatronCore, {});
  const RankedConfig off = plan(Framework::kMegatronCore, {false});
  EXPECT_TRUE(on.config.overlap_param_gather);
  EXPECT_FALSE(off.config.overlap_param_gather);
  const DeviceProfile device = *FindDevice("h100-sxm-80gb");
  const ShardedLinks links = ShardedDataParallelLinks(on.config, device, 8);
  const double psi = StageParamsSplit(*FindPreset("llama2-7b"), on.config, 0).dense;
  const double expected = AllGatherSeconds(2.0 * psi, 8, links.shard) -
                          AllGatherSeconds(2.0 * kReduceBucketParams, 8, links.shard);
  EXPECT_NEAR(off.time.dp_comm - on.time.dp_comm, expected, 1e-9);
  EXPECT_NEAR(off.iteration_time_s - on.iteration_time_s, expected, 1e-9);

  EXPECT_FALSE(plan(Framework::kMegatronDeepspeed, {}).config.overlap_param_gather);
  JobSpec spec = Llama13b(Framework::kDeepspeed);
  spec.search.overlap_param_gather = {true};
  EXPECT_EQ(spec.Validate().message(),
            "search.overlap_param_gather [true] needs training.framework megatron-core, nemo, "
            "torchtitan, llm-foundry, nemo-automodel (deepspeed has no parameter all-gather "
            "overlap)");
}

// Gradient reduction dtype: Megatron-Core all-reduces BF16 gradients in FP32, DeepSpeed in
// BF16 (its communication_data_type); the FP16 and FP32 runs reduce their own dtype.
TEST(FrameworkProfileTest, GradientReduceBytes) {
  EXPECT_EQ(GradientReduceBytes(Framework::kMegatronCore, Precision::kBf16), 4.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kTorchtitan, Precision::kBf16), 4.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kLlmFoundry, Precision::kBf16), 4.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kDeepspeed, Precision::kBf16), 2.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kMegatronDeepspeed, Precision::kFp8), 2.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kMegatronCore, Precision::kFp16), 2.0);
  EXPECT_EQ(GradientReduceBytes(Framework::kDeepspeed, Precision::kFp32), 4.0);
}

// An open sharding list tries the framework's stages: FSDP codebases full sharding, never
// ZeRO-1 (but torchtitan's pipelined FSDP2, kept gathered: optimizer with pp > 1);
// Megatron-Core the distributed optimizer, as before.
TEST(FrameworkProfileTest, OpenShardingTriesTheFrameworksStages) {
  for (const auto& [framework, expected] :
       {std::pair<Framework, DataParallelSharding>{Framework::kTorchtitan,
                                                   DataParallelSharding::kFull},
        {Framework::kLlmFoundry, DataParallelSharding::kFull},
        {Framework::kMegatronCore, DataParallelSharding::kOptimizer}}) {
    JobSpec spec = Llama13b(framework);
    spec.search.top_k = 1000;
    absl::StatusOr<PlanResult> result = Plan(spec);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_FALSE(result->ranked.empty()) << ToString(framework);
    bool saw_expected = false;
    for (const RankedConfig& r : result->ranked) {
      const DataParallelSharding s = r.config.data_parallel_sharding;
      const bool pipelined_fsdp = framework == Framework::kTorchtitan && r.config.pp > 1 &&
                                  s == DataParallelSharding::kOptimizer;
      EXPECT_TRUE(s == DataParallelSharding::kNone || s == expected || pipelined_fsdp)
          << ToString(framework) << ": " << r.config.ToString();
      if (framework == Framework::kTorchtitan && r.config.pp > 1) {
        EXPECT_NE(s, DataParallelSharding::kFull) << r.config.ToString();
      }
      saw_expected = saw_expected || s == expected;
      if (framework == Framework::kLlmFoundry) {
        EXPECT_EQ(r.config.pp, 1) << r.config.ToString();
        EXPECT_EQ(r.config.cp, 1) << r.config.ToString();
        EXPECT_FALSE(r.config.sequence_parallel) << r.config.ToString();
      }
    }
    EXPECT_TRUE(saw_expected) << ToString(framework);
  }
}

TEST(FrameworkProfileTest, RefusalsNameTheFieldAndTheRule) {
  JobSpec spec = Llama13b(Framework::kMegatronDeepspeed);
  spec.search.tp_comm_overlap = {true};
  EXPECT_EQ(spec.Validate().message(),
            "search.tp_comm_overlap [true] needs training.framework megatron-core, nemo, "
            "torchtitan, nemo-automodel (megatron-deepspeed has no TP communication overlap)");
  spec = Llama13b(Framework::kLlmFoundry);
  spec.search.overlap_p2p_comm = {false, true};
  EXPECT_THAT(spec.Validate().message(),
              HasSubstr("search.overlap_p2p_comm [true] needs training.framework"));
  spec = Llama13b(Framework::kLlmFoundry);
  spec.search.data_parallel_sharding = {DataParallelSharding::kOptimizer};
  EXPECT_EQ(spec.Validate().message(),
            "search.data_parallel_sharding optimizer is not a stage of training.framework "
            "llm-foundry (it runs none, optimizer_grads, full)");
  spec.search.data_parallel_sharding = {DataParallelSharding::kFull};
  EXPECT_TRUE(spec.Validate().ok());

  // Layout rules.
  ParallelConfig c = Layout(1, 4, DataParallelSharding::kFull);
  c.pp = 2;
  EXPECT_EQ(ValidateParallelConfig(c, Llama13b(Framework::kLlmFoundry)).message(),
            "search.pp (2) must be 1: training.framework llm-foundry has no pipeline "
            "parallelism");
  EXPECT_THAT(std::string(ValidateParallelConfig(c, Llama13b(Framework::kDeepspeed)).message()),
              HasSubstr("ZeRO stage 0 or 1 only"));
  EXPECT_TRUE(ValidateParallelConfig(c, Llama13b(Framework::kMegatronCore)).ok());
}

TEST(FrameworkProfileTest, SpecFilesReadAndWriteTheFramework) {
  nlohmann::json j = JobSpecToJson(Llama13b(Framework::kMegatronCore));
  EXPECT_EQ(j["training"]["framework"], "megatron-core");
  j["training"]["framework"] = "llm-foundry";
  absl::StatusOr<JobSpec> back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training.framework, Framework::kLlmFoundry);
  j["training"].erase("framework");
  EXPECT_EQ(JobSpecFromJson(j)->training.framework, Framework::kMegatronCore);
  j["training"]["framework"] = "fsdp";
  EXPECT_EQ(JobSpecFromJson(j).status().message(),
            "training.framework: unknown framework 'fsdp' (expected megatron-core, nemo, "
            "megatron-deepspeed, deepspeed, torchtitan, llm-foundry, nemo-automodel)");
}

// A pinned spec's layout takes the framework's overlap defaults.
TEST(FrameworkProfileTest, PinnedLayoutsTakeTheFrameworksOverlaps) {
  JobSpec spec = Llama13b(Framework::kDeepspeed);
  PinTp1Dp8(spec, Recompute::kSelective);
  EXPECT_FALSE(PinnedLayout(spec)->overlap_grad_reduce);
  spec.search.data_parallel_sharding = {DataParallelSharding::kFull};
  EXPECT_TRUE(PinnedLayout(spec)->overlap_grad_reduce);
  spec.training.framework = Framework::kMegatronCore;
  spec.search.data_parallel_sharding = {DataParallelSharding::kOptimizer};
  EXPECT_TRUE(PinnedLayout(spec)->overlap_grad_reduce);
}

}  // namespace
}  // namespace paratune
