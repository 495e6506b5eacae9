// The MLP activations, the twins of kernels/cpu/activations.h: GeLU (tanh approximation,
// GPT-2 / Megatron) and squared ReLU elementwise; SwiGLU and GeGLU gated, x rows being
// [gate | up] (f each) and y = act(gate)·up. One grid-stride kernel per form, templated on
// the activation (its value and derivative in fp32).
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- activations: value a and derivative da at v ---------------------------------------

struct Gelu {
  __device__ static void Eval(float v, float* a, float* da) {
    constexpr float kScale = 0.7978845608028654f;  // sqrt(2/pi)
    const float th = tanhf(kScale * (v + 0.044715f * v * v * v));
    const float du = kScale * (1.0f + 3.0f * 0.044715f * v * v);
    *a = 0.5f * v * (1.0f + th);
    *da = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
  }
};

struct Silu {
  __device__ static void Eval(float v, float* a, float* da) {
    const float sig = 1.0f / (1.0f + __expf(-v));
    *a = v * sig;
    *da = sig * (1.0f + v * (1.0f - sig));
  }
};

struct SquaredRelu {
  __device__ static void Eval(float v, float* a, float* da) {
    *a = v > 0.0f ? v * v : 0.0f;
    *da = v > 0.0f ? 2.0f * v : 0.0f;
  }
};

// ---- kernels ---------------------------------------------------------------------------

template <typename Act, typename T>
__global__ void ElementwiseForwardKernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float a, da;
    Act::Eval(ToF(x[i]), &a, &da);
    y[i] = FromF<T>(a);
  }
}

template <typename Act, typename T>
__global__ void ElementwiseBackwardKernel(T* dx, const T* dy, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float a, da;
    Act::Eval(ToF(x[i]), &a, &da);
    dx[i] = FromF<T>(ToF(dy[i]) * da);
  }
}

template <typename Act, typename T>
__global__ void GatedForwardKernel(T* y, const T* x, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    float a, da;
    Act::Eval(ToF(x[r * 2 * f + c]), &a, &da);
    y[i] = FromF<T>(a * ToF(x[r * 2 * f + f + c]));
  }
}

template <typename Act, typename T>
__global__ void GatedBackwardKernel(T* dx, const T* dy, const T* x, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    float a, da;
    Act::Eval(ToF(x[r * 2 * f + c]), &a, &da);
    const float u = ToF(x[r * 2 * f + f + c]), d = ToF(dy[i]);
    dx[r * 2 * f + c] = FromF<T>(d * u * da);
    dx[r * 2 * f + f + c] = FromF<T>(d * a);
  }
}

template <typename Act>
cudaError_t ElementwiseForward(ElemType t, void* y, const void* x, int64_t n, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    ElementwiseForwardKernel<Act, T>
        <<<Blocks(n, 256), 256, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n);
  });
}

template <typename Act>
cudaError_t ElementwiseBackward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                                cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    ElementwiseBackwardKernel<Act, T><<<Blocks(n, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), n);
  });
}

template <typename Act>
cudaError_t GatedForward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                         cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    GatedForwardKernel<Act, T><<<Blocks(rows * f, 256), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(x), rows, f);
  });
}

template <typename Act>
cudaError_t GatedBackward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                          int64_t f, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    GatedBackwardKernel<Act, T><<<Blocks(rows * f, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), rows, f);
  });
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t gelu_forward(ElemType t, void* y, const void* x, int64_t n, cudaStream_t stream) {
  return ElementwiseForward<Gelu>(t, y, x, n, stream);
}
cudaError_t gelu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                          cudaStream_t stream) {
  return ElementwiseBackward<Gelu>(t, dx, dy, x, n, stream);
}
cudaError_t squared_relu_forward(ElemType t, void* y, const void* x, int64_t n,
                                 cudaStream_t stream) {
  return ElementwiseForward<SquaredRelu>(t, y, x, n, stream);
}
cudaError_t squared_relu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                                  cudaStream_t stream) {
  return ElementwiseBackward<SquaredRelu>(t, dx, dy, x, n, stream);
}
cudaError_t swiglu_forward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                           cudaStream_t stream) {
  return GatedForward<Silu>(t, y, x, rows, f, stream);
}
cudaError_t swiglu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                            int64_t f, cudaStream_t stream) {
  return GatedBackward<Silu>(t, dx, dy, x, rows, f, stream);
}
cudaError_t geglu_forward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                          cudaStream_t stream) {
  return GatedForward<Gelu>(t, y, x, rows, f, stream);
}
cudaError_t geglu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                           int64_t f, cudaStream_t stream) {
  return GatedBackward<Gelu>(t, dx, dy, x, rows, f, stream);
}

}  // namespace paratune::kernels::cuda
