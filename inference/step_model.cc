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

// E[max of n iid standard normals] = integral of x · n·phi(x)·Phi(x)^(n-1) dx (the mean
// of the largest normal order statistic: 0.5642 for n = 2, 1.0294 for 4, 1.4236 for 8;
// Harter 1961's tables), by the trapezoid rule over [-10, 10].
double ExpectedMaxOfNormals(int64_t n) {
  if (n <= 1) return 0;
  constexpr double kStep = 1e-3;
  const double count = static_cast<double>(n);
  double sum = 0;
  for (double x = -10; x <= 10; x += kStep) {
    const double pdf = std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * count * pdf * std::pow(cdf, count - 1) * kStep;
  }
  return sum;
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
  if (c.attention_dp) {
    if (auto s = CheckAttentionDp(model, c.tp, c.ep, "attention_dp"); !s.ok()) return s;
  }
  if (auto s = CheckExpertParallel(model, c.tp, c.ep, "ep"); !s.ok()) return s;
  if (IsMoe(model)) {
    // Routed experts are sliced over the tp / ep ranks of their group (moe_tp_size), the
    // shared experts over all tp ranks like a dense MLP.
    const int64_t moe_tp = c.tp / c.ep;
    if (model.moe_ffn_hidden_size % moe_tp != 0) {
      return absl::InvalidArgumentError(
          c.ep == 1
              ? absl::StrCat("tp (", c.tp, ") must divide model.moe_ffn_hidden_size (",
                             model.moe_ffn_hidden_size, "): each rank holds 1/tp of every expert")
              : absl::StrCat("tp / ep (", c.tp, " / ", c.ep, " = ", moe_tp,
                             ") must divide model.moe_ffn_hidden_size (", model.moe_ffn_hidden_size,
                             "): each rank holds 1/(tp / ep) of each expert of its group"));
    }
    const int64_t shared = model.num_shared_experts > 0 ? SharedExpertFfn(model) : 0;
    if (!c.attention_dp && shared % c.tp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp (", c.tp, ") must divide model.shared_expert_ffn_hidden_size (", shared,
                       "): each rank holds 1/tp of every shared expert"));
    }
  }
  StepModel s;
  s.model_ = model;
  s.device_ = device;
  s.engine_ = engine;
  s.tp_ = c.tp;
  s.pp_ = c.pp;
  s.ep_ = c.ep;
  s.weight_format_ = c.weight_precision;
  s.dp_ = c.attention_dp ? c.tp : 1;
  // Attention, dense layers and shared experts: sliced over tp, or whole on every
  // attention data-parallel rank. The routed experts always split over all tp ranks.
  s.shard_ = static_cast<double>(c.tp / s.dp_);
  const double tp = s.shard_;
  const double all_ranks = static_cast<double>(c.tp);
  const double h = static_cast<double>(model.hidden_size);
  const double a = static_cast<double>(model.num_attention_heads);
  const double g = static_cast<double>(QueryGroups(model));
  const double f = static_cast<double>(model.ffn_hidden_size);
  const bool mla = EffectiveAttention(model) == AttentionType::kMla;
  s.hidden_ = h;
  s.head_dim_ = static_cast<double>(HeadDim(model));
  s.q_heads_rank_ = a / tp;
  // With more ranks than KV heads each rank keeps a copy of one head.
  s.kv_heads_rank_ = std::max(1.0, std::ceil(g / tp));
  // The most loaded stage: ceil(L / pp) layers, and of the stages the one with the most
  // expert layers.
  const int64_t per_stage = (model.num_layers + c.pp - 1) / c.pp;
  s.layers_per_stage_ = static_cast<double>(per_stage);
  int64_t most_experts = 0;
  for (int64_t stage = 0; stage < c.pp; ++stage) {
    const int64_t lo = std::min(stage * per_stage, model.num_layers);
    const int64_t hi = std::min(lo + per_stage, model.num_layers);
    most_experts =
        std::max(most_experts, ExpertLayersBelow(model, hi) - ExpertLayersBelow(model, lo));
  }
  s.expert_layers_stage_ = static_cast<double>(most_experts);
  s.dense_layers_stage_ = s.layers_per_stage_ - s.expert_layers_stage_;
  // MLA caches one latent of kv_lora_rank + the shared RoPE key per token and layer, on
  // every rank; GQA/MHA K and V of the rank's heads.
  s.kv_bytes_per_token_layer_ =
      (mla ? static_cast<double>(model.kv_lora_rank + model.qk_rope_head_dim)
           : 2.0 * s.kv_heads_rank_ * s.head_dim_) *
      BytesPerElement(c.kv_cache_precision);
  s.kv_bytes_per_token_ = s.layers_per_stage_ * s.kv_bytes_per_token_layer_;
  s.span_ = AttentionSpan(model);
  s.attention_flops_per_pair_ =
      s.q_heads_rank_ * (mla ? 2.0 * static_cast<double>(model.qk_head_dim +
                                                         model.qk_rope_head_dim + model.v_head_dim)
                             : 4.0 * s.head_dim_);

  s.qkv_n_ = (a + 2 * g) * s.head_dim_ / tp;
  s.proj_k_ = a * s.head_dim_ / tp;
  if (mla) s.mla_attention_n_ = AttentionMatmulParams(model) / h / tp;
  s.fc1_n_ = (IsGated(model.activation) ? 2 * f : f) / tp;
  s.fc2_k_ = f / tp;
  if (IsMoe(model)) {
    const double glu = IsGated(model.activation) ? 2.0 : 1.0;
    const double moe_tp = all_ranks / static_cast<double>(c.ep);
    s.experts_ = static_cast<double>(model.num_experts);
    s.local_experts_ = s.experts_ / static_cast<double>(c.ep);
    s.topk_ = static_cast<double>(model.moe_router_topk);
    s.expert_fc1_n_ = glu * static_cast<double>(model.moe_ffn_hidden_size) / moe_tp;
    s.expert_fc2_k_ = static_cast<double>(model.moe_ffn_hidden_size) / moe_tp;
    if (c.ep > 1) {
      // The group loads are ep exchangeable counts with a fixed sum: in the normal
      // approximation Y_i - mean(Y) with Y_i iid, so the busiest exceeds the mean by
      // sqrt(ep / (ep - 1)) x E[max of ep iid standard normals] standard deviations.
      const double groups = static_cast<double>(c.ep);
      s.busiest_group_sigmas_ = std::sqrt(groups / (groups - 1)) * ExpectedMaxOfNormals(c.ep);
    }
    if (model.num_shared_experts > 0) {
      const double shared = static_cast<double>(model.num_shared_experts * SharedExpertFfn(model));
      s.shared_fc1_n_ = glu * shared / tp;
      s.shared_fc2_k_ = shared / tp;
    }
  }

  // FP8 weights run FP8 GEMMs (activations quantised too); weight-only INT8/INT4 and
  // 16-bit formats run 16-bit GEMMs after dequantising; NVFP4 runs FP4 GEMMs where the
  // tensor cores have block-scaled FP4 (Blackwell), else FP8 ones.
  const bool fp8_math =
      (c.weight_precision == QuantFormat::kFp8 || c.weight_precision == QuantFormat::kFp4) &&
      device.peak_fp8_tflops > 0;
  const bool fp4_math = c.weight_precision == QuantFormat::kFp4 && device.peak_fp4_tflops > 0 &&
                        device.block_scaled_formats;
  s.gemm_precision_ = fp4_math ? Precision::kNvfp4 : fp8_math ? Precision::kFp8 : Precision::kBf16;
  s.gemm_peak_ = device.PeakFlops(s.gemm_precision_);
  s.attention_peak_ = device.PeakFlops(Precision::kBf16) * device.attention_efficiency;
  s.stream_bw_ = device.memory_bandwidth * device.memory_efficiency;
  s.weight_bytes_per_element_ = BytesPerElement(c.weight_precision);

  // Every weight of the stage (all experts of an expert layer) and the output layer.
  const double expert_layer_weights =
      IsMoe(model) ? (AttentionMatmulParams(model) + SharedExpertParams(model)) / tp +
                         s.experts_ * ExpertParams(model) / all_ranks
                   : 0;
  s.weight_bytes_read_ = (s.dense_layers_stage_ * LayerMatmulParams(model) / tp +
                          s.expert_layers_stage_ * expert_layer_weights) *
                             s.weight_bytes_per_element_ +
                         s.expert_layers_stage_ * RouterParams(model) * 2 +
                         static_cast<double>(model.vocab_size) * h / tp * 2;

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
  const double tp = shard_;  // Attention and dense weights: / tp, or whole with attention DP.
  const double all_ranks = static_cast<double>(tp_);
  const double h = hidden_;
  const double v = static_cast<double>(model_.vocab_size);
  const double attention_n = mla_attention_n_ > 0 ? mla_attention_n_ : qkv_n_;
  const double layer_matmul = LayerMatmulParams(model_) / tp;
  const double layer_other = (LayerParams(model_) - LayerMatmulParams(model_)) / tp;
  const double dense_layer =
      layer_matmul * weight_bytes_per_element_ +
      ScaleBytes(weight_format_, layer_matmul, attention_n + h + fc1_n_ + h) + layer_other * 2;
  double expert_layer = 0;
  if (IsMoe(model_)) {
    // Attention, every routed expert and the shared ones quantised; the router (replicated
    // on every rank) and the norms in 16 bits.
    const double matmul = (AttentionMatmulParams(model_) + SharedExpertParams(model_)) / tp +
                          experts_ * ExpertParams(model_) / all_ranks;
    // Per-channel scales count output channels: the rank's experts' up/gate slices and
    // their full-width down projections (fewer with expert parallelism: E / ep of them).
    const double channels = attention_n + h + local_experts_ * (expert_fc1_n_ + h) +
                            (shared_fc1_n_ > 0 ? shared_fc1_n_ + h : 0);
    const double other = ExpertLayerParams(model_) - AttentionMatmulParams(model_) -
                         experts_ * ExpertParams(model_) - SharedExpertParams(model_) -
                         RouterParams(model_);
    expert_layer = matmul * weight_bytes_per_element_ +
                   ScaleBytes(weight_format_, matmul, channels) + other / tp * 2 +
                   RouterParams(model_) * 2;
  }
  // Embedding on the first stage, output layer on the last (both with pp == 1), 16-bit.
  const double embedding = v * h / tp * 2;
  const double head = model_.tie_embeddings ? 0 : v * h / tp * 2;
  const double ends = pp_ == 1 ? embedding + head : std::max(embedding, head);
  m.weights = dense_layers_stage_ * dense_layer + expert_layers_stage_ * expert_layer + ends;
  // Workspace for max_num_tokens rows: the layer's widest live tensors (input, QKV,
  // attention output, MLP up/gate and activation output), plus FP32 logits of the
  // sampled sequences.
  const double rows = static_cast<double>(max_num_tokens);
  // An expert layer's widest tensors are the N·k permuted rows and their up/gate outputs.
  const double ffn_width = dense_layers_stage_ > 0 ? 2 * fc1_n_ + h : 0;
  const double expert_width = expert_layers_stage_ > 0 ? topk_ * (2 * expert_fc1_n_ + 2 * h) +
                                                             2 * shared_fc1_n_ + experts_ * 2
                                                       : 0;
  m.activations =
      rows * (3 * h / tp + attention_n + std::max(ffn_width, expert_width)) * kActivationBytes +
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
  // With attention data parallelism every rank holds its own sequences' cache.
  return std::floor(memory.kv_pool / kv_bytes_per_token_) * static_cast<double>(dp_);
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

