// A chosen layout as the settings of the frameworks that run it: Megatron-LM's
// pretrain_gpt.py command-line arguments, a NeMo (megatron_gpt_config.yaml) override, a
// DeepSpeed JSON config and a torchtitan job TOML; TrainingExporters() lists them.
#ifndef PARATUNE_SEARCH_EXPORTERS_H_
#define PARATUNE_SEARCH_EXPORTERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

/// A DeepSpeed config (ds_config.json): batch sizes, precision, zero_optimization.stage
/// (0-3 from data_parallel_sharding; HSDP as ZeRO++'s hierarchical partition
/// zero_hpz_partition_size for full sharding, MiCS's mics_shard_size otherwise) with
/// overlapped communication and 40M-element buckets, activation checkpointing for
/// recompute, AutoTP (tensor_parallel.autotp_size) for tp > 1. InvalidArgument for what
/// DeepSpeed cannot run: cp > 1, sequence parallelism, and pp > 1 with ZeRO-2/3 (its
/// pipeline engine takes stage 0 or 1 only).
absl::StatusOr<std::string> DeepSpeedConfig(const JobSpec& spec, const ParallelConfig& config);

/// A torchtitan job config (TOML): [parallelism] degrees (data_parallel_shard_degree is
/// the shard group over DP x CP divided by cp, data_parallel_replicate_degree the
/// replicas), pipeline schedule, [activation_checkpoint], [training] batch and sequence,
/// float8 for FP8, mx for MXFP8 (NVFP4: InvalidArgument). torchtitan shards with FSDP2 only: full
/// is fsdp_reshard_after_forward "default", optimizer_grads "never" (parameters stay gathered
/// between forward and backward); optimizer is its pipelined FSDP2 (pp > 1: "default", which
/// keeps the gathered parameters under PP) and has no form without a pipeline: InvalidArgument.
absl::StatusOr<std::string> TorchtitanConfig(const JobSpec& spec, const ParallelConfig& config);

/// NeMo AutoModel recipe keys (YAML) to merge into a recipe: step_scheduler's global and
/// local batch, distributed (strategy fsdp2, with reshard_after_forward false and
/// defer_fsdp_grad_sync true for optimizer, the reverse for full; ddp for none; tp/cp/pp/ep
/// sizes, sequence_parallel, activation_checkpointing, enable_async_tensor_parallel), the
/// pipeline schedule (pp_schedule 1f1b or interleaved1f1b, pp_microbatch_size, and
/// layers_per_stage where some value gives the layout's p*v stages, else
/// module_fqns_per_model_part), and for MoE models the experts' backend (dispatcher deepep
/// for flex). Its models train in BF16: other precisions, optimizer_grads and offload are
/// InvalidArgument.
absl::StatusOr<std::string> AutomodelConfig(const JobSpec& spec, const ParallelConfig& config);

/// One export format (a table of kinds): its name for `--format` and REST `?format=`, the
/// downloaded file's suffix and content type, and the renderer.
struct TrainingExporter {
  const char* format;        ///< "megatron" | "nemo" | "deepspeed" | "torchtitan" | "automodel".
  const char* file_suffix;   ///< "-megatron.txt", "-nemo.yaml", ...
  const char* content_type;  ///< HTTP Content-Type of the download.
  absl::StatusOr<std::string> (*render)(const JobSpec&, const ParallelConfig&);
};
/// Every training export format, in the order help texts list them.
const std::vector<TrainingExporter>& TrainingExporters();
/// The formats' names in that order, the last after " or " unless `more` follows it:
/// "megatron, nemo, deepspeed, torchtitan or automodel".
std::string TrainingExportFormatList(absl::string_view more = "");
/// The exporter named `format`, or nullptr.
const TrainingExporter* FindTrainingExporter(absl::string_view format);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_EXPORTERS_H_
