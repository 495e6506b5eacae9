#include "search/model_math.h"

#include <algorithm>

namespace paratune {

int64_t QueryGroups(const ModelSpec& model) {
  return model.num_query_groups > 0 ? model.num_query_groups : model.num_attention_heads;
}

bool HasLinearBiases(const ModelSpec& model) {
  return model.activation == Activation::kGelu &&
         model.normalization == Normalization::kLayerNorm;
}

int64_t PaddedVocab(const ModelSpec& model, int64_t tp) {
  const int64_t multiple = 128 * (tp > 0 ? tp : 1);
  return (model.vocab_size + multiple - 1) / multiple * multiple;
}

int64_t HeadDim(const ModelSpec& model) {
  if (model.kv_channels > 0) return model.kv_channels;
  return model.num_attention_heads > 0 ? model.hidden_size / model.num_attention_heads : 0;
}

AttentionType EffectiveAttention(const ModelSpec& model) {
  if (model.attention == AttentionType::kMla) return AttentionType::kMla;
  return QueryGroups(model) == model.num_attention_heads ? AttentionType::kMha
                                                         : AttentionType::kGqa;
}

namespace {
// QKV output width: a*d for Q plus 2*g*d for K and V (d = h/a unless kv_channels).
double QkvWidth(const ModelSpec& m) {
  const double d = static_cast<double>(HeadDim(m));
  return d * (static_cast<double>(m.num_attention_heads) + 2.0 * QueryGroups(m));
}
double Fc1Width(const ModelSpec& m) {
  const double f = static_cast<double>(m.ffn_hidden_size);
  return IsGated(m.activation) ? 2.0 * f : f;
}
double NormParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  return m.normalization == Normalization::kLayerNorm ? 2.0 * h : h;
}
// Matrices of one FFN: SwiGLU's gate, up and down, or FC1 and FC2.
double MlpMatrices(const ModelSpec& m) { return IsGated(m.activation) ? 3.0 : 2.0; }
// The norms inside MLA: on the compressed query (with q_lora_rank) and the compressed KV.
double MlaNormParams(const ModelSpec& m) {
  if (m.attention != AttentionType::kMla) return 0;
  return static_cast<double>(m.q_lora_rank + m.kv_lora_rank);
}
}  // namespace

double AttentionMatmulParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double a = static_cast<double>(m.num_attention_heads);
  if (m.attention == AttentionType::kMla) {
    const double qk = static_cast<double>(m.qk_head_dim + m.qk_rope_head_dim);
    const double q_rank = static_cast<double>(m.q_lora_rank);
    const double kv_rank = static_cast<double>(m.kv_lora_rank);
    // Queries: down- and up-projection through q_lora_rank, or one h x a*(qk + rope).
    const double q = m.q_lora_rank > 0 ? h * q_rank + q_rank * a * qk : h * a * qk;
    // Keys/values: compressed to kv_lora_rank plus the shared RoPE key, then up-projected to
    // a*(qk_head_dim + v_head_dim).
    const double kv = h * (kv_rank + static_cast<double>(m.qk_rope_head_dim)) +
                      kv_rank * a * static_cast<double>(m.qk_head_dim + m.v_head_dim);
    const double out = a * static_cast<double>(m.v_head_dim) * h;
    return q + kv + out;
  }
  return h * QkvWidth(m) + a * static_cast<double>(HeadDim(m)) * h;
}

double LayerMatmulParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double f = static_cast<double>(m.ffn_hidden_size);
  return AttentionMatmulParams(m) + h * Fc1Width(m) + f * h;
}

double LayerParams(const ModelSpec& m) {
  double p = LayerMatmulParams(m) + 2.0 * NormParams(m) + MlaNormParams(m);
  if (HasLinearBiases(m)) {
    p += QkvWidth(m) + static_cast<double>(m.hidden_size) + Fc1Width(m) +
         static_cast<double>(m.hidden_size);
  }
  return p;
}

// ---- Mixture of experts ----

bool IsMoe(const ModelSpec& m) { return m.num_experts > 1; }