double StepModel::GroupedGemmSeconds(double groups, double rows, double n, double k) const {
  if (groups <= 0 || rows <= 0) return 0;
  const double flops = 2 * groups * rows * n * k;
  const double eff = GemmEfficiency(device_, rows, n, k, groups, gemm_precision_);
  const double compute = flops / (gemm_peak_ * eff);
  const double bytes =
      groups * (n * k * weight_bytes_per_element_ + rows * (n + k) * kActivationBytes);
  return std::max(compute, bytes / stream_bw_) + device_.kernel_launch_s;
}

double StepModel::FfnSeconds(double rows) const {
  return GemmSecondsOnRank(rows, fc1_n_, hidden_) + GemmSecondsOnRank(rows, hidden_, fc2_k_);
}

double StepModel::AttentionLinearSeconds(double rows) const {
  if (mla_attention_n_ > 0) return GemmSecondsOnRank(rows, mla_attention_n_, hidden_);
  return GemmSecondsOnRank(rows, qkv_n_, hidden_) + GemmSecondsOnRank(rows, hidden_, proj_k_);
}

double StepModel::ExpertsReached(double rows) const {
  if (experts_ <= 0 || rows <= 0) return 0;
  return experts_ * (1 - std::pow(1 - topk_ / experts_, rows));
}

