// A discrete-event simulation of serving engines' schedulers over a request stream.
//
// Each engine (one model instance, or one pipeline micro-batch slot of an instance: a pp-
// stage instance keeps pp micro-batches in flight, so it is simulated as pp engines each
// with 1/pp of its KV pool and the full trip time per step) runs steps back to back while it
// has work. A step of an inflight (continuous-batching) engine admits waiting requests while
// the batch limit and the KV budget allow, then packs one token for every decoding
// sequence and prompt chunks up to max_num_tokens (chunked prefill); an engine that
// allocates KV blocks as sequences grow preempts its newest sequence (to be recomputed)
// when the pool is full. A static-batching engine runs a batch's prefill in one step and
// then decodes until the whole batch is done. Disaggregated pools: prefill engines produce
// the first token, the KV cache moves to the least loaded decode engine, which admits it
// under its own budget and decodes. Requests arrive all at once (offline), from closed-loop
// clients (a new request when one completes) or as a Poisson stream, and go to the engine
// with the fewest outstanding requests.
#ifndef PARATUNE_INFERENCE_SIMULATOR_H_
#define PARATUNE_INFERENCE_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "inference/serving_result.h"
#include "inference/serving_spec.h"
#include "inference/step_model.h"

namespace paratune::inference {

enum class EngineRole { kMixed, kPrefill, kDecode };

/// One simulated engine (scheduler plus the step-time function of its instance).
struct SimEngine {
  const StepModel* model = nullptr;  ///< Not owned; outlives the simulation.
  EngineRole role = EngineRole::kMixed;
  double kv_token_capacity = 0;  ///< Tokens its KV pool holds.
  int64_t kv_block_tokens = 1;
  bool reserves_whole_sequence = true;
  int64_t max_batch_size = 256;
  int64_t max_num_tokens = 8192;
};

/// The request stream.
struct SimWorkload {
  int64_t isl = 0, osl = 0;
  double isl_stddev = 0, osl_stddev = 0;
  std::optional<int64_t> concurrency;
  std::optional<double> request_rate;
  int64_t num_requests = 0;
  Batching batching = Batching::kInflight;
  int64_t static_batch_size = 0;
  uint64_t seed = 1;
};

struct SimulationResult {
  LatencyStats ttft_ms, tpot_ms, e2e_latency_ms;
  double output_tokens_per_sec = 0;
  double requests_per_sec = 0;
  double tokens_per_sec_per_user = 0;  ///< 1000 / mean TPOT.
  double makespan_s = 0;
  int64_t completed = 0;
  int64_t preemptions = 0;
  int64_t dropped = 0;           ///< Requests longer than a KV pool holds (never served).
  double mean_decode_batch = 0;  ///< Decoding sequences per step, averaged over steps.
  int64_t steps = 0;
};

/// Runs the stream through `engines` (mixed ones, or prefill and decode ones).
/// `kv_transfer_seconds(isl)` is the prefill-to-decode move of one request's KV cache.
SimulationResult Simulate(const std::vector<SimEngine>& engines, const SimWorkload& workload,
                          const std::function<double(int64_t)>& kv_transfer_seconds = {});

/// Mean and nearest-rank p50/p90/p99 of `values` (reordered).
LatencyStats Percentiles(std::vector<double>& values);

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_SIMULATOR_H_
