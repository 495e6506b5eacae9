#include "inference/step_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "inference/measured_steps.h"
#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/presets.h"

namespace paratune::inference {
namespace {

ServingConfig Layout(int64_t tp, int64_t pp, QuantFormat w, QuantFormat kv) {
  ServingConfig c;
  c.tp = tp;
  c.pp = pp;
  c.weight_precision = w;
  c.kv_cache_precision = kv;
  c.max_batch_size = 256;
  c.max_num_tokens = 8192;
  return c;
}

StepModel Make(const char* preset, const char* gpu, const ServingConfig& c,
               ServingEngine engine = ServingEngine::kTrtllm) {
  auto model = FindPreset(preset);
  auto device = FindDevice(gpu);
  EXPECT_TRUE(model.ok() && device.ok());
  auto s = StepModel::Create(*model, *device, EngineProfileFor(engine), c, 8);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(StepModelTest, KvBytesPerTokenOfGqaModels) {
  // Llama 3 70B: 80 layers, 8 KV heads of 128 dims. BF16: 2 * 80 * 8 * 128 * 2 = 327,680
  // bytes per token on one GPU; TP4 holds 2 heads per rank; TP16 would replicate.
  EXPECT_DOUBLE_EQ(
      Make("llama3-70b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16))
          .kv_bytes_per_token_per_rank(),
      327680.0);
  EXPECT_DOUBLE_EQ(
      Make("llama3-70b", "h100-sxm-80gb", Layout(4, 1, QuantFormat::kBf16, QuantFormat::kFp8))
          .kv_bytes_per_token_per_rank(),
      2.0 * 80 * 2 * 128 * 1);
  // PP2 keeps 40 layers per stage.
  EXPECT_DOUBLE_EQ(
      Make("llama3-70b", "h100-sxm-80gb", Layout(8, 2, QuantFormat::kBf16, QuantFormat::kBf16))
          .kv_bytes_per_token_per_rank(),
      2.0 * 40 * 1 * 128 * 2);
  // Llama 3 8B: 32 layers, 8 KV heads: 131,072 bytes per token in BF16.
  EXPECT_DOUBLE_EQ(
      Make("llama3-8b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16))
          .kv_bytes_per_token_per_rank(),
      131072.0);
}

TEST(StepModelTest, WeightsPerRankCountQuantisationAndScales) {
  auto model = *FindPreset("llama3-8b");
  const StepModel bf16 =
      Make("llama3-8b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  const StepModel int4 =
      Make("llama3-8b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kInt4, QuantFormat::kBf16));
  const double matmul = 32 * LayerMatmulParams(model);
  const double rest = TotalParams(model) - matmul;
  // BF16: every parameter 2 bytes.
  EXPECT_NEAR(bf16.Memory(1, 1, 0.9).weights, 2 * TotalParams(model), 1e6);
  // INT4 matmuls: half a byte per weight plus a 16-bit scale per 128 weights; the rest
  // stays 16-bit.
  EXPECT_NEAR(int4.Memory(1, 1, 0.9).weights, matmul * (0.5 + 2.0 / 128) + 2 * rest, 1e6);
}

TEST(StepModelTest, DecodeAtBatchOneIsTheWeightReadWithinTheOverheads) {
  const StepModel m =
      Make("llama3-70b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kFp8, QuantFormat::kFp8));
  auto device = *FindDevice("h100-sxm-80gb");
  StepWork w;
  w.decode_sequences = 1;
  w.decode_context_tokens = 128;
  w.sampled_sequences = 1;
  const double read =
      m.weight_bytes_per_rank() / (device.memory_bandwidth * device.memory_efficiency);
  const double t = m.StepSeconds(w);
  // ~70 GB of FP8 weights (and the 16-bit output layer) at 2.68 TB/s: ~26 ms. On top: 12
  // kernel launches per layer (4 GEMMs, 8 others) at 3 us, and the engine's 0.1 ms step
  // overhead; attention over 128 tokens and the elementwise kernels add microseconds.
  EXPECT_NEAR(read, 26.7e-3, 1.5e-3);
  EXPECT_NEAR(t, read + 80 * 12 * 3e-6 + 0.1e-3, 0.1e-3);
}

TEST(StepModelTest, PrefillFlopsByHand) {
  const StepModel m =
      Make("llama3-8b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  // Per layer: QKV 4096 x (4096 + 2*1024), output 4096 x 4096, MLP 3 x 4096 x 14336
  // = 218,103,808 weights; 2 FLOPs per weight and token, plus causal attention
  // 2 * s^2 * h; plus the last token's logits 2 * h * V.
  const double s = 1000;
  const double per_layer = 2 * s * 218103808.0 + 2 * s * s * 4096;
  EXPECT_DOUBLE_EQ(m.PrefillFlops(s), 32 * per_layer + 2 * 4096.0 * 128256);
}

TEST(StepModelTest, TensorParallelAllReduceIsLatencyBoundForDecode) {
  const StepModel tp8 =
      Make("llama3-70b", "h100-sxm-80gb", Layout(8, 1, QuantFormat::kFp8, QuantFormat::kFp8));
  StepWork w;
  w.decode_sequences = 8;
  w.decode_context_tokens = 8 * 1000;
  w.sampled_sequences = 8;
  const StepBreakdown b = tp8.Breakdown(w);
  // 160 all-reduces of 8 x 8192 x 2 bytes (128 KiB): the one-shot kernel's ~6 us fixed
  // cost dominates; the whole step spends ~1-2 ms in them.
  EXPECT_GT(b.tp_comm, 160 * 6e-3);
  EXPECT_LT(b.tp_comm, 160 * 12e-3);
}

TEST(StepModelTest, EachEnginesKvPoolRule) {
  const ServingConfig c = Layout(1, 1, QuantFormat::kFp8, QuantFormat::kFp8);
  const StepModel trt = Make("llama3-8b", "h100-sxm-80gb", c, ServingEngine::kTrtllm);
  const StepModel vllm = Make("llama3-8b", "h100-sxm-80gb", c, ServingEngine::kVllm);
  const StepModel sgl = Make("llama3-8b", "h100-sxm-80gb", c, ServingEngine::kSglang);
  const RankMemory t = trt.Memory(256, 8192, 0.9);
  // TensorRT-LLM: 90 % of what weights, activations and the reserve leave free.
  EXPECT_DOUBLE_EQ(t.kv_pool, 0.9 * (t.capacity - t.weights - t.activations - t.reserve));
  // vLLM: 90 % of the whole memory, minus everything else.
  const RankMemory v = vllm.Memory(256, 8192, 0.9);
  EXPECT_DOUBLE_EQ(v.kv_pool, 0.9 * v.capacity - v.weights - v.activations - v.reserve);
  // SGLang: 88 % of the memory for weights and pool; activations and the reserve fit in the
  // other 12 % (9.6 GiB of an 80 GB H100).
  const RankMemory g = sgl.Memory(256, 8192, 0.88);
  EXPECT_DOUBLE_EQ(g.kv_pool, 0.88 * g.capacity - g.weights);
  // The pool holds kv_pool / (2 * 32 * 8 * 128 * 1) tokens.
  EXPECT_DOUBLE_EQ(trt.KvTokenCapacity(t), std::floor(t.kv_pool / 65536.0));
}

TEST(StepModelTest, PipelineStagesHandOffActivations) {
  const StepModel pp1 =
      Make("llama3-70b", "h100-sxm-80gb", Layout(4, 1, QuantFormat::kFp8, QuantFormat::kFp8));
  const StepModel pp2 =
      Make("llama3-70b", "h100-sxm-80gb", Layout(4, 2, QuantFormat::kFp8, QuantFormat::kFp8));
  StepWork w;
  w.decode_sequences = 64;
  w.decode_context_tokens = 64 * 2000;
  w.sampled_sequences = 64;
  const StepBreakdown a = pp1.Breakdown(w), b = pp2.Breakdown(w);
  // One hand-off of 64 x 8192 x 2 bytes over NVLink (360 GB/s) plus a 1 us hop.
  EXPECT_NEAR(b.pp_comm, (64 * 8192 * 2 / 360e9 + 1e-6) * 1e3, 1e-9);
  EXPECT_DOUBLE_EQ(a.pp_comm, 0);
  // A micro-batch's trip through both stages costs what one stage-1 instance costs, plus
  // the hand-off: the layers are the same.
  EXPECT_NEAR(b.total - b.pp_comm, a.total, 0.02 * a.total);
}

TEST(StepModelTest, BreakdownSeparatesWeightWaitsFromCompute) {
  const StepModel m =
      Make("llama3-70b", "h100-sxm-80gb", Layout(4, 1, QuantFormat::kFp8, QuantFormat::kFp8));
  StepWork decode;
  decode.decode_sequences = 1;
  decode.decode_context_tokens = 100;
  decode.sampled_sequences = 1;
  StepWork prefill;
  prefill.prefill_tokens = 4096;
  prefill.prefill_attention_pairs = 4096.0 * 2048;
  prefill.sampled_sequences = 1;
  for (const StepWork& w : {decode, prefill}) {
    const StepBreakdown b = m.Breakdown(w);
    EXPECT_NEAR(b.total, b.compute + b.memory + b.tp_comm + b.pp_comm + b.overhead, 1e-9);
  }
  // Batch 1 waits for the weights; 4096 prompt tokens hide the weight reads behind compute.
  EXPECT_GT(m.Breakdown(decode).memory, m.Breakdown(decode).compute);
  EXPECT_DOUBLE_EQ(m.Breakdown(prefill).memory, 0);
}

// GPT-OSS-120B: 36 layers, every second one attending to a 128-token window.
TEST(StepModelTest, SlidingWindowLayersHoldAndReadTheWindowOnly) {
  const ServingConfig c = Layout(1, 1, QuantFormat::kFp8, QuantFormat::kFp8);
  const StepModel m = Make("gpt-oss-120b", "h100-sxm-80gb", c);
  EXPECT_EQ(m.span().windowed_layers(), 18);
  // 1000 tokens in 16-token blocks: 1008 in a full layer; a windowed one keeps the blocks
  // of the window and the one being written, 128 + 16. Half the layers each.
  EXPECT_DOUBLE_EQ(m.span().KvSlots(1000, 16), 0.5 * 1008 + 0.5 * 144);
  EXPECT_DOUBLE_EQ(m.span().KvSlots(100, 16), 112);
  EXPECT_DOUBLE_EQ(m.span().AttendedContext(1000), 0.5 * 1000 + 0.5 * 128);
  EXPECT_DOUBLE_EQ(m.span().AttendedContext(100), 100);
  // A 100-token chunk after 50 cached: full layers 100 x (50 + 50) pairs; a windowed
  // layer's queries at 50..128 see all before them ((128 - 50)(50 + 128) / 2), the 22
  // after see 128 each.
  EXPECT_DOUBLE_EQ(m.span().ChunkAttentionPairs(50, 100),
                   0.5 * 10000 + 0.5 * ((128 - 50) * (50 + 128) / 2.0 + 22 * 128));
  EXPECT_DOUBLE_EQ(m.span().ChunkAttentionPairs(0, 100), 5000);
  EXPECT_DOUBLE_EQ(m.span().ChunkAttentionPairs(200, 10), 0.5 * 10 * 205 + 0.5 * 10 * 128);

  // Without the window: whole sequences, and a long context's decode reads twice the
  // windowed model's KV in its attention layers.
  ModelSpec full = *FindPreset("gpt-oss-120b");
  full.sliding_window = 0;
  full.window_attn_skip_freq = 0;
  auto f = StepModel::Create(full, *FindDevice("h100-sxm-80gb"),
                             EngineProfileFor(ServingEngine::kTrtllm), c, 8);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->span().windowed_layers(), 0);
  EXPECT_DOUBLE_EQ(f->span().KvSlots(1000, 16), 1008);
  EXPECT_DOUBLE_EQ(f->span().AttendedContext(1000), 1000);
  EXPECT_DOUBLE_EQ(f->span().ChunkAttentionPairs(50, 100), 10000);
  StepWork w;
  w.decode_sequences = 64;
  w.sampled_sequences = 64;
  w.decode_context_tokens = 64 * f->span().AttendedContext(32768);
  StepWork windowed = w;
  windowed.decode_context_tokens = 64 * m.span().AttendedContext(32768);
  EXPECT_LT(m.StepSeconds(windowed), f->StepSeconds(w));
}

TEST(StepModelTest, RejectsTpThatDoesNotDivideTheHeads) {
  auto model = *FindPreset("llama3-70b");
  auto device = *FindDevice("h100-sxm-80gb");
  auto s = StepModel::Create(model, device, EngineProfileFor(ServingEngine::kTrtllm),
                             Layout(3, 1, QuantFormat::kBf16, QuantFormat::kBf16), 8);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "tp (3) must divide model.num_attention_heads (64)");
}

// Mixtral 8x7B: 32 expert layers of 8 experts (top-2) with the Mistral 7B attention. GQA
// with 8 KV heads of 128: the same KV bytes per token as Llama 3 8B.
TEST(StepModelTest, MixtralKvAndWeightsPerRank) {
  auto model = *FindPreset("mixtral-8x7b");
  const StepModel bf16 =
      Make("mixtral-8x7b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  EXPECT_DOUBLE_EQ(bf16.kv_bytes_per_token_per_rank(), 2.0 * 32 * 8 * 128 * 2);
  // Every parameter, every expert, 2 bytes (46.7B parameters: 93.4 GB).
  EXPECT_NEAR(bf16.Memory(1, 1, 0.9).weights, 2 * TotalParams(model), 1e6);
  EXPECT_NEAR(TotalParams(model) / 1e9, 46.7, 0.25);
  // TP2 halves every expert; the router (h x 8) stays whole on each rank.
  const StepModel tp2 =
      Make("mixtral-8x7b", "h100-sxm-80gb", Layout(2, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  EXPECT_NEAR(tp2.Memory(1, 1, 0.9).weights,
              bf16.Memory(1, 1, 0.9).weights / 2 + 32 * 4096.0 * 8 * 2 / 2, 1e6);
}

// DeepSeek-V3's MLA caches one 512 + 64 latent per token and layer, on every TP rank.
TEST(StepModelTest, MlaCachesTheCompressedLatent) {
  EXPECT_DOUBLE_EQ(
      Make("deepseek-v3", "h200-141gb", Layout(8, 1, QuantFormat::kFp8, QuantFormat::kBf16))
          .kv_bytes_per_token_per_rank(),
      61.0 * (512 + 64) * 2);
  // PP2: 31 layers on the first stage.
  EXPECT_DOUBLE_EQ(
      Make("deepseek-v3", "h200-141gb", Layout(8, 2, QuantFormat::kFp8, QuantFormat::kFp8))
          .kv_bytes_per_token_per_rank(),
      31.0 * (512 + 64) * 1);
}

// One decoding sequence reaches exactly top-k experts per layer (E·(1 − (1 − k/E)^1) = k):
// the step reads the attention and two of eight experts, not the whole model.
TEST(StepModelTest, MoeDecodeAtBatchOneReadsTheActiveExperts) {
  auto model = *FindPreset("mixtral-8x7b");
  auto device = *FindDevice("h100-sxm-80gb");
  const StepModel m =
      Make("mixtral-8x7b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kFp8, QuantFormat::kFp8));
  StepWork w;
  w.decode_sequences = 1;
  w.decode_context_tokens = 128;
  w.sampled_sequences = 1;
  const double bw = device.memory_bandwidth * device.memory_efficiency;
  const double active =
      (32 * (AttentionMatmulParams(model) + 2 * ExpertParams(model)) * 1 + 32000.0 * 4096 * 2) / bw;
  // Per layer: 2 attention GEMMs, the router, 2 permutations, the expert activation, 2
  // grouped GEMMs and the 8 other kernels at 3 us; the engine's 0.1 ms per step. Within
  // 0.25 ms (4 %): the router, the permutations, attention over 128 tokens.
  EXPECT_NEAR(m.StepSeconds(w), active + 32 * 16 * 3e-6 + 0.1e-3, 0.25e-3);
  EXPECT_LT(m.StepSeconds(w), 0.5 * m.weight_bytes_per_rank() / bw);
}

// A dense model's decode step barely grows from batch 1 to 64 (the weights are read once
// either way); an MoE step grows as the batch reaches more of its experts.
TEST(StepModelTest, MoeDecodeGrowsWithTheExpertsTheBatchReaches) {
  auto step = [](const char* preset, double batch) {
    const StepModel m =
        Make(preset, "h100-sxm-80gb", Layout(2, 1, QuantFormat::kFp8, QuantFormat::kFp8));
    StepWork w;
    w.decode_sequences = batch;
    w.decode_context_tokens = batch * 512;
    w.sampled_sequences = batch;
    return m.StepSeconds(w);
  };
  EXPECT_LT(step("llama3-8b", 64) / step("llama3-8b", 1), 1.3);
  EXPECT_GT(step("mixtral-8x7b", 64) / step("mixtral-8x7b", 1), 2.5);
}

// Prefill FLOPs of Mixtral by hand: per layer the attention (4096 x 6144 QKV, 4096 x 4096
// output), the 4096 x 8 router and two experts of 3 x 4096 x 14336; causal attention
// 2 * s^2 * a * d; the last token's logits.
TEST(StepModelTest, MoePrefillFlopsCountTheActiveExperts) {
  const StepModel m =
      Make("mixtral-8x7b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  const double s = 1000;
  const double active = 4096.0 * 6144 + 4096.0 * 4096 + 4096.0 * 8 + 2 * 3 * 4096.0 * 14336;
  const double per_layer = 2 * s * active + 2 * s * s * 4096;
  EXPECT_DOUBLE_EQ(m.PrefillFlops(s), 32 * per_layer + 2 * 4096.0 * 32000);
}

TEST(StepModelTest, ExpertWidthMustSplitOverTp) {
  auto model = *FindPreset("mixtral-8x7b");
  model.moe_ffn_hidden_size = 14335;
  auto device = *FindDevice("h100-sxm-80gb");
  auto s = StepModel::Create(model, device, EngineProfileFor(ServingEngine::kTrtllm),
                             Layout(2, 1, QuantFormat::kBf16, QuantFormat::kBf16), 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tp (2) must divide model.moe_ffn_hidden_size (14335)"),
            std::string::npos)
      << s.status();
}

ServingConfig ExpertParallel(ServingConfig c, int64_t ep) {
  c.ep = ep;
  return c;
}

// Expert parallelism moves whole experts between ranks, it does not add copies: at tp 8 a
// Mixtral rank holds 8 experts / 8 ranks = one expert's worth per layer either way (8 slices
// of 1/8 with ep 1, one whole expert with ep 8): 32 x 3 x 4096 x 14336 x 2 bytes = 10.5 GiB.
TEST(StepModelTest, ExpertParallelKeepsTheExpertBytesPerRank) {
  auto model = *FindPreset("mixtral-8x7b");
  const auto bf16 = Layout(8, 1, QuantFormat::kBf16, QuantFormat::kBf16);
  const StepModel tp8 = Make("mixtral-8x7b", "h100-sxm-80gb", bf16);
  const StepModel ep8 = Make("mixtral-8x7b", "h100-sxm-80gb", ExpertParallel(bf16, 8));
  const StepModel ep2 = Make("mixtral-8x7b", "h100-sxm-80gb", ExpertParallel(bf16, 2));
  const StepModel tp1 =
      Make("mixtral-8x7b", "h100-sxm-80gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  EXPECT_DOUBLE_EQ(32 * 8 * ExpertParams(model) * 2 / 8, 32 * 3 * 4096.0 * 14336 * 2);
  EXPECT_DOUBLE_EQ(ep8.Memory(1, 1, 0.9).weights, tp8.Memory(1, 1, 0.9).weights);
  EXPECT_DOUBLE_EQ(ep2.Memory(1, 1, 0.9).weights, tp8.Memory(1, 1, 0.9).weights);
  EXPECT_DOUBLE_EQ(ep8.weight_bytes_per_rank(), tp8.weight_bytes_per_rank());
  // Everything an eighth of TP1's, but the router (h x 8) whole on every rank.
  EXPECT_NEAR(ep8.Memory(1, 1, 0.9).weights,
              tp1.Memory(1, 1, 0.9).weights / 8 + 32 * 4096.0 * 8 * 2 * 7 / 8, 1e6);
  // INT8 per-channel scales follow the output channels: the rank's up/gate slices are the
  // same, but it holds 1 whole down projection (4096 outputs) per layer instead of 8
  // slices of 4096 outputs each: 32 x 7 x 4096 16-bit scales fewer.
  const auto int8 = Layout(8, 1, QuantFormat::kInt8, QuantFormat::kBf16);
  EXPECT_NEAR(
      Make("mixtral-8x7b", "h100-sxm-80gb", int8).Memory(1, 1, 0.9).weights -
          Make("mixtral-8x7b", "h100-sxm-80gb", ExpertParallel(int8, 8)).Memory(1, 1, 0.9).weights,
      32 * 7 * 4096.0 * 2, 1.0);
}

// One sequence decoding at 1k context, sampled.
StepWork DecodeOneSequence() {
  StepWork w;
  w.decode_sequences = 1;
  w.decode_context_tokens = 1024;
  w.sampled_sequences = 1;
  return w;
}

// Mixtral decode at batch 1, FP8 weights, tp 2 on H100. One token reaches 2 of the 8
// experts. ep 1: each rank reads half of both (one expert's bytes). ep 2: each rank holds 4
// whole experts; the two reached experts are a random pair, in the same group with
// probability 3/7, so the busiest group reads more than one expert: a group's count is
// hypergeometric with mean 1 and variance 2 x 1/2 x 1/2 x 6/7 = 3/7, and the busiest of
// two exceeds the mean by sqrt(2) x E[max of 2 standard normals] = sqrt(2 / pi) standard
// deviations: 1 + sqrt(6 / (7 pi)) = 1.522 experts (the exact expectation is 1.43). Every
// other term (attention, router, all-reduces, output layer, overheads) is the same, so ep
// 2 is slower by 32 layers x 0.522 x 3 x 4096 x 14336 bytes at the device's bandwidth:
// 2.94 GB, 1.1 ms on H100 (the activation and permutation bytes differ by < 0.01 ms).
TEST(StepModelTest, ExpertParallelDecodeAtBatchOneWaitsForTheBusiestGroup) {
  auto model = *FindPreset("mixtral-8x7b");
  auto device = *FindDevice("h100-sxm-80gb");
  const auto fp8 = Layout(2, 1, QuantFormat::kFp8, QuantFormat::kFp8);
  const StepModel ep1 = Make("mixtral-8x7b", "h100-sxm-80gb", fp8);
  const StepModel ep2 = Make("mixtral-8x7b", "h100-sxm-80gb", ExpertParallel(fp8, 2));
  const StepWork w = DecodeOneSequence();
  const double bw = device.memory_bandwidth * device.memory_efficiency;
  const double excess = std::sqrt(6 / (7 * M_PI));
  const double extra = 32 * excess * ExpertParams(model) * 1 / bw;
  EXPECT_NEAR(ep2.StepSeconds(w) - ep1.StepSeconds(w), extra, 0.01e-3);
  EXPECT_GT(ep2.StepSeconds(w) / ep1.StepSeconds(w), 1.2);
}

// ep = tp = 8 at batch 1: each rank holds one whole expert. The two reached experts are on
// two ranks, each reading its whole expert (in the normal approximation the busiest of 8
// groups would hold 0.25 + sqrt(8/7) x 1.4236 x sqrt(3/16) = 0.91 experts; a group holds
// whole experts, so 1), where ep 1 reads an eighth of both: a quarter of one. ep 8 is
// slower by 32 layers x 0.75 x one expert's FP8 bytes at the device's bandwidth (1.5 ms).
TEST(StepModelTest, ExpertParallelDecodeAtBatchOneReadsWholeExpertsPerRank) {
  auto model = *FindPreset("mixtral-8x7b");
  auto device = *FindDevice("h100-sxm-80gb");
  const auto fp8 = Layout(8, 1, QuantFormat::kFp8, QuantFormat::kFp8);
  const StepModel ep1 = Make("mixtral-8x7b", "h100-sxm-80gb", fp8);
  const StepModel ep8 = Make("mixtral-8x7b", "h100-sxm-80gb", ExpertParallel(fp8, 8));
  const StepWork w = DecodeOneSequence();
  const double bw = device.memory_bandwidth * device.memory_efficiency;
  EXPECT_NEAR(ep8.StepSeconds(w) - ep1.StepSeconds(w), 32 * 0.75 * ExpertParams(model) / bw,
              0.01e-3);
}

// With tp = ep each rank runs whole experts: the expert width need not split over tp.
TEST(StepModelTest, ExpertParallelSlicesEachExpertOverTpOverEp) {
  auto model = *FindPreset("mixtral-8x7b");
  model.moe_ffn_hidden_size = 14335;
  auto device = *FindDevice("h100-sxm-80gb");
  const auto bf16 = Layout(4, 1, QuantFormat::kBf16, QuantFormat::kBf16);
  auto create = [&](int64_t ep) {
    return StepModel::Create(model, device, EngineProfileFor(ServingEngine::kTrtllm),
                             ExpertParallel(bf16, ep), 8);
  };
  EXPECT_TRUE(create(4).ok()) << create(4).status();
  ASSERT_FALSE(create(2).ok());
  EXPECT_EQ(create(2).status().message(),
            "tp / ep (4 / 2 = 2) must divide model.moe_ffn_hidden_size (14335): each rank "
            "holds 1/(tp / ep) of each expert of its group");
  ASSERT_FALSE(create(8).ok());
  EXPECT_EQ(create(8).status().message(),
            "ep (8) must divide tp (4): the experts split over ep groups of tp / ep ranks "
            "(TensorRT-LLM moe_tp_size x moe_ep_size = tp_size)");
}

ServingConfig AttentionDp(ServingConfig c) {
  c.ep = c.tp;
  c.attention_dp = true;
  return c;
}

// Mixtral 8x7B at tp 8, BF16. Tensor-parallel attention: every weight an eighth, but the
// router whole (the test above). Attention DP: every weight whole but the routed experts,
// which split whole over the 8 ranks (32 layers x 8 experts x 3 x 4096 x 14336, 7/8 of them
// elsewhere). The KV cache holds all 8 KV heads per token on a rank (TP: one per rank), and
// the instance's pool is the 8 ranks' pools together.
TEST(StepModelTest, AttentionDataParallelWeightsAndKvPerRankByHand) {
  auto model = *FindPreset("mixtral-8x7b");
  const auto bf16 = Layout(8, 1, QuantFormat::kBf16, QuantFormat::kBf16);
  const StepModel tp8 = Make("mixtral-8x7b", "h100-sxm-80gb", bf16);
  const StepModel adp = Make("mixtral-8x7b", "h100-sxm-80gb", AttentionDp(bf16));
  const double routed = 32 * 8 * 3 * 4096.0 * 14336;
  EXPECT_DOUBLE_EQ(NumExpertLayers(model) * 8 * ExpertParams(model), routed);
  EXPECT_NEAR(adp.Memory(1, 1, 0.9).weights, 2 * (TotalParams(model) - routed * 7 / 8), 1e6);
  // 3.2 GB of attention, norms, router, embedding and output layer, 11.3 GB of experts.
  EXPECT_NEAR(adp.Memory(1, 1, 0.9).weights / 1e9, 14.5, 0.1);
  EXPECT_NEAR(tp8.Memory(1, 1, 0.9).weights / 1e9, 11.7, 0.1);
  EXPECT_DOUBLE_EQ(tp8.kv_bytes_per_token_per_rank(), 2.0 * 32 * 1 * 128 * 2);
  EXPECT_DOUBLE_EQ(adp.kv_bytes_per_token_per_rank(), 2.0 * 32 * 8 * 128 * 2);
  const RankMemory m = adp.Memory(256, 8192, 0.9);
  EXPECT_DOUBLE_EQ(adp.KvTokenCapacity(m), 8 * std::floor(m.kv_pool / (2.0 * 32 * 8 * 128 * 2)));
  EXPECT_EQ(adp.attention_dp_size(), 8);
}

// Measured attention-DP steps were timed with the work spread evenly over the ranks, and a
// step waits for its slowest rank: on 8 ranks, one 64-token prompt chunk beside 2 decodes
// (one rank prefills the chunk and decodes one sequence) is looked up as 8 of that rank's
// work, 512 prompt tokens and 8 decodes; tensor-parallel attention looks the step up as is.
TEST(StepModelTest, AttentionDataParallelMeasuredStepsAreLookedUpAtTheSlowestRanksWork) {
  const auto bf16 = Layout(8, 1, QuantFormat::kBf16, QuantFormat::kBf16);
  std::vector<StepSample> samples;
  for (int64_t b : {1, 8, 16}) {
    for (ServingStepPhase phase : {ServingStepPhase::kPrefill, ServingStepPhase::kDecode}) {
      StepSample x;
      x.phase = phase;
      x.batch = b;
      x.length = 64;
      const double rows = phase == ServingStepPhase::kPrefill ? 64.0 * b : b;
      x.gemm_s = 1e-3 + 1e-5 * rows;  // GEMMs 1 ms + 10 us per row; nothing else
      x.total_s = x.gemm_s;
      samples.push_back(x);
    }
  }
  auto table = MeasuredStepTable::Create(samples);
  ASSERT_TRUE(table.ok()) << table.status();
  auto shared = std::make_shared<const MeasuredStepTable>(*table);
  StepWork w;
  w.prefill_tokens = 64;
  w.prefill_chunks = 1;
  w.prefill_attention_pairs = 64.0 * 32;
  w.decode_sequences = 2;
  w.decode_context_tokens = 2 * 64;
  w.sampled_sequences = 3;
  StepWork spread = w;  // the slowest rank's work, times 8
  spread.prefill_tokens = 512;
  spread.prefill_attention_pairs = 8 * 64.0 * 32;
  spread.prefill_chunks = 8;
  spread.decode_sequences = 8;
  spread.decode_context_tokens = 8 * 64;
  spread.sampled_sequences = 8;
  StepModel adp = Make("mixtral-8x7b", "h100-sxm-80gb", AttentionDp(bf16));
  adp.UseMeasured(shared);
  const StepBreakdown got = adp.Breakdown(w);
  EXPECT_NEAR(got.total - got.overhead, table->Breakdown(spread).total, 1e-9);
  EXPECT_NEAR(got.total - got.overhead, 1.0 + 0.01 * (512 + 8), 1e-6);  // ms
  StepModel tp8 = Make("mixtral-8x7b", "h100-sxm-80gb", bf16);
  tp8.UseMeasured(shared);
  const StepBreakdown as_is = tp8.Breakdown(w);
  EXPECT_NEAR(as_is.total - as_is.overhead, 1.0 + 0.01 * (64 + 2), 1e-6);
}

// DeepSeek-V3 at tp 8 on H200, BF16 (by hand against TP 1, which holds everything): attention
// DP keeps every weight of TP 1 but 7/8 of the routed experts (58 layers x 256 x 3 x 7168 x
// 2048). MLA's latent (512 + 64 per token and layer) is the same per token on a rank either
// way, but tensor-parallel attention keeps it on all 8 ranks while attention DP keeps each
// sequence on one: the instance holds 8 x the tokens of one rank's pool.
TEST(StepModelTest, AttentionDataParallelMlaHoldsEachSequenceOnOneRank) {
  auto model = *FindPreset("deepseek-v3");
  const StepModel tp1 =
      Make("deepseek-v3", "h200-141gb", Layout(1, 1, QuantFormat::kBf16, QuantFormat::kBf16));
  const auto bf16 = Layout(8, 1, QuantFormat::kBf16, QuantFormat::kBf16);
  const StepModel tp8 = Make("deepseek-v3", "h200-141gb", bf16);
  const StepModel adp = Make("deepseek-v3", "h200-141gb", AttentionDp(bf16));
  const double routed = 58 * 256 * 3 * 7168.0 * 2048;
  EXPECT_DOUBLE_EQ(NumExpertLayers(model) * 256 * ExpertParams(model), routed);
  EXPECT_NEAR(adp.Memory(1, 1, 0.9).weights, tp1.Memory(1, 1, 0.9).weights - 2 * routed * 7 / 8,
              1e6);
  EXPECT_DOUBLE_EQ(adp.kv_bytes_per_token_per_rank(), 61.0 * (512 + 64) * 2);
  EXPECT_DOUBLE_EQ(tp8.kv_bytes_per_token_per_rank(), 61.0 * (512 + 64) * 2);
  RankMemory pool;
  pool.kv_pool = 10 * kGiB;
  const double tokens = std::floor(10 * kGiB / (61.0 * 576 * 2));
  EXPECT_DOUBLE_EQ(tp8.KvTokenCapacity(pool), tokens);
  EXPECT_DOUBLE_EQ(adp.KvTokenCapacity(pool), 8 * tokens);
}

StepWork Decode(double sequences, double context) {
  StepWork w;
  w.decode_sequences = sequences;
  w.decode_context_tokens = sequences * context;
  w.sampled_sequences = sequences;
  return w;
}

// A decode step's attention with attention DP over 8 ranks is TP 1's for batch / 8
// sequences (the slowest rank's ceil(batch / 8)): one more KV token per sequence costs the
// same on both, 61 layers x the rank's sequences x 576 x 2 bytes at the streamed bandwidth.
TEST(StepModelTest, AttentionDataParallelDecodeAttentionIsTpOnesForItsShare) {
  auto device = *FindDevice("h200-141gb");
  const auto fp8 = Layout(8, 1, QuantFormat::kFp8, QuantFormat::kBf16);
  const StepModel adp = Make("deepseek-v3", "h200-141gb", AttentionDp(fp8));
  const StepModel tp1 =
      Make("deepseek-v3", "h200-141gb", Layout(1, 1, QuantFormat::kFp8, QuantFormat::kBf16));
  const double bw = device.memory_bandwidth * device.memory_efficiency;
  for (const auto& [batch, share] : {std::pair<double, double>{64, 8}, {65, 9}, {7, 1}}) {
    const double adp_delta =
        adp.StepSeconds(Decode(batch, 2048)) - adp.StepSeconds(Decode(batch, 1024));
    const double tp1_delta =
        tp1.StepSeconds(Decode(share, 2048)) - tp1.StepSeconds(Decode(share, 1024));
    EXPECT_NEAR(adp_delta, tp1_delta, 1e-8) << batch;
    EXPECT_NEAR(adp_delta, 61 * share * 1024 * 576 * 2 / bw, 1e-8) << batch;
  }
}

// The dispatch and combine by hand: DeepSeek-V3 decode of 64 sequences on 8 ranks (8 each),
// per expert layer (58) two all-to-alls of 8 tokens x 8 routes x 7168 x 2 bytes, 7/8 of them
// leaving the rank, over NVLink; no all-reduce.
TEST(StepModelTest, AttentionDataParallelDispatchAndCombineByHand) {
  auto device = *FindDevice("h200-141gb");
  const auto fp8 = Layout(8, 1, QuantFormat::kFp8, QuantFormat::kFp8);
  const StepModel adp = Make("deepseek-v3", "h200-141gb", AttentionDp(fp8));
  const double bytes = 8 * 8 * 7168.0 * 2 * 7 / 8;
  const double one =
      bytes / device.nvlink_bandwidth + device.nvlink_latency_s + device.kernel_launch_s;
  EXPECT_DOUBLE_EQ(adp.AllToAllSeconds(8), one);
  EXPECT_NEAR(adp.Breakdown(Decode(64, 1024)).tp_comm, 58 * 2 * one * 1e3, 1e-9);
  // Tensor-parallel attention keeps its all-reduces instead (two per layer, 61 layers).
  EXPECT_GT(Make("deepseek-v3", "h200-141gb", fp8).Breakdown(Decode(64, 1024)).tp_comm, 0);
  EXPECT_EQ(Make("deepseek-v3", "h200-141gb", fp8).AllToAllSeconds(8), 0);
}

TEST(StepModelTest, AttentionDataParallelRefusalsNameTheRule) {
  const auto make = [](const char* preset, ServingConfig c) {
    return StepModel::Create(*FindPreset(preset), *FindDevice("h100-sxm-80gb"),
                             EngineProfileFor(ServingEngine::kTrtllm), c, 8);
  };
  const auto fp8 = Layout(8, 1, QuantFormat::kFp8, QuantFormat::kFp8);
  auto dense = make("llama3.1-70b", AttentionDp(fp8));
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.status().message().find(
                "attention_dp (true) needs a mixture-of-experts model (model.num_experts 1)"),
            std::string::npos)
      << dense.status();
  auto tp1 = make("mixtral-8x7b", AttentionDp(Layout(1, 1, QuantFormat::kFp8, QuantFormat::kFp8)));
  ASSERT_FALSE(tp1.ok());
  EXPECT_NE(tp1.status().message().find("attention_dp (true) needs tp > 1"), std::string::npos)
      << tp1.status();
  ServingConfig ep4 = AttentionDp(fp8);
  ep4.ep = 4;
  auto wrong_ep = make("mixtral-8x7b", ep4);
  ASSERT_FALSE(wrong_ep.ok());
  EXPECT_EQ(wrong_ep.status().message(),
            "ep (4) must equal tp (8) when attention_dp is true: the routed experts split over "
            "every attention rank");
}

}  // namespace
}  // namespace paratune::inference
