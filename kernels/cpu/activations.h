// The MLP activations, CPU twins of kernels/cuda/mlp_activations.cu: GeLU (tanh
// approximation, as GPT-2/Megatron) and squared ReLU (Nemotron-4) elementwise; SwiGLU and
// GeGLU (GeLU-gated, tanh GeLU as Gemma's gelu_pytorch_tanh) gated. One loop per form,
// templated on the activation's value and derivative.
#ifndef PARATUNE_KERNELS_CPU_ACTIVATIONS_H_
#define PARATUNE_KERNELS_CPU_ACTIVATIONS_H_

#include <cmath>
#include <cstdint>

#include "kernels/cpu/parallel.h"

namespace paratune::kernels::cpu {

inline constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)

// Each activation's value *a and derivative *da at v.
template <typename T>
void gelu_and_derivative(T v, T* a, T* da) {
  const T u = T(kGeluScale) * (v + T(0.044715) * v * v * v);
  const T th = std::tanh(u);
  const T du = T(kGeluScale) * (T(1) + T(3 * 0.044715) * v * v);
  *a = T(0.5) * v * (T(1) + th);
  *da = T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du;
}
template <typename T>
void silu_and_derivative(T v, T* a, T* da) {
  const T sig = T(1) / (T(1) + std::exp(-v));
  *a = v * sig;
  *da = sig * (T(1) + v * (T(1) - sig));
}
template <typename T>
void squared_relu_and_derivative(T v, T* a, T* da) {
  *a = v > T(0) ? v * v : T(0);
  *da = v > T(0) ? T(2) * v : T(0);
}

/// y = act(x) elementwise.
template <typename T, typename Act>
void elementwise_forward(T* y, const T* x, int64_t n, int threads, Act act) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T a, da;
      act(x[i], &a, &da);
      y[i] = a;
    }
  });
}
template <typename T, typename Act>
void elementwise_backward(T* dx, const T* dy, const T* x, int64_t n, int threads, Act act) {
  ParallelFor(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T a, da;
      act(x[i], &a, &da);
      dx[i] = dy[i] * da;
    }
  });
}

/// x rows are [gate | up] (f each); y = act(gate)·up.
template <typename T, typename Act>
void gated_forward(T* y, const T* x, int64_t rows, int64_t f, int threads, Act act) {
  ParallelFor(rows, threads, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = x + r * 2 * f;
      const T* up = gate + f;
      for (int64_t c = 0; c < f; ++c) {
        T a, da;
        act(gate[c], &a, &da);
        y[r * f + c] = a * up[c];
      }
    }
  });
}
template <typename T, typename Act>
void gated_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t f, int threads, Act act) {
  ParallelFor(rows, threads, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gate = x + r * 2 * f;
      const T* up = gate + f;
      T* dgate = dx + r * 2 * f;
      T* dup = dgate + f;
      for (int64_t c = 0; c < f; ++c) {
        T a, da;
        act(gate[c], &a, &da);
        dgate[c] = dy[r * f + c] * up[c] * da;
        dup[c] = dy[r * f + c] * a;
      }
    }
  });
}

template <typename T>
void gelu_forward(T* y, const T* x, int64_t n, int threads) {
  elementwise_forward(y, x, n, threads, gelu_and_derivative<T>);
}
template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n, int threads) {
  elementwise_backward(dx, dy, x, n, threads, gelu_and_derivative<T>);
}
template <typename T>
void squared_relu_forward(T* y, const T* x, int64_t n, int threads) {
  elementwise_forward(y, x, n, threads, squared_relu_and_derivative<T>);
}
template <typename T>
void squared_relu_backward(T* dx, const T* dy, const T* x, int64_t n, int threads) {
  elementwise_backward(dx, dy, x, n, threads, squared_relu_and_derivative<T>);
}
template <typename T>
void swiglu_forward(T* y, const T* x, int64_t rows, int64_t f, int threads) {
  gated_forward(y, x, rows, f, threads, silu_and_derivative<T>);
}
template <typename T>
void swiglu_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t f, int threads) {
  gated_backward(dx, dy, x, rows, f, threads, silu_and_derivative<T>);
}
template <typename T>
void geglu_forward(T* y, const T* x, int64_t rows, int64_t f, int threads) {
  gated_forward(y, x, rows, f, threads, gelu_and_derivative<T>);
}
template <typename T>
void geglu_backward(T* dx, const T* dy, const T* x, int64_t rows, int64_t f, int threads) {
  gated_backward(dx, dy, x, rows, f, threads, gelu_and_derivative<T>);
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_ACTIVATIONS_H_
