// The serving loop: a ServingModel on `tp` thread ranks (Gloo), a ContinuousBatcher and a
// synthetic request trace, run on the real kernels. Rank 0 owns the clock: with Poisson
// arrivals it broadcasts the time each step, so every rank admits the same requests and
// runs the same plan (offline and closed-loop plans depend on completions only); sampled
// tokens are identical on every rank (vocab-parallel argmax). Rank 0 records each
// request's arrival, first-token and finish times. A closed-loop client's next request
// arrives when its previous one finishes and reaches the engine while the next step runs
// (a client's round trip is longer than the gap between two steps), so it joins the step
// after: as the inference simulator schedules it.
#ifndef PARATUNE_KERNELS_SERVING_SERVE_LOOP_H_
#define PARATUNE_KERNELS_SERVING_SERVE_LOOP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/serving/continuous_batcher.h"
#include "kernels/serving/request_trace.h"
#include "kernels/serving/serving_config.h"
#include "kernels/serving/serving_model.h"

namespace paratune::kernels::serving {

struct ServeOptions {
  ServingConfig model;  ///< The model and its tp; kv_block_size/num_kv_blocks size the cache.
  TraceOptions trace;
  int64_t max_batch_size = 8;
  int64_t max_num_tokens = 256;
  bool chunked_prefill = true;
  int64_t warmup_steps = 2;  ///< Untimed steps of a throw-away request before the trace.
  /// Per-rank memory capacity in bytes (0: unlimited); beyond it the run is
  /// ResourceExhausted.
  int64_t capacity_bytes = 0;
  /// Where the ranks run: CPU threads (Gloo), or CUDA devices 0 .. tp − 1 (NCCL; the model
  /// in model.dtype; aggregated, pp 1).
  BackendKind backend = BackendKind::kCpu;
  /// Disaggregated serving (both > 0; 0 and 0: aggregated): prefill_instances model
  /// instances of tp ranks compute the prompts and first tokens, decode_instances others
  /// the remaining tokens. A request goes to the prefill instance with the fewest
  /// outstanding requests; after its prompt its KV cache moves to the decode instance with
  /// the fewest, which admits it under its own batch and KV limits. Every instance has
  /// the model's shape, cache and the limits above. Not with attention_dp.
  int64_t prefill_instances = 0;
  int64_t decode_instances = 0;
  bool disaggregated() const { return prefill_instances > 0 || decode_instances > 0; }
  /// Keep every request's output tokens (RequestRecord::tokens).
  bool keep_tokens = false;

  absl::Status Validate() const;
};

struct RequestRecord {
  int64_t id = 0, isl = 0, osl = 0;
  int64_t output_tokens = 0;  ///< Tokens generated (equals osl when the run completed).
  std::vector<int32_t> tokens;  ///< The tokens, with ServeOptions::keep_tokens.
  double arrival_s = 0, first_token_s = 0, finish_s = 0;
  double ttft_s() const { return first_token_s - arrival_s; }
  double e2e_s() const { return finish_s - arrival_s; }
  /// Mean time per output token after the first; 0 when osl == 1.
  double tpot_s() const {
    return output_tokens > 1 ? (finish_s - first_token_s) / (output_tokens - 1) : 0.0;
  }
};

/// p50/p90/p99 and mean (linear interpolation between order statistics, as numpy).
struct Distribution {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Distribution Summarize(std::vector<double> values);

struct StepStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;  ///< Prompt tokens computed.
  int64_t decode_tokens = 0;   ///< Decode tokens computed.
  int64_t max_step_tokens = 0;
  int64_t max_step_sequences = 0;
  ModelPhaseTimes phases;  ///< Rank 0.
};

struct ServeResult {
  std::vector<RequestRecord> requests;  ///< In id order.
  double duration_s = 0;                ///< First arrival to last finish.
  StepStats steps;
  int64_t weight_bytes = 0;    ///< Per rank.
  int64_t kv_cache_bytes = 0;  ///< Per rank.
  int64_t peak_bytes = 0;      ///< Per rank (rank 0's tracking allocator).

  int64_t output_tokens() const;
  double output_tokens_per_s() const;
  Distribution ttft_s() const;
  Distribution tpot_s() const;
  Distribution e2e_s() const;
  /// Little's law: mean requests in the system = Σ e2e / duration.
  double mean_in_flight() const;
};

/// Runs the trace to completion on options.model.parallel.tp thread ranks; with pp > 1 on
/// pp x tp (pp micro-batch engines in flight, each with 1/pp of the KV pool: see
/// pipeline_loop.cc); disaggregated, on (prefill_instances + decode_instances) x tp.
absl::StatusOr<ServeResult> RunServeLoop(const ServeOptions& options);

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVE_LOOP_H_
