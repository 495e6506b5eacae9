// The configuration of one parallel transformer layer (Megatron GPT layer, pre-norm).
#ifndef PARATUNE_KERNELS_LAYER_CONFIG_H_
#define PARATUNE_KERNELS_LAYER_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/enums.h"
#include "core/parallel_config.h"
#include "kernels/dtype.h"
#include "kernels/moe_layer.h"

namespace paratune::kernels {

/// Shape of one transformer layer (the LayerShape of task.proto).
struct LayerShape {
  int64_t hidden_size = 0;            ///< h.
  int64_t num_attention_heads = 0;    ///< a.
  int64_t num_query_groups = 0;       ///< g (GQA); 0 means g = a.
  int64_t ffn_hidden_size = 0;        ///< f; 0 means 4h.
  int64_t vocab_size = 0;             ///< V, for the last-stage logits (0: none).
  Activation activation = Activation::kGelu;
  Normalization normalization = Normalization::kLayerNorm;
  /// Head dimension d (Megatron's kv_channels); 0 = hidden_size / num_attention_heads. The
  /// attention projections are h x (a + 2g)d and ad x h either way.
  int64_t kv_channels = 0;

  int64_t head_dim() const {
    if (kv_channels > 0) return kv_channels;
    return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0;
  }
};

/// Everything that fixes one layer's forward/backward on one rank.
/// The window of layer `layer` (0-based) of a model whose layers attend to `window` keys
/// except each `skip_freq`-th (counting from 1; Megatron's window_attn_skip_freq), which
/// attends to the whole sequence: 0 for a whole-sequence layer or without a window.
inline int64_t LayerAttentionWindow(int64_t window, int64_t skip_freq, int64_t layer) {
  if (window <= 0) return 0;
  if (skip_freq > 0 && (layer + 1) % skip_freq == 0) return 0;
  return window;
}

/// Whether layer `layer` (0-based) of a mixture-of-experts model is an expert layer: after
/// `first_k_dense` dense layers, every `freq`-th (0 means 1), as the spec's fields mean.
inline bool IsExpertLayerAt(int64_t layer, int64_t first_k_dense, int64_t freq) {
  if (layer < first_k_dense) return false;
  return (layer - first_k_dense) % (freq > 0 ? freq : 1) == 0;
}

/// InvalidArgument naming the field when a model's window or skip frequency is negative.
absl::Status CheckAttentionWindow(int64_t window, int64_t skip_freq);

struct LayerConfig {
  LayerShape shape;
  /// The layout. A layer reads tp (t), sequence_parallel (norms and dropouts on s/t rows),
  /// micro_batch_size (b) and recompute (kFull: the whole layer is recomputed); cp must be
  /// 1. The pipeline and data-parallel fields are the trainer's (kernels/training).
  ParallelConfig parallel;
  int64_t seq_length = 0;             ///< s.
  DType dtype = DType::kF32;          ///< Storage type of weights and activations.
  bool flash_attention = false;       ///< Tiled online softmax; never stores s×s scores.
  /// Sliding-window attention: a query attends to this many keys, itself included (0 =
  /// every earlier key).
  int64_t attention_window = 0;
  /// Dropout after the attention / MLP output projections (a task's `dropout: true` is
  /// Megatron's 0.1 for both probabilities; 0 stores no masks).
  float hidden_dropout = 0.0f;
  float attention_dropout = 0.0f;     ///< Dropout on attention probabilities.
  uint64_t seed = 1234;               ///< Weights and dropout masks are functions of this.
  float norm_epsilon = 1e-5f;
  /// A mixture-of-experts layer's MLP block (kernels/moe_layer.h) in place of the dense one
  /// when moe.num_experts > 0: moe.hidden is the hidden size, moe.ep / moe.etp the layout's
  /// ep / etp. etp must be 1 or tp, and tp > 1 needs sequence parallelism
  /// (Megatron-LM's rule for experts with TP), so every rank routes its own s/t·b tokens
  /// (etp = 1) or the ETP (= TP) group gathers them first (etp = tp).
  MoeLayerConfig moe;
  /// False: the MLP block is the identity (the second norm's output is added back), so the
  /// layer is its attention part alone, the part of a mixture-of-experts layer that a MoE
  /// layer task (kernels/moe_step.h) does not time. Excludes moe.
  bool mlp = true;

  int64_t num_query_groups() const {
    return shape.num_query_groups > 0 ? shape.num_query_groups : shape.num_attention_heads;
  }
  int64_t ffn_hidden_size() const {
    return shape.ffn_hidden_size > 0 ? shape.ffn_hidden_size : 4 * shape.hidden_size;
  }
  int64_t head_dim() const { return shape.head_dim(); }
  bool is_moe() const { return moe.num_experts > 0; }

  /// First violated rule, e.g. `tp (3) must divide num_attention_heads (32)`;
  /// Unimplemented for context parallelism (cp > 1).
  absl::Status Validate() const;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_LAYER_CONFIG_H_
