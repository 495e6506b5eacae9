// The result of an inference search: one scored serving layout (the JSON `RankedConfig`
// of an inference job), the rejected ones with their reasons, and the Pareto front.
#ifndef PARATUNE_INFERENCE_SERVING_RESULT_H_
#define PARATUNE_INFERENCE_SERVING_RESULT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inference/serving_spec.h"

namespace paratune::inference {

/// One serving layout. Aggregated: `replicas` instances of tp*pp GPUs each serve whole
/// requests. Disaggregated: `prefill_replicas` instances run prefill and `decode_replicas`
/// run decode (each tp*pp GPUs), the KV cache moving between them.
struct ServingConfig {
  int64_t tp = 1, pp = 1;
  /// Expert parallelism inside the tp ranks of a stage (TensorRT-LLM moe_ep_size, with
  /// moe_tp_size = tp / ep): the routed experts split over ep groups of tp / ep ranks, each
  /// expert sliced over its group. It adds no GPUs; 1 = every expert sliced over all tp.
  int64_t ep = 1;
  /// Attention data parallelism (TensorRT-LLM enable_attention_dp, SGLang
  /// --enable-dp-attention, vLLM --data-parallel-size with --enable-expert-parallel): each of
  /// the tp ranks runs attention and the dense layers unsharded on its own sequences with its
  /// own KV cache, and the routed experts split over all of them (ep = tp), the tokens moving
  /// by an all-to-all dispatch and combine. Needs a mixture-of-experts model and tp > 1.
  bool attention_dp = false;
  int64_t replicas = 1;
  /// Sequences per engine step; with attention_dp per attention rank (the instance runs tp
  /// times as many).
  int64_t max_batch_size = 0;
  int64_t max_num_tokens = 0;  ///< Tokens per engine step (per attention rank with attention_dp).
  QuantFormat weight_precision = QuantFormat::kBf16;
  QuantFormat kv_cache_precision = QuantFormat::kBf16;
  bool disaggregated = false;
  int64_t prefill_replicas = 0;  ///< Disaggregated only.
  int64_t decode_replicas = 0;   ///< Disaggregated only.

  int64_t gpus_per_instance() const { return tp * pp; }
  /// Attention data-parallel ranks of an instance: tp with attention_dp, else 1.
  int64_t attention_dp_size() const { return attention_dp ? tp : 1; }
  /// GPUs the layout uses.
  int64_t num_gpus() const;
  /// "tp4 pp1 x2 mbs256 mnt8192 w:fp8 kv:fp8" style one-liner.
  std::string ToString() const;
  bool operator==(const ServingConfig&) const = default;
};

/// mean and percentiles of a latency, milliseconds.
struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

/// Memory per GPU of the most loaded rank, GiB.
struct ServingMemory {
  double weights = 0;      ///< After quantisation, scales included.
  double kv_cache = 0;     ///< The KV-cache pool the engine allocates.
  double activations = 0;  ///< Activation and logits workspace at max_num_tokens.
  double reserve = 0;      ///< Runtime reserve: CUDA graphs, NCCL, allocator.
  double peak = 0;
  double capacity = 0;
};

/// Where a step's time goes, milliseconds (one engine step of the phase).
struct StepBreakdown {
  double compute = 0;      ///< GEMMs and attention.
  double memory = 0;       ///< Weight and KV reads beyond what compute hides.
  double tp_comm = 0;      ///< TP all-reduces.
  double pp_comm = 0;      ///< PP hand-offs and bubbles.
  double overhead = 0;     ///< Scheduler, sampling, launch.
  double kv_transfer = 0;  ///< Disaggregated: prefill-to-decode KV move per request.
  double total = 0;
  std::string source = "modelled";  ///< "measured" when composed from worker profiles.
};

/// A serving layout run end to end with the serving loop on a worker (search.verify_top_k):
/// measured next to the entry's predicted figures.
struct InferenceVerification {
  std::string status;  ///< "verified", "verifying" or "not verified: <why>".
  LatencyStats measured_ttft_ms, measured_tpot_ms, measured_e2e_latency_ms;
  double measured_output_tokens_per_sec = 0;
  int64_t measured_requests = 0;  ///< Requests the run completed.
};

/// One scored serving layout.
struct InferenceRankedConfig {
  int64_t rank = 0;  ///< 1 = best.
  ServingConfig config;
  double output_tokens_per_sec_per_gpu = 0;
  double output_tokens_per_sec = 0;
  double tokens_per_sec_per_user = 0;
  double requests_per_sec = 0;
  LatencyStats ttft_ms, tpot_ms, e2e_latency_ms;
  ServingMemory memory;
  int64_t max_concurrency = 0;  ///< Sequences the KV budget holds at once (all instances).
  std::optional<double> cost_per_million_output_tokens;
  bool meets_limits = true;
  bool pareto_optimal = false;  ///< On the tokens/s/GPU vs tokens/s/user front.
  StepBreakdown prefill_step, decode_step;
  std::vector<std::string> notes;  ///< Why it ranks where it does; limits missed by how much.
  /// Set when the job asked for verification (search.verify_top_k) of this layout.
  std::optional<InferenceVerification> verification;
};

/// A layout that was not scored or missed the limits, with the rule it broke.
struct InferenceRejected {
  ServingConfig config;
  std::string rule;    ///< Stable key: "memory", "ttft", "tpot", "tokens_per_user", "layout".
  std::string reason;  ///< "does not fit by 12.3 GiB", "misses TTFT p99 by 340 ms".
};

struct InferencePlanResult {
  std::vector<InferenceRankedConfig> ranked;  ///< top_k, best first.
  /// The Pareto front (tokens/s/GPU against tokens/s/user) over every feasible layout,
  /// by decreasing tokens/s/GPU.
  std::vector<InferenceRankedConfig> pareto_front;
  std::vector<InferenceRejected> rejected;  ///< A sample, with every rule represented.
  int64_t candidates_considered = 0;
  int64_t feasible = 0;
  int64_t rejected_total = 0;
  std::vector<std::pair<std::string, int64_t>> rejected_reasons;  ///< rule -> count.
  std::string recommendation;  ///< One sentence: the pick and why, for the limits given.
  double elapsed_ms = 0;
};

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_SERVING_RESULT_H_
