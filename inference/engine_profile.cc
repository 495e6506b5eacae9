// Engine profiles. Sources:
//  - TensorRT-LLM: KvCacheConfig.free_gpu_memory_fraction defaults to 0.9 of the memory free
//    after the engine is loaded (docs "How to Change KV Cache Behavior", llm-api reference
//    KvCacheConfig); tokens_per_block 64 in the 0.x TensorRT backend (32 in the PyTorch
//    backend); capacity scheduler policy GUARANTEED_NO_EVICT by default (docs "Scheduler");
//    max_batch_size 2048 and max_num_tokens 8192 are the trtllm-build/trtllm-serve
//    defaults. The C++ executor overlaps scheduling with the GPU: ~0.1 ms per step.
//  - vLLM: --gpu-memory-utilization 0.9 of the total memory (0.92 in recent releases);
//    block size 16; the V1 scheduler allocates blocks as sequences grow and preempts
//    (recompute) the newest request when the pool is full; --max-num-seqs 256 and
//    --max-num-batched-tokens 8192 defaults. Python scheduling and sampling cost ~1 ms per
//    step (vLLM V1 blog, "CPU overhead").
//  - SGLang: --mem-fraction-static is the fraction of the total memory for weights plus the
//    KV pool (auto: ~0.88 on 80-GB GPUs, server_args.py); page size 1; allocation as
//    sequences grow, with retraction when full; --chunked-prefill-size 8192 on large GPUs.
//    The overlapped scheduler hides most host time: ~0.4 ms per step.
//  - Runtime reserve: CUDA context and cuBLAS/NCCL workspaces (~1 GiB), CUDA graphs of the
//    decode batch sizes (~0.5-1.5 GiB), allocator slack.
//  - One-shot all-reduce: TensorRT-LLM's and vLLM's custom all-reduce kernels for small
//    messages on NVLink take ~5-8 us end to end (vLLM custom_all_reduce, TensorRT-LLM
//    allReduceKernels one-shot/two-shot), against NCCL's ~15-25 us for 8 ranks.
#include "inference/engine_profile.h"

namespace paratune::inference {
namespace {

EngineProfile Trtllm() {
  EngineProfile e;
  e.engine = ServingEngine::kTrtllm;
  e.name = "trtllm";
  e.kv_rule = KvBudgetRule::kFractionOfFree;
  e.kv_cache_fraction = 0.9;
  e.runtime_reserve_gib = 1.5;
  e.kv_block_tokens = 64;
  e.reserves_whole_sequence = true;
  e.step_overhead_s = 0.1e-3;
  e.per_sequence_overhead_s = 0.2e-6;
  e.oneshot_allreduce_latency_s = 6e-6;
  e.default_max_batch_size = 2048;
  e.default_max_num_tokens = 8192;
  return e;
}

EngineProfile Vllm() {
  EngineProfile e;
  e.engine = ServingEngine::kVllm;
  e.name = "vllm";
  e.kv_rule = KvBudgetRule::kFractionOfTotal;
  e.kv_cache_fraction = 0.9;
  e.runtime_reserve_gib = 2.0;
  e.kv_block_tokens = 16;
  e.reserves_whole_sequence = false;
  e.step_overhead_s = 1.0e-3;
  e.per_sequence_overhead_s = 2e-6;
  e.oneshot_allreduce_latency_s = 8e-6;
  e.default_max_batch_size = 256;
  e.default_max_num_tokens = 8192;
  return e;
}

EngineProfile Sglang() {
  EngineProfile e;
  e.engine = ServingEngine::kSglang;
  e.name = "sglang";
  e.kv_rule = KvBudgetRule::kStaticFractionOfTotal;
  e.kv_cache_fraction = 0.88;
  e.runtime_reserve_gib = 2.0;
  e.kv_block_tokens = 1;
  e.reserves_whole_sequence = false;
  e.step_overhead_s = 0.4e-3;
  e.per_sequence_overhead_s = 1e-6;
  e.oneshot_allreduce_latency_s = 7e-6;
  e.default_max_batch_size = 1024;
  e.default_max_num_tokens = 8192;
  return e;
}

}  // namespace

const EngineProfile& EngineProfileFor(ServingEngine engine) {
  static const EngineProfile* const kTable = new EngineProfile[3]{Trtllm(), Vllm(), Sglang()};
  for (int i = 0; i < 3; ++i) {
    if (kTable[i].engine == engine) return kTable[i];
  }
  return kTable[0];
}

}  // namespace paratune::inference
