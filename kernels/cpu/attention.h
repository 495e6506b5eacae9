// Flash attention (tiled online softmax, FlashAttention-2 order) and the naive path's
// attention dropout: CPU twins of kernels/cuda/attention.cu.
//
// Forward walks query tiles of kTileQ rows; for each key tile at or left of the diagonal (and,
// with a sliding window, at or right of the tile's first key) it
// computes the kTileQ×kTileK scores with one GEMM, updates the running row max m and sum l,
// rescales the output accumulator and adds P·V. Only m + log(l) (the log-sum-exp, fp32) is
// kept for backward: memory is O(s) per head instead of O(s²). Backward recomputes each
// score tile from q, k and the lse. Dropout on P uses counter-based masks, so the same
// elements drop as in the naive path and nothing s×s is stored.
// Heads run one after another and OpenBLAS threads each 128×128 tile GEMM: running heads on
// our own threads as well oversubscribed the cores (OpenBLAS workers spin between calls)
// and halved the layer's rate in layer_step.
#ifndef PARATUNE_KERNELS_CPU_ATTENTION_H_
#define PARATUNE_KERNELS_CPU_ATTENTION_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/hash_random.h"

namespace paratune::kernels::cpu {

inline constexpr int64_t kTileQ = 128;
inline constexpr int64_t kTileK = 128;

template <typename T>
void flash_attention_forward(const AttentionArgs& a, float* lse, int threads) {
  const int64_t s = a.seq, d = a.head_dim, rs = a.batch * a.ld_qkv, rs_o = a.batch * a.ld_o;
  const int64_t per_group = a.heads / a.groups;
  const T keep_scale = T(1) / (T(1) - T(a.dropout));
  (void)threads;  // tiles are big enough for OpenBLAS to thread each GEMM itself
  ParallelFor(a.batch * a.heads, 1, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> S(kTileQ * kTileK), acc(kTileQ * d), m(kTileQ), l(kTileQ);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t bi = task / a.heads, hh = task % a.heads, gg = hh / per_group;
      const T* q = static_cast<const T*>(a.q) + bi * a.ld_qkv + hh * d;
      const T* k = static_cast<const T*>(a.k) + bi * a.ld_qkv + gg * d;
      const T* v = static_cast<const T*>(a.v) + bi * a.ld_qkv + gg * d;
      T* o = static_cast<T*>(a.o) + bi * a.ld_o + hh * d;
      for (int64_t i0 = 0; i0 < s; i0 += kTileQ) {
        const int64_t br = std::min(kTileQ, s - i0);
        std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
        std::fill(l.begin(), l.end(), T(0));
        std::fill(acc.begin(), acc.end(), T(0));
        // Key tiles from the one holding the tile's first row's first key.
        for (int64_t j0 = FirstKey(a, i0) / kTileK * kTileK; j0 < i0 + br; j0 += kTileK) {
          const int64_t bc = std::min(kTileK, s - j0);
          gemm(false, true, br, bc, d, 1.0f, q + i0 * rs, rs, k + j0 * rs, rs, 0.0f, S.data(),
               bc);
          for (int64_t r = 0; r < br; ++r) {
            const int64_t i = i0 + r;
            // Keys FirstKey(i) <= j <= i in this tile: columns [first, valid).
            const int64_t valid = std::min(bc, i - j0 + 1);
            const int64_t first = std::max<int64_t>(0, FirstKey(a, i) - j0);
            T* srow = S.data() + r * bc;
            if (valid <= first) {
              std::fill(srow, srow + bc, T(0));
              continue;
            }
            T mx = m[r];
            for (int64_t c = first; c < valid; ++c) mx = std::max(mx, srow[c] * T(a.scale));
            const T alpha = std::exp(m[r] - mx);
            T sum = 0;
            for (int64_t c = 0; c < bc; ++c) {
              if (c < first || c >= valid) {
                srow[c] = T(0);
                continue;
              }
              const T p = std::exp(srow[c] * T(a.scale) - mx);
              sum += p;
              if (a.dropout > 0) {
                const uint64_t idx =
                    AttentionDropoutIndex(bi, a.head_offset + hh, i, j0 + c, a.global_heads, s);
                srow[c] = DropoutKeep(a.seed, idx, a.dropout) ? p * keep_scale : T(0);
              } else {
                srow[c] = p;
              }
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
            for (int64_t c = 0; c < d; ++c) acc[r * d + c] *= alpha;
          }
          gemm(false, false, br, d, bc, 1.0f, S.data(), bc, v + j0 * rs, rs, 1.0f, acc.data(), d);
        }
        for (int64_t r = 0; r < br; ++r) {
          T* orow = o + (i0 + r) * rs_o;
          for (int64_t c = 0; c < d; ++c) orow[c] = acc[r * d + c] / l[r];
          lse[(bi * a.heads + hh) * s + i0 + r] = static_cast<float>(m[r] + std::log(l[r]));
        }
      }
    }
  });
}

