// The MoE router's CPU ops, as Megatron-Core's TopKRouter and DeepSeek-V3 route: scores
// from the router logits (softmax over the experts, or an elementwise sigmoid), the top-k
// experts per token (ties to the lower expert index), their probabilities (optionally
// divided by their sum, then scaled), and the Switch/GShard auxiliary load-balancing loss
//   L = coeff · E / (k · T²) · Σ_e count_e · Σ_t p_aux[t, e]
// (Megatron's switch_load_balancing_loss), where p_aux is the softmax, or the sigmoid
// normalised over the experts. Balanced routing assigns slot j of global token g to expert
// (g·k + j) mod E, so every expert gets T·k / E assignments when E divides T·k.
// Each op works on one token's row at a time; the logits are [T, E], row-major.
#ifndef PARATUNE_KERNELS_CPU_MOE_ROUTER_H_
#define PARATUNE_KERNELS_CPU_MOE_ROUTER_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace paratune::kernels::cpu {

/// scores[t, :] = softmax(logits[t, :]) or sigmoid(logits[t, :]).
template <typename T>
void moe_router_scores(T* scores, const T* logits, int64_t tokens, int64_t experts, bool sigmoid) {
  for (int64_t t = 0; t < tokens; ++t) {
    const T* l = logits + t * experts;
    T* s = scores + t * experts;
    if (sigmoid) {
      for (int64_t e = 0; e < experts; ++e) s[e] = T(1) / (T(1) + std::exp(-l[e]));
      continue;
    }
    const T mx = *std::max_element(l, l + experts);
    T sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += s[e] = std::exp(l[e] - mx);
    for (int64_t e = 0; e < experts; ++e) s[e] /= sum;
  }
}

/// The experts of each token: top-k of its scores (`balanced` false), or the forced
/// uniform assignment of global token first_token + t (`balanced` true). experts_out is
/// [T, k] in slot order (descending score for top-k).
template <typename T>
void moe_router_select(int32_t* experts_out, const T* scores, int64_t tokens, int64_t experts,
                       int64_t k, bool balanced, int64_t first_token) {
  std::vector<int32_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* out = experts_out + t * k;
    if (balanced) {
      for (int64_t j = 0; j < k; ++j)
        out[j] = static_cast<int32_t>(((first_token + t) * k + j) % experts);
      continue;
    }
    const T* s = scores + t * experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [s](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    std::copy(order.begin(), order.begin() + k, out);
  }
}

/// probs[t, j] = scale · s_j / (Σ_i s_i if normalize else 1), s_j = scores[t, expert(t, j)].
template <typename T>
void moe_router_probs(T* probs, const T* scores, const int32_t* selected, int64_t tokens,
                      int64_t experts, int64_t k, bool normalize, T scale) {
  for (int64_t t = 0; t < tokens; ++t) {
    T sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += scores[t * experts + selected[t * k + j]];
    const T div = normalize ? sum : T(1);
    for (int64_t j = 0; j < k; ++j) {
      probs[t * k + j] = scale * scores[t * experts + selected[t * k + j]] / div;
    }
  }
}

/// The probabilities the auxiliary loss uses: the softmax scores as they are, or the
/// sigmoid scores divided by their sum over the experts.
template <typename T>
void moe_aux_probs(T* p_aux, const T* scores, int64_t tokens, int64_t experts, bool sigmoid) {
  for (int64_t t = 0; t < tokens; ++t) {
    T sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += scores[t * experts + e];
    const T div = sigmoid ? sum : T(1);
    for (int64_t e = 0; e < experts; ++e) p_aux[t * experts + e] = scores[t * experts + e] / div;
  }
}

