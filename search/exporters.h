// A chosen layout as the settings of the frameworks that run it: Megatron-LM's
// pretrain_gpt.py command-line arguments and a NeMo (megatron_gpt_config.yaml) override.
#ifndef PARATUNE_SEARCH_EXPORTERS_H_
#define PARATUNE_SEARCH_EXPORTERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "search/parallel_config.h"
#include "search/specs.h"

namespace paratune {

/// One command-line flag and its value ("" for a switch such as --sequence-parallel).
using CommandLineFlag = std::pair<std::string, std::string>;

/// Megatron-LM arguments for `config` on `spec`: parallelism (data parallelism is implied
/// by the world size), batch, recompute, optimizer sharding, architecture, precision.
/// Full recompute of every layer of a stage (recompute_num_layers 0 or = layers per
/// stage) is `--recompute-method uniform --recompute-num-layers 1`; of only N layers per
/// stage, `--recompute-method block --recompute-num-layers N` (per model chunk with VP).
/// InvalidArgument if the layout breaks a rule of ValidateParallelConfig's kind that the
/// exporter relies on (layers not divisible by pp * vp).
absl::StatusOr<std::vector<CommandLineFlag>> MegatronArgs(const JobSpec& spec,
                                                          const ParallelConfig& config);

/// The arguments as a shell continuation block, one flag per line, after a `#` comment
/// naming the layout and the launch shape (nodes x GPUs per node).
absl::StatusOr<std::string> FormatMegatronArgs(const JobSpec& spec, const ParallelConfig& config);

/// A NeMo 1.x override (YAML): trainer.num_nodes / devices / precision and the model.*
/// keys of megatron_gpt_config.yaml (parallel sizes, batch, architecture,
/// activations_checkpoint_*, optim.name distributed_fused_adam when sharded).
absl::StatusOr<std::string> NemoConfigOverride(const JobSpec& spec, const ParallelConfig& config);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_EXPORTERS_H_
