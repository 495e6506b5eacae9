// One parallel layout: Megatron-LM's knobs (Megatron-Core's ModelParallelConfig), defined
// once for every layer: the planner ranks them, the wire carries them, the worker and the
// kernels run them (kernels::LayerConfig and kernels::training::TrainConfig embed one).
// The rules that need the job (the model's sizes, the batch, the cluster) are in
// search/parallel_config.h.
#ifndef PARATUNE_CORE_PARALLEL_CONFIG_H_
#define PARATUNE_CORE_PARALLEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "core/enums.h"

namespace paratune {

struct ParallelConfig {
  int64_t tp = 1;                       ///< Tensor parallel size t.
  int64_t pp = 1;                       ///< Pipeline stages p.
  int64_t dp = 1;                       ///< Data parallel size d.
  int64_t cp = 1;                       ///< Context parallel size c.
  int64_t vp = 1;                       ///< Virtual stages per pipeline rank v (1 = 1F1B).
  int64_t micro_batch_size = 1;         ///< b.
  bool sequence_parallel = false;       ///< SP (requires tp > 1).
  Recompute recompute = Recompute::kNone;  ///< Activation recomputation granularity.
  int64_t recompute_num_layers = 0;        ///< Layers per stage fully recomputed (kFull).
  /// Megatron-Core's --account-for-embedding-in-pipeline-split and
  /// --account-for-loss-in-pipeline-split: the embedding and the loss count as one layer
  /// each, so (L + 2) is split evenly over p*v model chunks and the first and last chunks
  /// hold one transformer layer fewer (uneven first/last stages; Llama 3.1 405B: 126 + 2
  /// layers over PP 8 x VP 8). torchtitan's default split (first and last stage one layer
  /// lighter: pipeline_parallel_first/last_stage_less_layers 1) is the same rule.
  bool split_counts_embedding_and_loss = false;
  /// Megatron's --overlap-grad-reduce: data-parallel gradient buckets are reduced while the
  /// backward runs (all but the last bucket hidden). Off, the whole reduce follows the
  /// backward (Megatron-LM 2021's "local" DDP). The planner always turns it on.
  bool overlap_grad_reduce = true;
  /// Megatron-Core's --tp-comm-overlap (Transformer Engine userbuffers): the SP
  /// all-gathers and reduce-scatters are chunked and pipelined with the GEMMs that use
  /// them. Requires sequence_parallel.
  bool tp_comm_overlap = false;
  /// Megatron-Core's --overlap-p2p-communication (its default with interleaving): the
  /// interleaved schedule's sends and receives run asynchronously behind compute. Off (or
  /// with plain 1F1B), every transfer blocks the sending stage (Megatron-LM 2021-22).
  bool overlap_p2p_comm = true;
  /// Megatron's --overlap-param-gather: with a sharded optimizer (optimizer,
  /// optimizer_grads) the updated parameters are all-gathered bucket by bucket behind the
  /// next forward (only the first bucket exposed). Off, the whole all-gather follows the
  /// step (DeepSpeed ZeRO-1/2). Full sharding's per-layer gathers are prefetched either way.
  bool overlap_param_gather = true;

  // ---- Expert parallelism (mixture-of-experts layers; Megatron-Core's parallel folding:
  // the expert layers regroup the same tp*cp*dp ranks of a stage as etp*ep*edp) ----
  int64_t ep = 1;   ///< Expert parallel size: the routed experts split over ep ranks.
  int64_t etp = 1;  ///< Expert tensor parallel size: each expert's FFN split over etp.
  /// How tokens reach the ranks that hold their experts.
  MoeTokenDispatcher moe_token_dispatcher = MoeTokenDispatcher::kAllToAll;
  // ---- Sharded data parallelism (ZeRO / FSDP) ----
  /// What the data-parallel x context-parallel group shards (kOptimizer: Megatron's
  /// --use-distributed-optimizer, ZeRO-1; kOptimizerGrads: ZeRO-2; kFull: ZeRO-3 / FSDP).
  DataParallelSharding data_parallel_sharding = DataParallelSharding::kNone;
  /// Ranks of one shard group (HSDP: shard inside a group of this many consecutive DP
  /// ranks, replicate across the dp*cp / shard_group_size groups). 0: the whole dp*cp group.
  int64_t shard_group_size = 0;
  /// Host-memory offload of the optimizer state (and with kOptimizerAndParams, of the
  /// parameter and gradient shards).
  Offload offload = Offload::kNone;
  /// Fine-grained activation offload (Megatron-Core's --fine-grained-activation-offloading):
  /// the inputs of the job's training.offload_modules go to host memory in the forward
  /// and come back for the backward, on their own stream behind the layer's compute.
  bool activation_offload = false;
  /// Ranks the optimizer state (and, by stage, gradients and parameters) is sharded over:
  /// shard_group_size, or dp*cp when it is 0; 1 without sharding.
  int64_t ShardRanks() const {
    if (data_parallel_sharding == DataParallelSharding::kNone) return 1;
    return shard_group_size > 0 ? shard_group_size : dp * cp;
  }
  /// The optimizer state is sharded (every stage but kNone): Megatron's distributed optimizer.
  bool distributed_optimizer() const {
    return data_parallel_sharding != DataParallelSharding::kNone;
  }

  /// Transformer layers in model chunk `chunk` (0..vp-1) of pipeline stage `stage`. Where
  /// the p*v chunks do not divide the layers (or the slots), the first virtual stages hold
  /// one more each, as torch.distributed.pipelining's frameworks split them (uneven splits
  /// are valid only where training.framework runs them; search/parallel_config.h).
  int64_t LayersInChunk(int64_t num_layers, int64_t stage, int64_t chunk) const;
  /// Transformer layers on pipeline stage `stage` (all its chunks).
  int64_t LayersOnStage(int64_t num_layers, int64_t stage) const;
  /// Ranks of the layout, t*p*c*d.
  int64_t world_size() const { return tp * pp * cp * dp; }
  /// Expert data parallel size edp = tp*cp*dp / (etp*ep) (0 when ep*etp does not divide).
  int64_t edp() const {
    const int64_t expert = ep * etp;
    return expert > 0 && (tp * cp * dp) % expert == 0 ? tp * cp * dp / expert : 0;
  }

  /// "tp8 pp12 dp16 cp1 vp1 mb1 sp selective dopt" style one-liner.
  std::string ToString() const;
  /// The one-liner's tokens beyond the shape, micro-batch, plain "sp", recompute and plain
  /// "dopt" (what a plan table's columns show): TP overlap, the other sharding stages and
  /// shard groups, offloads, overlaps turned off, the uneven split, the expert layout.
  std::string ExtrasString() const;
  bool operator==(const ParallelConfig&) const = default;

 private:
  std::string Describe(bool extras_only) const;
};

}  // namespace paratune

#endif  // PARATUNE_CORE_PARALLEL_CONFIG_H_
