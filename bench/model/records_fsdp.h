// The sharded-data-parallel training records of moe_fsdp_calibration.json (llm-foundry's
// MPT runs under PyTorch FSDP, and any other dense record that names a ZeRO stage) as jobs
// and layouts, for bench/model/model_accuracy.
#ifndef PARATUNE_BENCH_MODEL_RECORDS_FSDP_H_
#define PARATUNE_BENCH_MODEL_RECORDS_FSDP_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "search/parallel_config.h"
#include "search/specs.h"

namespace paratune::bench {

/// One dense record with a stated sharding and a published tokens/s/GPU.
struct FsdpRecord {
  std::string id;
  JobSpec spec;
  ParallelConfig config;  ///< Stated layout; zero_stage -> data_parallel_sharding,
                          ///< fsdp_shard_size < dp*cp -> shard_group_size (HSDP).
  double published_tokens_per_gpu = 0;
  /// The record names its activation recompute (else `config` has none and the benchmark
  /// chooses it, as the planner fills an unstated knob).
  bool recompute_stated = true;
};

/// The dense, sharded records of `records` (moe_fsdp_calibration.json) on a GPU of the
/// device catalog; a record whose `framework` names llm-foundry has training.framework
/// llm-foundry, one that names NeMo AutoModel is read by ReadAsAutoModel. MPT models (ALiBi: no position parameters) are read with rotary
/// positions, which also have none.
std::vector<FsdpRecord> FsdpRecords(const nlohmann::json& records);

}  // namespace paratune::bench

#endif  // PARATUNE_BENCH_MODEL_RECORDS_FSDP_H_
