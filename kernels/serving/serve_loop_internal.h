// Pieces the aggregated and the disaggregated serving loops share (serve_loop.cc,
// disaggregated_loop.cc); not part of the serving kernels' interface.
#ifndef PARATUNE_KERNELS_SERVING_SERVE_LOOP_INTERNAL_H_
#define PARATUNE_KERNELS_SERVING_SERVE_LOOP_INTERNAL_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "kernels/serving/continuous_batcher.h"
#include "kernels/serving/request_trace.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_model.h"

namespace paratune::kernels::serving::internal {

using Clock = std::chrono::steady_clock;

/// Seconds since t0 on this rank.
inline double Elapsed(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Every rank gets rank 0's values (an all-reduce where the other ranks add zeros); the
/// ranks must pass vectors of one size.
absl::Status Broadcast(Communicator& comm, std::vector<double>* values);
absl::StatusOr<double> Broadcast(Communicator& comm, double value);

/// One step of the served model, whole or through a pipeline: the sampled chunks' tokens.
using StepFn = std::function<absl::StatusOr<std::vector<int32_t>>(
    const std::vector<int32_t>& tokens, const std::vector<SeqChunk>& chunks)>;

/// The warm-up's throw-away sequence.
inline constexpr int64_t kWarmUpSeq = -1;

/// A throw-away request (kWarmUpSeq) through prefill and options.warmup_steps − 1 decodes
/// by `step`, untimed; the caller frees it.
absl::Status WarmUpRequest(const ServeOptions& options, const StepFn& step);

/// WarmUpRequest on the whole model, then the sequence freed and the model's times and the
/// backend's peaks reset.
absl::Status WarmUp(const ServeOptions& options, ServingModel& model, Backend& backend);

/// What RunInstances gives one rank: its backend (CPU, or CUDA device instance·tp + rank,
/// with the options' memory capacity) and its groups on it. The backend outlives the
/// groups.
struct RankResources {
  std::unique_ptr<Backend> backend;
  ServingGroups groups;
};

/// One rank's model (stage `stage` of options.model) on the rank's backend and groups; on
/// a device backend with phase timing off.
struct RankModel {
  Backend* backend = nullptr;  ///< The rank's (RankResources).
  std::unique_ptr<ServingModel> model;
};
absl::StatusOr<RankModel> MakeRankModel(const ServeOptions& options, RankResources& rank,
                                        int64_t stage = 0);

/// Keeps the larger of *result's per-rank memory figures and this rank's (the busiest
/// rank's weights, KV cache and peak are reported). The caller serializes calls.
void KeepLargestMemory(const RankModel& rank, ServeResult* result);

/// Runs `body(instance, rank, resources)` on instances x tp thread ranks, each instance
/// with its own TP (and EP) groups; `on_failure` runs when a rank fails, to wake ranks
/// waiting on it outside the groups' collectives. The first error.
absl::Status RunInstances(
    const ServeOptions& options, int instances, const std::string& name,
    const std::function<absl::Status(int instance, int rank, RankResources& resources)>& body,
    const std::function<void()>& on_failure = {});

/// A step's new tokens, chunk by chunk: the chunk's slice of its prompt (`prompts`) or,
/// past the prompt, its sequence's last token; counts them (prefill or decode tokens, the
/// step's tokens and sequences) into *stats.
std::vector<int32_t> StepInputTokens(const std::vector<SeqChunk>& plan,
                                     const std::map<int64_t, std::vector<int32_t>>& prompts,
                                     const std::map<int64_t, int32_t>& last_token,
                                     StepStats* stats);

/// The batcher's limits for `model`'s cache under `options`.
BatcherLimits LimitsFor(const ServeOptions& options, ServingModel& model);

/// The trace's requests in id order, their records and the run's duration (first arrival
/// to last finish) into *result.
void FinishResult(ServeResult* result);

/// RunServeLoop with options.model.parallel.pp > 1 (pipeline_loop.cc).
absl::StatusOr<ServeResult> RunPipelined(const ServeOptions& options,
                                         const std::vector<TraceRequest>& trace);

/// RunServeLoop with options.disaggregated() (disaggregated_loop.cc).
absl::StatusOr<ServeResult> RunDisaggregated(const ServeOptions& options,
                                             const std::vector<TraceRequest>& trace);

}  // namespace paratune::kernels::serving::internal

#endif  // PARATUNE_KERNELS_SERVING_SERVE_LOOP_INTERNAL_H_
