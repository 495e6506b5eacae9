// The time model. EstimateLayerTime sums a layer's phases (linear GEMMs, FP8 casts, the
// attention core, memory-bound kernels, then the TP and CP communication that the compute
// hides or not, then recompute); EstimateIteration builds the pipeline's per-chunk times,
// runs the schedule, adds each stage's gradient sync, DP reduce and optimizer step, and
// splits the critical stage's time by cause.
#include "search/time_model.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "absl/strings/str_format.h"
#include "search/collectives.h"
#include "search/framework_profile.h"
#include "search/gemm_efficiency.h"
#include "search/memory_model.h"
#include "search/model_math.h"
#include "search/pipeline_schedule.h"
#include "search/sharded_data_parallel.h"

namespace paratune {
namespace {

// Megatron's DDP bucket: gradients are reduced in buckets of at least 40M parameters.
constexpr double kGradBucketParams = kReduceBucketParams;
// Optimizer step traffic per parameter (Megatron's mixed-precision Adam, one pass per
// multi-tensor kernel): unscale and inf-check of the FP32 main grads (read 4, write 4),
// gradient norm (read 4), Adam (read grad, master, m, v: 16; write master, m, v: 12), copy
// of the master weights to the 16-bit weights (read 4, write 2), zeroing the gradient
// buffer (write 4): 50 bytes.
constexpr double kOptimizerBytesPerParam = 50;
// Flash attention's backward recomputes the scores: 5 matmuls against the forward's 2,
// and runs at ~80% of the forward's FLOP rate (FlashAttention-2 paper, Figs. 5-7).
constexpr double kFlashBackwardRatio = 2.5;
// The attention kernels' speed relative to the device's attention_efficiency (which is
// FlashAttention-2's on A100 and the flash kernels Megatron-Core runs on Hopper):
// FlashAttention-1 reaches 25-40 % of A100's peak where FlashAttention-2 reaches 50-73 %
// (Dao 2023, arXiv 2307.08691): 32.5 / 61.5 at the midpoints. FlashAttention-3 is 1.5-2.0x
// FlashAttention-2 in FP16 on H100 (Shah et al. 2024, arXiv 2407.08608): the lower end.
constexpr double kFlash1Relative = 32.5 / 61.5;
constexpr double kFlash3Relative = 1.5;
// cuDNN's flash attention (Transformer Engine's FusedAttention) on H100, causal, head dim
// 128, BF16 forward at 4k/8k/16k tokens: 518/529/539 TFLOP/s (Shah et al. 2024, arXiv
// 2407.08608, Fig. 5; FlashAttention-2 319/333/335 there), 0.535 of the BF16 peak at 8k
// against Hopper's attention_efficiency of 0.40: 1.34x. Hopper and later only: no
// measurement says it is faster than FlashAttention-2 before Hopper.
constexpr double kCudnnRelative = 0.535 / 0.40;
// Softmax of materialised scores as separate PyTorch ops (scale, mask fill, softmax, each
// reading and writing the scores) against one fused scale-mask-softmax kernel.
constexpr double kUnfusedSoftmaxPasses = 3.0;
// A norm as the PyTorch ops of the usual RMSNorm module (cast to FP32, pow, mean, multiply
// by the reciprocal root, cast back, multiply by the weight): bytes per element moved in
// the forward, e + 4 + 4 + 4 + 4 + 4 + 4 + 4 + e + e + e = 28 + 4e, against a fused
// kernel's 2e; seven kernels against one.
constexpr double kUnfusedNormFp32Bytes = 28.0;
constexpr double kUnfusedNormKernels = 7.0;
constexpr double kFlashBackwardEfficiency = 0.8;

double ElementBytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

// The optimizer step's bytes per parameter. Megatron-Core's precision-aware optimizer runs
// Transformer Engine's FusedAdam, which writes the 16-bit parameter itself (no copy
// kernel): around it the unscale, the norm and the zeroing (16 bytes); in it the
// gradient read (4), the parameter written (2), both moments read and written, and the
// main weights read and written (their 16-bit remainder beside the parameter it reads:
// 2 + 2 + 2; whole FP32 ones: 8).
double OptimizerStepBytesPerParam(const TrainingSpec& training) {
  if (!training.PrecisionAwareOptimizer()) return kOptimizerBytesPerParam;
  const double main = PrecisionAwareMainWeightBytes(training) == 2.0 ? 6.0 : 8.0;
  return 16.0 + 4.0 + 2.0 + main + 4.0 * OptimizerMomentBytes(*training.optimizer_state_dtype);
}

// Precision of the attention core and of non-linear-layer GEMMs (FP8 only for linears).
Precision CorePrecision(Precision p) { return IsLowPrecisionGemm(p) ? Precision::kBf16 : p; }

struct Gemm {
  double m, n, k;
};

// A collective of `comm` seconds overlapped with `window` seconds of compute: the part
// that is not hidden, and the part that is (which slows the compute it overlaps).
double Exposed(double comm, double window) { return std::max(0.0, comm - window); }
double Hidden(double comm, double window) { return std::min(comm, window); }

// Bytes of a gradient element: fp32 main gradients except with fp16 (Megatron's default).
double GradBytes(Precision p) { return p == Precision::kFp16 ? 2.0 : 4.0; }

// ---- EstimateLayerTime's phases -----------------------------------------------------------

// A layer's dimensions on one rank.
struct LayerDims {
  double t, c, b, s, s_local, h, a, g, f, head_dim;
  double tokens;     ///< Rows of every linear layer on this rank.
  double e;          ///< Bytes of an activation element.
  double mask;       ///< 1 with dropout (1-byte masks), else 0.
  double sp;         ///< t with sequence parallelism, else 1.
  double fc1_width;  ///< FC1's output width (2f for SwiGLU's gate and value).
  /// QKV's output width on this rank (a*d + 2*g*d over t; MLA: the FLOP-equivalent width
  /// of its replicated down-projections and its TP-split up-projections, over K = h).
  double qkv_local;
  double attn_out;    ///< The output projection's input width a*d (MLA: a*v_head_dim).
  double kv_width;    ///< K plus V per token (a CP ring step moves them): 2*g*d.
  double core_width;  ///< Per token pair, FLOPs/2 of QK^T and PV: a*(d_qk + d_v).
  /// Keys a query attends to over s, the mean over queries and layers (AttendedKeyFraction:
  /// 1/2 causal, less with a sliding window), what a flash kernel computes.
  double key_fraction;
};

LayerDims DimsOf(const ModelSpec& model, const TrainingSpec& training,
                 const ParallelConfig& config) {
  LayerDims d;
  d.t = static_cast<double>(config.tp);
  d.c = static_cast<double>(config.cp);
  d.b = static_cast<double>(config.micro_batch_size);
  d.s = static_cast<double>(training.seq_length);
  d.s_local = d.s / d.c;
  d.h = static_cast<double>(model.hidden_size);
  d.a = static_cast<double>(model.num_attention_heads);
  d.g = static_cast<double>(QueryGroups(model));
  d.f = static_cast<double>(model.ffn_hidden_size);
  d.head_dim = static_cast<double>(HeadDim(model));
  d.key_fraction = AttendedKeyFraction(model, d.s);
  d.tokens = d.b * d.s_local;
  d.e = ElementBytes(training.precision);
  d.mask = training.dropout ? 1.0 : 0.0;
  d.sp = config.sequence_parallel ? d.t : 1.0;
  d.fc1_width = IsGated(model.activation) ? 2.0 * d.f : d.f;
  if (model.attention == AttentionType::kMla) {
    const double qk = static_cast<double>(model.qk_head_dim + model.qk_rope_head_dim);
    const double v = static_cast<double>(model.v_head_dim);
    const double q_rank = static_cast<double>(model.q_lora_rank);
    const double kv_rank = static_cast<double>(model.kv_lora_rank);
    const double down = model.q_lora_rank > 0
                            ? d.h * (q_rank + kv_rank + static_cast<double>(model.qk_rope_head_dim))
                            : d.h * (kv_rank + static_cast<double>(model.qk_rope_head_dim));
    const double up = (model.q_lora_rank > 0 ? q_rank * d.a * qk : d.h * d.a * qk) +
                      kv_rank * d.a * static_cast<double>(model.qk_head_dim + model.v_head_dim);
    d.qkv_local = (down + up / d.t) / d.h;
    d.attn_out = d.a * v;
    d.kv_width = d.a * (qk + v);
    d.core_width = d.a * (qk + v);
  } else {
    const double head = static_cast<double>(HeadDim(model));
    d.qkv_local = (d.a + 2.0 * d.g) * head / d.t;
    d.attn_out = d.a * head;
    d.kv_width = 2.0 * d.g * head;
    d.core_width = 2.0 * d.a * head;
  }
  return d;
}

// The four linear layers: QKV and FC1 are column-parallel, projection and FC2 row-parallel.
struct LinearTimes {
  Gemm qkv, proj, fc1, fc2;
  double qkv_fwd = 0, proj_fwd = 0, fc1_fwd = 0, fc2_fwd = 0;
  double dgrad_qkv = 0, dgrad_proj = 0, dgrad_fc1 = 0, dgrad_fc2 = 0;
  double wgrad_qkv = 0, wgrad_fc1 = 0, wgrad_rest = 0;  ///< rest: projection and FC2.
  double Forward() const { return qkv_fwd + proj_fwd + fc1_fwd + fc2_fwd; }
  double DataGradient() const { return dgrad_qkv + dgrad_fc1 + dgrad_proj + dgrad_fc2; }
};

LinearTimes LinearLayerTimes(const LayerDims& d, const DeviceProfile& device, Precision p) {
  LinearTimes l{.qkv = {d.tokens, d.qkv_local, d.h},
                .proj = {d.tokens, d.h, d.attn_out / d.t},
                .fc1 = {d.tokens, d.fc1_width / d.t, d.h},
                .fc2 = {d.tokens, d.h, d.f / d.t}};
  // An expert layer without shared experts has no dense MLP (f = 0): no GEMM.
  const auto run = [&](double m, double n, double k) {
    return m > 0 && n > 0 && k > 0 ? GemmSeconds(device, m, n, k, 1, p) : 0.0;
  };
  const auto fwd = [&](const Gemm& g) { return run(g.m, g.n, g.k); };
  // Backward: data gradient [m x n] x [n x k], weight gradient [k x m] x [m x n].
  const auto dgrad = [&](const Gemm& g) { return run(g.m, g.k, g.n); };
  const auto wgrad = [&](const Gemm& g) { return run(g.k, g.n, g.m); };
  l.qkv_fwd = fwd(l.qkv);
  l.proj_fwd = fwd(l.proj);
  l.fc1_fwd = fwd(l.fc1);
  l.fc2_fwd = fwd(l.fc2);
  l.dgrad_qkv = dgrad(l.qkv);
  l.dgrad_fc1 = dgrad(l.fc1);
  l.dgrad_proj = dgrad(l.proj);
  l.dgrad_fc2 = dgrad(l.fc2);
  l.wgrad_qkv = wgrad(l.qkv);
  l.wgrad_fc1 = wgrad(l.fc1);
  l.wgrad_rest = wgrad(l.proj) + wgrad(l.fc2);
  return l;
}

// Bytes of a pass that are not a GEMM, forward and backward.
struct PassBytes {
  double forward = 0, backward = 0;
};

// FP8 (Transformer Engine): casts of the linear inputs (read 16-bit, write 1 byte) in
// the forward; in the backward the output gradients are cast and transposed (write two
// FP8 copies) and the saved FP8 inputs transposed for the weight gradient.
PassBytes Fp8CastBytesOf(std::initializer_list<Gemm> gemms, double e, Precision precision,
                         const DeviceProfile& device) {
  PassBytes out;
  if (IsLowPrecisionGemm(precision) && device.peak_fp8_tflops > 0) {
    for (const Gemm& gm : gemms) {
      out.forward += (e + 1.0) * gm.m * gm.k;
      out.backward += (e + 2.0) * gm.m * gm.n + 2.0 * gm.m * gm.k;
    }
  }
  return out;
}

PassBytes Fp8CastBytes(const LayerDims& d, const LinearTimes& l, const TrainingSpec& training,
                       const DeviceProfile& device) {
  return Fp8CastBytesOf({l.qkv, l.proj, l.fc1, l.fc2}, d.e, training.precision, device);
}

// Seconds of a pass, forward and backward.
struct PassSeconds {
  double forward = 0, backward = 0;
};

// Attention core, per rank: a/t heads, s_local queries against s keys.
PassSeconds AttentionCoreTimes(const LayerDims& d, const TrainingSpec& training,
                               const DeviceProfile& device) {
  const Precision core_precision = CorePrecision(training.precision);
  const double launch = device.kernel_launch_s;
  const double heads = d.a / d.t;
  PassSeconds out;
  const AttentionKernel kernel = training.AttentionKernelOf();
  if (IsFlash(kernel)) {
    // Flash kernels skip the masked blocks: the causal half, and outside a sliding window.
    const double flops = 2.0 * d.b * d.s_local * d.s * d.core_width / d.t * d.key_fraction;
    const double relative = kernel == AttentionKernel::kFlash1   ? kFlash1Relative
                            : kernel == AttentionKernel::kFlash3 ? kFlash3Relative
                            : kernel == AttentionKernel::kCudnn && device.HopperOrLater()
                                ? kCudnnRelative
                                : 1.0;
    const double rate =
        device.PeakFlops(core_precision) * device.attention_efficiency * relative;
    out.forward = flops / rate + launch;
    out.backward = kFlashBackwardRatio * flops / (kFlashBackwardEfficiency * rate) + launch;
    return out;
  }
  const double batch = d.b * heads;
  const double scores = batch * d.s_local * d.s;
  const double s_local = d.s_local, s = d.s, head_dim = d.head_dim;
  out.forward = GemmSeconds(device, s_local, s, head_dim, batch, core_precision) +
                GemmSeconds(device, s_local, head_dim, s, batch, core_precision);
  out.backward = GemmSeconds(device, s_local, head_dim, s, batch, core_precision) +  // dQ
                 GemmSeconds(device, s, head_dim, s_local, batch, core_precision) +  // dK
                 GemmSeconds(device, s_local, s, head_dim, batch, core_precision) +  // dP
                 GemmSeconds(device, s, head_dim, s_local, batch, core_precision);   // dV
  // Fused scale-mask-softmax (read + write the scores), dropout (read, write output and
  // the 1-byte mask); the backward reads the saved tensors and the incoming gradient.
  const double passes = kernel == AttentionKernel::kUnfused ? kUnfusedSoftmaxPasses : 1.0;
  const double softmax_bytes =
      passes * 2.0 * d.e * scores + d.mask * (2.0 * d.e + 1.0) * scores;
  out.forward += StreamSeconds(device, softmax_bytes) + (passes + d.mask) * launch;
  out.backward +=
      StreamSeconds(device, 1.5 * softmax_bytes + d.e * scores) + (passes + d.mask) * launch;
  return out;
}

// Memory-bound kernels outside the core: two norms (read + write), two fused
// bias-dropout-residual adds (read two, write one, mask), the activation function, RoPE;
// with the FP8 casts.
PassSeconds ElementwiseTimes(const LayerDims& d, const ModelSpec& model, bool fused_norm,
                             const PassBytes& fp8, const DeviceProfile& device) {
  const double launch = device.kernel_launch_s;
  const double x_sp = d.tokens * d.h / d.sp;
  // Bytes per element and kernels of one norm.
  const double norm_bytes = fused_norm ? 2.0 * d.e : kUnfusedNormFp32Bytes + 4.0 * d.e;
  const double norm_kernels = fused_norm ? 1.0 : kUnfusedNormKernels;
  double elementwise = 2.0 * (norm_bytes * x_sp) + 2.0 * ((3.0 * d.e + d.mask) * x_sp) +
                       d.e * d.tokens * d.fc1_width / d.t + d.e * d.tokens * d.f / d.t;
  double kernels = 4.0 + 2.0 * norm_kernels;
  if (model.position_embedding == PositionEmbedding::kRope) {
    elementwise += 2.0 * d.e * d.tokens * (d.attn_out + d.kv_width / 2.0) / d.t;
    kernels += 1;
  }
  PassSeconds out;
  out.forward = StreamSeconds(device, elementwise + fp8.forward) + kernels * launch;
  // Backward kernels read the saved input and the incoming gradient and write a gradient:
  // norms and activation functions move 3 tensors against the forward's 2, the fused
  // dropout-add backward 2-3 against 4: about 1.5x the forward traffic.
  out.backward = StreamSeconds(device, 1.5 * elementwise + fp8.backward) + 2 * kernels * launch;
  return out;
}

// Tensor-parallel communication of [s, b, h] activations, with what the GEMMs hide of it
// (which slows them by the device's overlap slowdown).
void AddTensorParallelComm(const LayerDims& d, const LinearTimes& l, const ModelSpec& model,
                           const TrainingSpec& training, const ParallelConfig& config,
                           const DeviceProfile& device, int64_t gpus_per_node, LayerTime& out) {
  if (config.tp <= 1) return;
  const double slowdown = device.comm_overlap_slowdown;
  const Link link = RingLink(device, config.tp, 1, gpus_per_node);
  const double bytes = d.tokens * d.h * d.e;
  if (!config.sequence_parallel) {
    const double ar = AllReduceSeconds(bytes, config.tp, link);
    out.forward_tp_comm = 2.0 * ar;  // After the projection and after FC2.
    // Input-gradient all-reduce of QKV and FC1, overlapped with their weight gradient.
    out.backward_tp_comm = Exposed(ar, l.wgrad_qkv) + Exposed(ar, l.wgrad_fc1);
    out.backward_compute += slowdown * (Hidden(ar, l.wgrad_qkv) + Hidden(ar, l.wgrad_fc1));
    return;
  }
  const double ag = AllGatherSeconds(bytes, config.tp, link);
  const double rs = ReduceScatterSeconds(bytes, config.tp, link);
  if (config.tp_comm_overlap) {
    // Transformer Engine userbuffers: each all-gather / reduce-scatter is split into
    // t chunks pipelined with the GEMM that consumes / produces it.
    out.forward_tp_comm = Exposed(ag, l.qkv_fwd) + Exposed(rs, l.proj_fwd) +
                          Exposed(ag, l.fc1_fwd) + Exposed(rs, l.fc2_fwd);
    out.forward_compute += slowdown * (Hidden(ag, l.qkv_fwd) + Hidden(rs, l.proj_fwd) +
                                       Hidden(ag, l.fc1_fwd) + Hidden(rs, l.fc2_fwd));
    out.backward_tp_comm = Exposed(ag, l.dgrad_proj) + Exposed(ag, l.dgrad_fc2);
    out.backward_compute += slowdown * (Hidden(ag, l.dgrad_proj) + Hidden(ag, l.dgrad_fc2));
  } else {
    // Forward: all-gather before QKV and FC1, reduce-scatter after projection and FC2.
    out.forward_tp_comm = 2.0 * (ag + rs);
    // Backward: all-gather of the output gradient before the row-parallel layers.
    out.backward_tp_comm = 2.0 * ag;
  }
  // For the column-parallel layers the input is gathered again during the data-gradient
  // GEMM and the input gradient reduce-scattered during the weight-gradient GEMM.
  out.backward_tp_comm += Exposed(ag, l.dgrad_qkv) + Exposed(ag, l.dgrad_fc1) +
                          Exposed(rs, l.wgrad_qkv) + Exposed(rs, l.wgrad_fc1);
  out.backward_compute += slowdown * (Hidden(ag, l.dgrad_qkv) + Hidden(ag, l.dgrad_fc1) +
                                      Hidden(rs, l.wgrad_qkv) + Hidden(rs, l.wgrad_fc1));
  // The two norms' weights (and LayerNorm's biases) are replicated over TP: their
  // gradients are all-reduced once per step.
  const double norm_params = (model.normalization == Normalization::kLayerNorm ? 4.0 : 2.0) * d.h;
  out.grad_sync_tp_comm =
      AllReduceSeconds(norm_params * GradBytes(training.precision), config.tp, link);
}

// Context parallelism: ring exchange of K and V blocks (c - 1 steps), hidden behind the
// attention of the block already held; the backward also returns dK and dV.
void AddContextParallelComm(const LayerDims& d, const PassSeconds& core,
                            const ParallelConfig& config, const DeviceProfile& device,
                            int64_t gpus_per_node, LayerTime& out) {
  if (config.cp <= 1) return;
  const double slowdown = device.comm_overlap_slowdown;
  const Link link = GroupLink(device, config.cp, config.tp, gpus_per_node);
  const double kv_bytes = d.tokens * d.kv_width / d.t * d.e;
  const double steps = d.c - 1.0;
  const double fwd = steps * SendRecvSeconds(kv_bytes, link);
  out.forward_cp_comm = Exposed(fwd, core.forward * steps / d.c);
  out.backward_cp_comm = Exposed(2.0 * fwd, core.backward * steps / d.c);
  out.forward_compute += slowdown * Hidden(fwd, core.forward * steps / d.c);
  out.backward_compute += slowdown * Hidden(2.0 * fwd, core.backward * steps / d.c);
}

// ---- Expert layers (mixture of experts) ------------------------------------------------------

// The routed experts of one expert layer on the busiest rank, one micro-batch: grouped
// GEMMs, router, permutation, dispatch and combine, with the ETP collectives.
struct ExpertPhases {
  double forward = 0, backward = 0;            ///< Compute.
  double activation_forward = 0;               ///< The activation function, forward.
  double forward_comm = 0, backward_comm = 0;  ///< Dispatch/combine and ETP, exposed.
};

ExpertPhases ExpertLayerPhases(const JobSpec& spec, const ParallelConfig& c,
                               const DeviceProfile& device) {
  const ModelSpec& m = spec.model;
  const Precision p = spec.training.precision;
  const double e = ElementBytes(p);
  const double launch = device.kernel_launch_s;
  const double sp = c.sequence_parallel ? static_cast<double>(c.tp) : 1.0;
  // Tokens entering the layer on this rank (sequence-parallel: split over tp).
  const double tokens = static_cast<double>(c.micro_batch_size) *
                        static_cast<double>(spec.training.seq_length) /
                        (static_cast<double>(c.cp) * sp);
  const double k = static_cast<double>(m.moe_router_topk);
  const double h = static_cast<double>(m.hidden_size);
  const double f = static_cast<double>(m.moe_ffn_hidden_size);
  const double fc1_width = IsGated(m.activation) ? 2.0 * f : f;
  const double ep = static_cast<double>(c.ep), etp = static_cast<double>(c.etp);
  const double experts = static_cast<double>(m.num_experts);
  const double load = ExpertLoadFactor(spec, c);
  // Rows of the grouped GEMMs on the busiest rank: its share of the top-k copies, gathered
  // over ETP; per local expert (fewer as EP grows, so the GEMMs get less efficient).
  const double rows = tokens * k * etp * load;
  const double local_experts = experts / ep;
  const double per_expert = rows / local_experts;
  const auto grouped = [&](double mm, double n, double kk) {
    return GemmSeconds(device, mm, n, kk, local_experts, p);
  };
  ExpertPhases out;
  // FC1 [per_expert x h] x [h x fc1_width/etp] and FC2 [per_expert x f/etp] x [f/etp x h].
  out.forward = grouped(per_expert, fc1_width / etp, h) + grouped(per_expert, h, f / etp);
  out.backward = grouped(per_expert, h, fc1_width / etp) + grouped(per_expert, f / etp, h) +
                 grouped(h, fc1_width / etp, per_expert) + grouped(f / etp, h, per_expert);
  // Low-precision GEMMs: the grouped GEMMs' inputs are cast as a dense layer's are (the
  // FC1 input rows, the activation output; in the backward the output gradients and the
  // transposes of the saved inputs).
  const ExpertCasts casts = ExpertCastBytes(spec, c, device);
  out.forward += StreamSeconds(device, casts.forward);
  out.backward += StreamSeconds(device, casts.backward);
  // The activation function (read fc1_width, write f per row), 1.5x in the backward.
  const double act_bytes = e * rows * (fc1_width + f) / etp;
  out.activation_forward = StreamSeconds(device, act_bytes) + launch;
  out.forward += out.activation_forward;
  out.backward += StreamSeconds(device, 1.5 * act_bytes) + 2 * launch;
  // Router: the [tokens x h] x [h x E] GEMM, softmax/sigmoid and top-k over FP32 scores
  // (memory-bound: write and read the logits and probabilities).
  out.forward += GemmSeconds(device, tokens, experts, h, 1, CorePrecision(p)) +
                 StreamSeconds(device, 16.0 * tokens * experts) + 3 * launch;
  out.backward += 2.0 * GemmSeconds(device, tokens, experts, h, 1, CorePrecision(p)) +
                  StreamSeconds(device, 16.0 * tokens * experts) + 3 * launch;
  // Permute before the dispatch and unpermute (weighted by the probabilities) after the
  // combine: read and write top-k x tokens rows of h each; fused into the flex dispatcher.
  const double permute_bytes = 2.0 * e * tokens * k * h * load;
  if (c.moe_token_dispatcher != MoeTokenDispatcher::kFlex) {
    out.forward += 2.0 * StreamSeconds(device, permute_bytes) + 2 * launch;
    out.backward += 2.0 * StreamSeconds(device, permute_bytes) + 2 * launch;
  }

  const int64_t domain = spec.cluster.NvlinkDomain();
  const DispatchBytes bytes = ExpertDispatchBytes(spec, c);
  double dispatch = 0, combine = 0;
  switch (c.moe_token_dispatcher) {
    case MoeTokenDispatcher::kAllToAll:
    case MoeTokenDispatcher::kFlex:
      dispatch = combine =
          AllToAllSeconds(bytes.total, c.ep, c.etp, device, domain, bytes.nic_scale);
      break;
    case MoeTokenDispatcher::kAllGather: {
      // Every rank gathers all tokens of the EP x ETP group and selects its experts' rows;
      // the combine reduce-scatters the outputs.
      const double gathered = e * tokens * h * ep * etp;
      const Link link = RingLink(device, c.ep * c.etp, 1, domain);
      dispatch = AllGatherSeconds(gathered, c.ep * c.etp, link);
      combine = ReduceScatterSeconds(gathered, c.ep * c.etp, link);
      break;
    }
  }
  // ETP: the dispatched rows are gathered over the ETP group before the experts and the
  // partial outputs reduce-scattered after (the all-gather dispatcher already gathers).
  double etp_comm = 0;
  if (c.etp > 1 && c.moe_token_dispatcher != MoeTokenDispatcher::kAllGather) {
    const Link link = RingLink(device, c.etp, 1, domain);
    etp_comm = AllGatherSeconds(e * rows * h, c.etp, link) +
               ReduceScatterSeconds(e * rows * h, c.etp, link);
  }
  out.forward_comm = dispatch + combine + etp_comm;
  // Backward: the combine's gradient is dispatched and the dispatch's gradient combined.
  // No dispatcher hides it in training: DeepEP's zero-SM hook overlap belongs to its
  // low-latency kernels for inference decoding, while training runs its normal kernels
  // (deepseek-ai/DeepEP README); Megatron's 1F1B A2A overlap is not modelled.
  out.backward_comm = out.forward_comm;
  return out;
}

}  // namespace

ExpertCasts ExpertCastBytes(const JobSpec& spec, const ParallelConfig& c,
                            const DeviceProfile& device) {
  const ModelSpec& m = spec.model;
  if (!IsMoe(m) || !IsLowPrecisionGemm(spec.training.precision) || device.peak_fp8_tflops <= 0) {
    return {};
  }
  const double sp = c.sequence_parallel ? static_cast<double>(c.tp) : 1.0;
  const double tokens = static_cast<double>(c.micro_batch_size) *
                        static_cast<double>(spec.training.seq_length) /
                        (static_cast<double>(c.cp) * sp);
  const double rows = tokens * static_cast<double>(m.moe_router_topk) *
                      static_cast<double>(c.etp) * ExpertLoadFactor(spec, c);
  const double h = static_cast<double>(m.hidden_size);
  const double f = static_cast<double>(m.moe_ffn_hidden_size);
  const double etp = static_cast<double>(c.etp);
  const double fc1_width = IsGated(m.activation) ? 2.0 * f : f;
  const PassBytes b =
      Fp8CastBytesOf({Gemm{rows, fc1_width / etp, h}, Gemm{rows, h, f / etp}},
                     ElementBytes(spec.training.precision), spec.training.precision, device);
  return {b.forward, b.backward};
}

double DomainsPerToken(double k, int64_t domains, int64_t groups, int64_t chosen) {
  const double n = static_cast<double>(domains);
  const double uniform = n * (1.0 - std::pow(1.0 - 1.0 / n, k));
  if (groups <= 1 || chosen <= 0 || chosen >= groups) return uniform;
  if (groups % domains == 0) {
    // Each domain holds groups/N whole groups; it is left out when none of them is among
    // the chosen (hypergeometric).
    const int64_t per = groups / domains;
    double none = 1.0;
    for (int64_t i = 0; i < chosen; ++i) {
      none *= std::max<double>(0.0, static_cast<double>(groups - per - i)) /
              static_cast<double>(groups - i);
    }
    return std::min(uniform, n * (1.0 - none));
  }
  if (domains % groups == 0) {
    // Each group spans N/groups domains: the k experts fall in chosen*N/groups of them.
    const double reachable = static_cast<double>(chosen * (domains / groups));
    return reachable * (1.0 - std::pow(1.0 - 1.0 / reachable, k));
  }
  return uniform;
}

DomainReach ExpertDomainReach(const JobSpec& spec, const ParallelConfig& c) {
  const ModelSpec& m = spec.model;
  DomainReach out;
  out.ranks_per_domain = RanksPerNvlinkDomain(c.ep, c.etp, spec.cluster.NvlinkDomain());
  out.domains = c.ep / std::max<int64_t>(out.ranks_per_domain, 1);
  out.per_token = DomainsPerToken(static_cast<double>(m.moe_router_topk), out.domains,
                                  m.moe_router_num_groups, m.moe_router_group_topk);
  return out;
}

DispatchBytes ExpertDispatchBytes(const JobSpec& spec, const ParallelConfig& c) {
  DispatchBytes out;
  const ModelSpec& m = spec.model;
  if (!IsMoe(m)) return out;
  const double sp = c.sequence_parallel ? static_cast<double>(c.tp) : 1.0;
  const double tokens = static_cast<double>(c.micro_batch_size) *
                        static_cast<double>(spec.training.seq_length) /
                        (static_cast<double>(c.cp) * sp);
  const double k = static_cast<double>(m.moe_router_topk);
  out.total = ElementBytes(spec.training.precision) * tokens * k *
              static_cast<double>(m.hidden_size) * ExpertLoadFactor(spec, c);
  const DomainReach reach = ExpertDomainReach(spec, c);
  if (c.moe_token_dispatcher == MoeTokenDispatcher::kAllGather || c.ep <= 1) {
    out.nic_scale = 1.0;
  } else if (c.moe_token_dispatcher == MoeTokenDispatcher::kFlex) {
    // DeepEP/HybridEP send a token once to each remote NVLink domain holding one of its
    // experts and forward it inside the domain: of the k copies bound for the other N - 1
    // domains (k(N - 1)/N on average), D(N - 1)/N cross the NIC, D the domains a token's
    // experts fall in (DomainsPerToken: group-limited routing confines them).
    if (reach.domains > 1) out.nic_scale = std::min(1.0, reach.per_token / k);
  }
  const double local = static_cast<double>(reach.ranks_per_domain);
  const double ep = static_cast<double>(c.ep);
  if (c.moe_token_dispatcher != MoeTokenDispatcher::kAllGather) {
    out.over_nic = out.total * (ep - local) / ep * out.nic_scale;
    out.over_nvlink = out.total * (local - 1.0) / ep;
  }
  return out;
}

namespace {

// ---- EstimateIteration's phases -----------------------------------------------------------

// Fraction of stage r's layers that are recomputed (full recompute of some layers).
double RecomputeFraction(const ParallelConfig& config, const ModelSpec& model, int64_t r) {
  if (config.recompute != Recompute::kFull || config.recompute_num_layers == 0) return 1.0;
  return std::min(
      1.0, static_cast<double>(config.recompute_num_layers) /
               static_cast<double>(std::max<int64_t>(1, DecoderLayersOnStage(model, config, r))));
}

// The pipeline's per-chunk forward and backward times, with the edges and the
// point-to-point transfers.
struct Pipeline {
  PipelineInput input;
  double p2p = 0;          ///< One activation (or gradient) transfer between stages.
  bool async_p2p = false;  ///< Transfers posted asynchronously (interleaved, overlapped).
  /// Per stage, one micro-batch's sharded data-parallel collectives (all chunks) that the
  /// chunk times include: exposed all-gathers and reduce-scatters, and the slowdown.
  std::vector<double> sharded_dp;
  /// Expert layers per stage (ExpertLayersPerStage; zeros for a dense model), counted once
  /// for the schedule, the critical stage and the breakdown.
  std::vector<int64_t> expert_layers_per_stage;
  /// Per stage, one micro-batch's gradient accumulation outside the GEMMs (all chunks),
  /// which the chunks' backward times include.
  std::vector<double> grad_accumulation;
};

Pipeline BuildPipeline(const JobSpec& spec, const ParallelConfig& config,
                       const DeviceProfile& device, const LayerTime& layer, const EdgeTime& edge,
                       const LayerTime* expert) {
  const ModelSpec& model = spec.model;
  const TrainingSpec& training = spec.training;
  const int64_t p = config.pp, v = config.vp;
  Pipeline out;
  PipelineInput& pipe = out.input;
  pipe.stages = p;
  pipe.chunks = v;
  pipe.micro_batches = NumMicroBatches(config, training);
  pipe.forward.resize(static_cast<size_t>(p * v));
  pipe.backward.resize(static_cast<size_t>(p * v));
  const std::vector<int64_t> expert_chunks = ExpertLayersPerChunk(model, config);
  out.expert_layers_per_stage.assign(static_cast<size_t>(p), 0);
  for (int64_t k = 0; k < p * v; ++k) {
    out.expert_layers_per_stage[static_cast<size_t>(k / v)] +=
        expert_chunks[static_cast<size_t>(k)];
  }
  // Sharded data parallelism's per-micro-batch collectives (ZeRO-2's gradient
  // reduce-scatters; full sharding's parameter all-gathers too), overlapped layer by layer.
  const ShardedLayerComm sharded = ShardedLayerCommSeconds(
      config, LayerParams(model) / static_cast<double>(config.tp), ElementBytes(training.precision),
      training.GradientBytes(), device, spec.cluster.gpus_per_node);
  out.sharded_dp.assign(static_cast<size_t>(p), 0.0);
  out.grad_accumulation.assign(static_cast<size_t>(p), 0.0);
  const double accumulation_bytes =
      GradAccumulationBytesPerParam(training.framework, training.precision);
  for (int64_t r = 0; r < p; ++r) {
    // Every micro-batch's gradients of the stage's parameters are added into the
    // accumulated ones after its backward (a memory-bound pass, split over the chunks).
    out.grad_accumulation[static_cast<size_t>(r)] =
        accumulation_bytes > 0
            ? StreamSeconds(device, accumulation_bytes * StageParamsPerGpu(model, config, r))
            : 0.0;
    const double not_recomputed = 1.0 - RecomputeFraction(config, model, r);
    const double layer_backward = layer.Backward() - not_recomputed * layer.Recompute();
    const double expert_backward =
        expert != nullptr ? expert->Backward() - not_recomputed * expert->Recompute() : 0.0;
    for (int64_t j = 0; j < v; ++j) {
      const double experts =
          expert != nullptr ? static_cast<double>(expert_chunks[r * v + j]) : 0.0;
      const double dense = static_cast<double>(DecoderLayersInChunk(model, config, r, j)) - experts;
      const double layers = dense + experts;
      const double forward =
          dense * layer.Forward() + (experts > 0 ? experts * expert->Forward() : 0.0);
      const double backward = dense * layer_backward + experts * expert_backward;
      // The sharded collectives run beside each layer's compute (an expert layer's are
      // modelled as a dense layer's).
      const double per_layer = std::max(layers, 1.0);
      const double forward_dp =
          OverlappedLayerCommSeconds(layers, sharded.forward_gather, forward / per_layer,
                                     sharded.forward_gather, device.comm_overlap_slowdown);
      const double backward_dp = OverlappedLayerCommSeconds(
          layers, sharded.backward_gather + sharded.backward_reduce, backward / per_layer,
          sharded.backward_gather, device.comm_overlap_slowdown);
      pipe.forward[r * v + j] = forward + forward_dp;
      pipe.backward[r * v + j] =
          backward + backward_dp +
          out.grad_accumulation[static_cast<size_t>(r)] / static_cast<double>(v);
      out.sharded_dp[r] += forward_dp + backward_dp;
    }
  }
  pipe.forward[0] += edge.embedding_forward;
  pipe.backward[0] += edge.embedding_backward;
  // Each MTP module: one more layer, its 2h -> h projection (small, not timed) and its own
  // logits and loss, after the last layer.
  const double mtp = static_cast<double>(model.mtp_layers);
  const LayerTime& mtp_layer = expert != nullptr ? *expert : layer;
  pipe.forward[p * v - 1] +=
      edge.logits_forward + mtp * (mtp_layer.Forward() + edge.logits_forward);
  pipe.backward[p * v - 1] +=
      edge.logits_backward + mtp * (mtp_layer.Backward() + edge.logits_backward);
  const double tokens = static_cast<double>(config.micro_batch_size) *
                        static_cast<double>(training.seq_length) / static_cast<double>(config.cp);
  // Megatron sends 1/t of the activation per TP rank (scatter-gather optimisation, or SP);
  // DeepSpeed's PipelineEngine sends the stage output whole from every rank.
  const bool replicated = ProfileOf(training.framework).pipeline_sends_replicated_activation &&
                          !config.sequence_parallel;
  const double p2p_bytes = tokens * model.hidden_size * ElementBytes(training.precision) /
                           (replicated ? 1.0 : static_cast<double>(config.tp));
  const Link p2p_link =
      GroupLink(device, 2, config.tp * config.cp * config.dp, spec.cluster.gpus_per_node);
  out.p2p = p > 1 ? SendRecvSeconds(p2p_bytes, p2p_link) : 0.0;
  // 1F1B's sends and receives are blocking (batched isend/irecv, then wait): every chunk
  // that passes an activation or a gradient on is busy for the transfer. The interleaved
  // schedule with overlap_p2p_comm posts them asynchronously: they only delay the receiver.
  out.async_p2p = v > 1 && config.overlap_p2p_comm;
  for (int64_t r = 0; r < p && p > 1 && !out.async_p2p; ++r) {
    for (int64_t j = 0; j < v; ++j) {
      if (!(r == p - 1 && j == v - 1)) pipe.forward[r * v + j] += out.p2p;
      if (!(r == 0 && j == 0)) pipe.backward[r * v + j] += out.p2p;
    }
  }
  pipe.p2p_s = out.async_p2p ? out.p2p : 0.0;
  pipe.max_simulated_micro_batches = 4 * p;
  return out;
}

// When each stage finishes its last backward: simulated, or from the closed-form makespan.
absl::StatusOr<std::vector<double>> StageFinishTimes(const PipelineInput& pipe, PipelineMode mode) {
  const int64_t p = pipe.stages, v = pipe.chunks;
  std::vector<double> finish(static_cast<size_t>(p), 0.0);
  if (mode == PipelineMode::kSimulated) {
    absl::StatusOr<PipelineResult> sim = SimulatePipeline(pipe);
    if (!sim.ok()) return sim.status();
    return sim->stage_finish;
  }
  const double makespan = PipelineClosedForm(pipe);
  for (int64_t r = 0; r < p; ++r) {
    double per = 0;
    for (int64_t j = 0; j < v; ++j) per += pipe.forward[r * v + j] + pipe.backward[r * v + j];
    // Stage r finishes its last backward about r slots before stage 0.
    finish[r] = makespan - static_cast<double>(r) * (per / static_cast<double>(v) + pipe.p2p_s);
  }
  return finish;
}

// The stage that ends the iteration, and what it spent after its last backward.
struct CriticalStage {
  double end = 0;  ///< When its optimizer step ends (the iteration, before tied sync).
  int64_t stage = 0;
  double dp_exposed = 0;  ///< Data-parallel reduce (and gather) not hidden.
  double optimizer = 0;
  double tp_sync = 0;  ///< The SP-replicated norm gradients' TP all-reduce.
};

// Data-parallel gradient reduce over the DP x CP group (TP/CP innermost): all-reduce, or
// reduce-scatter plus parameter all-gather with the distributed optimizer (with HSDP, the
// reduce-scatter inside the shard group and an all-reduce of the shard across replicas).
// Buckets are reduced while the last micro-batch's backward runs; the last bucket is
// exposed. ZeRO-2 and full sharding reduce every micro-batch in the pipeline's backward
// (BuildPipeline): what remains is the last micro-batch's last bucket (ZeRO-2) or layer
// (full), and ZeRO-2's first all-gather bucket after the step; they always overlap.
// `window_used`: seconds of the stage's backward already taken by an earlier reduction of
// the same step (the dense gradients' before the routed experts'), which this one cannot
// hide behind; the seconds this one hides are added to it.
double ExposedDataParallelSeconds(const ParallelConfig& config, const DeviceProfile& device,
                                  const PipelineInput& pipe, int64_t r, double params,
                                  double layer_params, double e, double grad_bytes,
                                  int64_t gpus_per_node, const MeasuredTerms* measured,
                                  double* window_used) {
  const int64_t dp_group = config.dp * config.cp;
  if (dp_group <= 1 || params <= 0) return 0;
  const int64_t v = config.vp;
  const ShardedLinks links = ShardedDataParallelLinks(config, device, gpus_per_node);
  auto reduce = [&](double count) {
    if (measured != nullptr && measured->dp_reduce_seconds) {
      return measured->dp_reduce_seconds(count * grad_bytes);
    }
    if (!config.distributed_optimizer()) {
      return AllReduceSeconds(count * grad_bytes, dp_group, links.shard);
    }
    double seconds = ReduceScatterSeconds(count * grad_bytes, links.shard_ranks, links.shard);
    if (links.replica_ranks > 1) {
      seconds += AllReduceSeconds(count * grad_bytes / static_cast<double>(links.shard_ranks),
                                  links.replica_ranks, links.replica);
    }
    return seconds;
  };
  auto gather = [&](double count) {
    if (measured != nullptr && measured->dp_gather_seconds) {
      return measured->dp_gather_seconds(count * e);
    }
    return AllGatherSeconds(count * e, links.shard_ranks, links.shard);
  };
  const double bucket = std::min(params, kGradBucketParams);
  if (config.data_parallel_sharding == DataParallelSharding::kFull) {
    return reduce(std::min(params, layer_params));
  }
  // The sharded optimizer's parameter all-gather: behind the next forward but its first
  // bucket (--overlap-param-gather, which needs the gradient overlap), else all of it.
  const double param_gather = !config.distributed_optimizer() ? 0.0
                              : config.overlap_param_gather && config.overlap_grad_reduce
                                  ? gather(bucket)
                                  : gather(params);
  if (config.data_parallel_sharding == DataParallelSharding::kOptimizerGrads) {
    return reduce(bucket) + param_gather;
  }
  double window = 0;
  for (int64_t j = 0; j < v; ++j) window += pipe.backward[r * v + j];
  window = std::max(0.0, window - *window_used);
  const double total = reduce(params);
  if (!config.overlap_grad_reduce) return total + param_gather;
  const double last_bucket = reduce(bucket);
  const double hidden = Hidden(total - last_bucket, window);
  *window_used += hidden;
  double exposed = std::max(last_bucket, total - window) + device.comm_overlap_slowdown * hidden;
  return exposed + param_gather;
}

// Each stage's end: its last backward, its TP gradient sync, its exposed DP reduce and its
// optimizer step; the latest one is critical.
CriticalStage FindCriticalStage(const JobSpec& spec, const ParallelConfig& config,
                                const DeviceProfile& device, const LayerTime& layer,
                                const PipelineInput& pipe,
                                const std::vector<int64_t>& experts_per_stage,
                                const std::vector<double>& finish, const MeasuredTerms* measured) {
  const ModelSpec& model = spec.model;
  const int64_t p = config.pp;
  // The data-parallel reduction's dtype: the spec's grad_reduce_in_fp32, else the framework's
  // (Megatron: FP32 in BF16 runs).
  const double grad_bytes = spec.training.GradientBytes();
  // The distributed optimizer gathers the updated parameters in their own dtype: FP8 with
  // fp8_param_gather (the linear weights, nearly all of them), else 16-bit.
  const double e = spec.training.Fp8ParamGather() ? 1.0 : ElementBytes(spec.training.precision);
  CriticalStage out;
  for (int64_t r = 0; r < p; ++r) {
    const StageParams split =
        StageParamsSplit(model, config, r, experts_per_stage[static_cast<size_t>(r)]);
    const double params = split.dense;
    // The SP-replicated norm gradients, once per step; the last stage's final norm is one
    // more norm of the same shape (half a layer's two).
    const double sync =
        layer.grad_sync_tp_comm *
        (static_cast<double>(DecoderLayersOnStage(model, config, r)) + (r == p - 1 ? 0.5 : 0.0));
    double window_used = 0;
    double exposed = ExposedDataParallelSeconds(
        config, device, pipe, r, params, LayerParams(model) / static_cast<double>(config.tp), e,
        grad_bytes, spec.cluster.gpus_per_node, measured, &window_used);
    const double shards = static_cast<double>(config.ShardRanks());
    // Routed experts: reduced (and sharded) over the expert data-parallel group, after the
    // dense gradients and behind what remains of the same backward.
    const ParallelConfig expert_group = ExpertDataParallelGroup(config);
    const double expert_shards = static_cast<double>(expert_group.ShardRanks());
    if (split.expert > 0) {
      const double stage_experts =
          static_cast<double>(std::max<int64_t>(experts_per_stage[static_cast<size_t>(r)], 1));
      exposed += ExposedDataParallelSeconds(expert_group, device, pipe, r, split.expert,
                                            split.expert / stage_experts, e, grad_bytes,
                                            spec.cluster.gpus_per_node, measured, &window_used);
    }
    const double updated = params / shards + split.expert / expert_shards;
    double step = measured != nullptr && measured->optimizer_seconds_per_param > 0
                      ? measured->optimizer_seconds_per_param * updated
                      : StreamSeconds(device, OptimizerStepBytesPerParam(spec.training) * updated) +
                            20 * device.kernel_launch_s;
    if (config.offload != Offload::kNone) {
      // The host's Adam step replaces the GPU's; the updated 16-bit parameters go back
      // (under parameter offload they stay on the host, fetched layer by layer). The
      // gradient shards go down as their buckets are reduced, behind the stage's last
      // backward but the last bucket (under parameter offload: layer by layer, above).
      step = HostAdamSeconds(updated, device);
      if (config.offload == Offload::kOptimizer) {
        double window = 0;
        for (int64_t j = 0; j < config.vp; ++j) window += pipe.backward[r * config.vp + j];
        const double down = HostTransferSeconds(updated * grad_bytes, device);
        const double last_bucket =
            HostTransferSeconds(std::min(updated, kGradBucketParams) * grad_bytes, device);
        step += std::max(last_bucket, down - window) + HostTransferSeconds(updated * e, device);
      }
    }
    const double end = finish[r] + sync + exposed + step;
    if (end > out.end) out = {end, r, exposed, step, sync};
  }
  return out;
}

// Tied embeddings split over the first and last stage: their gradients are all-reduced
// between the two before the optimizer step.
double TiedEmbeddingSyncSeconds(const JobSpec& spec, const ParallelConfig& config,
                                const DeviceProfile& device) {
  const ModelSpec& model = spec.model;
  const int64_t p = config.pp;
  if (!model.tie_embeddings || p <= 1) return 0;
  const double bytes = static_cast<double>(PaddedVocab(model, config.tp)) * model.hidden_size /
                       static_cast<double>(config.tp) * GradBytes(spec.training.precision);
  return AllReduceSeconds(bytes, 2,
                          GroupLink(device, 2, (p - 1) * config.tp * config.cp * config.dp,
                                    spec.cluster.gpus_per_node));
}

// The iteration split by cause, per micro-batch on the critical stage times the
// micro-batches, plus its once-per-step parts; the rest is pipeline transfer and bubble.
TimeBreakdown SplitByCause(const JobSpec& spec, const ParallelConfig& config,
                           const LayerTime& layer, const LayerTime* expert, const EdgeTime& edge,
                           const Pipeline& pipeline, const CriticalStage& critical,
                           double embedding_sync, double iteration) {
  const int64_t p = config.pp, v = config.vp;
  const double mb = static_cast<double>(pipeline.input.micro_batches);
  const double p2p = pipeline.p2p;
  const bool last = critical.stage == p - 1;
  const double mtp = last ? static_cast<double>(spec.model.mtp_layers) : 0.0;
  const double experts =
      expert != nullptr
          ? static_cast<double>(
                pipeline.expert_layers_per_stage[static_cast<size_t>(critical.stage)]) +
                mtp
          : 0.0;
  const double layers =
      static_cast<double>(DecoderLayersOnStage(spec.model, config, critical.stage)) + mtp - experts;
  const double recompute_fraction = RecomputeFraction(config, spec.model, critical.stage);
  const auto sum = [&](auto term) {
    return layers * term(layer) + (experts > 0 ? experts * term(*expert) : 0.0);
  };
  double compute = sum([&](const LayerTime& t) {
    return t.forward_compute + t.backward_compute + recompute_fraction * t.recompute;
  });
  const double tp = sum([&](const LayerTime& t) {
    return t.forward_tp_comm + t.backward_tp_comm + recompute_fraction * t.recompute_tp_comm;
  });
  const double cp = sum([](const LayerTime& t) { return t.forward_cp_comm + t.backward_cp_comm; });
  const double ep = sum([&](const LayerTime& t) {
    return t.forward_ep_comm + t.backward_ep_comm + recompute_fraction * t.recompute_ep_comm;
  });
  const double offload =
      sum([](const LayerTime& t) { return t.forward_offload + t.backward_offload; });
  compute += pipeline.grad_accumulation[static_cast<size_t>(critical.stage)];
  if (critical.stage == 0) compute += edge.embedding_forward + edge.embedding_backward;
  if (last) compute += (1.0 + mtp) * (edge.logits_forward + edge.logits_backward);
  TimeBreakdown out;
  out.compute = mb * compute;
  out.tp_comm = mb * tp + critical.tp_sync;
  out.cp_comm = mb * cp;
  out.ep_comm = mb * ep;
  out.offload = mb * offload;
  out.dp_comm = critical.dp_exposed + embedding_sync +
                mb * pipeline.sharded_dp[static_cast<size_t>(critical.stage)];
  out.optimizer = critical.optimizer;
  const double pipeline_rest =
      std::max(0.0, iteration - out.compute - out.tp_comm - out.cp_comm - out.ep_comm -
                        out.offload - out.dp_comm - out.optimizer);
  const double sends =
      2.0 * static_cast<double>(v) - ((critical.stage == 0 || critical.stage == p - 1) ? 1.0 : 0.0);
  out.pp_p2p = std::min(
      pipeline_rest, p > 1 ? (pipeline.async_p2p ? 2.0 * (p - 1) * p2p : mb * sends * p2p) : 0.0);
  out.pp_bubble = pipeline_rest - out.pp_p2p;
  return out;
}

// Why the expert-parallel group does or does not leave the NVLink domain, and what its
// dispatch costs.
std::string ExpertPlacementNote(const JobSpec& spec, const ParallelConfig& c,
                                const TimeBreakdown& time, double iteration) {
  const int64_t domain = spec.cluster.NvlinkDomain();
  const int64_t span = c.ep * c.etp;
  const double share = 100.0 * time.ep_comm / iteration;
  if (span <= domain) {
    return absl::StrFormat(
        "EP %d x ETP %d stays inside one NVLink domain of %d GPUs: dispatch and combine run "
        "over NVLink (%.0f%% of the iteration exposed)",
        c.ep, c.etp, domain, share);
  }
  const int64_t inside = std::max<int64_t>(1, domain / c.etp);
  // The flex dispatcher sends a token once per domain it reaches.
  std::string reach;
  if (c.moe_token_dispatcher == MoeTokenDispatcher::kFlex) {
    const ModelSpec& m = spec.model;
    const DomainReach r = ExpertDomainReach(spec, c);
    reach = absl::StrFormat("; each token reaches %.1f of the %d domains", r.per_token, r.domains);
    if (m.moe_router_num_groups > 0) {
      absl::StrAppend(&reach, absl::StrFormat(", routed inside %d of %d expert groups",
                                              m.moe_router_group_topk, m.moe_router_num_groups));
    }
  }
  return absl::StrFormat(
      "EP %d x ETP %d spans %d NVLink domains of %d GPUs: dispatch and combine cross the NIC "
      "(%s dispatcher, %.0f%% of the iteration exposed%s); it holds %d experts per GPU where "
      "an EP inside the domain (at most %d) would hold %d",
      c.ep, c.etp, (span + domain - 1) / domain, domain, ToString(c.moe_token_dispatcher), share,
      reach, spec.model.num_experts / c.ep, inside,
      spec.model.num_experts / std::max<int64_t>(1, std::min(inside, c.ep)));
}

// What limits the layout, in words: a large bubble, exposed TP communication or gradient
// sync.
std::vector<std::string> LimitNotes(const TimeBreakdown& time, double iteration, int64_t m,
                                    int64_t p, int64_t v) {
  std::vector<std::string> notes;
  auto share = [&](double x) { return 100.0 * x / iteration; };
  if (time.pp_bubble > 0.1 * iteration) {
    notes.push_back(
        absl::StrFormat("pipeline bubble is %.0f%% of the iteration (m = %d, p = %d, v = %d)",
                        share(time.pp_bubble), m, p, v));
  }
  if (time.tp_comm > 0.1 * iteration) {
    notes.push_back(absl::StrFormat("exposed TP communication is %.0f%% of the iteration",
                                    share(time.tp_comm)));
  }
  if (time.dp_comm > 0.05 * iteration) {
    notes.push_back(
        absl::StrFormat("exposed gradient sync is %.0f%% of the iteration", share(time.dp_comm)));
  }
  return notes;
}

// Activation offload of `bytes` per layer and micro-batch: copied to the host on a copy
// stream while the layer's forward runs and back while the backward of the layer after it
// runs (prefetched); what the compute does not cover is exposed.
void SetActivationOffload(double bytes, const DeviceProfile& device, LayerTime& out) {
  const double transfer = HostTransferSeconds(bytes, device);
  out.forward_offload = std::max(0.0, transfer - out.forward_compute);
  out.backward_offload = std::max(0.0, transfer - out.backward_compute);
}

}  // namespace

LayerTime EstimateLayerTime(const ModelSpec& model, const TrainingSpec& training,
                            const ParallelConfig& config, const DeviceProfile& device,
                            int64_t gpus_per_node) {
  const LayerDims d = DimsOf(model, training, config);
  const LinearTimes linear = LinearLayerTimes(d, device, training.precision);
  const PassBytes fp8 = Fp8CastBytes(d, linear, training, device);
  const PassSeconds core = AttentionCoreTimes(d, training, device);
  const PassSeconds elementwise = ElementwiseTimes(d, model, training.fused_norm, fp8, device);

  LayerTime out;
  out.attention_forward = core.forward;
  out.forward_compute = linear.Forward() + core.forward + elementwise.forward;
  out.backward_compute = linear.DataGradient() + linear.wgrad_qkv + linear.wgrad_fc1 +
                         linear.wgrad_rest + core.backward + elementwise.backward;
  AddTensorParallelComm(d, linear, model, training, config, device, gpus_per_node, out);
  AddContextParallelComm(d, core, config, device, gpus_per_node, out);
  switch (config.recompute) {
    case Recompute::kFull:
      out.recompute = out.forward_compute + out.forward_cp_comm;
      out.recompute_tp_comm = out.forward_tp_comm;
      break;
    case Recompute::kSelective: {
      const SelectiveModules rerun = SelectiveModules::Of(training);
      if (rerun.core_attn) out.recompute += core.forward;
      if (rerun.layernorm) {
        // Both norms again: read the layer's (or the attention block's) output, write x.
        out.recompute += StreamSeconds(device, 4.0 * d.e * d.tokens * d.h / d.sp) +
                         2 * device.kernel_launch_s;
      }
      if (rerun.mlp && d.f > 0) {
        // FC1, the activation function and FC2 again, with the MLP's share of the forward's
        // tensor-parallel collectives (one of the two).
        out.recompute += linear.fc1_fwd + linear.fc2_fwd +
                         StreamSeconds(device, d.e * d.tokens * (d.fc1_width + d.f) / d.t) +
                         device.kernel_launch_s;
        out.recompute_tp_comm += 0.5 * out.forward_tp_comm;
      }
      if (rerun.mla_up_proj && model.attention == AttentionType::kMla) {
        // The query and key/value up-projections; counted as the whole QKV GEMM time (its
        // down-projections are small beside them).
        out.recompute += linear.qkv_fwd;
      }
      break;
    }
    case Recompute::kNone:
      break;
  }
  if (config.activation_offload) {
    SetActivationOffload(DenseLayerOffloadedBytes(model, training, config), device, out);
  }
  return out;
}

LayerTime EstimateExpertLayerTime(const JobSpec& spec, const ParallelConfig& config,
                                  const DeviceProfile& device) {
  // Attention, norms and the shared experts (a tensor-parallel MLP of their total width).
  ModelSpec shared = spec.model;
  shared.ffn_hidden_size = spec.model.num_shared_experts * SharedExpertFfn(spec.model);
  // Selective recompute of that dense part: its MLP is the shared experts.
  TrainingSpec dense_part = spec.training;
  std::erase(dense_part.recompute_modules, RecomputeModule::kMlp);
  if (spec.training.Recomputes(RecomputeModule::kSharedExperts)) {
    dense_part.recompute_modules.push_back(RecomputeModule::kMlp);
  }
  LayerTime out =
      EstimateLayerTime(shared, dense_part, config, device, spec.cluster.gpus_per_node);
  const ExpertPhases experts = ExpertLayerPhases(spec, config, device);
  out.forward_compute += experts.forward;
  out.backward_compute += experts.backward;
  out.forward_ep_comm = experts.forward_comm;
  out.backward_ep_comm = experts.backward_comm;
  switch (config.recompute) {
    case Recompute::kFull:
      out.recompute = out.forward_compute + out.forward_cp_comm;
      out.recompute_ep_comm = out.forward_ep_comm;
      break;
    case Recompute::kSelective:
      if (spec.training.Recomputes(RecomputeModule::kMoe)) {
        // The whole expert block again: router, permutation, dispatch, experts, combine.
        out.recompute += experts.forward;
        out.recompute_ep_comm = experts.forward_comm;
      } else if (spec.training.Recomputes(RecomputeModule::kMoeAct)) {
        out.recompute += experts.activation_forward;
      }
      break;
    case Recompute::kNone:
      break;
  }
  if (config.activation_offload) {
    SetActivationOffload(LayerOffloadedBytes(spec, config, /*expert_layer=*/true), device, out);
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
  const Link link = RingLink(device, config.tp, 1, gpus_per_node);
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

absl::StatusOr<IterationEstimate> EstimateIteration(
    const JobSpec& spec, const ParallelConfig& config, const DeviceProfile& device,
    const LayerTime& layer, const EdgeTime& edge, PipelineMode mode, const MeasuredTerms* measured,
    const LayerTime* expert_layer) {
  if (IsMoe(spec.model) && expert_layer == nullptr) {
    return absl::InvalidArgumentError(
        "EstimateIteration needs the expert layer's time for a mixture-of-experts model");
  }
  const LayerTime* expert = IsMoe(spec.model) ? expert_layer : nullptr;
  const Pipeline pipeline = BuildPipeline(spec, config, device, layer, edge, expert);
  absl::StatusOr<std::vector<double>> finish = StageFinishTimes(pipeline.input, mode);
  if (!finish.ok()) return finish.status();
  const CriticalStage critical =
      FindCriticalStage(spec, config, device, layer, pipeline.input,
                        pipeline.expert_layers_per_stage, *finish, measured);
  const double embedding_sync = TiedEmbeddingSyncSeconds(spec, config, device);
  const double iteration = critical.end + embedding_sync;

  IterationEstimate out;
  out.iteration_time_s = iteration;
  out.time = SplitByCause(spec, config, layer, expert, edge, pipeline, critical, embedding_sync,
                          iteration);
  out.notes = LimitNotes(out.time, iteration, pipeline.input.micro_batches, config.pp, config.vp);
  if (config.pp > 1 && PipelineSlots(spec.model, config) % (config.pp * config.vp) != 0) {
    int64_t fewest = std::numeric_limits<int64_t>::max(), most = 0, heaviest = 0;
    for (int64_t r = 0; r < config.pp; ++r) {
      const int64_t layers = DecoderLayersOnStage(spec.model, config, r);
      fewest = std::min(fewest, layers);
      if (layers > most) heaviest = 0;
      most = std::max(most, layers);
      if (layers == most) ++heaviest;
    }
    out.notes.push_back(absl::StrFormat(
        "uneven pipeline split (training.framework %s): the %d stages hold %d to %d decoder "
        "layers, %d of them the most",
        ToString(spec.training.framework), config.pp, fewest, most, heaviest));
  }
  if (expert != nullptr && config.ep * config.etp > 1) {
    out.notes.push_back(ExpertPlacementNote(spec, config, out.time, iteration));
  }
  // What the optimizer stage is under an FSDP2 codebase that keeps the layers gathered.
  const FrameworkProfile& framework = ProfileOf(spec.training.framework);
  if (framework.pipeline_defers_fsdp_sync &&
      config.data_parallel_sharding == DataParallelSharding::kOptimizer &&
      config.dp * config.cp > 1) {
    out.notes.push_back(absl::StrFormat(
        "data_parallel_sharding optimizer (training.framework %s): FSDP2 keeps every layer's "
        "gathered parameters and the unsharded gradients, and reduce-scatters them %s "
        "(%.0f%% of the iteration exposed)",
        ToString(spec.training.framework),
        config.pp > 1 ? "after each stage's last backward" : "in the last micro-batch's backward",
        100.0 * out.time.dp_comm / iteration));
  }
  if (config.activation_offload) {
    out.notes.push_back(absl::StrFormat(
        "activation offload: %.2f GiB per layer and micro-batch to the host (%.0f GB/s link), "
        "%.0f%% of the iteration exposed",
        LayerOffloadedBytes(spec, config, IsMoe(spec.model)) / (1024.0 * 1024.0 * 1024.0),
        device.host_link_bandwidth / 1e9, 100.0 * out.time.offload / iteration));
  }
  return out;
}

}  // namespace paratune
