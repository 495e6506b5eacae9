// The configuration of one parallel transformer layer (Megatron GPT layer, pre-norm).
#ifndef PARATUNE_KERNELS_LAYER_CONFIG_H_
#define PARATUNE_KERNELS_LAYER_CONFIG_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace paratune::kernels {

enum class Activation { kGelu, kSwiglu };
enum class Normalization { kLayerNorm, kRmsNorm };
/// none: store everything; selective: the attention core (scores, softmax, dropout, P·V)
/// is recomputed in backward; full: only the layer input is kept, the whole forward is
/// rerun in backward.
enum class RecomputeMode { kNone, kSelective, kFull };

absl::StatusOr<Activation> ParseActivation(absl::string_view name);        ///< gelu|swiglu
absl::StatusOr<Normalization> ParseNormalization(absl::string_view name);  ///< layernorm|rmsnorm
absl::StatusOr<RecomputeMode> ParseRecompute(absl::string_view name);  ///< none|selective|full
absl::string_view RecomputeName(RecomputeMode mode);

/// Shape of one transformer layer (the LayerShape of task.proto).
struct LayerShape {
  int64_t hidden_size = 0;            ///< h.
  int64_t num_attention_heads = 0;    ///< a.
  int64_t num_query_groups = 0;       ///< g (GQA); 0 means g = a.
  int64_t ffn_hidden_size = 0;        ///< f; 0 means 4h.
  int64_t vocab_size = 0;             ///< V, for the last-stage logits (0: none).
  Activation activation = Activation::kGelu;
  Normalization normalization = Normalization::kLayerNorm;
};

/// Everything that fixes one layer's forward/backward on one rank.
struct LayerConfig {
  LayerShape shape;
  int64_t tp = 1;                     ///< Tensor-parallel size t.
  bool sequence_parallel = false;     ///< SP: norms/dropouts on s/t rows.
  int64_t micro_batch_size = 1;       ///< b.
  int64_t seq_length = 0;             ///< s.
  RecomputeMode recompute = RecomputeMode::kNone;
  DType dtype = DType::kF32;          ///< Storage type of weights and activations.
  bool flash_attention = false;       ///< Tiled online softmax; never stores s×s scores.
  /// Dropout after the attention / MLP output projections (a task's `dropout: true` is
  /// Megatron's 0.1 for both probabilities; 0 stores no masks).
  float hidden_dropout = 0.0f;
  float attention_dropout = 0.0f;     ///< Dropout on attention probabilities.
  uint64_t seed = 1234;               ///< Weights and dropout masks are functions of this.
  float norm_epsilon = 1e-5f;

  int64_t num_query_groups() const {
    return shape.num_query_groups > 0 ? shape.num_query_groups : shape.num_attention_heads;
  }
  int64_t ffn_hidden_size() const {
    return shape.ffn_hidden_size > 0 ? shape.ffn_hidden_size : 4 * shape.hidden_size;
  }
  int64_t head_dim() const { return shape.hidden_size / shape.num_attention_heads; }

  /// First violated rule, e.g. `tp (3) must divide num_attention_heads (32)`.
  absl::Status Validate() const;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_LAYER_CONFIG_H_
