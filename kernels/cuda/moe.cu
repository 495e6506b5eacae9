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

// Forced uniform assignment: slot j of global token g goes to expert (g·k + j) mod E.
__global__ void RouterBalancedKernel(int32_t* selected, float* probs, const float* scores,
                                     int64_t tokens, int64_t experts, int64_t k,
                                     int64_t first_token, bool normalize, float scale) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const float* s = scores + t * experts;
  int32_t* out = selected + t * k;
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    out[j] = static_cast<int32_t>(((first_token + t) * k + j) % experts);
    sum += s[out[j]];
  }
  const float div = normalize ? sum : 1.0f;
  for (int64_t j = 0; j < k; ++j) probs[t * k + j] = scale * s[out[j]] / div;
}

// One block per token: the probabilities' gradient reaches the k selected scores
// (dscores is zero elsewhere), then the score function's backward writes every logit.
__global__ void RouterBackwardKernel(float* dlogits, const float* dprobs, const float* scores,
                                     const int32_t* selected, int64_t experts, int64_t k,
                                     bool sigmoid, bool normalize, float scale) {
  const int64_t t = blockIdx.x;
  const float* s = scores + t * experts;
  const int32_t* sel = selected + t * k;
  const float* dp = dprobs + t * k;
  float* dl = dlogits + t * experts;
  // p_j = c·s_j/S when normalised: ∂/∂s_i = c·(dp_i/S − Σ_j dp_j·s_j/S²).
  float sum = 0.0f, pdot = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    sum += s[sel[j]];
    pdot += dp[j] * s[sel[j]];
  }
  auto dscore = [&](int64_t e) {
    float d = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (sel[j] != e) continue;
      d += normalize ? scale * (dp[j] / sum - pdot / (sum * sum)) : scale * dp[j];
    }
    return d;
  };
  if (sigmoid) {
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
      dl[e] = dscore(e) * s[e] * (1.0f - s[e]);
    }
    return;
  }
  // Softmax: dl_e = s_e·(ds_e − Σ_i ds_i·s_i), ds nonzero on the selected experts only.
  float dot = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    bool first = true;
    for (int64_t q = 0; q < j; ++q) first &= sel[q] != sel[j];
    if (first) dot += dscore(sel[j]) * s[sel[j]];
  }
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) dl[e] = s[e] * (dscore(e) - dot);
}

// One block per permuted row i: din[i] = p·dy[t] and dprobs[perm[i]] = dy[t]·in[i].
template <typename T>
__global__ void UnpermuteBackwardKernel(T* din, T* dprobs, const T* dy, const T* in, const T* probs,
                                        const int32_t* perm, int64_t k, int64_t hidden) {
  const int64_t i = blockIdx.x;
  const int64_t t = perm[i] / k;
  const float p = ToF(probs[perm[i]]);
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    const float g = ToF(dy[t * hidden + c]);
    din[i * hidden + c] = FromF<T>(p * g);
    dot += g * ToF(in[i * hidden + c]);
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) dprobs[perm[i]] = FromF<T>(dot);
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

cudaError_t moe_router_balanced(int32_t* selected, float* probs, const float* scores,
                                int64_t tokens, int64_t experts, int64_t k, int64_t first_token,
                                bool normalize, float scale, cudaStream_t stream) {
  if (tokens > 0) {
    RouterBalancedKernel<<<Blocks(tokens, 128), 128, 0, stream>>>(
        selected, probs, scores, tokens, experts, k, first_token, normalize, scale);
  }
  return cudaGetLastError();
}

cudaError_t moe_router_backward(float* dlogits, const float* dprobs, const float* scores,
                                const int32_t* selected, int64_t tokens, int64_t experts, int64_t k,
                                bool sigmoid, bool normalize, float scale, cudaStream_t stream) {
  if (tokens > 0) {
    RouterBackwardKernel<<<static_cast<unsigned>(tokens), 128, 0, stream>>>(
        dlogits, dprobs, scores, selected, experts, k, sigmoid, normalize, scale);
  }
  return cudaGetLastError();
}

cudaError_t moe_unpermute_backward(ElemType t, void* din, void* dprobs, const void* dy,
                                   const void* in, const void* probs, const int32_t* perm,
                                   int64_t rows, int64_t k, int64_t hidden, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    UnpermuteBackwardKernel<T><<<static_cast<unsigned>(rows), 128, 0, stream>>>(
        static_cast<T*>(din), static_cast<T*>(dprobs), static_cast<const T*>(dy),
        static_cast<const T*>(in), static_cast<const T*>(probs), perm, k, hidden);
  });
}

}  // namespace paratune::kernels::cuda