bool IsExpertLayer(const ModelSpec& m, int64_t layer) {
  if (!IsMoe(m) || layer < m.first_k_dense_layers) return false;
  return (layer - m.first_k_dense_layers) % std::max<int64_t>(m.moe_layer_freq, 1) == 0;
}

int64_t ExpertLayersBelow(const ModelSpec& m, int64_t layer) {
  if (!IsMoe(m)) return 0;
  const int64_t after = std::min(layer, m.num_layers) - m.first_k_dense_layers;
  const int64_t freq = std::max<int64_t>(m.moe_layer_freq, 1);
  return after <= 0 ? 0 : (after + freq - 1) / freq;
}

int64_t NumExpertLayers(const ModelSpec& m) { return ExpertLayersBelow(m, m.num_layers); }

int64_t SharedExpertFfn(const ModelSpec& m) {
  return m.shared_expert_ffn_hidden_size > 0 ? m.shared_expert_ffn_hidden_size
                                             : m.moe_ffn_hidden_size;
}

double ExpertParams(const ModelSpec& m) {
  return MlpMatrices(m) * static_cast<double>(m.hidden_size) *
         static_cast<double>(m.moe_ffn_hidden_size);
}

double SharedExpertParams(const ModelSpec& m) {
  return static_cast<double>(m.num_shared_experts) * MlpMatrices(m) *
         static_cast<double>(m.hidden_size) * static_cast<double>(SharedExpertFfn(m));
}

double RouterParams(const ModelSpec& m) {
  return static_cast<double>(m.hidden_size) * static_cast<double>(m.num_experts);
}

double ExpertLayerParams(const ModelSpec& m) {
  return AttentionMatmulParams(m) + 2.0 * NormParams(m) + MlaNormParams(m) + RouterParams(m) +
         static_cast<double>(m.num_experts) * ExpertParams(m) + SharedExpertParams(m);
}

double ExpertLayerActiveMatmulParams(const ModelSpec& m) {
  return AttentionMatmulParams(m) + RouterParams(m) +
         static_cast<double>(m.moe_router_topk) * ExpertParams(m) + SharedExpertParams(m);
}

double MtpParams(const ModelSpec& m) {
  if (m.mtp_layers <= 0) return 0;
  const double h = static_cast<double>(m.hidden_size);
  // Each module: norms of the hidden state and of the next token's embedding, the 2h -> h
  // projection, one transformer layer (an expert layer in an MoE model), its final norm;
  // the embedding and the output layer are shared with the main model.
  const double layer = IsMoe(m) ? ExpertLayerParams(m) : LayerParams(m);
  return static_cast<double>(m.mtp_layers) * (layer + 2.0 * h * h + 3.0 * NormParams(m));
}

namespace {
// Parameters and active matmul parameters of the transformer layers (no MTP).
double AllLayerParams(const ModelSpec& m) {
  const double experts = static_cast<double>(NumExpertLayers(m));
  return (static_cast<double>(m.num_layers) - experts) * LayerParams(m) +
         experts * ExpertLayerParams(m);
}
}  // namespace

double EmbeddingParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  double p = static_cast<double>(m.vocab_size) * h;
  if (m.position_embedding == PositionEmbedding::kLearned) {
    p += static_cast<double>(m.max_position_embeddings) * h;
  }
  return p;
}

double OutputParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  return (m.tie_embeddings ? 0.0 : static_cast<double>(m.vocab_size) * h) + NormParams(m);
}

double TotalParams(const ModelSpec& m) {
  return AllLayerParams(m) + EmbeddingParams(m) + OutputParams(m);
}

double ActiveParams(const ModelSpec& m) {
  if (!IsMoe(m)) return TotalParams(m);
  const double experts = static_cast<double>(NumExpertLayers(m));
  const double inactive = static_cast<double>(m.num_experts - m.moe_router_topk) * ExpertParams(m);
  return TotalParams(m) - experts * inactive;
}

int64_t WindowedLayers(const ModelSpec& m) {
  if (m.sliding_window <= 0) return 0;
  if (m.window_attn_skip_freq <= 0) return m.num_layers;
  return m.num_layers - m.num_layers / m.window_attn_skip_freq;
}

