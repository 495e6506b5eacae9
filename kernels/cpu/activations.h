// GeLU (tanh approximation, as GPT-2/Megatron), SwiGLU, GeGLU (GeLU-gated, tanh GeLU as
// Gemma's gelu_pytorch_tanh) and squared ReLU (Nemotron-4), CPU twins of
// kernels/cuda/gelu.cu, swiglu.cu and glu_activations.cu.
#ifndef PARATUNE_KERNELS_CPU_ACTIVATIONS_H_
#define PARATUNE_KERNELS_CPU_ACTIVATIONS_H_

#include <cmath>
#include <cstdint>

#include "kernels/cpu/parallel.h"

namespace paratune::kernels::cpu {

inline constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)

template <typename T>
void gelu_forward(T* y, const T* x, int64_t n, int threads) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T v = x[i];
      const T u = T(kGeluScale) * (v + T(0.044715) * v * v * v);
      y[i] = T(0.5) * v * (T(1) + std::tanh(u));
    }
  });
}

template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n, int threads) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T v = x[i];
      const T u = T(kGeluScale) * (v + T(0.044715) * v * v * v);
      const T th = std::tanh(u);
      const T du = T(kGeluScale) * (T(1) + T(3 * 0.044715) * v * v);
      dx[i] = dy[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
    }
  });
}

template <typename T>
void swiglu_forward(T* y, const T* x, int64_t rows, int64_t f, int threads) {
  ParallelFor(rows, threads, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = x + r * 2 * f;
      const T* up = gate + f;
      T* yr = y + r * f;
      for (int64_t c = 0; c < f; ++c) {
        const T sig = T(1) / (T(1) + std::exp(-gate[c]));
        yr[c] = gate[c] * sig * up[c];
      }
    }
  });
}

template <typename T>
void swiglu_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t f, int threads) {
  ParallelFor(rows, threads, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = x + r * 2 * f;
      const T* up = gate + f;
      const T* dyr = dy + r * f;
      T* dgate = dx + r * 2 * f;
      T* dup = dgate + f;
      for (int64_t c = 0; c < f; ++c) {
        const T sig = T(1) / (T(1) + std::exp(-gate[c]));
        const T silu = gate[c] * sig;
        dgate[c] = dyr[c] * up[c] * sig * (T(1) + gate[c] * (T(1) - sig));
        dup[c] = dyr[c] * silu;
      }
    }
  });
}

// tanh GeLU of v and its derivative.
template <typename T>
void gelu_and_derivative(T v, T* g, T* dg) {
  const T u = T(kGeluScale) * (v + T(0.044715) * v * v * v);
  const T th = std::tanh(u);
  const T du = T(kGeluScale) * (T(1) + T(3 * 0.044715) * v * v);
  *g = T(0.5) * v * (T(1) + th);
  *dg = T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du;
}

/// x rows are [gate | up] (f each); y = gelu(gate)·up.
template <typename T>
void geglu_forward(T* y, const T* x, int64_t rows, int64_t f, int threads) {
  ParallelFor(rows, threads, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = x + r * 2 * f;
      const T* up = gate + f;
      for (int64_t c = 0; c < f; ++c) {
        T g, dg;
        gelu_and_derivative(gate[c], &g, &dg);
        y[r * f + c] = g * up[c];
      }
    }
  });
}

template <typename T>
void geglu_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t f, int threads) {
  ParallelFor(rows, threads, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = x + r * 2 * f;
      const T* up = gate + f;
      T* dgate = dx + r * 2 * f;
      T* dup = dgate + f;
      for (int64_t c = 0; c < f; ++c) {
        T g, dg;
        gelu_and_derivative(gate[c], &g, &dg);
        dgate[c] = dy[r * f + c] * up[c] * dg;
        dup[c] = dy[r * f + c] * g;
      }
    }
  });
}

/// y = max(x, 0)².
template <typename T>
void squared_relu_forward(T* y, const T* x, int64_t n, int threads) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] > T(0) ? x[i] * x[i] : T(0);
  });
}

template <typename T>
void squared_relu_backward(T* dx, const T* dy, const T* x, int64_t n, int threads) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = x[i] > T(0) ? T(2) * x[i] * dy[i] : T(0);
  });
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_ACTIVATIONS_H_