template <typename T>
void flash_attention_backward(const AttentionArgs& a, const float* lse, const T* d_o, T* dq,
                              T* dk, T* dv, int threads) {
  const int64_t s = a.seq, d = a.head_dim, rs = a.batch * a.ld_qkv, rs_o = a.batch * a.ld_o;
  const int64_t per_group = a.heads / a.groups;
  const T keep_scale = T(1) / (T(1) - T(a.dropout));
  // One task per (batch, kv group): dk and dv accumulate over the group's heads.
  (void)threads;
  ParallelFor(a.batch * a.groups, 1, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> S(kTileQ * kTileK), dP(kTileQ * kTileK), D(s);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t bi = task / a.groups, gg = task % a.groups;
      const T* k = static_cast<const T*>(a.k) + bi * a.ld_qkv + gg * d;
      const T* v = static_cast<const T*>(a.v) + bi * a.ld_qkv + gg * d;
      T* dkg = dk + bi * a.ld_qkv + gg * d;
      T* dvg = dv + bi * a.ld_qkv + gg * d;
      for (int64_t i = 0; i < s; ++i) {
        std::fill(dkg + i * rs, dkg + i * rs + d, T(0));
        std::fill(dvg + i * rs, dvg + i * rs + d, T(0));
      }
      for (int64_t hh = gg * per_group; hh < (gg + 1) * per_group; ++hh) {
        const T* q = static_cast<const T*>(a.q) + bi * a.ld_qkv + hh * d;
        const T* o = static_cast<const T*>(a.o) + bi * a.ld_o + hh * d;
        const T* dO = d_o + bi * a.ld_o + hh * d;
        T* dqh = dq + bi * a.ld_qkv + hh * d;
        const float* lse_h = lse + (bi * a.heads + hh) * s;
        for (int64_t i = 0; i < s; ++i) {
          T dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += dO[i * rs_o + c] * o[i * rs_o + c];
          D[i] = dot;
          std::fill(dqh + i * rs, dqh + i * rs + d, T(0));
        }
        for (int64_t i0 = 0; i0 < s; i0 += kTileQ) {
          const int64_t br = std::min(kTileQ, s - i0);
          for (int64_t j0 = FirstKey(a, i0) / kTileK * kTileK; j0 < i0 + br; j0 += kTileK) {
            const int64_t bc = std::min(kTileK, s - j0);
            gemm(false, true, br, bc, d, 1.0f, q + i0 * rs, rs, k + j0 * rs, rs, 0.0f,
                 S.data(), bc);
            // dP = dO·Vᵀ (dropped-probability gradient).
            gemm(false, true, br, bc, d, 1.0f, dO + i0 * rs_o, rs_o, v + j0 * rs, rs, 0.0f,
                 dP.data(), bc);
            for (int64_t r = 0; r < br; ++r) {
              const int64_t i = i0 + r;
              for (int64_t c = 0; c < bc; ++c) {
                const int64_t j = j0 + c;
                T& sv = S[r * bc + c];
                T& dpv = dP[r * bc + c];
                if (j > i || j < FirstKey(a, i)) {
                  sv = T(0);
                  dpv = T(0);
                  continue;
                }
                const T p = std::exp(sv * T(a.scale) - T(lse_h[i]));
                T z = T(1);
                if (a.dropout > 0) {
                  const uint64_t idx =
                      AttentionDropoutIndex(bi, a.head_offset + hh, i, j, a.global_heads, s);
                  z = DropoutKeep(a.seed, idx, a.dropout) ? keep_scale : T(0);
                }
                // S now holds the dropped probabilities (for dV), dP the score gradient.
                sv = p * z;
                dpv = p * (dpv * z - D[i]);
              }
            }
            gemm(true, false, bc, d, br, 1.0f, S.data(), bc, dO + i0 * rs_o, rs_o, 1.0f,
                 dvg + j0 * rs, rs);
            gemm(false, false, br, d, bc, a.scale, dP.data(), bc, k + j0 * rs, rs, 1.0f,
                 dqh + i0 * rs, rs);
            gemm(true, false, bc, d, br, a.scale, dP.data(), bc, q + i0 * rs, rs, 1.0f,
                 dkg + j0 * rs, rs);
          }
        }
      }
    }
  });
}

// Naive path: dropout on the stored probabilities [b, heads, s, s], mask stored (u8).
template <typename T>
void attention_dropout_forward(T* y, uint8_t* mask, const T* x, const AttentionArgs& a,
                               int threads) {
  const int64_t ss = a.seq * a.seq;
  for (int64_t bi = 0; bi < a.batch; ++bi) {
    for (int64_t hh = 0; hh < a.heads; ++hh) {
      const int64_t off = (bi * a.heads + hh) * ss;
      dropout_forward(y + off, mask + off, x + off, ss, a.dropout, a.seed,
                      AttentionDropoutIndex(bi, a.head_offset + hh, 0, 0, a.global_heads, a.seq),
                      threads);
    }
  }
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_ATTENTION_H_
