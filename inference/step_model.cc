#include "inference/step_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "inference/measured_steps.h"
#include "search/collectives.h"
#include "search/gemm_efficiency.h"
#include "search/model_math.h"

namespace paratune::inference {
namespace {

// Activations travel between layers in 16 bits (the all-reduced tensor, the pipeline
// hand-off), whatever the weight format.
constexpr double kActivationBytes = 2;
// Elementwise kernels of a layer (two norms, residual adds, RoPE, activation function,
// quantise/dequantise) read and write the N x h activations about this many times.
constexpr double kElementwisePasses = 12;
// Rows above which the linear-time cache stops (larger steps are computed directly).
constexpr int64_t kMaxCachedRows = 65536;

// Per-tensor FP8 scales are a few floats; per-channel INT8 one 16-bit scale per output
// channel; INT4 (AWQ/GPTQ) one 16-bit scale per group of 128 weights; NVFP4 one FP8 scale
// per 16 weights plus a per-tensor FP32 scale.
double ScaleBytes(QuantFormat f, double weights, double output_channels) {
  switch (f) {
    case QuantFormat::kFp8:
      return 8;
    case QuantFormat::kInt8:
      return 2 * output_channels;
    case QuantFormat::kInt4:
      return 2 * weights / 128;
    case QuantFormat::kFp4:
      return weights / 16 + 4;
    default:
      return 0;
  }
}

}  // namespace

absl::StatusOr<StepModel> StepModel::Create(const ModelSpec& model, const DeviceProfile& device,
                                            const EngineProfile& engine, const ServingConfig& c,
                                            int64_t gpus_per_node) {
  if (c.tp <= 0 || c.pp <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp (", c.tp, ") and pp (", c.pp, ") must be positive"));
  }
  if (model.num_attention_heads % c.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp (", c.tp, ") must divide model.num_attention_heads (", model.num_attention_heads, ")"));
  }
  if (c.pp > model.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp (", c.pp, ") must be at most model.num_layers (", model.num_layers, ")"));
  }
  StepModel s;
  s.model_ = model;
  s.device_ = device;
  s.engine_ = engine;
  s.tp_ = c.tp;
  s.pp_ = c.pp;
  s.weight_format_ = c.weight_precision;
  const double tp = static_cast<double>(c.tp);
  const double h = static_cast<double>(model.hidden_size);
  const double a = static_cast<double>(model.num_attention_heads);
  const double g = static_cast<double>(QueryGroups(model));
  const double f = static_cast<double>(model.ffn_hidden_size);
  const double v = static_cast<double>(model.vocab_size);
  s.hidden_ = h;
  s.head_dim_ = h / a;
  s.q_heads_rank_ = a / tp;
  // With more ranks than KV heads each rank keeps a copy of one head.
  s.kv_heads_rank_ = std::max(1.0, std::ceil(g / tp));
  // The most loaded stage: ceil(L / pp) layers.
  s.layers_per_stage_ = std::ceil(static_cast<double>(model.num_layers) / c.pp);
  s.kv_bytes_per_token_layer_ =
      2.0 * s.kv_heads_rank_ * s.head_dim_ * BytesPerElement(c.kv_cache_precision);
  s.kv_bytes_per_token_ = s.layers_per_stage_ * s.kv_bytes_per_token_layer_;

  s.qkv_n_ = (a + 2 * g) * s.head_dim_ / tp;
  s.proj_k_ = h / tp;
  s.fc1_n_ = (model.activation == Activation::kSwiglu ? 2 * f : f) / tp;
  s.fc2_k_ = f / tp;

  // FP8 weights run FP8 GEMMs (activations quantised too); weight-only INT8/INT4 and
  // 16-bit formats run 16-bit GEMMs after dequantising; NVFP4 is modelled at the FP8 rate.
  const bool fp8_math =
      (c.weight_precision == QuantFormat::kFp8 || c.weight_precision == QuantFormat::kFp4) &&
      device.peak_fp8_tflops > 0;
  s.gemm_precision_ = fp8_math ? Precision::kFp8 : Precision::kBf16;
  s.gemm_peak_ = device.PeakFlops(s.gemm_precision_);
  s.attention_peak_ = device.PeakFlops(Precision::kBf16) * device.attention_efficiency;
  s.stream_bw_ = device.memory_bandwidth * device.memory_efficiency;
  s.weight_bytes_per_element_ = BytesPerElement(c.weight_precision);

  const double layer_weights = LayerMatmulParams(model) / tp;
  s.weight_bytes_read_ =
      s.layers_per_stage_ * layer_weights * s.weight_bytes_per_element_ + v * h / tp * 2;

  const Link tp_link = GroupLink(device, c.tp, 1, gpus_per_node);
  s.tp_link_bandwidth_ = tp_link.bandwidth;
  s.tp_link_latency_ = tp_link.latency_s;
  // The one-shot kernels need peer access over NVLink inside one node.
  s.tp_oneshot_ = tp_link.bandwidth == device.nvlink_bandwidth && c.tp <= gpus_per_node &&
                  device.nvlink_bandwidth >= 100e9;
  const Link pp_link = GroupLink(device, c.pp, c.tp, gpus_per_node);
  s.pp_link_bandwidth_ = pp_link.bandwidth;
  s.pp_link_latency_ = pp_link.latency_s;
  return s;
}

RankMemory StepModel::Memory(int64_t max_batch_size, int64_t max_num_tokens,
                             double kv_fraction) const {
  RankMemory m;
  const double tp = static_cast<double>(tp_);
  const double h = hidden_;
  const double v = static_cast<double>(model_.vocab_size);
  const double layer_matmul = LayerMatmulParams(model_) / tp;
  const double layer_other = (LayerParams(model_) - LayerMatmulParams(model_)) / tp;
  const double per_layer = layer_matmul * weight_bytes_per_element_ +
                           ScaleBytes(weight_format_, layer_matmul, qkv_n_ + h + fc1_n_ + h) +
                           layer_other * 2;
  // Embedding on the first stage, output layer on the last (both with pp == 1), 16-bit.
  const double embedding = v * h / tp * 2;
  const double head = model_.tie_embeddings ? 0 : v * h / tp * 2;
  const double ends = pp_ == 1 ? embedding + head : std::max(embedding, head);
  m.weights = layers_per_stage_ * per_layer + ends;
  // Workspace for max_num_tokens rows: the layer's widest live tensors (input, QKV,
  // attention output, MLP up/gate and activation output), plus FP32 logits of the
  // sampled sequences.
  const double rows = static_cast<double>(max_num_tokens);
  m.activations = rows * (3 * h / tp + qkv_n_ + 2 * fc1_n_ + h) * kActivationBytes +
                  static_cast<double>(max_batch_size) * v / tp * 4;
  m.reserve = engine_.runtime_reserve_gib * kGiB;
  m.capacity = device_.memory_bytes;
  switch (engine_.kv_rule) {
    case KvBudgetRule::kFractionOfFree:
      m.kv_pool = kv_fraction * (m.capacity - m.weights - m.activations - m.reserve);
      break;
    case KvBudgetRule::kFractionOfTotal:
      m.kv_pool = kv_fraction * m.capacity - m.weights - m.activations - m.reserve;
      break;
    case KvBudgetRule::kStaticFractionOfTotal: {
      const double rest = (1 - kv_fraction) * m.capacity;
      m.kv_pool = kv_fraction * m.capacity - m.weights;
      // Activations and the reserve live outside the static fraction; a shortfall there
      // comes out of the pool.
      m.kv_pool -= std::max(0.0, m.activations + m.reserve - rest);
      break;
    }
  }
  return m;
}

double StepModel::KvTokenCapacity(const RankMemory& memory) const {
  if (memory.kv_pool <= 0) return 0;
  return std::floor(memory.kv_pool / kv_bytes_per_token_);
}

double StepModel::GemmSecondsOnRank(double rows, double n, double k) const {
  // [rows x k] x [k x n]: compute at the shape's efficiency, or the weights read once (with
  // the rows' activations), whichever is longer.
  const double flops = 2 * rows * n * k;
  const double eff = GemmEfficiency(device_, rows, n, k, 1, gemm_precision_);
  const double compute = flops / (gemm_peak_ * eff);
  const double bytes = n * k * weight_bytes_per_element_ + rows * (n + k) * kActivationBytes;
  return std::max(compute, bytes / stream_bw_) + device_.kernel_launch_s;
}

double StepModel::FfnSeconds(double rows) const {
  return GemmSecondsOnRank(rows, fc1_n_, hidden_) + GemmSecondsOnRank(rows, hidden_, fc2_k_);
}

double StepModel::LinearSeconds(double rows) const {
  const int64_t r = static_cast<int64_t>(rows);
  if (r >= 0 && r < kMaxCachedRows) {
    if (linear_cache_.size() <= static_cast<size_t>(r)) {
      linear_cache_.resize(
          std::max<size_t>(static_cast<size_t>(r) + 1,
                           std::min<size_t>(2 * linear_cache_.size(), kMaxCachedRows)),
          -1.0f);
    }
    if (linear_cache_[r] >= 0) return linear_cache_[r];
  }
  const double t = GemmSecondsOnRank(rows, qkv_n_, hidden_) +
                   GemmSecondsOnRank(rows, hidden_, proj_k_) + FfnSeconds(rows);
  if (r >= 0 && r < kMaxCachedRows) linear_cache_[r] = static_cast<float>(t);
  return t;
}

double StepModel::AllReduceSeconds(double bytes) const {
  if (tp_ <= 1 || bytes <= 0) return 0;
  const double k = static_cast<double>(tp_);
  const double ring = 2 * (k - 1) / k * bytes / tp_link_bandwidth_ +
                      2 * (k - 1) * tp_link_latency_ + device_.kernel_launch_s;
  if (!tp_oneshot_) return ring;
  // One-shot: every rank reads the k-1 peer buffers and reduces locally.
  const double oneshot = engine_.oneshot_allreduce_latency_s + (k - 1) * bytes / tp_link_bandwidth_;
  return std::min(ring, oneshot);
}

StepBreakdown StepModel::Breakdown(const StepWork& w) const {
  StepBreakdown b;
  const double rows = w.prefill_tokens + w.decode_sequences;
  if (rows <= 0) return b;
  if (measured_) {
    b = measured_->Breakdown(w);
    b.overhead = (engine_.step_overhead_s +
                  engine_.per_sequence_overhead_s * (w.decode_sequences + w.sampled_sequences)) *
                 1e3;
    b.total += b.overhead;
    return b;
  }
  const double layers = layers_per_stage_;
  const double stages = static_cast<double>(pp_);
  const double linear = LinearSeconds(rows);
  // Attention over prompt chunks: QK^T and PV, 2 FLOPs each per pair, head and dim.
  const double prefill_attention =
      4 * w.prefill_attention_pairs * q_heads_rank_ * head_dim_ / attention_peak_;
  // Decode attention reads every cached token's K and V once per layer.
  const double decode_attention = w.decode_context_tokens * kv_bytes_per_token_layer_ / stream_bw_;
  const double elementwise = kElementwisePasses * rows * hidden_ * kActivationBytes / stream_bw_;
  const double launches = 8 * device_.kernel_launch_s;
  const double allreduce = 2 * AllReduceSeconds(rows * hidden_ * kActivationBytes);
  // The output layer for the sampling sequences (16-bit weights, read once per step).
  const double v = static_cast<double>(model_.vocab_size);
  const double sampled = std::max(w.sampled_sequences, 1.0);
  const double head_flops = 2 * sampled * hidden_ * v / static_cast<double>(tp_);
  const double head_bytes = hidden_ * v / static_cast<double>(tp_) * 2;
  const double head =
      std::max(head_flops / (device_.PeakFlops(Precision::kBf16) * device_.gemm_efficiency),
               head_bytes / stream_bw_);
  // The breakdown's memory term is the time the layers wait for weights beyond what their
  // GEMMs' compute hides, plus the KV-cache reads; compute is the rest of the layers' time
  // and the output layer.
  const double layer_weight_read =
      (weight_bytes_read_ - head_bytes) / std::max(layers, 1.0) / stream_bw_;
  const double body =
      stages * layers * (linear + prefill_attention + decode_attention + elementwise + launches);
  const double large_efficiency =
      gemm_precision_ == Precision::kFp8 ? device_.fp8_gemm_efficiency : device_.gemm_efficiency;
  const double linear_compute = 2 * rows * LayerMatmulParams(model_) / static_cast<double>(tp_) /
                                (gemm_peak_ * large_efficiency);
  const double linear_waiting = std::max(0.0, layer_weight_read - linear_compute);
  b.memory = std::min(body, stages * layers * (linear_waiting + decode_attention));
  b.compute = body - b.memory + head;
  b.tp_comm = stages * layers * allreduce;
  if (pp_ > 1) {
    b.pp_comm =
        (stages - 1) * (rows * hidden_ * kActivationBytes / pp_link_bandwidth_ + pp_link_latency_);
  }
  b.overhead = engine_.step_overhead_s +
               engine_.per_sequence_overhead_s * (w.decode_sequences + w.sampled_sequences);
  b.total = b.compute + b.memory + b.tp_comm + b.pp_comm + b.overhead;
  for (double* x : {&b.compute, &b.memory, &b.tp_comm, &b.pp_comm, &b.overhead, &b.total}) {
    *x *= 1e3;
  }
  return b;
}

double StepModel::StepSeconds(const StepWork& w) const { return Breakdown(w).total * 1e-3; }

double StepModel::PrefillFlops(double tokens) const {
  const double layers = static_cast<double>(model_.num_layers);
  return layers * (2 * tokens * LayerMatmulParams(model_) +
                   2 * tokens * tokens * static_cast<double>(model_.hidden_size)) +
         2 * static_cast<double>(model_.hidden_size) * static_cast<double>(model_.vocab_size);
}

}  // namespace paratune::inference
