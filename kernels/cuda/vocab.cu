// Vocab-parallel embedding lookup and cross-entropy pieces (one block per row for the
// reductions). The embedding gradient uses atomics: several tokens may share an id.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* ids, const T* table, int64_t tokens,
                                       int64_t hidden, int64_t start, int64_t end) {
  const int64_t n = tokens * hidden;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / hidden, c = e % hidden, id = ids[t];
    out[e] = id >= start && id < end ? table[(id - start) * hidden + c] : FromF<T>(0.0f);
  }
}

template <typename T>
__global__ void EmbeddingBackwardKernel(T* dtable, const int32_t* ids, const T* dout,
                                        int64_t tokens, int64_t hidden, int64_t start,
                                        int64_t end) {
  const int64_t n = tokens * hidden;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / hidden, c = e % hidden, id = ids[t];
    if (id >= start && id < end) atomicAdd(&dtable[(id - start) * hidden + c], dout[e]);
  }
}

template <typename T>
__global__ void RowMaxKernel(float* out, const T* logits, int64_t v) {
  const T* x = logits + blockIdx.x * v;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < v; c += blockDim.x) m = fmaxf(m, ToF(x[c]));
  m = BlockMax(m);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

template <typename T>
__global__ void CrossEntropyPartialsKernel(float* sumexp, float* target, const T* logits,
                                           const float* max, const int32_t* targets, int64_t v,
                                           int64_t start) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * v;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < v; c += blockDim.x) s += __expf(ToF(x[c]) - max[r]);
  s = BlockSum(s);
  if (threadIdx.x == 0) {
    sumexp[r] = s;
    const int64_t t = targets[r] - start;
    target[r] = t >= 0 && t < v ? ToF(x[t]) : 0.0f;
  }
}

template <typename T>
__global__ void CrossEntropyBackwardKernel(T* dlogits, const T* logits, const float* max,
                                           const float* sumexp, const int32_t* targets,
                                           int64_t rows, int64_t v, int64_t start, float scale) {
  const int64_t n = rows * v;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / v, c = e % v;
    float d = scale * __expf(ToF(logits[e]) - max[r]) / sumexp[r];
    if (targets[r] - start == c) d -= scale;
    dlogits[e] = FromF<T>(d);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t embedding_forward(ElemType t, void* out, const int32_t* ids, const void* table,
                              int64_t tokens, int64_t hidden, int64_t vocab_start,
                              int64_t vocab_end, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    EmbeddingForwardKernel<T><<<Blocks(tokens * hidden, 256), 256, 0, stream>>>(
        static_cast<T*>(out), ids, static_cast<const T*>(table), tokens, hidden, vocab_start,
        vocab_end);
  });
}

cudaError_t embedding_backward(ElemType t, void* dtable, const int32_t* ids, const void* dout,
                               int64_t tokens, int64_t hidden, int64_t vocab_start,
                               int64_t vocab_end, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    EmbeddingBackwardKernel<T><<<Blocks(tokens * hidden, 256), 256, 0, stream>>>(
        static_cast<T*>(dtable), ids, static_cast<const T*>(dout), tokens, hidden, vocab_start,
        vocab_end);
  });
}

cudaError_t row_max(ElemType t, float* out, const void* logits, int64_t rows, int64_t v,
                    cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    RowMaxKernel<T><<<rows, 256, 0, stream>>>(out, static_cast<const T*>(logits), v);
  });
}

cudaError_t cross_entropy_partials(ElemType t, float* sumexp, float* target, const void* logits,
                                   const float* max, const int32_t* targets, int64_t rows,
                                   int64_t v, int64_t vocab_start, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    CrossEntropyPartialsKernel<T><<<rows, 256, 0, stream>>>(
        sumexp, target, static_cast<const T*>(logits), max, targets, v, vocab_start);
  });
}

cudaError_t cross_entropy_backward(ElemType t, void* dlogits, const void* logits,
                                   const float* max, const float* sumexp,
                                   const int32_t* targets, int64_t rows, int64_t v,
                                   int64_t vocab_start, float scale, cudaStream_t stream) {
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    CrossEntropyBackwardKernel<T><<<Blocks(rows * v, 256), 256, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), max, sumexp, targets, rows, v,
        vocab_start, scale);
  });
}

}  // namespace paratune::kernels::cuda
