#include "search/memory_model.h"

#include <algorithm>

#include "search/model_math.h"

namespace paratune {

double LayerActivationBytes(const ModelSpec& model, const LayerActivationParams& p) {
  const double t = static_cast<double>(std::max<int64_t>(p.parallel.tp, 1));
  const double c = static_cast<double>(std::max<int64_t>(p.parallel.cp, 1));
  const double s = static_cast<double>(p.seq_length);
  const double b = static_cast<double>(p.parallel.micro_batch_size);
  const double h = static_cast<double>(model.hidden_size);
  const double a = static_cast<double>(model.num_attention_heads);
  const double g = static_cast<double>(QueryGroups(model));
  const double f = static_cast<double>(model.ffn_hidden_size);
  const double e = p.bytes_per_element;
  const double lin = p.fp8_linear_inputs ? 1.0 : e;  // Linear-layer inputs.
  const double mask = p.dropout ? 1.0 : 0.0;         // One byte per element.
  const double x = s * b * h / c;                    // Elements of one [s, b, h] tensor.
  const double sp = p.parallel.sequence_parallel ? t : 1.0;  // Divisor of the non-TP regions.

  if (p.parallel.recompute == Recompute::kFull) {
    return e * x / sp;  // Only the layer input (the checkpoint).
  }
  // Regions outside TP: norms' inputs, the norms' outputs feeding QKV and FC1, masks.
  double replicated = e * x        // LN1 input
                      + lin * x    // QKV input
                      + mask * x   // attention dropout mask
                      + e * x      // LN2 input
                      + lin * x    // FC1 input
                      + mask * x;  // MLP dropout mask
  // Inside TP.
  double sharded = e * x + e * x * g / a  // Q and K
                   + e * x * g / a        // V
                   + lin * x;             // output projection input
  const double fc1_width = model.activation == Activation::kSwiglu ? 2.0 * f : f;
  sharded += e * s * b * fc1_width / c  // activation-function input
             + lin * s * b * f / c;      // FC2 input
  if (p.parallel.recompute != Recompute::kSelective) {
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
  p.flash_attention = training.flash_attention;
  p.dropout = training.dropout;
  p.bytes_per_element = training.precision == Precision::kFp32 ? 4.0 : 2.0;
  // NVFP4 stores its linear inputs in 4 bits plus scales; counted at one byte, as FP8
  // (an upper bound: Transformer Engine also keeps a transposed copy for the wgrad GEMM).
  p.fp8_linear_inputs = IsLowPrecisionGemm(training.precision);
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

double StageParamsPerGpu(const ModelSpec& m, const ParallelConfig& c, int64_t stage) {
  const double t = static_cast<double>(c.tp);
  double params =
      static_cast<double>(c.LayersOnStage(m.num_layers, stage)) * LayerParams(m) / t;
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
  return params;
}

double MaxParamsPerGpu(const ModelSpec& model, const ParallelConfig& config) {
  return std::max(StageParamsPerGpu(model, config, 0), StageParamsPerGpu(model, config, config.pp - 1));
}

FrameworkMemory FrameworkMemoryFor(const DeviceProfile& device) {
  FrameworkMemory f;
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
  const LayerActivationParams act = ActivationParamsFor(m, tr, c);
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
  // Activations of one micro-batch through all layers of stage r.
  auto stage_act = [&](int64_t r) {
    const double layers = static_cast<double>(c.LayersOnStage(m.num_layers, r));
    if (c.recompute != Recompute::kFull) return layers * per_layer_stored;
    const double recomputed = c.recompute_num_layers > 0
                                  ? std::min(layers, static_cast<double>(c.recompute_num_layers))
                                  : layers;
    LayerActivationParams no_rc = act;
    no_rc.parallel.recompute = Recompute::kNone;
    return recomputed * per_layer_full_recompute +
           (layers - recomputed) * LayerActivationBytes(m, no_rc);
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
  const double backward_working_set =
      LayerActivationBytes(m, working) * (c.recompute == Recompute::kFull ? 2.0 : 1.0);

  // Last stage: the loss buffers (FP32 logits and the 16-bit output by default) for one
  // micro-batch, and the output layer's input.
  const double vocab_local = static_cast<double>(PaddedVocab(m, c.tp)) /
                             (framework.vocab_parallel_loss ? t : 1.0);
  const double loss_buffers = framework.logits_bytes_per_element * s_local * b * vocab_local;
  const double logits = loss_buffers + e * s_local * b * h / sp;

  const double weight_bytes = tr.precision == Precision::kFp32 ? 4.0 : 2.0;
  const double optimizer_bytes = OptimizerBytesPerParam(tr.precision);

  MemoryBreakdown best;
  for (int64_t stage : {int64_t{0}, c.pp - 1}) {
    const double params = StageParamsPerGpu(m, c, stage);
    MemoryBreakdown mem;
    mem.capacity = capacity_bytes;
    const ShardedModelState state =
        ShardedModelStateBytes(c, params, LayerParams(m) / t, weight_bytes,
                               framework.gradient_bytes_per_param, optimizer_bytes);
    mem.weights = state.weights + state.gathered_weights;
    mem.gradients = state.gradients + state.reduce_buffers;
    mem.optimizer = state.optimizer;
    const double stage_in_flight = in_flight_on(stage);
    mem.activations =
        stage_in_flight * stage_act(stage) + (stage == 0 ? in_flight * embedding_act : 0);
    // The last stage's loss buffers live from the logits to the output layer's input
    // gradient and are freed before the last layer's backward allocates its working set
    // (autograd in Megatron-LM, kernels/training alike), so the two do not add up.
    const double transient =
        stage == c.pp - 1 ? std::max(backward_working_set, logits) : backward_working_set;
    mem.other = transient + framework.workspace_bytes +
                framework.fragmentation_fraction * (mem.activations + transient);
    mem.loss_buffers = stage == c.pp - 1 ? loss_buffers : 0.0;
    if (mem.Peak() > best.Peak()) best = mem;
  }
  return best;
}

}  // namespace paratune