// The busiest of `ep` groups, each holding E / ep of the E experts, when `drawn` of the
// experts are picked at random `draws` times: a group's count is hypergeometric, mean
// draws / ep, variance draws (1/ep)(1 - 1/ep)(E - drawn)/(E - 1); the busiest sits `sigmas`
// standard deviations above the mean (normal approximation).
namespace {
double BusiestOfGroups(double draws, double ep, double experts, double drawn, double sigmas) {
  const double mean = draws / ep;
  const double variance =
      draws / ep * (1 - 1 / ep) * (experts - drawn) / std::max(experts - 1, 1.0);
  return mean + sigmas * std::sqrt(std::max(variance, 0.0));
}
}  // namespace

double StepModel::BusiestGroupExperts(double rows) const {
  const double reached = ExpertsReached(rows);
  if (ep_ == 1) return reached;
  // The reached experts are a uniform random subset of the E: R draws without replacement.
  const double normal =
      BusiestOfGroups(reached, static_cast<double>(ep_), experts_, reached, busiest_group_sigmas_);
  // Whole experts: once a step reaches any, the busiest group reaches at least one.
  return std::min({local_experts_, reached, std::max(normal, std::min(reached, 1.0))});
}

double StepModel::BusiestGroupRows(double rows) const {
  const double assignments = rows * topk_;
  if (ep_ == 1) return assignments;
  // Each token sends its k rows to k distinct experts: a group receives a hypergeometric
  // count per token (k draws, E / ep of E), independent across tokens.
  const double mean = assignments / static_cast<double>(ep_);
  const double normal = BusiestOfGroups(assignments, static_cast<double>(ep_), experts_, topk_,
                                        busiest_group_sigmas_);
  // Whole rows: the busiest of ep groups holds at least ceil(N·k / ep) of them.
  return std::min(rows * std::min(topk_, local_experts_), std::max(normal, std::ceil(mean)));
}

