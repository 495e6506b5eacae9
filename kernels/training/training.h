// End-to-end training of a whole GPT/Llama-style model under one parallel layout, on real
// ranks: the embedding, L transformer layers, the final norm, the vocab-parallel logits and
// cross entropy, split TP × PP × DP (Megatron's rank order: tp fastest, then dp, then pp),
// with sequence parallelism and recompute from the layer, the 1F1B schedule (vp = 1) or
// Megatron's interleaved schedule (vp > 1 model chunks per pipeline rank), real
// point-to-point transfers between stages, the DP gradient all-reduce (or reduce-scatter +
// all-gather with the distributed optimizer) and AdamW. Parameters and gradients live in
// one contiguous weight and one gradient buffer per rank (Megatron's DDP buffers).
//
// Layout invariance: every weight is a function of (seed, global layer index, parameter
// name, unsharded element index) and the data of (seed, step, global sample), so a run
// under any layout trains the same model on the same data as the single-rank run; only the
// floating-point summation order differs.
//
// Point-to-point: each rank owns a Gloo context over its pipeline group used only for
// unbound-buffer send/recv. At the start of a step a rank posts every receive it will need
// (one untracked host buffer per message, a unique slot per (step, direction, chunk,
// micro-batch)), so sends complete as soon as the bytes move and no schedule order can
// deadlock; a received buffer is copied into a tracked tensor when its op runs, so the
// tracking allocator's peak counts it from then on, as Megatron's receive buffer.
//
// Mixture of experts (TrainConfig::moe): the expert layers run kernels/moe_layer.h's block
// in place of the MLP; the stage's tp·dp ranks regroup as etp × ep × edp (etp fastest,
// Megatron-Core's parallel folding), the routed experts' gradients are reduced (or
// reduce-scattered, with the distributed optimizer) over the expert-data-parallel group in
// a second pair of contiguous buffers, the router's and shared experts' with the dense
// weights. etp 1 or tp; on CUDA no auxiliary loss and no capacity routing.
//
// Backends: CPU (fp32; Gloo for every group) or CUDA (one device per rank, numbered from 0
// in each process: fp32, or bf16/fp16 weights, activations and gradients with fp32 master
// weights and Adam state; NCCL for the TP and DP groups; the point-to-point messages and the
// end-of-run world exchange are staged through host memory over Gloo).
#ifndef PARATUNE_KERNELS_TRAINING_TRAINING_H_
#define PARATUNE_KERNELS_TRAINING_TRAINING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/parallel_config.h"
#include "kernels/communicator.h"
#include "kernels/dtype.h"
#include "kernels/layer_config.h"
#include "kernels/step_runner.h"

namespace paratune::kernels::training {

struct TrainConfig {
  LayerShape shape;                   ///< Every layer's shape; vocab_size is required.
  int64_t num_layers = 0;             ///< L.
  int64_t seq_length = 0;             ///< s.
  /// The layout: tp, pp, dp, vp (model chunks per pipeline rank, interleaved if > 1),
  /// micro_batch_size, sequence_parallel, recompute (kFull recomputes every layer, so
  /// recompute_num_layers must be 0) and data_parallel_sharding none or optimizer over the
  /// whole DP group (DP reduce-scatter, sharded AdamW, all-gather). cp must be 1. The layers
  /// split over the pp·vp chunks as ParallelConfig::LayersInChunk says (unevenly where they
  /// do not divide; split_counts_embedding_and_loss gives the embedding and the loss a slot
  /// each). The overlap flags change no arithmetic: the trainer runs every collective and
  /// transfer blocking.
  ParallelConfig parallel;
  int64_t num_micro_batches = 1;      ///< M per DP rank and step (global batch = b·M·dp).
  bool flash_attention = false;       ///< Tiled online softmax (no s×s scores stored).
  /// Sliding-window attention (the spec's model.sliding_window and window_attn_skip_freq):
  /// layer l (0-based) attends to `attention_window` keys, itself included, unless
  /// window_attn_skip_freq > 0 and (l + 1) % window_attn_skip_freq == 0 (Megatron's every
  /// n-th layer attends to the whole sequence). 0: no window.
  int64_t attention_window = 0;
  int64_t window_attn_skip_freq = 0;
  /// Megatron-LM's default dropout: 0.1 on the embedding output, on the attention
  /// probabilities and after both output projections of every layer. The masks are
  /// functions of the layer's (embedding's) seed and the element's index in the
  /// micro-batch, so every layout drops the same elements and still equals the single-rank
  /// run; they repeat from micro-batch to micro-batch (a stand-in for time and memory, not
  /// a regulariser).
  bool dropout = false;
  /// Megatron's share_embeddings_and_output_weights (GPT's default): the output layer
  /// computes with the input embedding's table. With one pipeline stage it is one
  /// parameter; with several, the last stage holds a copy initialised as the table and the
  /// first and last stage of each (tp, dp) all-reduce the two gradients before the DP
  /// reduce (Megatron's embedding group), so both copies take the same update.
  bool tie_embeddings = false;
  /// Mixture of experts: the routed block of every expert layer (moe.num_experts 0: a
  /// dense model). moe.hidden, moe.ep and moe.etp are filled from shape and parallel.
  /// Expert layer l (0-based): l >= first_k_dense_layers and (l − first_k_dense_layers) %
  /// moe_layer_freq == 0, as the spec's fields mean. Every layout trains the same model on
  /// the same data; with dropless routing and no auxiliary loss it also computes the same
  /// numbers as one rank (the balanced and capacity assignments and the auxiliary loss
  /// depend on which tokens an EP group pools).
  MoeLayerConfig moe;
  int64_t first_k_dense_layers = 0;
  int64_t moe_layer_freq = 1;
  /// Rows of a learned absolute position table on the first stage (GPT's; the spec's
  /// max_position_embeddings), added to the word embeddings; 0: none. At least seq_length.
  int64_t position_rows = 0;
  int64_t steps = 5;
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f, weight_decay = 0.01f;
  uint64_t seed = 1234;
  int threads_per_rank = 1;           ///< CPU backend elementwise threads.
  BackendKind backend = BackendKind::kCpu;
  /// Weights, activations and gradients: fp32 (either backend) or bf16/fp16 (CUDA; fp32
  /// master weights in the optimizer, as Megatron's mixed precision).
  DType dtype = DType::kF32;

