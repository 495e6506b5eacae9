// LayerNorm and RMSNorm, CPU twins of kernels/cuda/layernorm.cu. One row per token;
// statistics in fp32 (as llm.c), math in the accumulation type of T (float or double).
// Backward follows llm.c: dx = rstd·(dŷ − mean(dŷ) − x̂·mean(dŷ·x̂)), dŷ = dy·gamma.
#ifndef PARATUNE_KERNELS_CPU_LAYERNORM_H_
#define PARATUNE_KERNELS_CPU_LAYERNORM_H_

#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace paratune::kernels::cpu {

template <typename T>
void layernorm_forward(T* y, float* mean, float* rstd, const T* x, const T* gamma,
                       const T* beta, int64_t rows, int64_t cols, float eps, int threads) {
  ParallelFor(rows, threads, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T m = 0;
      for (int64_t c = 0; c < cols; ++c) m += xr[c];
      m /= cols;
      T var = 0;
      for (int64_t c = 0; c < cols; ++c) var += (xr[c] - m) * (xr[c] - m);
      var /= cols;
      const T rs = T(1) / std::sqrt(var + T(eps));
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
      mean[r] = static_cast<float>(m);
      rstd[r] = static_cast<float>(rs);
    }
  });
}

// dgamma/dbeta: += so that gradients accumulate across micro-batches. Rows are reduced
// per thread into private sums first (no races).
template <typename T>
void layernorm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols,
                        int threads) {
  std::mutex mu;
  ParallelFor(rows, threads, 64, [&](int64_t r0, int64_t r1) {
    std::vector<T> dg(cols, T(0)), db(cols, T(0));
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      const T m = mean[r], rs = rstd[r];
      T mean_dn = 0, mean_dnx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const T xhat = (xr[c] - m) * rs;
        const T dn = dyr[c] * gamma[c];
        mean_dn += dn;
        mean_dnx += dn * xhat;
        dg[c] += dyr[c] * xhat;
        db[c] += dyr[c];
      }
      mean_dn /= cols;
      mean_dnx /= cols;
      T* dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const T xhat = (xr[c] - m) * rs;
        dxr[c] = (dyr[c] * gamma[c] - mean_dn - xhat * mean_dnx) * rs;
      }
    }
    // Accumulate this chunk's sums; chunks are few, a short critical section is enough.
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t c = 0; c < cols; ++c) {
      dgamma[c] += dg[c];
      dbeta[c] += db[c];
    }
  });
}

template <typename T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* gamma, int64_t rows,
                     int64_t cols, float eps, int threads) {
  ParallelFor(rows, threads, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T ms = 0;
      for (int64_t c = 0; c < cols; ++c) ms += xr[c] * xr[c];
      const T rs = T(1) / std::sqrt(ms / cols + T(eps));
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * gamma[c];
      rstd[r] = static_cast<float>(rs);
    }
  });
}

template <typename T>
void rmsnorm_backward(T* dx, T* dgamma, const T* dy, const T* x, const T* gamma,
                      const float* rstd, int64_t rows, int64_t cols, int threads) {
  std::mutex mu;
  ParallelFor(rows, threads, 64, [&](int64_t r0, int64_t r1) {
    std::vector<T> dg(cols, T(0));
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      const T rs = rstd[r];
      T mean_dnx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const T xhat = xr[c] * rs;
        mean_dnx += dyr[c] * gamma[c] * xhat;
        dg[c] += dyr[c] * xhat;
      }
      mean_dnx /= cols;
      T* dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        dxr[c] = (dyr[c] * gamma[c] - xr[c] * rs * mean_dnx) * rs;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t c = 0; c < cols; ++c) dgamma[c] += dg[c];
  });
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_LAYERNORM_H_
