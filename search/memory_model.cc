#include "search/memory_model.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "search/framework_profile.h"
#include "search/model_math.h"
#include "search/sharded_data_parallel.h"

namespace paratune {
namespace {

// Coefficient of variation of one expert's share of the routed tokens in a micro-batch
// under dropless routing (an auxiliary-loss router in the first iterations, as benchmarks
// run it). One constant, fit on the only published measurements that isolate it: the four
// Megatron-MoE-ModelZoo Qwen3-235B-A22B runs (H100, EP 8 over 128 experts, 16k-128k
// tokens) measured with forced balance and dropless on the same layout, whose throughput
// ratios 1.245 / 1.209 / 1.150 / 1.090 the model gives as 1.241 / 1.203 / 1.139 / 1.085
// (1.225-1.278 / 1.190-1.235 / 1.130-1.161 / 1.079-1.098 for 1.0-1.25).
constexpr double kExpertLoadSpread = 1.15;

// Per-token widths of the attention's stored tensors (see LayerActivationBytes).
struct AttentionWidths {
  double q = 0, k = 0, v = 0, out = 0;
  double latent = 0;  ///< MLA: the compressed query and KV (q_lora_rank + kv_lora_rank + rope).
};

AttentionWidths AttentionWidthsOf(const ModelSpec& m) {
  const double a = static_cast<double>(m.num_attention_heads);
  AttentionWidths w;
  if (m.attention == AttentionType::kMla) {
    const double qk = static_cast<double>(m.qk_head_dim + m.qk_rope_head_dim);
    w.q = w.k = a * qk;
    w.v = w.out = a * static_cast<double>(m.v_head_dim);
    w.latent = static_cast<double>(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim);
    return w;
  }
  const double d = static_cast<double>(HeadDim(m));
  w.q = w.out = a * d;
  w.k = w.v = static_cast<double>(QueryGroups(m)) * d;
  return w;
}

}  // namespace

SelectiveModules SelectiveModules::Of(const TrainingSpec& training) {
  SelectiveModules m;
  m.core_attn = training.Recomputes(RecomputeModule::kCoreAttn);
  m.layernorm = training.Recomputes(RecomputeModule::kLayernorm);
  m.mlp = training.Recomputes(RecomputeModule::kMlp);
  m.moe_act = training.Recomputes(RecomputeModule::kMoeAct);
  m.moe = training.Recomputes(RecomputeModule::kMoe);
  m.shared_experts = training.Recomputes(RecomputeModule::kSharedExperts);
  m.mla_up_proj = training.Recomputes(RecomputeModule::kMlaUpProj);
  return m;
}

OffloadedInputs OffloadedInputs::Of(const TrainingSpec& training, const ParallelConfig& config) {
  OffloadedInputs o;
  if (!config.activation_offload || config.recompute == Recompute::kFull) return o;
  o.attn_norm = training.Offloads(OffloadModule::kAttnNorm);
  o.qkv_linear = training.Offloads(OffloadModule::kQkvLinear);
  o.core_attn = training.Offloads(OffloadModule::kCoreAttn);
  o.attn_proj = training.Offloads(OffloadModule::kAttnProj);
  o.mlp_norm = training.Offloads(OffloadModule::kMlpNorm);
  o.expert_fc1 = training.Offloads(OffloadModule::kExpertFc1);
  o.moe_act = training.Offloads(OffloadModule::kMoeAct);
  return o;
}

SelectiveModules SelectiveModules::ForSharedExperts() const {
  SelectiveModules m = *this;
  m.mlp = shared_experts;
  return m;
}

double LayerActivationBytes(const ModelSpec& model, const LayerActivationParams& p) {
  const double t = static_cast<double>(std::max<int64_t>(p.parallel.tp, 1));
  const double c = static_cast<double>(std::max<int64_t>(p.parallel.cp, 1));
  const double s = static_cast<double>(p.seq_length);
  const double b = static_cast<double>(p.parallel.micro_batch_size);
  const double h = static_cast<double>(model.hidden_size);
  const double a = static_cast<double>(model.num_attention_heads);
  const double f = static_cast<double>(model.ffn_hidden_size);
  const double e = p.bytes_per_element;
  const double lin = p.fp8_linear_inputs ? 1.0 : e;  // Linear-layer inputs.
  const double mask = p.dropout ? 1.0 : 0.0;         // One byte per element.
  const double x = s * b * h / c;                    // Elements of one [s, b, h] tensor.
  const double sp = p.parallel.sequence_parallel ? t : 1.0;  // Divisor of the non-TP regions.

  if (p.parallel.recompute == Recompute::kFull) {
    return e * x / sp;  // Only the layer input (the checkpoint).
  }
  const bool selective = p.parallel.recompute == Recompute::kSelective;
  const SelectiveModules& rerun = p.selective;
  // Regions outside TP: norms' inputs, the norms' outputs feeding QKV and FC1, masks.
  const double norm_outputs = selective && rerun.layernorm ? 0.0 : 1.0;
  const double norm_saved = p.fused_norm ? e : 4.0 + e;  // Per element, per norm.
  const OffloadedInputs& off = p.offloaded;
  const auto kept = [](bool offloaded) { return offloaded ? 0.0 : 1.0; };
  double replicated = kept(off.attn_norm) * norm_saved * x                  // LN1 input
                      + kept(off.qkv_linear) * norm_outputs * lin * x     // QKV input
                      + mask * x                                        // attention dropout mask
                      + kept(off.mlp_norm) * norm_saved * x             // LN2 input
                      + norm_outputs * lin * x                          // FC1 input
                      + mask * x;                                       // MLP dropout mask
  // Inside TP. Widths per token relative to h: Q and K a*d_qk, V g*d_v (MLA: a*d_v), the
  // output projection's input a*d_v; d = h/a gives Korthikanti's x, x*g/a, x*g/a, x.
  const AttentionWidths w = AttentionWidthsOf(model);
  const double up_projected =
      selective && rerun.mla_up_proj && model.attention == AttentionType::kMla ? 0.0 : 1.0;
  double sharded = kept(off.core_attn) * up_projected * e * x * (w.q + w.k) / h  // Q and K
                   + kept(off.core_attn) * up_projected * e * x * w.v / h        // V
                   + kept(off.attn_proj) * lin * x * w.out / h;  // output projection input
  // MLA's compressed query and KV (and their norms' inputs), computed on every TP rank.
  replicated += (lin + e) * x * w.latent / h;
  const double fc1_width = IsGated(model.activation) ? 2.0 * f : f;
  if (!(selective && rerun.mlp)) {
    sharded += e * s * b * fc1_width / c  // activation-function input
               + lin * s * b * f / c;      // FC2 input
    if (p.unfused_glu && IsGated(model.activation)) {
      sharded += e * s * b * f / c;  // the activation's output (the multiply's input)
    }
  }
  if (p.attention_output_copied && !(selective && rerun.core_attn)) {
    sharded += kept(off.core_attn) * e * x * w.out / h;  // the flash kernel's own output
  }
  if (!(selective && rerun.core_attn)) {
    if (p.flash_attention) {
      sharded += 4.0 * a * s * b / c;  // log-sum-exp statistics, fp32
    } else {
      const double scores = a * s * s * b / c;  // Each rank's queries against all keys.
      sharded += e * scores                     // softmax output
                 + mask * scores                // softmax dropout mask
                 + mask * e * scores;           // dropout output (input of attention x V)
    }
  }
  return replicated / sp + sharded / t;
}

LayerActivationParams ActivationParamsFor(const ModelSpec& model, const TrainingSpec& training,
                                          const ParallelConfig& config) {
  (void)model;
  LayerActivationParams p;
  p.seq_length = training.seq_length;
  p.parallel = config;
  p.flash_attention = IsFlash(training.AttentionKernelOf());
  p.dropout = training.dropout;
  p.bytes_per_element = training.precision == Precision::kFp32 ? 4.0 : 2.0;
  // NVFP4 stores its linear inputs in 4 bits plus scales; counted at one byte, as FP8
  // (an upper bound: Transformer Engine also keeps a transposed copy for the wgrad GEMM).
  p.fp8_linear_inputs = IsLowPrecisionGemm(training.precision);
  p.selective = SelectiveModules::Of(training);
  p.offloaded = OffloadedInputs::Of(training, config);
  p.fused_norm = training.fused_norm;
  return p;
}

double OptimizerBytesPerParam(Precision precision) {
  // Adam's m and v are FP32 (8 bytes). Mixed precision adds the FP32 master copy of the
  // 16-bit weights (4 bytes); FP32 training updates the weights in place, so Megatron's
  // FP32 optimizer keeps no copy and its distributed optimizer's FP32 shards are views
  // into the weight buffer (Megatron-LM docs, distributed optimizer: 16 bytes/param for
  // FP32 params and grads, 18 for BF16 params with FP32 grads, i.e. 4+4+8 and 2+4+12).
  return precision == Precision::kFp32 ? 8.0 : 12.0;
}

double OptimizerMomentBytes(Precision dtype) {
  switch (dtype) {
    case Precision::kFp32:
      return 4.0;
    case Precision::kFp8:
      return 1.0;
    default:
      return 2.0;
  }
}

double PrecisionAwareMainWeightBytes(const TrainingSpec& training) {
  // Transformer Engine's FusedAdam keeps the 16 bits an FP32 value has beyond its BF16
  // parameter (store_param_remainders, which Megatron-Core passes with TE 2.1 and later);
  // FP16 and FP8 parameters do not share those bits, so their main weights are whole.
  const bool bf16_parameters = training.precision != Precision::kFp16 &&
                               training.precision != Precision::kFp32 && !training.Fp8ParamGather();
  return bf16_parameters ? 2.0 : 4.0;
}

double PrecisionAwareOptimizerBytes(const TrainingSpec& training) {
  const Precision moments = training.optimizer_state_dtype.value_or(Precision::kFp32);
  return PrecisionAwareMainWeightBytes(training) + 2.0 * OptimizerMomentBytes(moments);
}

double StageParamsPerGpu(const ModelSpec& m, const ParallelConfig& c, int64_t stage) {
  return StageParamsSplit(m, c, stage).Total();
}

// ---- Mixture of experts ----

std::vector<int64_t> ExpertLayersPerChunk(const ModelSpec& m, const ParallelConfig& c) {
  std::vector<int64_t> out(static_cast<size_t>(c.pp * c.vp), 0);
  if (!IsMoe(m)) return out;
  // Megatron's interleaving: model chunk j of stage r is virtual stage j*p + r; virtual
  // stages hold consecutive layers.
  int64_t first = 0, below_first = 0;
  for (int64_t k = 0; k < c.pp * c.vp; ++k) {
    const int64_t r = k % c.pp, j = k / c.pp;
    first += DecoderLayersInChunk(m, c, r, j);
    const int64_t below = ExpertLayersBelow(m, first);
    out[static_cast<size_t>(r * c.vp + j)] = below - below_first;
    below_first = below;
  }
  return out;
}

std::vector<int64_t> ExpertLayersPerStage(const ModelSpec& m, const ParallelConfig& c) {
  std::vector<int64_t> out(static_cast<size_t>(c.pp), 0);
  if (!IsMoe(m)) return out;
  const std::vector<int64_t> chunks = ExpertLayersPerChunk(m, c);
  for (int64_t r = 0; r < c.pp; ++r) {
    for (int64_t j = 0; j < c.vp; ++j) {
      out[static_cast<size_t>(r)] += chunks[static_cast<size_t>(r * c.vp + j)];
    }
  }
  return out;
}

int64_t ExpertLayersOnStage(const ModelSpec& m, const ParallelConfig& c, int64_t stage) {
  if (!IsMoe(m)) return 0;
  return ExpertLayersPerStage(m, c)[static_cast<size_t>(stage)];
}

StageParams StageParamsSplit(const ModelSpec& m, const ParallelConfig& c, int64_t stage) {
  return StageParamsSplit(m, c, stage, ExpertLayersOnStage(m, c, stage));
}

StageParams StageParamsSplit(const ModelSpec& m, const ParallelConfig& c, int64_t stage,
                             int64_t expert_layers_on_stage) {
  const double t = static_cast<double>(c.tp);
  const double expert_layers = static_cast<double>(expert_layers_on_stage);
  const double dense_layers =
      static_cast<double>(DecoderLayersOnStage(m, c, stage)) - expert_layers;
  StageParams out;
  // Routed experts over ep*etp; the rest of an expert layer over tp (the router replicated).
  const double routed = static_cast<double>(m.num_experts) * ExpertParams(m);
  const double expert_shard = static_cast<double>(c.ep * c.etp);
  const double expert_layer_rest =
      (ExpertLayerParams(m) - routed - RouterParams(m)) / t + (IsMoe(m) ? RouterParams(m) : 0.0);
  out.expert = expert_layers * routed / expert_shard;
  out.linear = dense_layers * LayerMatmulParams(m) / t +
               expert_layers *
                   ((AttentionMatmulParams(m) + SharedExpertParams(m)) / t + routed / expert_shard);
  double params = dense_layers * LayerParams(m) / t + expert_layers * expert_layer_rest;
  if (stage == c.pp - 1 && m.mtp_layers > 0) {
    // The MTP modules run after the last layer (Megatron places them on the last stage).
    const double mtp = static_cast<double>(m.mtp_layers);
    const double module = MtpParams(m) / mtp;  // Its layer, projection and norms.
    if (IsMoe(m)) {
      params += mtp * ((module - routed - RouterParams(m)) / t + RouterParams(m));
      out.expert += mtp * routed / expert_shard;
    } else {
      params += mtp * module / t;
    }
  }
  const double h = static_cast<double>(m.hidden_size);
  const double word = static_cast<double>(PaddedVocab(m, c.tp)) * h / t;
  if (stage == 0) params += EmbeddingParams(m) / t - static_cast<double>(m.vocab_size) * h / t + word;
  if (stage == c.pp - 1) {
    params += OutputParams(m) / t;
    // The output layer: its own matrix, or the tied copy held by the last stage.
    if (m.tie_embeddings) {
      if (c.pp > 1) params += word;
    } else {
      params += word - static_cast<double>(m.vocab_size) * h / t;
    }
  }
  out.dense = params;
  return out;
}

double ExpertLoadFactor(const JobSpec& spec, const ParallelConfig& c) {
  const ModelSpec& m = spec.model;
  if (!IsMoe(m) || spec.training.moe_routing == MoeRouting::kBalanced || c.ep <= 1) return 1.0;
  // Tokens one EP rank receives per micro-batch when balanced: its share of the top-k
  // copies of the group's tokens (gathered over ETP).
  const double sp = c.sequence_parallel ? static_cast<double>(c.tp) : 1.0;
  const double tokens = static_cast<double>(c.micro_batch_size) *
                        static_cast<double>(spec.training.seq_length) /
                        (static_cast<double>(c.cp) * sp);
  const double mean = tokens * static_cast<double>(m.moe_router_topk * c.etp);
  // A rank's share of the routed tokens varies with two things: the experts' popularity
  // (each expert's share of the tokens has a coefficient of variation kExpertLoadSpread;
  // a rank's num_experts/ep experts average it down by sqrt(num_experts/ep)) and sampling
  // (balls into bins: a coefficient of variation 1/sqrt(mean)). The most loaded of ep
  // ranks is about sqrt(2 ln ep) standard deviations above the mean (Raab and Steger 1998).
  const double ep = static_cast<double>(c.ep);
  const double variance =
      kExpertLoadSpread * kExpertLoadSpread * ep / static_cast<double>(m.num_experts) +
      1.0 / std::max(mean, 1.0);
  const double dropless = 1.0 + std::sqrt(2.0 * std::log(ep) * variance);
  if (spec.training.moe_routing == MoeRouting::kCapacity) {
    return std::min(dropless, spec.training.moe_capacity_factor);
  }
  return dropless;
}

double ExpertLayerActivationBytes(const ModelSpec& model, const LayerActivationParams& p,
                                  double load) {
  if (p.parallel.recompute == Recompute::kFull) return LayerActivationBytes(model, p);
  // Attention, the norms and the router's input as in a dense layer whose MLP is the shared
  // experts (tensor-parallel like a dense MLP).
  ModelSpec shared = model;
  shared.ffn_hidden_size = model.num_shared_experts * SharedExpertFfn(model);
  LayerActivationParams dense_part = p;
  dense_part.selective = p.selective.ForSharedExperts();
  double bytes = LayerActivationBytes(shared, dense_part);
  const bool selective = p.parallel.recompute == Recompute::kSelective;
  // Recomputing the whole expert block keeps only its input (the norm's output, counted
  // above).
  if (selective && p.selective.moe) return bytes;
  const double sp = p.parallel.sequence_parallel ? static_cast<double>(p.parallel.tp) : 1.0;
  const double tokens = static_cast<double>(p.parallel.micro_batch_size) *
                        static_cast<double>(p.seq_length) /
                        (static_cast<double>(p.parallel.cp) * sp);
  const double k = static_cast<double>(model.moe_router_topk);
  const double h = static_cast<double>(model.hidden_size);
  const double f = static_cast<double>(model.moe_ffn_hidden_size);
  const double etp = static_cast<double>(p.parallel.etp);
  const double fc1_width = IsGated(model.activation) ? 2.0 * f : f;
  const double e = p.bytes_per_element;
  const double lin = p.fp8_linear_inputs ? 1.0 : e;
  // Per routed token copy on this rank: the permuted FC1 input (gathered over ETP), FC1's
  // output (the activation's input, fc1_width/etp of etp*... tokens), FC2's input (not
  // stored when the activation is recomputed), and the expert output kept for the
  // probability-weighted combine.
  const double fc2_input = selective && p.selective.moe_act ? 0.0 : lin * f;
  const double fc1_input = p.offloaded.expert_fc1 ? 0.0 : lin * h * etp;
  const double act_input = p.offloaded.moe_act ? 0.0 : e * fc1_width;
  bytes += load * tokens * k * (fc1_input + act_input + fc2_input + e * h);
  // Router: FP32 logits and probabilities, the 1-byte routing map.
  bytes += tokens * static_cast<double>(model.num_experts) * 9.0;
  return bytes;
}

namespace {

// A layer's activation parameters with and without the layout's offloads.
std::pair<LayerActivationParams, LayerActivationParams> WithAndWithoutOffload(
    const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config) {
  const LayerActivationParams with = ActivationParamsFor(model, training, config);
  LayerActivationParams without = with;
  without.offloaded = OffloadedInputs();
  return {with, without};
}

}  // namespace

double DenseLayerOffloadedBytes(const ModelSpec& model, const TrainingSpec& training,
                                const ParallelConfig& config) {
  const auto [with, without] = WithAndWithoutOffload(model, training, config);
  return LayerActivationBytes(model, without) - LayerActivationBytes(model, with);
}

double LayerOffloadedBytes(const JobSpec& spec, const ParallelConfig& config, bool expert_layer) {
  if (!expert_layer) return DenseLayerOffloadedBytes(spec.model, spec.training, config);
  const auto [with, without] = WithAndWithoutOffload(spec.model, spec.training, config);
  const double load = ExpertLoadFactor(spec, config);
  return ExpertLayerActivationBytes(spec.model, without, load) -
         ExpertLayerActivationBytes(spec.model, with, load);
}

double DispatchBufferBytes(const ModelSpec& model, const LayerActivationParams& p, double load) {
  if (!IsMoe(model)) return 0;
  const double sp = p.parallel.sequence_parallel ? static_cast<double>(p.parallel.tp) : 1.0;
  const double tokens = static_cast<double>(p.parallel.micro_batch_size) *
                        static_cast<double>(p.seq_length) /
                        (static_cast<double>(p.parallel.cp) * sp);
  // The all-to-all's send and receive buffers of top-k x tokens rows of h.
  return 2.0 * load * tokens * static_cast<double>(model.moe_router_topk) *
         static_cast<double>(model.hidden_size) * p.bytes_per_element;
}

double MaxParamsPerGpu(const ModelSpec& model, const ParallelConfig& config) {
  const double first = StageParamsPerGpu(model, config, 0);
  if (config.pp <= 1) return first;
  return std::max(first, StageParamsPerGpu(model, config, config.pp - 1));
}

FrameworkMemory FrameworkMemoryFor(const DeviceProfile& device, const TrainingSpec& training) {
  FrameworkMemory f = FrameworkMemoryFor(device, training.framework);
  if (training.grad_reduce_in_fp32.has_value()) {
    f.gradient_bytes_per_param = *training.grad_reduce_in_fp32 ? 4.0 : 2.0;
  }
  if (ProfileOf(training.framework).fp8_weight_cache && !training.Fp8ParamGather() &&
      IsLowPrecisionGemm(training.precision) && device.peak_fp8_tflops > 0) {
    switch (training.precision) {
      case Precision::kMxfp8:
        f.fp8_weight_cache_bytes = 2.0 + 2.0 / 32.0;
        break;
      case Precision::kNvfp4:
        f.fp8_weight_cache_bytes = 2.0 * (0.5 + 1.0 / 16.0);
        break;
      default:
        f.fp8_weight_cache_bytes = device.block_scaled_formats ? 1.0 : 2.0;
        break;
    }
  }
  return f;
}

FrameworkMemory FrameworkMemoryFor(const DeviceProfile& device, Framework framework) {
  const FrameworkProfile& profile = ProfileOf(framework);
  FrameworkMemory f;
  f.gradient_bytes_per_param = profile.gradient_bytes_per_param;
  f.fp32_parameters = profile.fp32_parameters;
  f.optimizer_in_training_dtype = profile.optimizer_in_training_dtype;
  f.vocab_parallel_loss = profile.vocab_parallel_loss;
  f.pipeline_keeps_outputs = profile.pipeline_keeps_outputs;
  f.host_memory_bytes = device.host_memory_per_gpu;
  if (device.host_memory) {
    f.workspace_bytes = 0;
    f.fragmentation_fraction = 0;
  }
  return f;
}

double TrainerGradientBytesPerParam(Precision precision) {
  return precision == Precision::kFp32 ? 4.0 : 2.0;
}

double TrainerLogitsBytesPerElement(Precision precision) {
  return 2.0 * TrainerGradientBytesPerParam(precision);
}

double TrackedPeakBytes(const MemoryBreakdown& m, const FrameworkMemory& framework,
                        Precision precision) {
  const double f = framework.fragmentation_fraction;
  const double loss_buffers =
      framework.logits_bytes_per_element > 0
          ? m.loss_buffers * (TrainerLogitsBytesPerElement(precision) /
                                  framework.logits_bytes_per_element -
                              1.0)
          : 0.0;
  const double transient = std::max(
      0.0, (m.other - framework.workspace_bytes - f * m.activations) / (1.0 + f) + loss_buffers);
  const double gradients =
      framework.gradient_bytes_per_param > 0
          ? m.gradients * TrainerGradientBytesPerParam(precision) /
                framework.gradient_bytes_per_param
          : m.gradients;
  return m.weights + gradients + m.optimizer + m.activations + transient;
}

ShardedModelState ShardedModelStateBytes(const ParallelConfig& config, double params,
                                         double layer_params, double weight_bytes,
                                         double gradient_bytes, double optimizer_bytes) {
  const double n = static_cast<double>(std::max<int64_t>(config.ShardRanks(), 1));
  ShardedModelState out;
  out.weights = weight_bytes * params;
  out.gradients = gradient_bytes * params;
  out.optimizer = optimizer_bytes * params / n;
  switch (config.data_parallel_sharding) {
    case DataParallelSharding::kNone:
    case DataParallelSharding::kOptimizer:
      break;
    case DataParallelSharding::kOptimizerGrads:
      out.gradients /= n;
      out.reduce_buffers = 2.0 * std::min(params, kReduceBucketParams) * gradient_bytes;
      break;
    case DataParallelSharding::kFull:
      out.weights /= n;
      out.gradients /= n;
      out.gathered_weights =
          std::min(params, kFullShardUnshardedLayers * layer_params) * weight_bytes;
      out.reduce_buffers = std::min(params, 2.0 * layer_params) * gradient_bytes;
      break;
  }
  return out;
}

MemoryBreakdown EstimateMemory(const JobSpec& spec, const ParallelConfig& c,
                               double capacity_bytes, const FrameworkMemory& framework) {
  const ModelSpec& m = spec.model;
  const TrainingSpec& tr = spec.training;
  LayerActivationParams act = ActivationParamsFor(m, tr, c);
  act.unfused_glu = framework.unfused_glu;
  act.attention_output_copied = framework.attention_output_copied;
  const double micro_batches = static_cast<double>(NumMicroBatches(c, tr));
  const double t = static_cast<double>(c.tp);
  const double s_local = static_cast<double>(tr.seq_length) / static_cast<double>(c.cp);
  const double b = static_cast<double>(c.micro_batch_size);
  const double h = static_cast<double>(m.hidden_size);
  const double e = act.bytes_per_element;

  // Activations of one micro-batch through one stage.
  double per_layer_full_recompute = 0, per_layer_stored = 0;
  {
    LayerActivationParams kept = act;
    per_layer_stored = LayerActivationBytes(m, kept);
    kept.parallel.recompute = Recompute::kFull;
    per_layer_full_recompute = LayerActivationBytes(m, kept);
  }
  LayerActivationParams no_rc = act;
  no_rc.parallel.recompute = Recompute::kNone;
  // Expert layers (MoE): the busiest EP rank's share of the routed tokens.
  const double load = ExpertLoadFactor(spec, c);
  const double expert_stored = IsMoe(m) ? ExpertLayerActivationBytes(m, act, load) : 0.0;
  const double expert_no_rc = IsMoe(m) ? ExpertLayerActivationBytes(m, no_rc, load) : 0.0;
  const std::vector<int64_t> experts_per_stage = ExpertLayersPerStage(m, c);
  // Activation offload: what one layer of one micro-batch keeps on the host.
  const bool offloads = c.activation_offload && c.recompute != Recompute::kFull;
  const double dense_offloaded = offloads ? LayerOffloadedBytes(spec, c, false) : 0.0;
  const double expert_offloaded = offloads && IsMoe(m) ? LayerOffloadedBytes(spec, c, true) : 0.0;
  // Activations of one micro-batch through all layers of stage r (and the MTP modules on
  // the last stage, stored as their layers are).
  auto stage_act = [&](int64_t r) {
    const double mtp = r == c.pp - 1 ? static_cast<double>(m.mtp_layers) : 0.0;
    const double experts =
        static_cast<double>(experts_per_stage[static_cast<size_t>(r)]) + (IsMoe(m) ? mtp : 0.0);
    const double layers = static_cast<double>(DecoderLayersOnStage(m, c, r)) + mtp;
    const double dense = layers - experts;
    if (c.recompute != Recompute::kFull) return dense * per_layer_stored + experts * expert_stored;
    const double recomputed = c.recompute_num_layers > 0
                                  ? std::min(layers, static_cast<double>(c.recompute_num_layers))
                                  : layers;
    // Recomputed layers keep only their input; the rest store everything (expert layers
    // first in that share, in proportion).
    const double kept_fraction = layers > 0 ? (layers - recomputed) / layers : 0.0;
    return recomputed * per_layer_full_recompute +
           kept_fraction * (dense * LayerActivationBytes(m, no_rc) + experts * expert_no_rc);
  };
  // Micro-batches whose activations a stage holds at its peak (in units of a whole stage's
  // layers): 1F1B keeps min(p - r, m) on stage r; the interleaved schedule runs
  // (p - r - 1)*2 + (v - 1)*p + 1 model chunks of L/(p*v) layers before its first
  // backward, i.e. p + (p-1)/v stages' worth on the first stage (Korthikanti's
  // 1 + (p-1)/(p*v) factor).
  auto in_flight_on = [&](int64_t r) {
    if (c.vp == 1) return std::min(static_cast<double>(c.pp - r), micro_batches);
    const double chunks = std::min(
        micro_batches * static_cast<double>(c.vp),
        static_cast<double>((c.pp - r - 1) * 2 + (c.vp - 1) * c.pp + 1));
    return chunks / static_cast<double>(c.vp);
  };
  const double in_flight = in_flight_on(0);
  const double sp = c.sequence_parallel ? t : 1.0;
  // Embedding output dropout mask on the first stage, per in-flight micro-batch.
  const double embedding_act = (tr.dropout ? 1.0 : 0.0) * s_local * b * h / sp;
  // Working set of one layer's backward: its activation gradients, about one layer's
  // activations without recompute; under full recompute the layer's recomputed activations
  // are alive beside them, twice that (kernels/training holds both until the layer's
  // backward ends: tests/training/memory_vs_model_test.cc measured −16.7 % with once).
  LayerActivationParams working = act;
  working.parallel.recompute = Recompute::kNone;
  working.offloaded = OffloadedInputs();  // Gradients are on the device whatever is offloaded.
  // An expert layer's: its activations and the dispatch's send and receive buffers.
  const double working_layer =
      std::max(LayerActivationBytes(m, working),
               IsMoe(m) ? ExpertLayerActivationBytes(m, working, load) +
                              DispatchBufferBytes(m, working, load)
                        : 0.0);
  const double backward_working_set = working_layer * (c.recompute == Recompute::kFull ? 2.0 : 1.0);

  // Last stage: the loss buffers (FP32 logits and the 16-bit output by default) for one
  // micro-batch, and the output layer's input.
  const double vocab_local = static_cast<double>(PaddedVocab(m, c.tp)) /
                             (framework.vocab_parallel_loss ? t : 1.0);
  // Each MTP module computes its own logits and loss beside the main ones.
  const double loss_buffers = framework.logits_bytes_per_element * s_local * b * vocab_local *
                              (1.0 + static_cast<double>(m.mtp_layers));
  const double logits = loss_buffers + e * s_local * b * h / sp;

  // FSDP mixed precision keeps FP32 parameters that double as Adam's master copy.
  const bool fp32_parameters = framework.fp32_parameters && tr.precision != Precision::kFp32;
  const double weight_bytes = tr.precision == Precision::kFp32 || fp32_parameters ? 4.0 : 2.0;
  // 16-bit Adam states over 16-bit parameters: 4 bytes, no master copy.
  // Megatron-Core's precision-aware optimizer: the moments in their dtype beside the main
  // weights FusedAdam keeps.
  const double optimizer_bytes =
      tr.PrecisionAwareOptimizer() ? PrecisionAwareOptimizerBytes(tr)
      : framework.optimizer_in_training_dtype && tr.precision != Precision::kFp32
          ? 4.0
          : OptimizerBytesPerParam(fp32_parameters ? Precision::kFp32 : tr.precision);
  // FP32 training keeps FP32 gradients whatever the codebase.
  const double gradient_bytes = tr.precision == Precision::kFp32
                                    ? std::max(4.0, framework.gradient_bytes_per_param)
                                    : framework.gradient_bytes_per_param;
  const auto model_state = [&](const ParallelConfig& group, double params, double layer_params) {
    ShardedModelState state = ShardedModelStateBytes(group, params, layer_params, weight_bytes,
                                                     gradient_bytes, optimizer_bytes);
    if (framework.optimizer_in_training_dtype && tr.precision != Precision::kFp32) {
      // FSDP2 reduces the 16-bit gradients in FP32 (reduce_dtype) before the 16-bit shard
      // keeps them: the layers' reduce buffers are FP32. Kept gathered (optimizer), the
      // 16-bit parameters are whole beside their shard, which the optimizer updates.
      state.reduce_buffers *= 2.0;
      if (group.data_parallel_sharding == DataParallelSharding::kOptimizer &&
          group.ShardRanks() > 1) {
        // Kept gathered with the sync deferred, FSDP2 accumulates the unsharded gradients
        // in its reduce dtype (FP32: FSDPParam.to_accumulated_grad_if_needed); parameters
        // it does not manage (experts sharded by EP alone) keep 16-bit gradients.
        state.weights += weight_bytes * params / static_cast<double>(group.ShardRanks());
        state.gradients *= 2.0;
      }
    }
    if (fp32_parameters) {
      // The gathered layers are 16-bit copies of the FP32 shards; without resharding after
      // the forward (optimizer_grads) every layer's 16-bit copy stays until its backward.
      state.gathered_weights /= 2.0;
      // Kept gathered under a pipeline (optimizer) likewise, its unsharded gradients
      // accumulated in FP32 (the reduce dtype, as the codebase keeps them).
      if (group.data_parallel_sharding == DataParallelSharding::kOptimizerGrads ||
          group.data_parallel_sharding == DataParallelSharding::kOptimizer) {
        state.weights =
            weight_bytes * params / static_cast<double>(std::max<int64_t>(group.ShardRanks(), 1)) +
            2.0 * params;
      }
    }
    return state;
  };

  // Dense models peak on the first or the last stage; an MoE model's middle stages may
  // hold more expert layers than either. Of the stages with the same expert and decoder
  // layers, the earliest holds the most in-flight micro-batches, so it is the one checked.
  std::vector<int64_t> stages = {0, c.pp - 1};
  if (IsMoe(m)) {
    std::vector<std::pair<int64_t, int64_t>> seen;
    for (int64_t r = 1; r + 1 < c.pp; ++r) {
      const std::pair<int64_t, int64_t> kind{experts_per_stage[static_cast<size_t>(r)],
                                             DecoderLayersOnStage(m, c, r)};
      if (std::find(seen.begin(), seen.end(), kind) != seen.end()) continue;
      seen.push_back(kind);
      stages.push_back(r);
    }
  }
  const ParallelConfig expert_group = ExpertDataParallelGroup(c);
  MemoryBreakdown best;
  for (int64_t stage : stages) {
    const StageParams split =
        StageParamsSplit(m, c, stage, experts_per_stage[static_cast<size_t>(stage)]);
    MemoryBreakdown mem;
    mem.capacity = capacity_bytes;
    // Dense parameters shard over the data-parallel shard group; the routed experts over
    // the expert data-parallel group (edp = tp*cp*dp / (etp*ep)).
    const double stage_experts =
        static_cast<double>(std::max<int64_t>(experts_per_stage[static_cast<size_t>(stage)], 1));
    const ShardedModelState dense = model_state(c, split.dense, LayerParams(m) / t);
    const ShardedModelState expert =
        split.expert > 0 ? model_state(expert_group, split.expert, split.expert / stage_experts)
                         : ShardedModelState{};
    mem.weights = dense.weights + dense.gathered_weights + expert.weights +
                  expert.gathered_weights + framework.fp8_weight_cache_bytes * split.linear;
    mem.gradients =
        dense.gradients + dense.reduce_buffers + expert.gradients + expert.reduce_buffers;
    mem.optimizer = dense.optimizer + expert.optimizer;
    mem.host_capacity = framework.host_memory_bytes;
    if (c.offload != Offload::kNone) {
      // The optimizer state moves to the host with an FP32 copy of the gradient shard the
      // host's Adam step reads (ZeRO-Offload; Megatron's HybridDeviceOptimizer).
      mem.host = mem.optimizer * (1.0 + kHostGradientBytesPerParam / optimizer_bytes);
      mem.optimizer = 0;
    }
    if (c.offload == Offload::kOptimizerAndParams) {
      // The parameter and gradient shards too: the GPU keeps the layers it has gathered
      // and the reduce-scatter buffers.
      mem.host += dense.weights + expert.weights;
      mem.weights = dense.gathered_weights + expert.gathered_weights;
      mem.gradients = dense.reduce_buffers + expert.reduce_buffers;
    }
    const double stage_in_flight = in_flight_on(stage);
    double reload_buffers = 0;
    if (offloads) {
      // The offloaded inputs of every in-flight micro-batch's layers wait on the host; the
      // device keeps reload buffers for two layers (the one in its backward and the next,
      // prefetched).
      const double mtp = stage == c.pp - 1 ? static_cast<double>(m.mtp_layers) : 0.0;
      const double experts = static_cast<double>(experts_per_stage[static_cast<size_t>(stage)]) +
                             (IsMoe(m) ? mtp : 0.0);
      const double layers = static_cast<double>(DecoderLayersOnStage(m, c, stage)) + mtp;
      mem.host += stage_in_flight * ((layers - experts) * dense_offloaded +
                                     experts * expert_offloaded);
      reload_buffers = 2.0 * std::max(dense_offloaded, expert_offloaded);
    }
    // The stage's outputs the pipeline keeps for the backward (none on the last stage).
    const double kept_outputs =
        framework.pipeline_keeps_outputs && stage < c.pp - 1 ? e * s_local * b * h / sp : 0.0;
    mem.activations = stage_in_flight * (stage_act(stage) + kept_outputs) +
                      (stage == 0 ? in_flight * embedding_act : 0);
    // The last stage's loss buffers live from the logits to the output layer's input
    // gradient and are freed before the last layer's backward allocates its working set
    // (autograd in Megatron-LM, kernels/training alike), so the two do not add up.
    const double transient =
        stage == c.pp - 1 ? std::max(backward_working_set, logits) : backward_working_set;
    mem.other = transient + reload_buffers + framework.workspace_bytes +
                framework.fragmentation_fraction * (mem.activations + transient);
    mem.loss_buffers = stage == c.pp - 1 ? loss_buffers : 0.0;
    if (mem.Peak() > best.Peak()) best = mem;
  }
  return best;
}

}  // namespace paratune
