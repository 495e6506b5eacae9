// Memory and step time of one serving instance (tp x pp GPUs running one model copy).
//
// Memory per rank (the most loaded pipeline stage): the quantised matmul weights with their
// scales, the embedding and the output layer (kept in 16 bits, as the quantisation
// toolkits do), the activation and logits workspace the engine reserves for max_num_tokens,
// the engine's runtime reserve, and the KV-cache pool the engine's rule leaves
// (engine_profile.h).
//
// Step time of one engine step with P prefill tokens and D decoding sequences: per layer,
// the four matmuls (QKV, output projection, MLP up/gate and down) as GEMMs of N = P + D
// rows on the device's tensor cores, bounded below by reading the weights once; attention
// over the prompt chunks (FLOPs) and over the decoding sequences' KV cache (bytes); two
// all-reduces of N x h activations across the TP group (the cheaper of a one-shot
// all-reduce and a ring); then the output layer for the sequences that sample, the stage
// hand-offs of a pipeline, and the engine's host overheads.
//
// Mixture-of-experts layers (TensorRT-LLM's default moe_tp_size = tp, expert parallelism
// 1: every rank holds a 1/tp slice of every expert): the router GEMM, the permutation of
// the N·k routed rows, and a grouped GEMM over the experts the step's tokens reach. With
// uniform routing N tokens reach E·(1 − (1 − k/E)^N) distinct experts in expectation, each
// with N·k over that many rows, so a small decode batch reads only the experts it visits
// while a large prefill reads them all; the shared experts run as a dense FFN. Layers
// before first_k_dense_layers (and between moe_layer_freq) are dense. MLA caches the
// compressed latent (kv_lora_rank + qk_rope_head_dim per token and layer) on every rank.
//
// Expert parallelism (ep > 1, TensorRT-LLM moe_ep_size = ep, moe_tp_size = tp / ep): the
// tp ranks form ep groups, each holding E / ep experts sliced over its tp / ep ranks, so a
// rank holds the same expert bytes as with ep = 1 (E experts / tp either way) but runs
// fewer, wider experts on more rows each. Every rank sees every token (attention stays
// tensor-parallel); a rank's grouped GEMMs cover the rows routed to its group's experts and
// the distinct ones of them the step reaches. Under uniform routing those counts are
// hypergeometric; the step waits for the busiest group, taken as the mean plus the expected
// excess of the largest of ep normal loads with a fixed sum. The all-reduces after
// attention and the MoE block are unchanged (the tp group sums the groups' outputs).
//
// Attention data parallelism (attention_dp, ep = tp): each of the tp ranks holds the
// attention, the dense layers, the shared experts, the router, the embedding and the output
// layer whole, and 1/tp of the routed experts (whole experts). The instance's sequences
// spread over the ranks; each keeps its own sequences' KV cache with every KV head (MLA: the
// latent once per token instead of on every rank, so the instance holds tp times the
// tokens). A step's time is its slowest rank's: ceil(D / tp) decoding sequences (prompt
// chunks whole per rank, ceil(chunks / tp) of them) through the unsharded attention and
// dense layers, the routed experts over all N tokens of the instance as with ep groups, and
// per expert layer an all-to-all dispatch and combine of the rank's N / tp tokens x k
// copies x h x 2 bytes (the (tp − 1) / tp of them that leave the rank) over the tp link,
// in place of the two all-reduces.
#ifndef PARATUNE_INFERENCE_STEP_MODEL_H_
#define PARATUNE_INFERENCE_STEP_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/attention_span.h"
#include "inference/engine_profile.h"
#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "search/device_catalog.h"
#include "search/specs.h"

