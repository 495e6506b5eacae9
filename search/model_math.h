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

/// Head dimension d: kv_channels, or h / a.
int64_t HeadDim(const ModelSpec& model);
/// MLA as given; otherwise MHA when g == a, GQA when g < a.
AttentionType EffectiveAttention(const ModelSpec& model);
/// Matmul weights of one layer's attention: QKV (a*d + 2*g*d wide) and the output
/// projection; with MLA the query and KV down-/up-projections and the output projection.
double AttentionMatmulParams(const ModelSpec& model);

/// Weights of the matrix multiplications of one dense layer (attention, MLP).
double LayerMatmulParams(const ModelSpec& model);
/// All parameters of one layer: matmul weights, biases, norm weights.
double LayerParams(const ModelSpec& model);
/// Input embedding (word + learned positions) parameters, unpadded vocabulary.
double EmbeddingParams(const ModelSpec& model);
/// Output layer parameters (0 with tied embeddings) plus the final norm.
double OutputParams(const ModelSpec& model);
/// Total parameters with the unpadded vocabulary (published sizes; MTP modules excluded,
/// as DeepSeek-V3's 671B excludes them).
double TotalParams(const ModelSpec& model);

// ---- Mixture of experts ----
/// num_experts > 1.
bool IsMoe(const ModelSpec& model);
/// Whether layer `layer` (0-based) is an expert layer: after first_k_dense_layers, every
/// moe_layer_freq-th.
bool IsExpertLayer(const ModelSpec& model, int64_t layer);
/// Expert layers among layers 0 .. layer-1.
int64_t ExpertLayersBelow(const ModelSpec& model, int64_t layer);
/// Expert layers among the num_layers (MTP modules not counted).
int64_t NumExpertLayers(const ModelSpec& model);
/// FFN width of one shared expert (shared_expert_ffn_hidden_size or moe_ffn_hidden_size).
int64_t SharedExpertFfn(const ModelSpec& model);
/// Matmul weights of one routed expert (3*h*f_moe with SwiGLU, else 2*h*f_moe).
double ExpertParams(const ModelSpec& model);
/// Matmul weights of the shared experts of one layer.
double SharedExpertParams(const ModelSpec& model);
/// The router's h x num_experts matrix.
double RouterParams(const ModelSpec& model);
/// All parameters of one expert layer: attention, norms, router, routed and shared experts.
double ExpertLayerParams(const ModelSpec& model);
/// Matmul weights one token passes through in an expert layer: attention, router, its
/// top-k routed experts and the shared experts.
double ExpertLayerActiveMatmulParams(const ModelSpec& model);
/// Parameters of the multi-token-prediction modules (0 without).
double MtpParams(const ModelSpec& model);
/// Parameters one token uses (TotalParams less the routed experts it does not visit).
double ActiveParams(const ModelSpec& model);
/// Forward FLOPs of one expert layer (active experts only, the router included).
double ExpertLayerForwardFlops(const ModelSpec& model, double batch, double seq);
/// Forward FLOPs of every transformer layer, dense and expert, and the MTP modules.
double AllLayersForwardFlops(const ModelSpec& model, double batch, double seq);

/// Forward FLOPs of one layer for `tokens` = b*s tokens of sequence length s: 2 FLOPs per
/// matmul weight and token, plus 4*b*s^2*h for the attention scores and context.
double LayerForwardFlops(const ModelSpec& model, double batch, double seq);
/// Forward FLOPs of the attention core alone (4*b*s^2*a*d; MLA: 2*b*s^2*a*(qk + rope + v)),
/// the mean over the layers: a windowed layer (sliding_window w < s) counts 2sw - w^2
/// token pairs where a full one counts s^2 (the same convention, no causal halving).
double AttentionCoreForwardFlops(const ModelSpec& model, double batch, double seq);
/// Layers whose queries attend to the sliding window only (model.sliding_window, every
/// layer but each window_attn_skip_freq-th); 0 without a window.
int64_t WindowedLayers(const ModelSpec& model);
/// Keys a query attends to, as a fraction of the sequence, the mean over the queries of a
/// causal sequence of `seq` and over the layers: 1/2 for full attention, (w - w^2/2s)/s for
/// a window w < s.
double AttendedKeyFraction(const ModelSpec& model, double seq);
/// Forward FLOPs of the logits (2*b*s*h*V).
double LogitsForwardFlops(const ModelSpec& model, double batch, double seq);

/// Model FLOPs per iteration: 3x forward (backward = 2x forward), no recompute, active
/// experts only, MTP modules included (Megatron-LM's convention). For GPT
/// this is Narayanan's 72*B*s*L*h^2*(1 + s/6h + V/12hL).
double ModelFlopsPerIteration(const ModelSpec& model, double global_batch, double seq);
/// The same count with the attention scores of a causal mask halved: the convention of
/// Megatron-LM's num_floating_point_operations since 2025 ("causal mask: only half of the
/// mask is non-zero"), of Megatron-Bridge and of NeMo AutoModel, which their logged
/// TFLOP/s/GPU use.
double CausalModelFlopsPerIteration(const ModelSpec& model, double global_batch, double seq);
/// Hardware FLOPs: model FLOPs plus the recomputed forward work (full: one more layer
/// forward per recomputed layer; selective: the attention core forward).
double HardwareFlopsPerIteration(const ModelSpec& model, double global_batch, double seq,
                                 Recompute recompute, double recomputed_layer_fraction);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_MODEL_MATH_H_