double StepModel::ExpertFfnSeconds(double local_rows, double rows) const {
  // The busiest expert-parallel group's share (all of them with ep = 1): the rows routed to
  // its experts and the distinct experts of its own they reach; the other groups wait for it
  // at the all-reduce.
  const double assignments = BusiestGroupRows(rows);
  const double reached = BusiestGroupExperts(rows);
  // Router scores (h x E, every rank) and top-k; the rank's routed rows permuted into
  // expert order and back (each read and written once), then grouped GEMMs over its
  // reached experts.
  const double router = GemmSecondsOnRank(local_rows, experts_, hidden_);
  const double permute =
      2 * (2 * assignments * hidden_ * kActivationBytes) / stream_bw_ + 2 * device_.kernel_launch_s;
  // The gated activation runs as a kernel of its own between the two grouped GEMMs, over
  // the N·k routed rows: it reads their up/gate output and writes the product (16-bit).
  const double activation =
      assignments * (expert_fc1_n_ + expert_fc2_k_) * kActivationBytes / stream_bw_ +
      device_.kernel_launch_s;
  const double per_expert = assignments / std::max(reached, 1.0);
  double t = router + permute + activation +
             GroupedGemmSeconds(reached, per_expert, expert_fc1_n_, hidden_) +
             GroupedGemmSeconds(reached, per_expert, hidden_, expert_fc2_k_);
  if (shared_fc1_n_ > 0) {
    t += GemmSecondsOnRank(local_rows, shared_fc1_n_, hidden_) +
         GemmSecondsOnRank(local_rows, hidden_, shared_fc2_k_);
  }
  return t;
}

