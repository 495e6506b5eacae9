// Times one serving step on the serving kernels, as a worker's serving task asks: a
// prefill of `batch` prompts of `seq_length` tokens, or a decode step of `batch` sequences
// each holding `context_length` cached tokens (the cache is filled with synthetic K/V, so
// long contexts cost no prefill), over `num_layers` layers under tp thread ranks (Gloo on
// the CPU; one device per rank and NCCL on CUDA, where the total is timed over steps that
// do not wait at phase boundaries and the parts over as many more that do).
// Reports per step the total and its parts (GEMMs, attention, norms/activation, TP
// communication, logits), each as median/min/max over the timed iterations, and every
// rank's tracking-allocator peak; a shape that does not fit `capacity_bytes_per_rank` is
// ResourceExhausted (the allocator's OOM status, carrying the bytes requested).
#ifndef PARATUNE_KERNELS_SERVING_SERVING_STEP_RUNNER_H_
#define PARATUNE_KERNELS_SERVING_SERVING_STEP_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/serving/serving_config.h"
#include "kernels/step_runner.h"

namespace paratune::kernels::serving {

enum class ServingPhase { kPrefill, kDecode };

struct ServingStepConfig {
  /// Shape, tp, num_layers, weight_quant, kv_dtype, kv_block_size (num_kv_blocks is
  /// derived from the batch). A vocab_size of 0 is replaced by 128·tp (a minimal table).
  ServingConfig model;
  ServingPhase phase = ServingPhase::kDecode;
  /// Sequences in the step (with model.attention_dp: over all the ranks, each running its
  /// share, at least one).
  int64_t batch = 1;
  int64_t seq_length = 0;      ///< Prefill: prompt tokens per sequence.
  int64_t context_length = 0;  ///< Decode: tokens already cached per sequence.
  bool logits = false;         ///< Include final norm, output GEMM and greedy sampling.
  int64_t warmup = 1;
  int64_t iters = 5;
  int64_t capacity_bytes_per_rank = 0;  ///< 0: unlimited.
  /// Where the ranks run: CPU threads, or CUDA devices 0 .. tp − 1 (model.dtype bf16, fp16
  /// or fp32 there).
  BackendKind backend = BackendKind::kCpu;

  /// First violated rule, e.g. `context_length (0) must be positive for a decode step`.
  absl::Status Validate() const;
};

struct ServingStepResult {
  /// "total", "gemm", "attention", "other", "tp_comm", "logits": seconds per step.
  std::vector<PhaseTiming> phases;
  std::vector<int64_t> peak_bytes_per_rank;
  int64_t weight_bytes = 0;    ///< Per rank.
  int64_t kv_cache_bytes = 0;  ///< Per rank.
  /// Bytes of each TP all-reduce of the step (tokens·h·bytes of model.dtype) and their
  /// number (1 + 2·layers);
  /// 0 with attention data parallelism.
  int64_t tp_allreduce_bytes = 0;
  int64_t tp_allreduces_per_step = 0;
};

absl::StatusOr<ServingStepResult> RunServingStep(const ServingStepConfig& config);

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVING_STEP_RUNNER_H_
