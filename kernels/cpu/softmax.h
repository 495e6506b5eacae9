// Causal softmax over s×s score matrices (naive attention path), CPU twin of
// kernels/cuda/softmax.cu. Row i keeps columns j <= i (and, with a sliding window w > 0,
// j > i - w); the rest are written as 0. The backward needs no window: p is 0 there.
#ifndef PARATUNE_KERNELS_CPU_SOFTMAX_H_
#define PARATUNE_KERNELS_CPU_SOFTMAX_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/parallel.h"

namespace paratune::kernels::cpu {

template <typename T>
void causal_softmax_forward(T* p, int64_t batch, int64_t seq, float scale, int64_t window,
                            int threads) {
  ParallelFor(batch * seq, threads, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % seq;
      const int64_t lo = window > 0 && i >= window ? i - window + 1 : 0;
      T* row = p + r * seq;
      T mx = row[lo] * T(scale);
      for (int64_t j = lo + 1; j <= i; ++j) mx = std::max(mx, row[j] * T(scale));
      T sum = 0;
      for (int64_t j = lo; j <= i; ++j) {
        row[j] = std::exp(row[j] * T(scale) - mx);
        sum += row[j];
      }
      const T inv = T(1) / sum;
      for (int64_t j = lo; j <= i; ++j) row[j] *= inv;
      for (int64_t j = 0; j < lo; ++j) row[j] = T(0);
      for (int64_t j = i + 1; j < seq; ++j) row[j] = T(0);
    }
  });
}

template <typename T>
void causal_softmax_backward(T* dx, const T* p, const T* dp, int64_t batch, int64_t seq,
                             float scale, int threads) {
  ParallelFor(batch * seq, threads, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % seq;
      const T* pr = p + r * seq;
      const T* dpr = dp + r * seq;
      T dot = 0;
      for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dpr[j];
      T* dxr = dx + r * seq;
      for (int64_t j = 0; j <= i; ++j) dxr[j] = T(scale) * pr[j] * (dpr[j] - dot);
      for (int64_t j = i + 1; j < seq; ++j) dxr[j] = T(0);
    }
  });
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_SOFTMAX_H_
