// The configuration of a model served on the serving kernels: a stack of pre-norm
// Llama-style layers (RMSNorm, GQA, RoPE, SwiGLU or GeLU) under tensor parallelism, with a
// vocab-parallel embedding and output layer, weight-only quantization of the linear layers
// (CPU) and a paged KV cache.
#ifndef PARATUNE_KERNELS_SERVING_SERVING_CONFIG_H_
#define PARATUNE_KERNELS_SERVING_SERVING_CONFIG_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/enums.h"
#include "core/parallel_config.h"
#include "kernels/dtype.h"
#include "kernels/layer_config.h"
#include "kernels/moe_layer.h"

namespace paratune::kernels::serving {

/// Weight-only quantization of the linear layers (CPU, dtype fp32); activations and math
/// stay fp32.
enum class WeightQuant {
  kNone,  ///< fp32 weights.
  kInt8,  ///< Symmetric int8, one fp32 scale per output row.
  kInt4,  ///< Symmetric int4 (two per byte), one fp32 scale per `int4_group_size` inputs.
};
/// "none" | "int8" | "int4".
const char* ToString(WeightQuant q);
absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view s);

/// Everything that fixes a served model on one rank.
struct ServingConfig {
  /// h, a, g, f, V, activation (gelu | swiglu | geglu | squared_relu); normalization must
  /// be rmsnorm.
  LayerShape shape;
  int64_t num_layers = 1;  ///< Transformer layers of the model.
  /// The layout; the serving kernels read tp, pp and, for expert layers, ep (dividing tp:
  /// the experts split over ep ranks, each over tp / ep; TensorRT-LLM's moe_ep_size x
  /// moe_tp_size = tp). The other fields must stay at 1 / false.
  ParallelConfig parallel;
  /// With parallel.pp > 1, the pipeline stage this model is (0 .. pp − 1): its layers are
  /// the stage's contiguous share (StageLayers), the first stage holds the embedding, the
  /// last the final norm and the output layer.
  int64_t stage = 0;
  /// kRope rotates Q and K by their positions; kLearned applies no rotation inside the
  /// layers (the layer then equals kernels/transformer_layer's forward).
  PositionEmbedding position_embedding = PositionEmbedding::kRope;
  double rope_theta = 10000.0;                    ///< RoPE base.
  WeightQuant weight_quant = WeightQuant::kNone;  ///< Linear-layer weight storage.
  /// Activations and unquantized weights: fp32 (the CPU backend's only), or bf16 / fp16 on
  /// CUDA (GEMMs accumulate in fp32; RoPE, the cache write and attention run in fp32).
  DType dtype = DType::kF32;
  /// Time a step's phases (LayerPhaseTimes); on a device backend each phase boundary then
  /// waits for the queued work, which the step's total pays for.
  bool phase_timing = true;
  int64_t int4_group_size = 32;                   ///< Inputs per int4 scale; must divide every K.
  DType kv_dtype = DType::kF32;                   ///< KV-cache storage: fp32, bf16 or fp8 (E4M3).
  int64_t kv_block_size = 16;                     ///< Tokens per KV-cache block.
  /// Blocks in each layer's pool; with a sliding window, the bytes of that many per layer,
  /// shared by the cache's layer groups (PagedKvCache).
  int64_t num_kv_blocks = 64;
  float norm_epsilon = 1e-5f;                     ///< RMSNorm epsilon.
  uint64_t seed = 1234;  ///< Weights are functions of this (as the training layer's).
  int threads = 1;       ///< Threads of the attention and elementwise loops.
  /// Sliding-window attention in every layer but each window_attn_skip_freq-th
  /// (LayerAttentionWindow); 0: none.
  int64_t attention_window = 0;
  int64_t window_attn_skip_freq = 0;
  /// Mixture of experts: the routed block of the expert layers (its hidden, ep, etp and
  /// routing are set by the layer: h, parallel.ep, tp / ep, the real top-k). Experts are
  /// SwiGLU, their weights stored as weight_quant says (the router fp32); every tp rank
  /// holds the batch (no all-to-all), runs its experts' share and the shared experts'
  /// 1 / tp, and one all-reduce over the tp ranks sums them.
  std::optional<MoeLayerConfig> moe;
  /// Attention data parallelism (TensorRT-LLM's enable_attention_dp): each of the tp ranks
  /// runs attention, the dense layers and the vocabulary whole on its own sequences (its
  /// own KV cache); the routed experts are split over all tp ranks (ep = tp, etp 1), the
  /// tokens reaching them through an all-to-all dispatch and combine. Needs experts and
  /// parallel.ep = parallel.tp; every rank steps together with at least one token.
  bool attention_dp = false;
  int64_t first_k_dense_layers = 0;  ///< Dense layers before the first expert layer.
  int64_t moe_layer_freq = 1;        ///< Then every n-th layer is an expert layer.

  int64_t num_query_groups() const {
    return shape.num_query_groups > 0 ? shape.num_query_groups : shape.num_attention_heads;
  }
  int64_t ffn_hidden_size() const {
    return shape.ffn_hidden_size > 0 ? shape.ffn_hidden_size : 4 * shape.hidden_size;
  }
  int64_t head_dim() const { return shape.head_dim(); }
  /// Layers [first, last) of `stage` of parallel.pp: an even split, the first
  /// num_layers % pp stages one layer more.
  std::pair<int64_t, int64_t> StageLayers(int64_t s) const {
    const int64_t pp = std::max<int64_t>(1, parallel.pp), base = num_layers / pp;
    const int64_t extra = num_layers % pp;
    const int64_t first = s * base + std::min(s, extra);
    return {first, first + base + (s < extra ? 1 : 0)};
  }
  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == std::max<int64_t>(1, parallel.pp) - 1; }
  /// Ranks attention, the dense layers and the vocabulary are split over: 1 with attention
  /// data parallelism, else tp.
  int64_t attention_tp() const { return attention_dp ? 1 : parallel.tp; }
  /// Whether layer `layer` (0-based) is an expert layer.
  bool IsExpertLayer(int64_t layer) const {
    return moe.has_value() && IsExpertLayerAt(layer, first_k_dense_layers, moe_layer_freq);
  }
  /// The expert layers' block as layer `MoeLayer` runs it on this layout.
  MoeLayerConfig ExpertBlock() const;
  /// Tokens the KV cache of one rank holds.
  int64_t kv_capacity_tokens() const { return kv_block_size * num_kv_blocks; }
  /// The training-layer configuration with the same shape, tp and weights (and the window
  /// of layer `layer`).
  LayerConfig AsLayerConfig(int64_t seq_length, int64_t layer = 0) const;

  /// First violated rule, e.g. `tp (3) must divide num_query_groups (4)`.
  absl::Status Validate() const;
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVING_CONFIG_H_
