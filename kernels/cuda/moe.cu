// MoE router and token permutation, mirrors of kernels/cpu/moe_router.h and
// kernels/cpu/moe_permute.h. The router runs in fp32 (as Megatron-Core's router): one block
// per token computes the softmax (block max and sum) or the sigmoid of its E logits; one
// thread per token selects its top-k by k passes over its scores (E is at most a few
// hundred, k at most a few), ties to the lower expert index as on CPU. Permute gathers
// rows (one writer per output element); unpermute first inverts the permutation (a
// scatter of row indices, one writer each) and then sums each token's k rows in slot
// order, so the result has no atomics and is deterministic.
#include "kernels/cuda/common.cuh"

namespace paratune::kernels::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

__global__ void RouterScoresKernel(float* scores, const float* logits, int64_t experts,
                                   bool sigmoid) {
  const float* l = logits + blockIdx.x * experts;
  float* s = scores + blockIdx.x * experts;
  if (sigmoid) {
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) s[e] = 1.0f / (1.0f + expf(-l[e]));
    return;
  }
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) mx = fmaxf(mx, l[e]);
  mx = BlockMax(mx);
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) sum += expf(l[e] - mx);
  sum = BlockSum(sum);
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) s[e] = expf(l[e] - mx) / sum;
}

__global__ void RouterTopKKernel(int32_t* selected, float* probs, const float* scores,
                                 int64_t tokens, int64_t experts, int64_t k, bool normalize,
                                 float scale) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const float* s = scores + t * experts;
  int32_t* out = selected + t * k;
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (int64_t q = 0; q < j; ++q) taken |= out[q] == e;
      if (!taken && (best < 0 || s[e] > s[best])) best = static_cast<int32_t>(e);
    }
    out[j] = best;
    sum += s[best];
  }
  const float div = normalize ? sum : 1.0f;
  for (int64_t j = 0; j < k; ++j) probs[t * k + j] = scale * s[out[j]] / div;
}

template <typename T>
__global__ void PermuteKernel(T* out, const T* x, const int32_t* perm, int64_t rows, int64_t k,
                              int64_t hidden) {
  const int64_t n = rows * hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / hidden, c = i % hidden;
    out[i] = x[(perm[r] / k) * hidden + c];
  }
}

__global__ void InvertPermutationKernel(int32_t* position, const int32_t* perm, int64_t rows) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < rows) position[perm[i]] = static_cast<int32_t>(i);
}

template <typename T>
__global__ void UnpermuteKernel(T* y, const T* in, const T* probs, const int32_t* position,
                                int64_t tokens, int64_t k, int64_t hidden) {
  const int64_t n = tokens * hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / hidden, c = i % hidden;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float w = probs != nullptr ? ToF(probs[t * k + j]) : 1.0f;
      acc += w * ToF(in[position[t * k + j] * hidden + c]);
    }
    y[i] = FromF<T>(acc);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t moe_router_scores(float* scores, const float* logits, int64_t tokens, int64_t experts,
                              bool sigmoid, cudaStream_t stream) {
  if (tokens > 0) {
    RouterScoresKernel<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(scores, logits, experts,
                                                                          sigmoid);
  }
  return cudaGetLastError();
}

cudaError_t moe_router_topk(int32_t* selected, float* probs, const float* scores, int64_t tokens,
                            int64_t experts, int64_t k, bool normalize, float scale,
                            cudaStream_t stream) {
  if (tokens > 0) {
    RouterTopKKernel<<<Blocks(tokens, 128), 128, 0, stream>>>(selected, probs, scores, tokens,
                                                              experts, k, normalize, scale);
  }
  return cudaGetLastError();
}

cudaError_t moe_permute(ElemType t, void* out, const void* x, const int32_t* perm, int64_t rows,
                        int64_t k, int64_t hidden, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    PermuteKernel<T><<<Blocks(rows * hidden, 256), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), perm, rows, k, hidden);
  });
}

cudaError_t moe_unpermute(ElemType t, void* y, const void* in, const void* probs,
                          const int32_t* perm, int32_t* position_scratch, int64_t tokens, int64_t k,
                          int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return cudaGetLastError();
  InvertPermutationKernel<<<Blocks(tokens * k, 256), 256, 0, stream>>>(position_scratch, perm,
                                                                       tokens * k);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    UnpermuteKernel<T><<<Blocks(tokens * hidden, 256), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(in), static_cast<const T*>(probs),
        position_scratch, tokens, k, hidden);
  });
}

}  // namespace paratune::kernels::cuda
