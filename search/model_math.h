// Parameter counts and FLOPs of a dense decoder-only transformer (Narayanan et al. 2021,
// Appendix; Korthikanti et al. 2022, Appendix A).
#ifndef PARATUNE_SEARCH_MODEL_MATH_H_
#define PARATUNE_SEARCH_MODEL_MATH_H_

#include <cstdint>

#include "search/specs.h"

namespace paratune {

/// Query groups, treating 0 as multi-head attention (g = a).
int64_t QueryGroups(const ModelSpec& model);
/// Linear layers carry biases for the GPT/BLOOM family (LayerNorm + GeLU), not for
/// Llama-style models (RMSNorm or SwiGLU).
bool HasLinearBiases(const ModelSpec& model);
/// Vocabulary padded to a multiple of 128 * tp (Megatron's make-vocab-size-divisible-by).
int64_t PaddedVocab(const ModelSpec& model, int64_t tp);

/// Weights of the matrix multiplications of one layer (QKV, output projection, MLP).
double LayerMatmulParams(const ModelSpec& model);
/// All parameters of one layer: matmul weights, biases, norm weights.
double LayerParams(const ModelSpec& model);
/// Input embedding (word + learned positions) parameters, unpadded vocabulary.
double EmbeddingParams(const ModelSpec& model);
/// Output layer parameters (0 with tied embeddings) plus the final norm.
double OutputParams(const ModelSpec& model);
/// Total parameters with the unpadded vocabulary (published sizes).
double TotalParams(const ModelSpec& model);

/// Forward FLOPs of one layer for `tokens` = b*s tokens of sequence length s: 2 FLOPs per
/// matmul weight and token, plus 4*b*s^2*h for the attention scores and context.
double LayerForwardFlops(const ModelSpec& model, double batch, double seq);
/// Forward FLOPs of the attention core alone (4*b*s^2*h).
double AttentionCoreForwardFlops(const ModelSpec& model, double batch, double seq);
/// Forward FLOPs of the logits (2*b*s*h*V).
double LogitsForwardFlops(const ModelSpec& model, double batch, double seq);

/// Model FLOPs per iteration: 3x forward (backward = 2x forward), no recompute. For GPT
/// this is Narayanan's 72*B*s*L*h^2*(1 + s/6h + V/12hL).
double ModelFlopsPerIteration(const ModelSpec& model, double global_batch, double seq);
/// Hardware FLOPs: model FLOPs plus the recomputed forward work (full: one more layer
/// forward per recomputed layer; selective: the attention core forward).
double HardwareFlopsPerIteration(const ModelSpec& model, double global_batch, double seq,
                                 Recompute recompute, double recomputed_layer_fraction);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_MODEL_MATH_H_
