#include "search/time_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "search/collectives.h"
#include "search/gemm_efficiency.h"
#include "search/memory_model.h"
#include "search/model_math.h"
#include "search/pipeline_schedule.h"

namespace paratune {
namespace {

// Megatron's DDP bucket: gradients are reduced in buckets of at least 40M parameters.
constexpr double kGradBucketParams = 40e6;
// Optimizer step traffic per parameter (Megatron's mixed-precision Adam, one pass per
// multi-tensor kernel): unscale and inf-check of the FP32 main grads (read 4, write 4),
// gradient norm (read 4), Adam (read grad, master, m, v: 16; write master, m, v: 12), copy
// of the master weights to the 16-bit weights (read 4, write 2), zeroing the gradient
// buffer (write 4): 50 bytes.
constexpr double kOptimizerBytesPerParam = 50;
// Flash attention skips the fully masked blocks of a causal mask: half the scores.
constexpr double kCausalFraction = 0.5;
// Flash attention's backward recomputes the scores: 5 matmuls against the forward's 2,
// and runs at ~80% of the forward's FLOP rate (FlashAttention-2 paper, Figs. 5-7).
constexpr double kFlashBackwardRatio = 2.5;
constexpr double kFlashBackwardEfficiency = 0.8;

double ElementBytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

// Precision of the attention core and of non-linear-layer GEMMs (FP8 only for linears).
Precision CorePrecision(Precision p) { return p == Precision::kFp8 ? Precision::kBf16 : p; }

struct Gemm {
  double m, n, k;
};

// A collective of `comm` seconds overlapped with `window` seconds of compute: the part
// that is not hidden, and the part that is (which slows the compute it overlaps).
double Exposed(double comm, double window) { return std::max(0.0, comm - window); }
double Hidden(double comm, double window) { return std::min(comm, window); }

// Bytes of a gradient element: fp32 main gradients except with fp16 (Megatron's default).
double GradBytes(Precision p) { return p == Precision::kFp16 ? 2.0 : 4.0; }

}  // namespace

LayerTime EstimateLayerTime(const ModelSpec& model, const TrainingSpec& training,
                            const ParallelConfig& config, const DeviceProfile& device,
                            int64_t gpus_per_node) {
  const double t = static_cast<double>(config.tp);
  const double c = static_cast<double>(config.cp);
  const double b = static_cast<double>(config.micro_batch_size);
  const double s = static_cast<double>(training.seq_length);
  const double s_local = s / c;
  const double h = static_cast<double>(model.hidden_size);
  const double a = static_cast<double>(model.num_attention_heads);
  const double g = static_cast<double>(QueryGroups(model));
  const double f = static_cast<double>(model.ffn_hidden_size);
  const double head_dim = h / a;
  const double tokens = b * s_local;  // Rows of every linear layer on this rank.
  const double e = ElementBytes(training.precision);
  const double mask = training.dropout ? 1.0 : 0.0;
  const double sp = config.sequence_parallel ? t : 1.0;
  const Precision linear_precision = training.precision;
  const Precision core_precision = CorePrecision(training.precision);
  const double fc1_width = model.activation == Activation::kSwiglu ? 2.0 * f : f;
  const double launch = device.kernel_launch_s;
  const double slowdown = device.comm_overlap_slowdown;

  LayerTime out;
  // Linear layers: QKV and FC1 are column-parallel, projection and FC2 row-parallel.
  const Gemm qkv{tokens, (h + 2.0 * h * g / a) / t, h};
  const Gemm proj{tokens, h, h / t};
  const Gemm fc1{tokens, fc1_width / t, h};
  const Gemm fc2{tokens, h, f / t};
  double linear_fwd = 0, dgrad = 0, wgrad_qkv = 0, wgrad_fc1 = 0, wgrad_rest = 0;
  double dgrad_qkv = 0, dgrad_fc1 = 0;
  const double qkv_fwd = GemmSeconds(device, qkv.m, qkv.n, qkv.k, 1, linear_precision);
  const double proj_fwd = GemmSeconds(device, proj.m, proj.n, proj.k, 1, linear_precision);
  const double fc1_fwd = GemmSeconds(device, fc1.m, fc1.n, fc1.k, 1, linear_precision);
  const double fc2_fwd = GemmSeconds(device, fc2.m, fc2.n, fc2.k, 1, linear_precision);
  linear_fwd = qkv_fwd + proj_fwd + fc1_fwd + fc2_fwd;
  // Backward: data gradient [m x n] x [n x k], weight gradient [k x m] x [m x n].
  dgrad_qkv = GemmSeconds(device, qkv.m, qkv.k, qkv.n, 1, linear_precision);
  dgrad_fc1 = GemmSeconds(device, fc1.m, fc1.k, fc1.n, 1, linear_precision);
  const double dgrad_proj = GemmSeconds(device, proj.m, proj.k, proj.n, 1, linear_precision);
  const double dgrad_fc2 = GemmSeconds(device, fc2.m, fc2.k, fc2.n, 1, linear_precision);
  dgrad = dgrad_qkv + dgrad_fc1 + dgrad_proj + dgrad_fc2;
  wgrad_qkv = GemmSeconds(device, qkv.k, qkv.n, qkv.m, 1, linear_precision);
  wgrad_fc1 = GemmSeconds(device, fc1.k, fc1.n, fc1.m, 1, linear_precision);
  wgrad_rest = GemmSeconds(device, proj.k, proj.n, proj.m, 1, linear_precision) +
               GemmSeconds(device, fc2.k, fc2.n, fc2.m, 1, linear_precision);

  // FP8 (Transformer Engine): casts of the linear inputs (read 16-bit, write 1 byte) in
  // the forward; in the backward the output gradients are cast and transposed (write two
  // FP8 copies) and the saved FP8 inputs transposed for the weight gradient.
  double fp8_fwd_bytes = 0, fp8_bwd_bytes = 0;
  if (training.precision == Precision::kFp8 && device.peak_fp8_tflops > 0) {
    for (const Gemm& gm : {qkv, proj, fc1, fc2}) {
      fp8_fwd_bytes += (e + 1.0) * gm.m * gm.k;
      fp8_bwd_bytes += (e + 2.0) * gm.m * gm.n + 2.0 * gm.m * gm.k;
    }
  }

  // Attention core, per rank: a/t heads, s_local queries against s keys.
  const double heads = a / t;
  double core_fwd = 0, core_bwd = 0;
  if (training.flash_attention) {
    const double flops = 4.0 * b * s_local * s * h / t * kCausalFraction;
    const double rate = device.PeakFlops(core_precision) * device.attention_efficiency;
    core_fwd = flops / rate + launch;
    core_bwd = kFlashBackwardRatio * flops / (kFlashBackwardEfficiency * rate) + launch;
  } else {
    const double batch = b * heads;
    const double scores = batch * s_local * s;
    core_fwd = GemmSeconds(device, s_local, s, head_dim, batch, core_precision) +
               GemmSeconds(device, s_local, head_dim, s, batch, core_precision);
    core_bwd = GemmSeconds(device, s_local, head_dim, s, batch, core_precision) +  // dQ
               GemmSeconds(device, s, head_dim, s_local, batch, core_precision) +  // dK
               GemmSeconds(device, s_local, s, head_dim, batch, core_precision) +  // dP
               GemmSeconds(device, s, head_dim, s_local, batch, core_precision);   // dV
    // Fused scale-mask-softmax (read + write the scores), dropout (read, write output and
    // the 1-byte mask); the backward reads the saved tensors and the incoming gradient.
    const double softmax_bytes = 2.0 * e * scores + mask * (2.0 * e + 1.0) * scores;
    core_fwd += StreamSeconds(device, softmax_bytes) + (1 + mask) * launch;
    core_bwd += StreamSeconds(device, 1.5 * softmax_bytes + e * scores) + (1 + mask) * launch;
  }
  out.attention_forward = core_fwd;

  // Memory-bound kernels outside the core: two norms (read + write), two fused
  // bias-dropout-residual adds (read two, write one, mask), the activation function, RoPE.
  const double x_sp = tokens * h / sp;
  double elementwise = 2.0 * (2.0 * e * x_sp) + 2.0 * ((3.0 * e + mask) * x_sp) +
                       e * tokens * fc1_width / t + e * tokens * f / t;
  int kernels = 6;
  if (model.position_embedding == PositionEmbedding::kRope) {
    elementwise += 2.0 * e * tokens * (h + h * g / a) / t;
    kernels += 1;
  }
  const double elementwise_fwd = StreamSeconds(device, elementwise + fp8_fwd_bytes) + kernels * launch;
  // Backward kernels read the saved input and the incoming gradient and write a gradient:
  // norms and activation functions move 3 tensors against the forward's 2, the fused
  // dropout-add backward 2-3 against 4: about 1.5x the forward traffic.
  const double elementwise_bwd =
      StreamSeconds(device, 1.5 * elementwise + fp8_bwd_bytes) + 2 * kernels * launch;

  out.forward_compute = linear_fwd + core_fwd + elementwise_fwd;
  out.backward_compute = dgrad + wgrad_qkv + wgrad_fc1 + wgrad_rest + core_bwd + elementwise_bwd;

  // Tensor-parallel communication of [s, b, h] activations.
  if (config.tp > 1) {
    const Link link = GroupLink(device, config.tp, 1, gpus_per_node);
    const double bytes = tokens * h * e;
    if (config.sequence_parallel) {
      const double ag = AllGatherSeconds(bytes, config.tp, link);
      const double rs = ReduceScatterSeconds(bytes, config.tp, link);
      if (config.tp_comm_overlap) {
        // Transformer Engine userbuffers: each all-gather / reduce-scatter is split into
        // t chunks pipelined with the GEMM that consumes / produces it.
        out.forward_tp_comm = Exposed(ag, qkv_fwd) + Exposed(rs, proj_fwd) +
                              Exposed(ag, fc1_fwd) + Exposed(rs, fc2_fwd);
        out.forward_compute += slowdown * (Hidden(ag, qkv_fwd) + Hidden(rs, proj_fwd) +
                                           Hidden(ag, fc1_fwd) + Hidden(rs, fc2_fwd));
        out.backward_tp_comm = Exposed(ag, dgrad_proj) + Exposed(ag, dgrad_fc2);
        out.backward_compute += slowdown * (Hidden(ag, dgrad_proj) + Hidden(ag, dgrad_fc2));
      } else {
        // Forward: all-gather before QKV and FC1, reduce-scatter after projection and FC2.
        out.forward_tp_comm = 2.0 * (ag + rs);
        // Backward: all-gather of the output gradient before the row-parallel layers.
        out.backward_tp_comm = 2.0 * ag;
      }
      // For the column-parallel layers the input is gathered again during the data-gradient
      // GEMM and the input gradient reduce-scattered during the weight-gradient GEMM.
      out.backward_tp_comm += Exposed(ag, dgrad_qkv) + Exposed(ag, dgrad_fc1) +
                              Exposed(rs, wgrad_qkv) + Exposed(rs, wgrad_fc1);
      out.backward_compute += slowdown * (Hidden(ag, dgrad_qkv) + Hidden(ag, dgrad_fc1) +
                                          Hidden(rs, wgrad_qkv) + Hidden(rs, wgrad_fc1));
      // The two norms' weights (and LayerNorm's biases) are replicated over TP: their
      // gradients are all-reduced once per step.
      const double norm_params =
          (model.normalization == Normalization::kLayerNorm ? 4.0 : 2.0) * h;
      out.grad_sync_tp_comm =
          AllReduceSeconds(norm_params * GradBytes(training.precision), config.tp, link);
    } else {
      const double ar = AllReduceSeconds(bytes, config.tp, link);
      out.forward_tp_comm = 2.0 * ar;  // After the projection and after FC2.
      // Input-gradient all-reduce of QKV and FC1, overlapped with their weight gradient.
      out.backward_tp_comm = Exposed(ar, wgrad_qkv) + Exposed(ar, wgrad_fc1);
      out.backward_compute += slowdown * (Hidden(ar, wgrad_qkv) + Hidden(ar, wgrad_fc1));
    }
  }
  // Context parallelism: ring exchange of K and V blocks (c - 1 steps), hidden behind the
  // attention of the block already held; the backward also returns dK and dV.
  if (config.cp > 1) {
    const Link link = GroupLink(device, config.cp, config.tp, gpus_per_node);
    const double kv_bytes = 2.0 * tokens * (h * g / a) / t * e;
    const double steps = c - 1.0;
    const double fwd = steps * SendRecvSeconds(kv_bytes, link);
    out.forward_cp_comm = Exposed(fwd, core_fwd * steps / c);
    out.backward_cp_comm = Exposed(2.0 * fwd, core_bwd * steps / c);
    out.forward_compute += slowdown * Hidden(fwd, core_fwd * steps / c);
    out.backward_compute += slowdown * Hidden(2.0 * fwd, core_bwd * steps / c);
  }
  switch (config.recompute) {
    case Recompute::kFull:
      out.recompute = out.forward_compute + out.forward_cp_comm;
      out.recompute_tp_comm = out.forward_tp_comm;
      break;
    case Recompute::kSelective:
      out.recompute = core_fwd;
      break;
    case Recompute::kNone:
      break;
  }
  return out;
}

EdgeTime EstimateEdgeTime(const ModelSpec& model, const TrainingSpec& training,
                          const ParallelConfig& config, const DeviceProfile& device,
                          int64_t gpus_per_node) {
  const double t = static_cast<double>(config.tp);
  const double tokens = static_cast<double>(config.micro_batch_size) *
                        static_cast<double>(training.seq_length) / static_cast<double>(config.cp);
  const double h = static_cast<double>(model.hidden_size);
  const double vocab = static_cast<double>(PaddedVocab(model, config.tp)) / t;
  const double e = ElementBytes(training.precision);
  const double sp = config.sequence_parallel ? t : 1.0;
  const Precision p = CorePrecision(training.precision);
  const double launch = device.kernel_launch_s;
  EdgeTime out;
  const Link link = GroupLink(device, config.tp, 1, gpus_per_node);
  const double act_bytes = tokens * h * e;
  // Embedding: a gather of rows (write the output, read the rows), the vocab-parallel
  // partial sums combined across TP (all-reduce, or reduce-scatter with SP); the backward
  // scatters gradients into the table.
  out.embedding_forward = StreamSeconds(device, 2.0 * act_bytes) + 2 * launch;
  out.embedding_backward = StreamSeconds(device, 3.0 * act_bytes) + 2 * launch;
  if (config.tp > 1) {
    out.embedding_forward += config.sequence_parallel
                                 ? ReduceScatterSeconds(act_bytes, config.tp, link)
                                 : AllReduceSeconds(act_bytes, config.tp, link);
    if (config.sequence_parallel) {
      out.embedding_backward += AllGatherSeconds(act_bytes, config.tp, link);
    }
  }
  // Final norm, output GEMM, and Megatron's (unfused) vocab-parallel cross entropy, one
  // kernel per step over the [tokens, V/t] logits: upcast to FP32 (read 16-bit, write 4),
  // max (read 4), subtract (read 4, write 4), exp (read 4, write 4), sum (read 4), divide
  // into the saved softmax (read 4, write 4): 2e + 30 bytes per element. The backward
  // scales the saved softmax by the loss gradient (read 4, write 4) and casts it for the
  // output layer's backward (read 4, write e): 12 + e.
  const double logits = tokens * vocab;
  out.logits_forward = StreamSeconds(device, 2.0 * e * tokens * h / sp) +
                       GemmSeconds(device, tokens, vocab, h, 1, p) +
                       StreamSeconds(device, (e + 30.0) * logits) + 8 * launch;
  const double wgrad = GemmSeconds(device, h, vocab, tokens, 1, p);
  out.logits_backward = StreamSeconds(device, 4.0 * e * tokens * h / sp) +
                        GemmSeconds(device, tokens, h, vocab, 1, p) + wgrad +
                        StreamSeconds(device, (12.0 + e) * logits) + 4 * launch;
  if (config.tp > 1) {
    if (config.sequence_parallel) {
      out.logits_forward += AllGatherSeconds(act_bytes, config.tp, link);
      out.logits_backward += Exposed(ReduceScatterSeconds(act_bytes, config.tp, link), wgrad);
    } else {
      out.logits_backward += Exposed(AllReduceSeconds(act_bytes, config.tp, link), wgrad);
    }
  }
  return out;
}

absl::StatusOr<IterationEstimate> EstimateIteration(const JobSpec& spec,
                                                    const ParallelConfig& config,
                                                    const DeviceProfile& device,
                                                    const LayerTime& layer, const EdgeTime& edge,
                                                    PipelineMode mode,
                                                    const MeasuredTerms* measured) {
  const ModelSpec& model = spec.model;
  const TrainingSpec& training = spec.training;
  const int64_t n = spec.cluster.gpus_per_node;
  const int64_t p = config.pp, v = config.vp;
  const int64_t m = NumMicroBatches(config, training);
  const double t = static_cast<double>(config.tp);
  const double e = ElementBytes(training.precision);
  const int64_t L = model.num_layers;

  // Fraction of a stage's layers that are recomputed (full recompute of some layers).
  auto recompute_fraction_on = [&](int64_t r) {
    if (config.recompute != Recompute::kFull || config.recompute_num_layers == 0) return 1.0;
    return std::min(1.0, static_cast<double>(config.recompute_num_layers) /
                             static_cast<double>(config.LayersOnStage(L, r)));
  };

  PipelineInput pipe;
  pipe.stages = p;
  pipe.chunks = v;
  pipe.micro_batches = m;
  pipe.forward.resize(static_cast<size_t>(p * v));
  pipe.backward.resize(static_cast<size_t>(p * v));
  for (int64_t r = 0; r < p; ++r) {
    const double layer_backward =
        layer.Backward() -
        (1.0 - recompute_fraction_on(r)) * (layer.recompute + layer.recompute_tp_comm);
    for (int64_t j = 0; j < v; ++j) {
      const double layers = static_cast<double>(config.LayersInChunk(L, r, j));
      pipe.forward[r * v + j] = layers * layer.Forward();
      pipe.backward[r * v + j] = layers * layer_backward;
    }
  }
  pipe.forward[0] += edge.embedding_forward;
  pipe.backward[0] += edge.embedding_backward;
  pipe.forward[p * v - 1] += edge.logits_forward;
  pipe.backward[p * v - 1] += edge.logits_backward;
  const double tokens = static_cast<double>(config.micro_batch_size) *
                        static_cast<double>(training.seq_length) / static_cast<double>(config.cp);
  // Megatron sends 1/t of the activation per TP rank (scatter-gather optimisation, or SP).
  const double p2p_bytes = tokens * model.hidden_size * e / t;
  const Link p2p_link = GroupLink(device, 2, config.tp * config.cp * config.dp, n);
  const double p2p = p > 1 ? SendRecvSeconds(p2p_bytes, p2p_link) : 0.0;
  // 1F1B's sends and receives are blocking (batched isend/irecv, then wait): every chunk
  // that passes an activation or a gradient on is busy for the transfer. The interleaved
  // schedule with overlap_p2p_comm posts them asynchronously: they only delay the receiver.
  const bool async_p2p = v > 1 && config.overlap_p2p_comm;
  for (int64_t r = 0; r < p && p > 1 && !async_p2p; ++r) {
    for (int64_t j = 0; j < v; ++j) {
      if (!(r == p - 1 && j == v - 1)) pipe.forward[r * v + j] += p2p;
      if (!(r == 0 && j == 0)) pipe.backward[r * v + j] += p2p;
    }
  }
  pipe.p2p_s = async_p2p ? p2p : 0.0;
  pipe.max_simulated_micro_batches = 4 * p;

  std::vector<double> finish(static_cast<size_t>(p), 0.0);
  if (mode == PipelineMode::kSimulated) {
    absl::StatusOr<PipelineResult> sim = SimulatePipeline(pipe);
    if (!sim.ok()) return sim.status();
    finish = sim->stage_finish;
  } else {
    const double makespan = PipelineClosedForm(pipe);
    for (int64_t r = 0; r < p; ++r) {
      double per = 0;
      for (int64_t j = 0; j < v; ++j) per += pipe.forward[r * v + j] + pipe.backward[r * v + j];
      // Stage r finishes its last backward about r slots before stage 0.
      finish[r] = makespan - static_cast<double>(r) * (per / static_cast<double>(v) + pipe.p2p_s);
    }
  }

  // Data-parallel gradient reduce over the DP x CP group (TP/CP innermost): all-reduce, or
  // reduce-scatter plus parameter all-gather with the distributed optimizer. Buckets are
  // reduced while the last micro-batch's backward runs; the last bucket is exposed.
  const int64_t dp_group = config.dp * config.cp;
  const Link dp_link = GroupLink(device, dp_group, config.tp, n);
  const double grad_bytes = GradBytes(training.precision);
  double iteration = 0, dp_on_critical = 0, optimizer = 0, sync_on_critical = 0;
  int64_t critical = 0;
  for (int64_t r = 0; r < p; ++r) {
    const double params = StageParamsPerGpu(model, config, r);
    // The SP-replicated norm gradients, once per step; the last stage's final norm is one
    // more norm of the same shape (half a layer's two).
    const double sync =
        layer.grad_sync_tp_comm * (static_cast<double>(config.LayersOnStage(L, r)) +
                                   (r == p - 1 ? 0.5 : 0.0));
    double exposed = 0;
    if (dp_group > 1) {
      auto reduce = [&](double count) {
        if (measured != nullptr && measured->dp_reduce_seconds) {
          return measured->dp_reduce_seconds(count * grad_bytes);
        }
        return config.distributed_optimizer
                   ? ReduceScatterSeconds(count * grad_bytes, dp_group, dp_link)
                   : AllReduceSeconds(count * grad_bytes, dp_group, dp_link);
      };
      auto gather = [&](double count) {
        if (measured != nullptr && measured->dp_gather_seconds) {
          return measured->dp_gather_seconds(count * e);
        }
        return AllGatherSeconds(count * e, dp_group, dp_link);
      };
      const double bucket = std::min(params, kGradBucketParams);
      double window = 0;
      for (int64_t j = 0; j < v; ++j) window += pipe.backward[r * v + j];
      const double total = reduce(params);
      if (config.overlap_grad_reduce) {
        exposed = std::max(reduce(bucket), total - window) +
                  device.comm_overlap_slowdown * Hidden(total - reduce(bucket), window);
        if (config.distributed_optimizer) {
          // Parameter all-gather overlapped with the next forward except its first bucket.
          exposed += gather(bucket);
        }
      } else {
        exposed = total + (config.distributed_optimizer ? gather(params) : 0.0);
      }
    }
    const double shards = config.distributed_optimizer ? static_cast<double>(dp_group) : 1.0;
    const double step =
        measured != nullptr && measured->optimizer_seconds_per_param > 0
            ? measured->optimizer_seconds_per_param * params / shards
            : StreamSeconds(device, kOptimizerBytesPerParam * params / shards) +
                  20 * device.kernel_launch_s;
    const double end = finish[r] + sync + exposed + step;
    if (end > iteration) {
      iteration = end;
      critical = r;
      dp_on_critical = exposed;
      optimizer = step;
      sync_on_critical = sync;
    }
  }
  // Tied embeddings split over the first and last stage: their gradients are all-reduced
  // between the two before the optimizer step.
  double embedding_sync = 0;
  if (model.tie_embeddings && p > 1) {
    const double bytes = static_cast<double>(PaddedVocab(model, config.tp)) *
                         model.hidden_size / t * grad_bytes;
    embedding_sync = AllReduceSeconds(
        bytes, 2, GroupLink(device, 2, (p - 1) * config.tp * config.cp * config.dp, n));
  }
  iteration += embedding_sync;

  IterationEstimate out;
  out.iteration_time_s = iteration;
  const double mb = static_cast<double>(m);
  double compute = 0, tp = 0, cp = 0;
  {
    // Per micro-batch on the critical stage, split by cause.
    const double layers = static_cast<double>(config.LayersOnStage(L, critical));
    const double recompute_fraction = recompute_fraction_on(critical);
    compute = layers * (layer.forward_compute + layer.backward_compute +
                        recompute_fraction * layer.recompute);
    tp = layers * (layer.forward_tp_comm + layer.backward_tp_comm +
                   recompute_fraction * layer.recompute_tp_comm);
    cp = layers * (layer.forward_cp_comm + layer.backward_cp_comm);
    if (critical == 0) compute += edge.embedding_forward + edge.embedding_backward;
    if (critical == p - 1) compute += edge.logits_forward + edge.logits_backward;
  }
  out.time.compute = mb * compute;
  out.time.tp_comm = mb * tp + sync_on_critical;
  out.time.cp_comm = mb * cp;
  out.time.dp_comm = dp_on_critical + embedding_sync;
  out.time.optimizer = optimizer;
  const double pipeline_rest = std::max(
      0.0, iteration - out.time.compute - out.time.tp_comm - out.time.cp_comm -
               out.time.dp_comm - out.time.optimizer);
  const double sends = 2.0 * static_cast<double>(v) -
                      ((critical == 0 || critical == p - 1) ? 1.0 : 0.0);
  out.time.pp_p2p =
      std::min(pipeline_rest, p > 1 ? (async_p2p ? 2.0 * (p - 1) * p2p : mb * sends * p2p) : 0.0);
  out.time.pp_bubble = pipeline_rest - out.time.pp_p2p;

  auto share = [&](double x) { return 100.0 * x / iteration; };
  if (out.time.pp_bubble > 0.1 * iteration) {
    out.notes.push_back(absl::StrFormat("pipeline bubble is %.0f%% of the iteration (m = %d, p = %d, v = %d)",
                                        share(out.time.pp_bubble), m, p, v));
  }
  if (out.time.tp_comm > 0.1 * iteration) {
    out.notes.push_back(absl::StrFormat("exposed TP communication is %.0f%% of the iteration",
                                        share(out.time.tp_comm)));
  }
  if (out.time.dp_comm > 0.05 * iteration) {
    out.notes.push_back(absl::StrFormat("exposed gradient sync is %.0f%% of the iteration",
                                        share(out.time.dp_comm)));
  }
  return out;
}

}  // namespace paratune