namespace {
// A lazily filled table of a function of the row count (whole rows below kMaxCachedRows).
template <typename F>
double Cached(std::vector<float>& cache, double rows, F compute) {
  const int64_t r = static_cast<int64_t>(rows);
  const bool cacheable = r >= 0 && r < kMaxCachedRows;
  if (cacheable) {
    if (cache.size() <= static_cast<size_t>(r)) {
      cache.resize(std::max<size_t>(static_cast<size_t>(r) + 1,
                                    std::min<size_t>(2 * cache.size(), kMaxCachedRows)),
                   -1.0f);
    }
    if (cache[r] >= 0) return cache[r];
  }
  const double t = compute(rows);
  if (cacheable) cache[r] = static_cast<float>(t);
  return t;
}
}  // namespace

double StepModel::LinearSeconds(double rows) const {
  return Cached(linear_cache_, rows,
                [this](double n) { return AttentionLinearSeconds(n) + FfnSeconds(n); });
}

double StepModel::ExpertLayerLinearSeconds(double rows, double local_rows) const {
  if (dp_ > 1) {
    // The rank's share of the instance's rows through its unsharded attention; the routed
    // experts over all of them (router and shared experts over the even share).
    return Cached(attention_cache_, local_rows,
                  [this](double n) { return AttentionLinearSeconds(n); }) +
           Cached(expert_cache_, rows, [this](double n) {
             return ExpertFfnSeconds(std::ceil(n / static_cast<double>(dp_)), n);
           });
  }
  return Cached(expert_cache_, rows,
                [this](double n) { return AttentionLinearSeconds(n) + ExpertFfnSeconds(n, n); });
}

