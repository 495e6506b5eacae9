#include "kernels/serving/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace paratune::kernels::serving {
namespace {

// Query tokens per tile: with 8 query heads per KV head a tile is 128 stacked rows, a
// GEMM large enough for OpenBLAS while the [rows, block] scores stay in L1/L2.
constexpr int64_t kTileTokens = 16;

}  // namespace

void PagedAttentionForward(const PagedAttentionArgs& a, const PagedKvCache& cache, int64_t layer,
                           const std::vector<SeqChunk>& chunks, int threads) {
  const int64_t d = a.head_dim, pg = a.heads / a.groups, bs = cache.shape().block_size;
  std::vector<int64_t> row0(chunks.size());
  for (size_t c = 1; c < chunks.size(); ++c) row0[c] = row0[c - 1] + chunks[c - 1].num_tokens;
  const int64_t tasks = static_cast<int64_t>(chunks.size()) * a.groups;
  cpu::ParallelFor(tasks, threads, 1, [&](int64_t t0, int64_t t1) {
    const int64_t max_rows = kTileTokens * pg;
    std::vector<float> qt(max_rows * d), acc(max_rows * d), s(max_rows * bs), m(max_rows),
        l(max_rows), kb(bs * d), vb(bs * d);
    for (int64_t task = t0; task < t1; ++task) {
      const SeqChunk& ch = chunks[task / a.groups];
      const int64_t gg = task % a.groups;
      const std::vector<int32_t>& table = cache.block_table(ch.seq, layer);
      for (int64_t i0 = 0; i0 < ch.num_tokens; i0 += kTileTokens) {
        const int64_t tn = std::min(kTileTokens, ch.num_tokens - i0), rows = tn * pg;
        // Stacked row ti·pg + p = token i0 + ti, head gg·pg + p; pre-scaled.
        for (int64_t ti = 0; ti < tn; ++ti) {
          for (int64_t p = 0; p < pg; ++p) {
            const float* src = a.q + (row0[task / a.groups] + i0 + ti) * a.ld_q + (gg * pg + p) * d;
            float* dst = qt.data() + (ti * pg + p) * d;
            for (int64_t c = 0; c < d; ++c) dst[c] = src[c] * a.scale;
          }
        }
        std::fill(acc.begin(), acc.begin() + rows * d, 0.0f);
        std::fill(m.begin(), m.begin() + rows, -std::numeric_limits<float>::infinity());
        std::fill(l.begin(), l.begin() + rows, 0.0f);
        const int64_t kv_len = ch.start + i0 + tn;  // keys the tile's last token sees
        // The first key a query at position q sees.
        const auto first_key = [&](int64_t q) {
          return a.window > 0 && q >= a.window ? q - a.window + 1 : 0;
        };
        for (int64_t b = first_key(ch.start + i0) / bs; b * bs < kv_len; ++b) {
          const int64_t count = std::min(bs, kv_len - b * bs), key0 = b * bs;
          cache.ReadBlock(layer, table[b], gg, 0, count, kb.data(), vb.data());
          cpu::gemm(false, true, rows, count, d, 1.0f, qt.data(), d, kb.data(), d, 0.0f, s.data(),
                    count);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t qpos = ch.start + i0 + r / pg;
            // Columns [first, valid): keys first_key(qpos) ≤ key ≤ qpos.
            const int64_t valid = std::min(count, qpos - key0 + 1);
            const int64_t first = std::max<int64_t>(0, first_key(qpos) - key0);
            float* sr = s.data() + r * count;
            if (valid <= first) {
              std::fill(sr, sr + count, 0.0f);
              continue;
            }
            float mx = m[r];
            for (int64_t c = first; c < valid; ++c) mx = std::max(mx, sr[c]);
            const float alpha = std::exp(m[r] - mx);
            float sum = 0;
            for (int64_t c = 0; c < count; ++c) {
              const float p = c >= first && c < valid ? std::exp(sr[c] - mx) : 0.0f;
              sr[c] = p;
              sum += p;
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
            float* ar = acc.data() + r * d;
            for (int64_t c = 0; c < d; ++c) ar[c] *= alpha;
          }
          cpu::gemm(false, false, rows, d, count, 1.0f, s.data(), count, vb.data(), d, 1.0f,
                    acc.data(), d);
        }
        for (int64_t ti = 0; ti < tn; ++ti) {
          for (int64_t p = 0; p < pg; ++p) {
            const int64_t r = ti * pg + p;
            float* dst = a.o + (row0[task / a.groups] + i0 + ti) * a.ld_o + (gg * pg + p) * d;
            for (int64_t c = 0; c < d; ++c) dst[c] = acc[r * d + c] / l[r];
          }
        }
      }
    }
  });
}

}  // namespace paratune::kernels::serving