  int64_t world_size() const { return parallel.world_size(); }
  bool IsExpertLayer(int64_t layer) const;
  /// Keys a query of layer `layer` attends to (0: every earlier one).
  int64_t AttentionWindowOf(int64_t layer) const;
  /// First violated rule, e.g. `pp·vp (6) must be at most num_layers, 4`; Unimplemented for
  /// a layout field the trainer does not run (cp > 1, recompute_num_layers).
  absl::Status Validate() const;
};

/// Coordinates of a global rank (Megatron order: tp fastest, then dp, then pp).
struct RankCoords {
  int64_t tp = 0, dp = 0, pp = 0;
};
RankCoords CoordsOf(const TrainConfig& c, int64_t rank);
int64_t RankOf(const TrainConfig& c, const RankCoords& x);

/// One pipeline op of a rank's schedule: forward or backward of (model chunk, micro-batch).
struct ScheduleOp {
  bool forward = true;
  int64_t chunk = 0;
  int64_t micro_batch = 0;
};
/// The op order of pipeline rank `pp_rank`: 1F1B (vp = 1; warm-up pp − rank − 1 forwards)
/// or Megatron's interleaved schedule (warm-up (pp − rank − 1)·2 + (vp − 1)·pp).
std::vector<ScheduleOp> PipelineSchedule(const TrainConfig& c, int64_t pp_rank);

/// The token ids of global micro-batch `g` of `step` ([s, b] order), s + 1 per sample so
/// that targets are the ids shifted by one. Layout-invariant.
std::vector<int32_t> SyntheticTokens(const TrainConfig& c, int64_t step, int64_t g, bool targets);

struct RankResult {
  int64_t rank = 0;
  std::vector<double> step_seconds;   ///< This rank's wall time per step.
  /// Per step: the gradient collective(s) (the tied-embedding all-reduce between the
  /// first and last stage, then DP all-reduce, or reduce-scatter + all-gather) and the
  /// AdamW update, parts of step_seconds.
  std::vector<double> dp_seconds, optimizer_seconds;
  /// Per step: time spent waiting for another stage's activation or gradient (the
  /// rank's pipeline bubble plus transfer), part of step_seconds; 0 without PP.
  std::vector<double> p2p_wait_seconds;
  int64_t peak_bytes = 0;             ///< Tracking-allocator peak over the run.
  int64_t parameter_count = 0;        ///< Elements this rank holds.
  int64_t expert_parameter_count = 0;  ///< Of which routed-expert elements.
};

struct TrainResult {
  std::vector<double> losses;         ///< Mean loss of the global batch, per step.
  std::vector<double> step_seconds;   ///< Slowest rank's time per step.
  std::vector<RankResult> ranks;      ///< The ranks run in this process, by rank.
  /// Median over steps after the first (the first allocates and warms up).
  double median_step_seconds() const;
};

/// Runs ranks [first_rank, first_rank + count) of the job as threads of this process;
/// the other ranks must be run by other processes with the same config and a rendezvous
/// they share (MakeFileRendezvous). losses and step_seconds are the whole job's (a
/// world all-gather at the end).
absl::StatusOr<TrainResult> RunTraining(const TrainConfig& config, int64_t first_rank,
                                        int64_t count,
                                        std::shared_ptr<GlooRendezvous> rendezvous);

/// All ranks as threads of this process with an in-process rendezvous.
absl::StatusOr<TrainResult> RunTrainingInProcess(const TrainConfig& config);

/// One rank's optimizer step as RunTraining runs it, without the DP collectives: zero the
/// gradient buffer, scale the gradients, AdamW (TrainConfig's defaults), on `params` fp32
/// parameters on a one-thread CPU backend of `capacity_bytes` (0 = unlimited). Returns the
/// fastest of `iters` timed steps after `warmup` untimed ones, in seconds. Profile mode's
/// optimizer task (worker/kernels_executor) and bench/verify/prediction_accuracy time it.
absl::StatusOr<double> TimeOptimizerStep(int64_t params, int64_t warmup, int64_t iters,
                                         int64_t capacity_bytes = 0);

}  // namespace paratune::kernels::training

#endif  // PARATUNE_KERNELS_TRAINING_TRAINING_H_