/// Capacity routing (Megatron's drop policy "probs"): each expert keeps at most `capacity`
/// of the assignments in `selected` ([T, k]), those of highest probability (ties to the
/// lower assignment index); routed is `selected` with the dropped assignments set to −1.
template <typename T>
void moe_capacity_routes(int32_t* routed, const T* probs, const int32_t* selected, int64_t tokens,
                         int64_t experts, int64_t k, int64_t capacity) {
  std::vector<std::vector<int64_t>> by_expert(experts);
  for (int64_t i = 0; i < tokens * k; ++i) {
    routed[i] = selected[i];
    by_expert[selected[i]].push_back(i);
  }
  for (std::vector<int64_t>& a : by_expert) {
    if (static_cast<int64_t>(a.size()) <= capacity) continue;
    std::stable_sort(a.begin(), a.end(),
                     [probs](int64_t x, int64_t y) { return probs[x] > probs[y]; });
    for (size_t r = static_cast<size_t>(capacity); r < a.size(); ++r) routed[a[r]] = -1;
  }
}

/// dscores (overwritten, [T, E]) from dprobs ([T, k]) through moe_router_probs.
template <typename T>
void moe_router_probs_backward(T* dscores, const T* dprobs, const T* scores,
                               const int32_t* selected, int64_t tokens, int64_t experts, int64_t k,
                               bool normalize, T scale) {
  std::fill(dscores, dscores + tokens * experts, T(0));
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t* sel = selected + t * k;
    const T* dp = dprobs + t * k;
    T* ds = dscores + t * experts;
    if (!normalize) {
      for (int64_t j = 0; j < k; ++j) ds[sel[j]] += scale * dp[j];
      continue;
    }
    // p_j = c·s_j/S: ∂/∂s_i = c·(dp_i/S − Σ_j dp_j·s_j/S²).
    T sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      const T s = scores[t * experts + sel[j]];
      sum += s;
      dot += dp[j] * s;
    }
    for (int64_t j = 0; j < k; ++j) ds[sel[j]] += scale * (dp[j] / sum - dot / (sum * sum));
  }
}

/// dscores += the gradient of moe_aux_probs given dp_aux ([T, E]).
template <typename T>
void moe_aux_probs_backward(T* dscores, const T* dp_aux, const T* scores, int64_t tokens,
                            int64_t experts, bool sigmoid) {
  for (int64_t t = 0; t < tokens; ++t) {
    const T* s = scores + t * experts;
    const T* g = dp_aux + t * experts;
    T* ds = dscores + t * experts;
    if (!sigmoid) {
      for (int64_t e = 0; e < experts; ++e) ds[e] += g[e];
      continue;
    }
    // q_e = s_e/S: ∂/∂s_i = (g_i − Σ_e g_e·q_e)/S.
    T sum = 0, dot = 0;
    for (int64_t e = 0; e < experts; ++e) sum += s[e];
    for (int64_t e = 0; e < experts; ++e) dot += g[e] * s[e] / sum;
    for (int64_t e = 0; e < experts; ++e) ds[e] += (g[e] - dot) / sum;
  }
}

/// dlogits (overwritten) from dscores through moe_router_scores.
template <typename T>
void moe_router_scores_backward(T* dlogits, const T* dscores, const T* scores, int64_t tokens,
                                int64_t experts, bool sigmoid) {
  for (int64_t t = 0; t < tokens; ++t) {
    const T* s = scores + t * experts;
    const T* ds = dscores + t * experts;
    T* dl = dlogits + t * experts;
    if (sigmoid) {
      for (int64_t e = 0; e < experts; ++e) dl[e] = ds[e] * s[e] * (T(1) - s[e]);
      continue;
    }
    T dot = 0;
    for (int64_t e = 0; e < experts; ++e) dot += ds[e] * s[e];
    for (int64_t e = 0; e < experts; ++e) dl[e] = s[e] * (ds[e] - dot);
  }
}

/// Switch/GShard auxiliary loss from the global assignment counts and the global per-expert
/// sums of p_aux over `total_tokens` tokens.
inline double moe_aux_loss(const std::vector<double>& counts, const std::vector<double>& p_sums,
                           int64_t total_tokens, int64_t k, double coeff) {
  const double e = static_cast<double>(counts.size());
  double dot = 0;
  for (size_t i = 0; i < counts.size(); ++i) dot += counts[i] * p_sums[i];
  const double t = static_cast<double>(total_tokens);
  return coeff * e / (static_cast<double>(k) * t * t) * dot;
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_MOE_ROUTER_H_