namespace paratune::inference {

class MeasuredStepTable;

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// The work of one engine step of one instance.
struct StepWork {
  double prefill_tokens = 0;  ///< Prompt tokens processed this step (chunks).
  /// Sum over the prompt chunks of chunk_tokens x (tokens before the chunk + chunk/2):
  /// the causal attention pairs the chunks compute.
  double prefill_attention_pairs = 0;
  double decode_sequences = 0;       ///< Sequences generating one token.
  double decode_context_tokens = 0;  ///< Sum of the decoding sequences' KV lengths.
  double sampled_sequences = 0;      ///< Sequences that produce a token (logits computed).
  /// Prompt chunks among prefill_tokens (one per prefilling sequence). With attention data
  /// parallelism a chunk runs whole on one rank; 0 = unknown, the tokens split evenly.
  double prefill_chunks = 0;
};

/// Bytes per rank, before the KV pool is sized.
struct RankMemory {
  double weights = 0;
  double activations = 0;
  double reserve = 0;
  double capacity = 0;
  double kv_pool = 0;  ///< The pool the engine allocates (may be <= 0: does not fit).
};

/// Step times of one instance layout. Not thread-safe: StepSeconds fills a cache of the
/// layer matmul times by row count (each plan builds its own models).
class StepModel {
 public:
  /// InvalidArgument when the layout cannot hold the model (tp does not divide the heads,
  /// pp exceeds the layers, ep breaks CheckExpertParallel or tp / ep does not divide the
  /// expert width).
  static absl::StatusOr<StepModel> Create(const ModelSpec& model, const DeviceProfile& device,
                                          const EngineProfile& engine, const ServingConfig& c,
                                          int64_t gpus_per_node);

  /// KV-cache bytes one token occupies on one rank: 2 (K and V) x layers of the stage x
  /// max(1, kv_heads / tp) x head_dim x bytes per element.
  double kv_bytes_per_token_per_rank() const { return kv_bytes_per_token_; }
  /// Memory of the most loaded rank with the engine's KV rule and `kv_fraction`.
  RankMemory Memory(int64_t max_batch_size, int64_t max_num_tokens, double kv_fraction) const;
  /// Tokens the pool of `memory` holds (on every rank of the instance), counted as tokens
  /// of every layer (AttentionSpan::KvSlots).
  double KvTokenCapacity(const RankMemory& memory) const;
  /// How far the layers attend (AttentionSpan: pool tokens per sequence, decode reads,
  /// prompt attention pairs with sliding-window layers).
  const AttentionSpan& span() const { return span_; }

  /// Seconds of one engine step for `w` over all pipeline stages (a micro-batch's trip).
  double StepSeconds(const StepWork& w) const;
  /// The same, by component (milliseconds).
  StepBreakdown Breakdown(const StepWork& w) const;
  /// The work of the rank a step waits for: all of it, or with attention data parallelism
  /// its share of the sequences (rounded up) and of the prompt chunks (whole, rounded up).
  StepWork SlowestRankWork(const StepWork& w) const;
  /// From now on step times come from `table` (inference/measured_steps.h), measured on
  /// this instance's shape, plus the engine's per-step and per-sequence overheads
  /// (breakdowns then say source "measured"). With pp > 1 the table timed one stage (the
  /// busiest: ceil(L / pp) layers on tp ranks).
  void UseMeasured(std::shared_ptr<const MeasuredStepTable> table) { measured_ = std::move(table); }
  bool measured() const { return measured_ != nullptr; }

  /// Matmul FLOPs of one prompt of `tokens` through the whole model (2 per weight and
  /// token, plus the causal attention 2 x tokens^2 x h per layer, plus the logits of the
  /// last token), for the whole instance (all ranks).
  double PrefillFlops(double tokens) const;
  /// Bytes of weights one rank reads per step.
  double weight_bytes_per_rank() const { return weight_bytes_read_; }
  int64_t pp() const { return pp_; }
  int64_t tp() const { return tp_; }
  int64_t ep() const { return ep_; }
  /// Attention data-parallel ranks (tp with attention_dp, else 1).
  int64_t attention_dp_size() const { return dp_; }
  /// One all-to-all (dispatch or combine) of `rank_rows` tokens' k routed copies (0 without
  /// attention data parallelism).
  double AllToAllSeconds(double rank_rows) const;

