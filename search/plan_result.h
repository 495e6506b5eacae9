// What the planner returns: ranked layouts with time and memory breakdowns.
// Field names follow proto/paratune/v1/results.proto (snake_case in JSON).
#ifndef PARATUNE_SEARCH_PLAN_RESULT_H_
#define PARATUNE_SEARCH_PLAN_RESULT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "search/parallel_config.h"

namespace paratune {

/// Seconds per iteration on the critical path, by cause. ep_comm: the expert layers'
/// dispatch and combine (and ETP collectives) that compute does not hide; offload: the
/// GPU-host copies of activation offload that the layers' compute does not hide.
struct TimeBreakdown {
  double compute = 0, tp_comm = 0, cp_comm = 0, pp_bubble = 0, pp_p2p = 0, dp_comm = 0,
         optimizer = 0, ep_comm = 0, offload = 0;
};

/// Bytes on the most loaded GPU, by cause (GiB in JSON).
struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, other = 0;
  double capacity = 0;  ///< Device memory, bytes.
  /// Of `other`: the last stage's loss buffers (logits and their FP32 copy), when the peak
  /// is the last stage's; 0 otherwise. Last, so that positional initialisers keep their
  /// meaning.
  double loss_buffers = 0;
  /// Host memory this GPU's share of the offloaded state takes, and what the host has per
  /// GPU (0 without offload).
  double host = 0, host_capacity = 0;
  double Peak() const { return weights + gradients + optimizer + activations + other; }
  /// The GPU peak within capacity and the offloaded state within the host's.
  bool Fits() const { return Peak() <= capacity && host <= host_capacity; }
};

enum class ResultSource { kModelled, kMeasured };

struct RankedConfig {
  int64_t rank = 0;  ///< 1 = best.
  ParallelConfig config;
  double iteration_time_s = 0;
  double tokens_per_sec_per_gpu = 0;
  double model_tflops_per_gpu = 0;
  double hardware_tflops_per_gpu = 0;
  double mfu = 0;  ///< Model FLOPs utilisation, 0..1.
  MemoryBreakdown memory;
  bool fits = true;
  ResultSource source = ResultSource::kModelled;
  TimeBreakdown time;
  double time_to_train_days = 0;  ///< When training.total_tokens > 0.
  std::vector<std::string> notes;  ///< What limits this layout, in words.
};

struct RejectedConfig {
  ParallelConfig config;
  std::string reason;  ///< "out of memory by 3.2 GiB (peak 83.2 of 80.0 GiB)", a rule.
};

struct PlanResult {
  std::vector<RankedConfig> ranked;  ///< Best first, at most search.top_k.
  int64_t candidates_considered = 0;
  int64_t feasible = 0;
  double elapsed_ms = 0;
  std::vector<RejectedConfig> rejected;
  /// How many layouts were rejected when `rejected` lists only the first of them (a
  /// coordinator's results cap the list); 0 means rejected.size().
  int64_t rejected_total = 0;
  /// Per-rule counts of all rejected layouts, most frequent first (rule: the reason without
  /// its numbers, server/convert.h RejectionRule), when `rejected` lists only the first of
  /// them; empty means they are counted from `rejected`.
  std::vector<std::pair<std::string, int64_t>> rejected_reasons;
};

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PLAN_RESULT_H_
