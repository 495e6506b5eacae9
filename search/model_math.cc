#include "search/model_math.h"

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

namespace {
// QKV output width: h for Q plus 2*h*g/a for K and V.
double QkvWidth(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  return h + 2.0 * h * static_cast<double>(QueryGroups(m)) /
                 static_cast<double>(m.num_attention_heads);
}
double Fc1Width(const ModelSpec& m) {
  const double f = static_cast<double>(m.ffn_hidden_size);
  return m.activation == Activation::kSwiglu ? 2.0 * f : f;
}
double NormParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  return m.normalization == Normalization::kLayerNorm ? 2.0 * h : h;
}
}  // namespace

double LayerMatmulParams(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double f = static_cast<double>(m.ffn_hidden_size);
  return h * QkvWidth(m) + h * h + h * Fc1Width(m) + f * h;
}

double LayerParams(const ModelSpec& m) {
  double p = LayerMatmulParams(m) + 2.0 * NormParams(m);
  if (HasLinearBiases(m)) {
    p += QkvWidth(m) + static_cast<double>(m.hidden_size) + Fc1Width(m) +
         static_cast<double>(m.hidden_size);
  }
  return p;
}

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
  return static_cast<double>(m.num_layers) * LayerParams(m) + EmbeddingParams(m) +
         OutputParams(m);
}

double AttentionCoreForwardFlops(const ModelSpec& m, double batch, double seq) {
  return 4.0 * batch * seq * seq * static_cast<double>(m.hidden_size);
}

double LayerForwardFlops(const ModelSpec& m, double batch, double seq) {
  return 2.0 * batch * seq * LayerMatmulParams(m) + AttentionCoreForwardFlops(m, batch, seq);
}

double LogitsForwardFlops(const ModelSpec& m, double batch, double seq) {
  return 2.0 * batch * seq * static_cast<double>(m.hidden_size) *
         static_cast<double>(m.vocab_size);
}

double ModelFlopsPerIteration(const ModelSpec& m, double global_batch, double seq) {
  return 3.0 * (static_cast<double>(m.num_layers) * LayerForwardFlops(m, global_batch, seq) +
                LogitsForwardFlops(m, global_batch, seq));
}

double HardwareFlopsPerIteration(const ModelSpec& m, double global_batch, double seq,
                                 Recompute recompute, double recomputed_layer_fraction) {
  double flops = ModelFlopsPerIteration(m, global_batch, seq);
  const double layers = static_cast<double>(m.num_layers);
  if (recompute == Recompute::kFull) {
    flops += recomputed_layer_fraction * layers * LayerForwardFlops(m, global_batch, seq);
  } else if (recompute == Recompute::kSelective) {
    flops += layers * AttentionCoreForwardFlops(m, global_batch, seq);
  }
  return flops;
}

}  // namespace paratune
