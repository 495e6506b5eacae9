// The first and last pipeline stage's extra work, vocab-parallel as in Megatron:
// VocabParallelEmbedding (rank r holds vocabulary rows [r·V/t, (r+1)·V/t); out-of-range ids
// give zeros and the partial sums are combined by reduce_from_tp_region, or by
// reduce_scatter_to_sp_region with SP; then the embedding dropout, hidden_dropout, whose
// mask is a function of the global element index as the layers' are: kernels/dropout.h),
// and VocabParallelOutput: final norm, the logits ColumnParallelLinear ([N, V/t], never
// gathered) and vocab_parallel_cross_entropy (max by all-gather, sum of exponentials and
// target logit by all-reduce).
// Thread-safety: one instance per rank (thread).
#ifndef PARATUNE_KERNELS_VOCAB_PARALLEL_H_
#define PARATUNE_KERNELS_VOCAB_PARALLEL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/layer_config.h"
#include "kernels/parallel_context.h"
#include "kernels/parallel_linear.h"

namespace paratune::kernels {

/// What the embedding keeps from a forward for its backward.
struct EmbeddingSaved {
  Tensor ids;           ///< The micro-batch's token ids (i32, s·b).
  Tensor dropout_mask;  ///< With dropout: its mask (u8, [N_sp, h]); else empty.
};

class VocabParallelEmbedding {
 public:
  /// `position_rows` > 0 adds a learned position table of that many rows (GPT's absolute
  /// position embedding, Megatron's position_embeddings: at least seq_length rows, the same
  /// on every TP rank), added to the word embeddings after their TP reduce; 0: none (RoPE
  /// models, whose rotation has no parameters and is not modelled here).
  static absl::StatusOr<std::unique_ptr<VocabParallelEmbedding>> Create(
      const LayerConfig& config, const ParallelContext& ctx, int64_t position_rows = 0);
  /// The rule on `position_rows` that Create applies (kernels/training's
  /// TrainConfig::Validate applies it up front): 0, or at least `seq_length`.
  static absl::Status CheckPositionRows(int64_t position_rows, int64_t seq_length);
  /// This TP rank's rows of the table, "embedding.weight", initialised as a function of
  /// (seed, global element index): the same values on whichever stage makes it.
  static absl::StatusOr<Parameter> MakeTable(const LayerConfig& config, const ParallelContext& ctx);
  /// ids: all s·b tokens in [s, b] order. Returns [N_sp, h], dropped out when
  /// config.hidden_dropout > 0.
  absl::StatusOr<Tensor> Forward(const std::vector<int32_t>& ids);
  /// dout: [N_sp, h]; accumulates the table gradient (through the forward's dropout mask).
  absl::Status Backward(const Tensor& dout);
  Parameter& weight() { return table_; }
  /// The table and, with learned positions, the position table.
  std::vector<Parameter*> Parameters();
  /// A pipeline keeps several micro-batches in flight: it moves each forward's saved
  /// tensors out and puts them back before the matching backward.
  EmbeddingSaved TakeSaved() { return std::move(saved_); }
  void RestoreSaved(EmbeddingSaved saved) { saved_ = std::move(saved); }

 private:
  LayerConfig config_;
  ParallelContext ctx_;
  Parameter table_;
  Parameter positions_;  ///< Learned positions [rows, h]; undefined without.
  /// With learned positions: each token's row, t / b for token t of the micro-batch ([s, b]
  /// order; i32, s·b), made once.
  Tensor position_ids_;
  EmbeddingSaved saved_;
};

/// The output layer's weight ([V/t, h], the embedding's row split). Untied (Megatron's
/// untie_embeddings_and_output_weights): its own matrix, "output.weight". Tied (Megatron's
/// default for GPT, share_embeddings_and_output_weights): the input embedding's table itself
/// where this rank holds it (`table`), else, on a later pipeline stage, a copy initialised
/// as that table (VocabParallelEmbedding::MakeTable); kernels/training sums the two copies'
/// gradients so that both take the same update.
struct OutputWeight {
  bool tied = false;
  Parameter* table = nullptr;  ///< Tied and on the embedding's rank: the table, not owned.
};

class VocabParallelOutput {
 public:
  static absl::StatusOr<std::unique_ptr<VocabParallelOutput>> Create(
      const LayerConfig& config, const ParallelContext& ctx, OutputWeight weight = {});
  /// y: [N_sp, h], targets: s·b ids. Returns the mean cross entropy over all tokens.
  absl::StatusOr<double> Forward(const Tensor& y, const std::vector<int32_t>& targets);
  /// Gradient of the mean loss with respect to y: [N_sp, h].
  absl::StatusOr<Tensor> Backward();
  /// The parameters this layer owns: the final norm's and, unless it uses the embedding's
  /// table, the output weight.
  std::vector<Parameter*> Parameters();
  /// The logits weight (the embedding's table when shared).
  Parameter& weight() { return logits_->weight(); }

 private:
  LayerConfig config_;
  ParallelContext ctx_;
  Parameter norm_w_, norm_b_;
  std::unique_ptr<ColumnParallelLinear> logits_;
  // Kept for backward.
  Tensor y_, mean_, rstd_, ln_, logits_out_, max_, sumexp_, targets_;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_VOCAB_PARALLEL_H_
