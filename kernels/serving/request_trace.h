// Synthetic request traces for the serving loop: input/output lengths fixed or uniformly
// jittered around a mean, and arrivals offline (all at t = 0), closed-loop (a fixed number
// of clients, each sending its next request when the previous one finishes) or Poisson
// (exponential gaps at a rate), as the benchmark clients of vLLM and TensorRT-LLM.
#ifndef PARATUNE_KERNELS_SERVING_REQUEST_TRACE_H_
#define PARATUNE_KERNELS_SERVING_REQUEST_TRACE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paratune::kernels::serving {

struct TraceOptions {
  int64_t num_requests = 16;  ///< Requests in the trace.
  int64_t isl = 32;           ///< Mean input (prompt) tokens.
  int64_t osl = 16;           ///< Mean output tokens (generated exactly; no early stop).
  double isl_jitter = 0.0;    ///< Lengths uniform in mean·[1 − j, 1 + j]; 0: fixed.
  double osl_jitter = 0.0;
  int64_t concurrency = 0;    ///< Closed-loop clients (> 0), or
  double request_rate = 0.0;  ///< Poisson arrivals per second (> 0); neither: offline.
  uint64_t seed = 1;          ///< Lengths, arrivals and prompt tokens.

  /// First violated rule, e.g. `osl (0) must be positive`.
  absl::Status Validate() const;
  /// "offline" | "concurrency" | "rate".
  const char* mode() const;
};

struct TraceRequest {
  int64_t id = 0;
  int64_t isl = 0;
  int64_t osl = 0;
  /// Seconds after the start (Poisson); 0 offline; closed-loop requests arrive when a
  /// client's previous request finishes (the first `concurrency` at 0).
  double arrival_s = 0.0;
};

/// The trace's requests in id order.
absl::StatusOr<std::vector<TraceRequest>> MakeTrace(const TraceOptions& options);

/// Prompt tokens of request `id`, deterministic, in [0, vocab).
std::vector<int32_t> PromptTokens(uint64_t seed, int64_t id, int64_t isl, int64_t vocab);

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_REQUEST_TRACE_H_
