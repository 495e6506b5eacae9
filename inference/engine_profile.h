// The serving engines as a table of kinds: each engine's memory policy (which fraction of
// which memory its KV-cache pool takes by default), its runtime reserve, its scheduler's
// admission rule and its per-step host overheads. A new engine is a new entry.
#ifndef PARATUNE_INFERENCE_ENGINE_PROFILE_H_
#define PARATUNE_INFERENCE_ENGINE_PROFILE_H_

#include <cstdint>
#include <string_view>

#include "inference/serving_spec.h"

namespace paratune::inference {

/// How the engine sizes its KV-cache pool from `kv_cache_fraction`.
enum class KvBudgetRule {
  /// fraction x (memory free after weights, activations and the runtime reserve):
  /// TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction.
  kFractionOfFree,
  /// fraction x capacity, minus weights, activations and the reserve:
  /// vLLM --gpu-memory-utilization.
  kFractionOfTotal,
  /// fraction x capacity for weights plus KV pool, the rest for activations and the
  /// reserve: SGLang --mem-fraction-static.
  kStaticFractionOfTotal,
};

struct EngineProfile {
  ServingEngine engine = ServingEngine::kTrtllm;
  std::string_view name;
  KvBudgetRule kv_rule = KvBudgetRule::kFractionOfFree;
  double kv_cache_fraction = 0.9;  ///< The engine's default.
  double runtime_reserve_gib = 0;  ///< CUDA context, CUDA graphs, NCCL and allocator.
  int64_t kv_block_tokens = 1;     ///< Paged KV-cache block (page) size, tokens.
  /// Admission reserves blocks for the whole sequence (prompt + max output), so nothing is
  /// ever preempted (TensorRT-LLM GUARANTEED_NO_EVICT); false: blocks are allocated as
  /// the sequence grows and the newest sequence is preempted (recomputed) when full.
  bool reserves_whole_sequence = true;
  double step_overhead_s = 0;          ///< Host scheduling, launch and sampling per step.
  double per_sequence_overhead_s = 0;  ///< Per sequence in the step (sampling, bookkeeping).
  /// One-shot custom all-reduce (NVLink peers read each other's buffers): fixed cost.
  double oneshot_allreduce_latency_s = 0;
  int64_t default_max_batch_size = 0;
  int64_t default_max_num_tokens = 0;
};

/// The profile of `engine` (sources in engine_profile.cc).
const EngineProfile& EngineProfileFor(ServingEngine engine);

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_ENGINE_PROFILE_H_
