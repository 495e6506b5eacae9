#include "inference/serving_profile.h"

#include <gtest/gtest.h>

#include <set>

#include "inference/engine_profile.h"
#include "inference/planner.h"
#include "inference/spec_io.h"
#include "tests/inference/small_cpu_serving_spec.h"

namespace paratune::inference {
namespace {

InferenceJobSpec SmallCpuSpec() {
  auto spec = InferenceJobSpecFromJson(nlohmann::json::parse(test_specs::kSmallCpuServingSpec));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Prefill and decode steps of 1 and 8 sequences at 64 tokens that all take gemm_s + logits_s.
std::vector<StepSample> FlatGrid(double gemm_s, double logits_s = 0) {
  std::vector<StepSample> grid;
  for (ServingStepPhase phase : {ServingStepPhase::kPrefill, ServingStepPhase::kDecode}) {
    for (int64_t b : {1, 8}) {
      StepSample s;
      s.phase = phase;
      s.batch = b;
      s.length = 64;
      s.total_s = gemm_s + logits_s;
      s.gemm_s = gemm_s;
      s.logits_s = logits_s;
      grid.push_back(s);
    }
  }
  return grid;
}

TEST(ServingProfileTest, PlansThePrefillAndDecodeGridOfEachShapeOnce) {
  const InferenceJobSpec spec = SmallCpuSpec();
  auto plan = PlanInference(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->ranked.size(), 4u);  // tp 1, 2 x max_batch_size 4, 16.
  auto profile = PlanServingProfiles(spec, *plan, ServingProfileOptions());
  ASSERT_TRUE(profile.ok()) << profile.status();
  // Per shape (tp1, tp2; int8 weights, bf16 KV): prefill of 1, 2, 4 prompts of 64 tokens
  // (256 tokens per step at most); decode of 1, 2, 4, 8 sequences (max_batch_size 16
  // capped by the 8 clients) at 64 and 80 cached tokens: 3 + 8 = 11 tasks.
  EXPECT_EQ(profile->steps.size(), 22u);
  std::set<std::string> keys;
  int prefill = 0;
  for (const ServingStepTaskSpec& t : profile->steps) {
    keys.insert(t.Key());
    EXPECT_EQ(t.device_kind, "cpu");
    EXPECT_EQ(t.kv_block_size, EngineProfileFor(ServingEngine::kTrtllm).kv_block_tokens);
    EXPECT_EQ(t.shape.weight_precision, QuantFormat::kInt8);
    if (t.phase == ServingStepPhase::kPrefill) {
      ++prefill;
      EXPECT_EQ(t.length, 64);
      EXPECT_LE(t.batch * t.length, 256);
    } else {
      EXPECT_TRUE(t.length == 64 || t.length == 80) << t.length;
      EXPECT_LE(t.batch, 8);
    }
  }
  EXPECT_EQ(keys.size(), 22u);
  EXPECT_EQ(prefill, 6);
  // One fp32 all-reduce sweep for tp 2 at the grid's row counts x 256 x 4 bytes.
  ASSERT_EQ(profile->sweeps.size(), 1u);
  EXPECT_EQ(profile->sweeps[0].group_size, 2);
  EXPECT_EQ(profile->sweeps[0].sizes_bytes,
            (std::vector<int64_t>{1024, 2048, 4096, 8192, 65536, 131072, 262144}));
}

// Every measured step takes the same time: then TPOT is that time plus the engine's
// per-step overheads, for every request.
TEST(ServingProfileTest, ComposedLayoutsRunOnTheMeasuredStepTimes) {
  const InferenceJobSpec spec = SmallCpuSpec();
  auto plan = PlanInference(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  constexpr double kStep = 4e-3;
  ServingMeasurements measured;
  for (int64_t tp : {1, 2}) {
    measured.steps[StepShape{tp, QuantFormat::kInt8, QuantFormat::kBf16}] = FlatGrid(kStep);
  }
  // tp 2's grid is unusable: its layouts keep the modelled figures.
  measured.failures[StepShape{2, QuantFormat::kInt8, QuantFormat::kBf16}] =
      "serving_step task failed: no worker";
  auto composed = ComposeInference(spec, *plan, measured);
  ASSERT_TRUE(composed.ok()) << composed.status();
  ASSERT_EQ(composed->ranked.size(), plan->ranked.size());
  const EngineProfile& engine = EngineProfileFor(ServingEngine::kTrtllm);
  int measured_layouts = 0;
  for (size_t i = 0; i < composed->ranked.size(); ++i) {
    const InferenceRankedConfig& r = composed->ranked[i];
    EXPECT_EQ(r.rank, static_cast<int64_t>(i) + 1);
    if (i > 0) {
      EXPECT_FALSE(RanksBefore(r, composed->ranked[i - 1], spec.search.objective));
    }
    ASSERT_FALSE(r.notes.empty());
    if (r.config.tp == 2) {
      EXPECT_EQ(r.decode_step.source, "modelled");
      EXPECT_EQ(r.notes.front(), "modelled steps: serving_step task failed: no worker");
      continue;
    }
    ++measured_layouts;
    EXPECT_EQ(r.decode_step.source, "measured");
    EXPECT_EQ(r.prefill_step.source, "measured");
    EXPECT_EQ(r.notes.front().rfind("measured steps (4 serving_step tasks on cpu)", 0), 0u)
        << r.notes.front();
    // Decoding sequences d per step: TPOT = kStep + step overhead + 2 d per-sequence
    // overhead, d between 1 and max_batch_size.
    const double lo = (kStep + engine.step_overhead_s + 2 * engine.per_sequence_overhead_s) * 1e3;
    const double hi = lo + 2 * (r.config.max_batch_size - 1) * engine.per_sequence_overhead_s * 1e3;
    EXPECT_GE(r.tpot_ms.p50, lo - 1e-9);
    EXPECT_LE(r.tpot_ms.p50, hi + 1e-9) << r.config.ToString() << " " << r.decode_step.total << " "
                                        << r.decode_step.overhead << " " << r.notes.back();
  }
  EXPECT_EQ(measured_layouts, 2);
}

// A pipeline of 2 stages over 3 layers (2 + 1) is profiled as its busiest stage: steps of
// the model's first 2 layers on tp 1 ranks (shape "tp1 L2"). An engine then steps every 2
// stage steps (the stages serve the two engines in turn, and an engine waits for its last
// step's tokens), plus one modelled hand-off.
TEST(ServingProfileTest, PipelineLayoutsComposeFromTheirTensorParallelShape) {
  InferenceJobSpec spec = SmallCpuSpec();
  spec.model.num_layers = 3;
  spec.search.tp = {1};
  spec.search.pp = {2};
  auto plan = PlanInference(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->ranked.empty());
  auto profile = PlanServingProfiles(spec, *plan, ServingProfileOptions());
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_FALSE(profile->steps.empty());
  for (const ServingStepTaskSpec& t : profile->steps) {
    EXPECT_EQ(t.shape.tp, 1);
    EXPECT_EQ(t.shape.layers, 2);
    EXPECT_EQ(t.shape.ToString(), "tp1 L2 w:int8 kv:bf16");
    EXPECT_EQ(t.model.num_layers, 2);  // one stage's
    EXPECT_NE(t.Key().find(" L=2 "), std::string::npos) << t.Key();
  }
  constexpr double kLayers = 3e-3, kLogits = 2e-3;
  ServingMeasurements measured;
  measured.steps[StepShape{1, QuantFormat::kInt8, QuantFormat::kBf16, 1, false, 2}] =
      FlatGrid(kLayers, kLogits);
  auto composed = ComposeInference(spec, *plan, measured);
  ASSERT_TRUE(composed.ok()) << composed.status();
  for (const InferenceRankedConfig& r : composed->ranked) {
    ASSERT_EQ(r.config.pp, 2);
    EXPECT_EQ(r.decode_step.source, "measured") << r.notes.front();
    EXPECT_NEAR(r.decode_step.compute, 2 * (kLayers + kLogits) * 1e3, 1e-9);
    EXPECT_GT(r.decode_step.pp_comm, 0.0);
    EXPECT_NEAR(r.decode_step.total,
                r.decode_step.compute + r.decode_step.tp_comm + r.decode_step.pp_comm +
                    r.decode_step.overhead,
                1e-9);
  }
}

// The serving kernels run grouped-query or multi-head attention: an MLA model plans no
// step task, and composing keeps every layout modelled, saying why.
TEST(ServingProfileTest, ModelsTheKernelsCannotRunStayModelledWithTheReason) {
  nlohmann::json j = nlohmann::json::parse(test_specs::kSmallCpuServingSpec);
  j["model"]["attention"] = "mla";
  j["model"]["kv_lora_rank"] = 64;
  j["model"]["qk_head_dim"] = 32;
  j["model"]["qk_rope_head_dim"] = 16;
  j["model"]["v_head_dim"] = 32;
  auto spec = InferenceJobSpecFromJson(j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string reason =
      "the serving kernels run multi-head or grouped-query attention (model.attention mla)";
  EXPECT_EQ(ServingKernelsUnsupportedReason(spec->model), reason);
  auto plan = PlanInference(*spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->ranked.empty());
  auto profile = PlanServingProfiles(*spec, *plan, ServingProfileOptions());
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_TRUE(profile->steps.empty());
  EXPECT_TRUE(profile->sweeps.empty());
  auto composed = ComposeInference(*spec, *plan, ServingMeasurements());
  ASSERT_TRUE(composed.ok()) << composed.status();
  ASSERT_EQ(composed->ranked.size(), plan->ranked.size());
  for (const InferenceRankedConfig& r : composed->ranked) {
    EXPECT_EQ(r.notes.front(), "modelled steps: " + reason);
    EXPECT_EQ(r.decode_step.source, "modelled");
  }
  EXPECT_EQ(ServingKernelsUnsupportedReason(SmallCpuSpec().model), "");
}

// A mixture-of-experts model (4 experts of 128, top-2, after one dense layer) is profiled
// with its experts: every step task's key names the block, so a dense model's
// measurements never stand in for it.
// A spec read from `j`, which the serving kernels can run, its ranking and its step tasks.
struct Profiled {
  InferenceJobSpec spec;
  ServingProfilePlan profile;
};
absl::StatusOr<Profiled> ProfileOf(const nlohmann::json& j) {
  absl::StatusOr<InferenceJobSpec> spec = InferenceJobSpecFromJson(j);
  if (!spec.ok()) return spec.status();
  if (std::string why = ServingKernelsUnsupportedReason(spec->model); !why.empty()) {
    return absl::FailedPreconditionError(why);
  }
  absl::StatusOr<InferencePlanResult> plan = PlanInference(*spec);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<ServingProfilePlan> profile =
      PlanServingProfiles(*spec, *plan, ServingProfileOptions());
  if (!profile.ok()) return profile.status();
  return Profiled{*std::move(spec), *std::move(profile)};
}

TEST(ServingProfileTest, MixtureOfExpertsModelsAreProfiledWithTheirExperts) {
  nlohmann::json j = nlohmann::json::parse(test_specs::kSmallCpuServingSpec);
  j["model"]["num_experts"] = 4;
  j["model"]["moe_router_topk"] = 2;
  j["model"]["moe_ffn_hidden_size"] = 128;
  j["model"]["first_k_dense_layers"] = 1;
  auto p = ProfileOf(j);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_FALSE(p->profile.steps.empty());
  for (const ServingStepTaskSpec& t : p->profile.steps) {
    EXPECT_NE(t.Key().find(" moe=4x128 k=2 shared=0x0 dense0=1 freq=1"), std::string::npos)
        << t.Key();
  }
  // Expert parallelism inside tp 2 is profiled as a shape of its own: tp 1, tp 2 and
  // tp 2 ep 2, each with its prefill and decode grid.
  j["search"]["ep"] = {1, 2};
  p = ProfileOf(j);
  ASSERT_TRUE(p.ok()) << p.status();
  std::set<std::string> shapes;
  for (const ServingStepTaskSpec& t : p->profile.steps) {
    shapes.insert(t.shape.ToString());
    EXPECT_EQ(t.Key().find(" ep=2 ") != std::string::npos, t.shape.ep == 2) << t.Key();
  }
  EXPECT_EQ(shapes, (std::set<std::string>{"tp1 w:int8 kv:bf16", "tp2 w:int8 kv:bf16",
                                           "tp2 ep2 w:int8 kv:bf16"}));
  // Attention data parallelism (ep = tp) too: its own shape, whose tasks say so.
  j["search"]["tp"] = {2};
  j["search"]["ep"] = {2};
  j["search"]["attention_dp"] = {false, true};
  p = ProfileOf(j);
  ASSERT_TRUE(p.ok()) << p.status();
  shapes.clear();
  for (const ServingStepTaskSpec& t : p->profile.steps) {
    shapes.insert(t.shape.ToString());
    EXPECT_EQ(t.Key().find(" adp=1 ") != std::string::npos, t.shape.attention_dp) << t.Key();
  }
  EXPECT_EQ(shapes,
            (std::set<std::string>{"tp2 ep2 w:int8 kv:bf16", "tp2 ep2 adp w:int8 kv:bf16"}));
}

// A model whose first layer attends to a 32-token window is profiled with its window (the
// tasks' key says so), and its measured attention is tabled by the work the window leaves:
// a decode at context 64 reads 0.5 x 64 + 0.5 x 32 = 48 tokens per sequence.
TEST(ServingProfileTest, SlidingWindowModelsAreProfiledWithTheirWindow) {
  nlohmann::json j = nlohmann::json::parse(test_specs::kSmallCpuServingSpec);
  j["model"]["sliding_window"] = 32;
  j["model"]["window_attn_skip_freq"] = 2;
  auto p = ProfileOf(j);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->profile.steps.size(), 22u);
  for (const ServingStepTaskSpec& t : p->profile.steps) {
    EXPECT_NE(t.Key().find(" win=32/2 "), std::string::npos) << t.Key();
  }
  const AttentionSpan span(p->spec.model);
  EXPECT_DOUBLE_EQ(span.AttendedContext(64), 48);
  // Decode attention measured 1 ms per 100 attended tokens: a table built with the span
  // reads the simulator's attended units back as measured.
  std::vector<StepSample> samples;
  for (int64_t b : {1, 4}) {
    StepSample p;
    p.phase = ServingStepPhase::kPrefill, p.batch = b, p.length = 64;
    p.total_s = 1e-3, p.attention_s = 1e-5 * b * span.ChunkAttentionPairs(0, 64);
    samples.push_back(p);
    StepSample d;
    d.phase = ServingStepPhase::kDecode, d.batch = b, d.length = 64;
    d.total_s = 1e-3, d.attention_s = 1e-5 * b * span.AttendedContext(64);
    samples.push_back(d);
  }
  auto table = MeasuredStepTable::Create(samples, span);
  ASSERT_TRUE(table.ok()) << table.status();
  StepWork w;
  w.decode_sequences = 2;
  w.sampled_sequences = 2;
  w.decode_context_tokens = 2 * span.AttendedContext(64);
  auto whole = MeasuredStepTable::Create(samples);
  ASSERT_TRUE(whole.ok()) << whole.status();
  // Tabled by whole-context work, the same measurement reads 96 attended tokens as 96 of
  // 128 whole-context ones: less time than measured.
  EXPECT_GT(table->Breakdown(w).compute, whole->Breakdown(w).compute);
}

}  // namespace
}  // namespace paratune::inference
