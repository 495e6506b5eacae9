// Token permutation for the MoE layer, the CPU twins of kernels/cuda/moe.cu. perm[i] is the
// assignment (t·k + j: token t's j-th expert) at permuted row i; rows are sorted by expert.
#ifndef PARATUNE_KERNELS_CPU_MOE_PERMUTE_H_
#define PARATUNE_KERNELS_CPU_MOE_PERMUTE_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace paratune::kernels::cpu {

/// perm (up to [T·k]) from the selected experts ([T, k]): a stable counting sort by
/// expert, so tokens keep their order within an expert; an assignment whose expert is −1
/// (dropped) gets no row. tokens_per_expert ([E]) is filled too. Returns the rows.
inline int64_t moe_permutation(int32_t* perm, int64_t* tokens_per_expert, const int32_t* selected,
                               int64_t assignments, int64_t experts) {
  std::fill(tokens_per_expert, tokens_per_expert + experts, int64_t{0});
  int64_t rows = 0;
  for (int64_t i = 0; i < assignments; ++i) {
    if (selected[i] >= 0) ++tokens_per_expert[selected[i]], ++rows;
  }
  std::vector<int64_t> next(experts + 1, 0);
  std::partial_sum(tokens_per_expert, tokens_per_expert + experts, next.begin() + 1);
  for (int64_t i = 0; i < assignments; ++i) {
    if (selected[i] >= 0) perm[next[selected[i]]++] = static_cast<int32_t>(i);
  }
  return rows;
}

/// out[i, :] = x[perm[i] / k, :] for the T·k permuted rows.
template <typename T>
void moe_permute(T* out, const T* x, const int32_t* perm, int64_t rows, int64_t k, int64_t hidden) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* src = x + (perm[i] / k) * hidden;
    std::copy(src, src + hidden, out + i * hidden);
  }
}

/// y[t, :] = Σ_j w(t, j) · in[row of (t, j), :] over the `rows` permuted rows (a dropped
/// assignment adds nothing), w = probs[t·k + j] (probs [T, k]), or 1 when probs is null
/// (the permutation's backward). Overwrites y ([T, h]).
template <typename T>
void moe_unpermute(T* y, const T* in, const T* probs, const int32_t* perm, int64_t tokens,
                   int64_t k, int64_t hidden, int64_t rows) {
  std::fill(y, y + tokens * hidden, T(0));
  for (int64_t i = 0; i < rows; ++i) {
    const T w = probs != nullptr ? probs[perm[i]] : T(1);
    const T* row = in + i * hidden;
    T* yt = y + (perm[i] / k) * hidden;
    for (int64_t c = 0; c < hidden; ++c) yt[c] += w * row[c];
  }
}

/// moe_unpermute's backward with probabilities: din[i] = probs[perm[i]] · dy[t],
/// dprobs[perm[i]] = dy[t] · in[i] (t = perm[i] / k); a dropped assignment's dprobs is 0
/// (its expert output is not in y). Overwrites din ([rows, h]) and dprobs ([T, k]).
template <typename T>
void moe_unpermute_backward(T* din, T* dprobs, const T* dy, const T* in, const T* probs,
                            const int32_t* perm, int64_t tokens, int64_t k, int64_t hidden,
                            int64_t rows) {
  std::fill(dprobs, dprobs + tokens * k, T(0));
  for (int64_t i = 0; i < rows; ++i) {
    const T* dyt = dy + (perm[i] / k) * hidden;
    const T* o = in + i * hidden;
    T* d = din + i * hidden;
    const T p = probs[perm[i]];
    T dot = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      d[c] = p * dyt[c];
      dot += dyt[c] * o[c];
    }
    dprobs[perm[i]] = dot;
  }
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_MOE_PERMUTE_H_