 private:
  StepModel() = default;
  double GemmSecondsOnRank(double rows, double n, double k) const;
  double LinearSeconds(double rows) const;           // One layer's matmuls on one rank.
  double FfnSeconds(double rows) const;              // The dense FFN of LinearSeconds.
  double AttentionLinearSeconds(double rows) const;  // QKV (or MLA's) and the projection.
  /// Router, permutation, routed and shared experts: the router and shared experts over the
  /// rank's `local_rows`, the routed experts over the instance's `rows` (equal without
  /// attention data parallelism).
  double ExpertFfnSeconds(double local_rows, double rows) const;
  /// An expert layer's matmuls on one rank: attention over `local_rows` (the rank's share of
  /// the instance's `rows` with attention data parallelism, else all of them), the MoE block
  /// as ExpertFfnSeconds.
  double ExpertLayerLinearSeconds(double rows, double local_rows) const;
  /// Expected distinct routed experts that `rows` tokens reach in one layer.
  double ExpertsReached(double rows) const;
  /// Of the busiest expert-parallel group: its experts that `rows` tokens reach, and the
  /// routed rows it receives (ep = 1: all of them).
  double BusiestGroupExperts(double rows) const;
  double BusiestGroupRows(double rows) const;
  /// Grouped GEMM: `groups` GEMMs of [rows x k] x [k x n] in one launch.
  double GroupedGemmSeconds(double groups, double rows, double n, double k) const;
  double AllReduceSeconds(double bytes) const;

  ModelSpec model_;
  DeviceProfile device_;
  EngineProfile engine_;
  int64_t tp_ = 1, pp_ = 1, ep_ = 1;
  // Attention data-parallel ranks (1 or tp), and the ranks attention, dense layers, shared
  // experts, embedding and output layer are sliced over (tp, or 1 with attention DP).
  int64_t dp_ = 1;
  double shard_ = 1;
  double layers_per_stage_ = 0;
  // Dense and expert layers of the most loaded stage (all dense for a dense model).
  double dense_layers_stage_ = 0, expert_layers_stage_ = 0;
  // Expert-layer shapes on one rank: routed experts E, those of the rank's group (E / ep)
  // and top-k, one expert's fc1 width and fc2 depth (/(tp / ep)), the shared experts' (/tp;
  // 0 without).
  double experts_ = 0, local_experts_ = 0, topk_ = 0, expert_fc1_n_ = 0, expert_fc2_k_ = 0;
  // Standard deviations by which the busiest of ep groups exceeds the mean (0 with ep = 1).
  double busiest_group_sigmas_ = 0;
  double shared_fc1_n_ = 0, shared_fc2_k_ = 0;
  // Attention matmuls on one rank when MLA (weights / h, as one GEMM of that width).
  double mla_attention_n_ = 0;
  // Attention FLOPs per causal pair and rank (4·d per query head; MLA 2·(qk + rope + v)).
  double attention_flops_per_pair_ = 0;
  QuantFormat weight_format_ = QuantFormat::kBf16;
  double head_dim_ = 0, q_heads_rank_ = 0, kv_heads_rank_ = 0;
  double kv_bytes_per_token_ = 0;  // Whole stage, one rank.
  double kv_bytes_per_token_layer_ = 0;
  AttentionSpan span_;
  double weight_bytes_read_ = 0;  // Per step, per rank, one stage's layers + head.
  double gemm_peak_ = 0, attention_peak_ = 0, stream_bw_ = 0;
  double tp_link_bandwidth_ = 0, tp_link_latency_ = 0;
  bool tp_oneshot_ = false;
  double pp_link_bandwidth_ = 0, pp_link_latency_ = 0;
  // Per-layer matmul shapes on one rank: {n, k} of QKV, proj, fc1, fc2.
  double qkv_n_ = 0, proj_k_ = 0, fc1_n_ = 0, fc2_k_ = 0, hidden_ = 0;
  double gemm_efficiency_large_ = 0;
  Precision gemm_precision_ = Precision::kBf16;
  double weight_bytes_per_element_ = 2;
  mutable std::vector<float> linear_cache_;            // LinearSeconds by rows, filled lazily.
  mutable std::vector<float> expert_cache_;            // ExpertLayerLinearSeconds by rows.
  mutable std::vector<float> attention_cache_;         // AttentionLinearSeconds by rank rows (DP).
  std::shared_ptr<const MeasuredStepTable> measured_;  // Null: modelled steps.
};

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_STEP_MODEL_H_