double StepModel::AllToAllSeconds(double rank_rows) const {
  if (dp_ <= 1 || rank_rows <= 0) return 0;
  // The rank's tokens go to the experts of their k routes, 1/ep of them on the rank itself.
  const double e = static_cast<double>(ep_);
  const double bytes = rank_rows * topk_ * hidden_ * kActivationBytes * (e - 1) / e;
  return bytes / tp_link_bandwidth_ + tp_link_latency_ + device_.kernel_launch_s;
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

StepWork StepModel::SlowestRankWork(const StepWork& w) const {
  // All of it, or with attention data parallelism its share of the sequences (rounded up)
  // and of the prompt chunks (whole chunks, rounded up).
  StepWork r = w;
  if (dp_ > 1) {
    const double dp = static_cast<double>(dp_);
    if (w.decode_sequences > 0) {
      r.decode_sequences = std::ceil(w.decode_sequences / dp);
      r.decode_context_tokens = w.decode_context_tokens * r.decode_sequences / w.decode_sequences;
    }
    if (w.prefill_tokens > 0) {
      const double share = w.prefill_chunks > 0
                               ? std::ceil(w.prefill_chunks / dp) / w.prefill_chunks
                               : std::ceil(w.prefill_tokens / dp) / w.prefill_tokens;
      r.prefill_tokens = std::ceil(w.prefill_tokens * std::min(share, 1.0));
      r.prefill_attention_pairs = w.prefill_attention_pairs * std::min(share, 1.0);
    }
    r.sampled_sequences = std::ceil(w.sampled_sequences / dp);
  }
  return r;
}

StepBreakdown StepModel::Breakdown(const StepWork& w) const {
  StepBreakdown b;
  const double rows = w.prefill_tokens + w.decode_sequences;
  if (rows <= 0) return b;
  if (measured_) {
    // An attention-DP table was measured with the step's work spread evenly over the ranks:
    // the step waits for the slowest rank, so it is looked up at that rank's work times dp.
    StepWork q = w;
    if (dp_ > 1) {
      const double dp = static_cast<double>(dp_);
      const StepWork r = SlowestRankWork(w);
      q.prefill_tokens = r.prefill_tokens * dp;
      q.prefill_attention_pairs = r.prefill_attention_pairs * dp;
      q.prefill_chunks = std::ceil(w.prefill_chunks / dp) * dp;
      q.decode_sequences = r.decode_sequences * dp;
      q.decode_context_tokens = r.decode_context_tokens * dp;
      q.sampled_sequences = r.sampled_sequences * dp;
    }
    b = measured_->Breakdown(q);
    if (pp_ > 1) {
      // A pipeline's table timed one stage, its ceil(L / pp) layers with the step's fixed
      // costs (and the embedding and output layer) on the tp ranks. The stages serve the pp
      // engines in turn and an engine's next step needs its last one's tokens, so an engine
      // steps every pp stage steps, plus pp − 1 hand-offs of the step's hidden states.
      const double p = static_cast<double>(pp_);
      b.compute *= p;
      b.tp_comm *= p;
      b.total *= p;
      b.pp_comm = (p - 1) *
                  (rows * hidden_ * kActivationBytes / pp_link_bandwidth_ + pp_link_latency_) * 1e3;
    }
    b.overhead = (engine_.step_overhead_s +
                  engine_.per_sequence_overhead_s * (w.decode_sequences + w.sampled_sequences)) *
                 1e3;
    b.total += b.pp_comm + b.overhead;
    return b;
  }
  const double layers = layers_per_stage_;
  const double stages = static_cast<double>(pp_);
  const StepWork r = SlowestRankWork(w);
  const double rank_rows = r.prefill_tokens + r.decode_sequences;
  // Matmuls of the stage's layers, dense and expert.
  const double linear =
      (dense_layers_stage_ > 0 ? dense_layers_stage_ * LinearSeconds(rank_rows) : 0) +
      (expert_layers_stage_ > 0 ? expert_layers_stage_ * ExpertLayerLinearSeconds(rows, rank_rows)
                                : 0);
  // Attention over prompt chunks: QK^T and PV, 2 FLOPs each per pair, head and dim.
  const double prefill_attention =
      r.prefill_attention_pairs * attention_flops_per_pair_ / attention_peak_;
  // Decode attention reads every cached token's K and V once per layer.
  const double decode_attention = r.decode_context_tokens * kv_bytes_per_token_layer_ / stream_bw_;
  const double elementwise =
      kElementwisePasses * rank_rows * hidden_ * kActivationBytes / stream_bw_;
  const double launches = 8 * device_.kernel_launch_s;
  // Expert parallelism keeps the same two all-reduces over the tp ranks: with attention
  // tensor-parallel every rank holds every token, runs its own experts on the rows routed to
  // them, and the MoE block's all-reduce sums the groups' partial outputs (the tp group is
  // the moe_tp x moe_ep group). TensorRT-LLM takes its all-to-all dispatch and combine only
  // with attention data parallelism (fused_moe enable_alltoall requires
  // enable_attention_dp; docs/source/features/parallel-strategy.md, "Hybrid ETP").
  // With attention data parallelism no all-reduce: each expert layer dispatches the rank's
  // tokens to their experts and combines them back (two all-to-alls).
  const double allreduce = dp_ > 1 ? 0 : 2 * AllReduceSeconds(rows * hidden_ * kActivationBytes);
  const double dispatch_combine = 2 * AllToAllSeconds(rank_rows);
  // The output layer for the sampling sequences (16-bit weights, read once per step).
  const double v = static_cast<double>(model_.vocab_size);
  const double sampled = std::max(r.sampled_sequences, 1.0);
  const double head_flops = 2 * sampled * hidden_ * v / shard_;
  const double head_bytes = hidden_ * v / shard_ * 2;
  const double head =
      std::max(head_flops / (device_.PeakFlops(Precision::kBf16) * device_.gemm_efficiency),
               head_bytes / stream_bw_);
  // The breakdown's memory term is the time the layers wait for weights beyond what their
  // GEMMs' compute hides, plus the KV-cache reads; compute is the rest of the layers' time
  // and the output layer.
  // An expert layer reads the experts the step reaches, not all of them.
  // With expert parallelism: the experts of the busiest group it does not reach, each
  // sliced over tp / ep ranks.
  const double unreached = expert_layers_stage_ * (local_experts_ - BusiestGroupExperts(rows)) *
                           ExpertParams(model_) * static_cast<double>(ep_) /
                           static_cast<double>(tp_) * weight_bytes_per_element_;
  const double layer_weight_read =
      (weight_bytes_read_ - head_bytes - unreached) / std::max(layers, 1.0) / stream_bw_;
  const double body =
      stages * (linear + layers * (prefill_attention + decode_attention + elementwise + launches));
  const double large_efficiency =
      IsLowPrecisionGemm(gemm_precision_) ? device_.fp8_gemm_efficiency : device_.gemm_efficiency;
  const double active_params =
      (dense_layers_stage_ * LayerMatmulParams(model_) +
       (expert_layers_stage_ > 0 ? expert_layers_stage_ * ExpertLayerActiveMatmulParams(model_)
                                 : 0)) /
      std::max(layers, 1.0);
  const double linear_compute =
      2 * rank_rows * active_params / shard_ / (gemm_peak_ * large_efficiency);
  const double linear_waiting = std::max(0.0, layer_weight_read - linear_compute);
  b.memory = std::min(body, stages * layers * (linear_waiting + decode_attention));
  b.compute = body - b.memory + head;
  b.tp_comm = stages * (layers * allreduce + expert_layers_stage_ * dispatch_combine);
  if (pp_ > 1) {
    b.pp_comm = (stages - 1) *
                (rank_rows * hidden_ * kActivationBytes / pp_link_bandwidth_ + pp_link_latency_);
  }
  // Each attention rank's scheduler handles its own sequences.
  b.overhead = engine_.step_overhead_s +
               engine_.per_sequence_overhead_s * (r.decode_sequences + r.sampled_sequences);
  b.total = b.compute + b.memory + b.tp_comm + b.pp_comm + b.overhead;
  for (double* x : {&b.compute, &b.memory, &b.tp_comm, &b.pp_comm, &b.overhead, &b.total}) {
    *x *= 1e3;
  }
  return b;
}

double StepModel::StepSeconds(const StepWork& w) const { return Breakdown(w).total * 1e-3; }

double StepModel::PrefillFlops(double tokens) const {
  const double layers = static_cast<double>(model_.num_layers);
  const double experts = static_cast<double>(NumExpertLayers(model_));
  const double matmul = (layers - experts) * LayerMatmulParams(model_) +
                        (experts > 0 ? experts * ExpertLayerActiveMatmulParams(model_) : 0);
  // Causal attention: tokens^2 / 2 pairs per layer, over the tp ranks' heads.
  const double attention = layers * tokens * tokens / 2 * attention_flops_per_pair_ * shard_;
  return 2 * tokens * matmul + attention +
         2 * static_cast<double>(model_.hidden_size) * static_cast<double>(model_.vocab_size);
}

}  // namespace paratune::inference
