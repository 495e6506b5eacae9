// How far a model's layers attend, in the units the serving step model and the measured
// step tables count: with sliding-window attention (model.sliding_window) some layers keep
// and read only the window's KV cache, and their prompt queries see only the window.
#ifndef PARATUNE_INFERENCE_ATTENTION_SPAN_H_
#define PARATUNE_INFERENCE_ATTENTION_SPAN_H_

#include <cstdint>

#include "search/specs.h"

namespace paratune::inference {

/// The share of a model's layers attending to the whole context and the window of the
/// others. Without a window every quantity is the whole-context one.
class AttentionSpan {
 public:
  AttentionSpan() = default;  ///< Every layer attends to the whole context.
  explicit AttentionSpan(const ModelSpec& model);

  /// Pool tokens a sequence of `tokens` holds, its blocks of `block` tokens rounded up: a
  /// windowed layer keeps the blocks of the window and the one being written, as the
  /// engines free the others (vLLM's sliding-window KV manager, TensorRT-LLM's per-layer
  /// attention window, SGLang's SWA pool); a pool token is a token of every layer, so each
  /// kind of layer weighs by its share.
  double KvSlots(int64_t tokens, int64_t block) const;
  /// KV entries one decode step of a sequence of `context` tokens reads, in tokens of every
  /// layer (a windowed layer reads its window).
  double AttendedContext(double context) const;
  /// Causal attention pairs of a prompt chunk of `chunk` tokens after `before` cached ones,
  /// averaged over the layers: chunk x (before + chunk / 2) without a window.
  double ChunkAttentionPairs(double before, double chunk) const;
  /// Layers attending to a sliding window (0 without).
  int64_t windowed_layers() const { return windowed_layers_; }

 private:
  double window_ = 0;
  int64_t windowed_layers_ = 0;
  double full_layer_share_ = 1;
};

}  // namespace paratune::inference

#endif  // PARATUNE_INFERENCE_ATTENTION_SPAN_H_