namespace {

// Of a full layer's s^2 counted token pairs, the share the mean layer computes.
double CountedPairShare(const ModelSpec& m, double seq) {
  const double windowed = static_cast<double>(WindowedLayers(m));
  if (windowed == 0 || m.num_layers <= 0 || seq <= 0) return 1.0;
  const double w = std::min(static_cast<double>(m.sliding_window), seq);
  const double share = (2.0 * seq * w - w * w) / (seq * seq);
  const double layers = static_cast<double>(m.num_layers);
  return ((layers - windowed) + windowed * share) / layers;
}

}  // namespace

double AttendedKeyFraction(const ModelSpec& m, double seq) {
  return 0.5 * CountedPairShare(m, seq);
}

double AttentionCoreForwardFlops(const ModelSpec& m, double batch, double seq) {
  const double a = static_cast<double>(m.num_attention_heads);
  const double pairs = batch * seq * seq * CountedPairShare(m, seq);
  if (m.attention == AttentionType::kMla) {
    const double qk = static_cast<double>(m.qk_head_dim + m.qk_rope_head_dim);
    return 2.0 * pairs * a * (qk + static_cast<double>(m.v_head_dim));
  }
  return 4.0 * pairs * a * static_cast<double>(HeadDim(m));
}

double ExpertLayerForwardFlops(const ModelSpec& m, double batch, double seq) {
  return 2.0 * batch * seq * ExpertLayerActiveMatmulParams(m) +
         AttentionCoreForwardFlops(m, batch, seq);
}

double LayerForwardFlops(const ModelSpec& m, double batch, double seq) {
  return 2.0 * batch * seq * LayerMatmulParams(m) + AttentionCoreForwardFlops(m, batch, seq);
}

double LogitsForwardFlops(const ModelSpec& m, double batch, double seq) {
  return 2.0 * batch * seq * static_cast<double>(m.hidden_size) *
         static_cast<double>(m.vocab_size);
}

double AllLayersForwardFlops(const ModelSpec& m, double batch, double seq) {
  const double experts = static_cast<double>(NumExpertLayers(m));
  double flops = (static_cast<double>(m.num_layers) - experts) * LayerForwardFlops(m, batch, seq) +
                 experts * ExpertLayerForwardFlops(m, batch, seq);
  if (m.mtp_layers > 0) {
    // Each MTP module: its projection, its layer and its own logits.
    const double h = static_cast<double>(m.hidden_size);
    const double layer =
        IsMoe(m) ? ExpertLayerForwardFlops(m, batch, seq) : LayerForwardFlops(m, batch, seq);
    flops += static_cast<double>(m.mtp_layers) *
             (2.0 * batch * seq * 2.0 * h * h + layer + LogitsForwardFlops(m, batch, seq));
  }
  return flops;
}

double ModelFlopsPerIteration(const ModelSpec& m, double global_batch, double seq) {
  return 3.0 *
         (AllLayersForwardFlops(m, global_batch, seq) + LogitsForwardFlops(m, global_batch, seq));
}

double CausalModelFlopsPerIteration(const ModelSpec& m, double global_batch, double seq) {
  const double attention_layers = static_cast<double>(m.num_layers + m.mtp_layers);
  return ModelFlopsPerIteration(m, global_batch, seq) -
         3.0 * 0.5 * attention_layers * AttentionCoreForwardFlops(m, global_batch, seq);
}

double HardwareFlopsPerIteration(const ModelSpec& m, double global_batch, double seq,
                                 Recompute recompute, double recomputed_layer_fraction) {
  double flops = ModelFlopsPerIteration(m, global_batch, seq);
  const double layers = static_cast<double>(m.num_layers);
  if (recompute == Recompute::kFull) {
    flops += recomputed_layer_fraction * AllLayersForwardFlops(m, global_batch, seq);
  } else if (recompute == Recompute::kSelective) {
    flops += layers * AttentionCoreForwardFlops(m, global_batch, seq);
  }
  return flops;
}

}  // namespace paratune
