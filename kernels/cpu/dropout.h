// Dropout with counter-based masks (kernels/hash_random.h), residual add and AdamW:
// CPU twins of kernels/cuda/dropout.cu, residual.cu and adamw.cu.
#ifndef PARATUNE_KERNELS_CPU_DROPOUT_H_
#define PARATUNE_KERNELS_CPU_DROPOUT_H_

#include <cmath>
#include <cstdint>

#include "kernels/cpu/parallel.h"
#include "kernels/hash_random.h"

namespace paratune::kernels::cpu {

template <typename T>
void dropout_forward(T* y, uint8_t* mask, const T* x, int64_t n, float p, uint64_t seed,
                     uint64_t index_offset, int threads) {
  const T scale = T(1) / (T(1) - T(p));
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const bool keep = DropoutKeep(seed, index_offset + i, p);
      if (mask != nullptr) mask[i] = keep ? 1 : 0;
      y[i] = keep ? x[i] * scale : T(0);
    }
  });
}

template <typename T>
void dropout_backward(T* dx, const T* dy, const uint8_t* mask, int64_t n, float p,
                      int threads) {
  const T scale = T(1) / (T(1) - T(p));
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = mask[i] ? dy[i] * scale : T(0);
  });
}

template <typename T>
void residual_add(T* out, const T* a, const T* b, int64_t n, int threads) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) out[i] = a[i] + b[i];
  });
}

// Decoupled weight decay (Loshchilov & Hutter), bias-corrected moments.
template <typename T>
void adamw(float* param, const T* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step, int threads) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(step));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(step));
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = static_cast<float>(grad[i]);
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const float mhat = m[i] / c1, vhat = v[i] / c2;
      param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * param[i]);
    }
  });
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_DROPOUT_H_
