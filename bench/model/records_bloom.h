// BigScience's topology sweep before training BLOOM-176B (sweeps.json
// "bloom_tr11_topology_sweep"): its runs as jobs and layouts, for bench/model/ranking
// (throughput) and bench/model/memory_fit (memory per GPU).
#ifndef PARATUNE_BENCH_MODEL_RECORDS_BLOOM_H_
#define PARATUNE_BENCH_MODEL_RECORDS_BLOOM_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "search/parallel_config.h"
#include "search/specs.h"

namespace paratune::bench {

/// One run that finished with a recorded iteration time and global batch.
struct BloomRecord {
  std::string id;     ///< "bloom#N": the row's position in the sweep, from 1.
  std::string group;  ///< Candidate model, GPU count and global batch: one job.
  JobSpec spec;
  ParallelConfig config;
  double tokens_per_sec_per_gpu = 0;  ///< Global batch x sequence / (time x GPUs).
  /// The memory per GPU the run's nvidia-smi showed (MiB / 1024), when recorded.
  std::optional<double> memory_gib;
};

/// The runs of the sweep, read as the facts its sources document, the same for every row:
/// Megatron-DeepSpeed (training.framework megatron-deepspeed: DeepSpeed's pipeline engine,
/// the gradient reduce after the last backward, every pipeline transfer blocking),
/// activation checkpointing of every layer (the tr11 scripts' --checkpoint-activations),
/// ZeRO-1 unless the row states stage 0, BLOOM's 250,880-entry padded vocabulary, and Jean
/// Zay's network (four Omni-Path 100 Gb/s links per 8-GPU node).
std::vector<BloomRecord> BloomRecords(const nlohmann::json& sweep);

}  // namespace paratune::bench

#endif  // PARATUNE_BENCH_MODEL_RECORDS_BLOOM_H_
