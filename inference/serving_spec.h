// The domain form of an inference job specification (`kind: inference`): the model and the
// cluster as in training specs, the `serving` workload and limits, and the serving search
// options. Plain structs with defaults; each Validate() returns the first violated rule with
// a message naming the field (`serving.osl (0) must be > 0`).
#ifndef PARATUNE_INFERENCE_SERVING_SPEC_H_
#define PARATUNE_INFERENCE_SERVING_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/enums.h"
#include "search/specs.h"

namespace paratune::inference {

/// The serving engine: its scheduler, per-step overheads and memory reserve.
enum class ServingEngine { kTrtllm, kVllm, kSglang };
/// inflight: continuous batching; static: a fixed batch runs to completion.
enum class Batching { kInflight, kStatic };
/// Numeric format of the weights (int8/int4 are weight-only) or of the KV cache.
enum class QuantFormat { kBf16, kFp16, kFp8, kInt8, kInt4, kFp4 };
/// throughput: output tokens/s per GPU; latency: lowest TPOT p50 (then TTFT);
/// cost: lowest cost per million output tokens.
enum class ServingObjective { kThroughput, kLatency, kCost };

std::string_view ToString(ServingEngine v);
std::string_view ToString(Batching v);
std::string_view ToString(QuantFormat v);
std::string_view ToString(ServingObjective v);
absl::StatusOr<ServingEngine> ParseServingEngine(std::string_view s);
absl::StatusOr<Batching> ParseBatching(std::string_view s);
absl::StatusOr<QuantFormat> ParseQuantFormat(std::string_view s);
absl::StatusOr<ServingObjective> ParseServingObjective(std::string_view s);
/// Bytes per element of `f` (int4 and fp4: 0.5).
double BytesPerElement(QuantFormat f);

/// Percentile limits in milliseconds; unset = no limit.
struct LatencyLimits {
  std::optional<double> p50, p90, p99;
  bool empty() const { return !p50 && !p90 && !p99; }
};

/// InvalidArgument naming `field` and the rule when `ep` expert-parallel groups cannot split
/// `model`'s routed experts inside `tp` ranks: ep > 1 needs a mixture-of-experts model, ep
/// must divide model.num_experts and (tp > 0) tp. TensorRT-LLM's convention: moe_ep_size x
/// moe_tp_size = tp_size, each expert sliced over tp / ep ranks.
absl::Status CheckExpertParallel(const ModelSpec& model, int64_t tp, int64_t ep,
                                 const std::string& field);

/// InvalidArgument naming `field` and the rule when attention data parallelism cannot run
/// on `model` at (tp, ep): it needs tp > 1 (the data-parallel size is tp), a
/// mixture-of-experts model (a dense model's layers would all be replicated: nothing to
/// split) and ep == tp (the routed experts split over every attention rank). ep <= 0: not
/// checked (the planner sets it to tp).
absl::Status CheckAttentionDp(const ModelSpec& model, int64_t tp, int64_t ep,
                              const std::string& field);

/// The workload and the service-level limits (`serving:` in a spec file).
struct ServingSpec {
  ServingEngine engine = ServingEngine::kTrtllm;
  int64_t isl = 0;        ///< Input tokens per request (mean).
  double isl_stddev = 0;  ///< 0 = every request exactly isl.
  int64_t osl = 0;        ///< Output tokens per request (mean).
  double osl_stddev = 0;
  /// Closed-loop clients. With neither concurrency nor request_rate the run is offline:
  /// every request is issued at once (maximum throughput).
  std::optional<int64_t> concurrency;
  std::optional<double> request_rate;  ///< Requests/s, Poisson arrivals.
  int64_t num_requests = 1000;
  Batching batching = Batching::kInflight;
  std::optional<int64_t> batch_size;  ///< Static batching only.
  LatencyLimits ttft_ms;              ///< Time to first token.
  LatencyLimits tpot_ms;              ///< Time per output token after the first.
  std::optional<double> min_tokens_per_sec_per_user;
  std::optional<double> price_per_gpu_hour;  ///< Adds cost per million output tokens.
  /// The engine's KV-cache memory fraction (engine_profile.h: TensorRT-LLM
  /// free_gpu_memory_fraction, vLLM gpu_memory_utilization, SGLang mem_fraction_static);
  /// unset = the engine's default.
  std::optional<double> kv_cache_fraction;

  absl::Status Validate() const;
};

/// Allowed values per serving dimension; empty = the planner chooses; one value pins it.
struct ServingSearchOptions {
  std::vector<int64_t> tp, pp;
  /// Expert-parallel groups inside an instance's tp ranks (mixture-of-experts models; each
  /// must divide model.num_experts and one of tp). Empty: 1, every expert sliced over tp.
  std::vector<int64_t> ep;
  std::vector<int64_t> replicas;        ///< Model instances; empty: as many as fit.
  std::vector<int64_t> max_batch_size;  ///< Engine limit on sequences per step.
  std::vector<int64_t> max_num_tokens;  ///< Engine limit on tokens per step (chunked prefill).
  std::vector<QuantFormat> weight_precision, kv_cache_precision;
  std::vector<bool> disaggregated;  ///< true: separate prefill and decode pools.
  /// Attention data parallelism (ServingConfig::attention_dp); empty: false only. true needs
  /// a mixture-of-experts model and tp > 1, and sets ep = tp.
  std::vector<bool> attention_dp;
  /// Disaggregated pools: instances running prefill / decode; empty: every split of the
  /// budget.
  std::vector<int64_t> prefill_replicas, decode_replicas;
  ServingObjective objective = ServingObjective::kThroughput;
  int64_t top_k = 10;
  SearchMode mode = SearchMode::kModel;  ///< profile: workers measure the kernels.
  int64_t verify_top_k = 0;              ///< Run the top layouts with the serving loop.

  absl::Status Validate() const;
};

/// A whole inference job (`kind: inference`).
struct InferenceJobSpec {
  std::string name;
  ModelSpec model;
  ClusterSpec cluster;  ///< num_gpus is the budget.
  ServingSpec serving;
  ServingSearchOptions search;

  /// Every section, then the cross-section rules (gpu in the catalog, pinned tp divides
  /// the heads, the budget holds at least one instance, precisions the device supports).
  absl::Status Validate() const;
};

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_SERVING_SPEC_H_
