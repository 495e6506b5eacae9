// Flash attention on the GPU, blocked over query rows so that the matrix products run on
// cuBLAS (tensor cores) and only a block of scores exists at a time: for a block of C query
// rows [i0, i0 + C) the backend (cuda_backend.cc) forms S = Q_blk·Kᵀ over the kv keys
// [k0, i0 + C) the block can see (k0 = 0, or with a sliding window the first row's first
// key), then
//   forward:  attention_block_softmax turns S into P̃ = softmax(scale·S)·Z in place and
//             writes lse = max + log(sum) of the block's rows; O_blk = P̃·V;
//   backward: with dP̃ = dO_blk·Vᵀ, attention_block_grad recomputes P = exp(scale·S − lse)
//             and writes P̃ = P·Z over S and dS = scale·P·(Z·dP̃ − D) over dP̃, where
//             D_i = dO_i·O_i (attention_row_dot); then dV += P̃ᵀ·dO_blk, dQ_blk = dS·K and
//             dK += dSᵀ·Q_blk.
// Z is the attention-dropout factor regenerated from (seed, global element index), the same
// on every layout and on the CPU backend. What is kept between forward and backward is what
// flash attention keeps: O and lse (b·heads·s floats); nothing s×s. The blocks' S and dP̃
// buffers are transient workspace (the backend sizes them to a few tens of MiB).
//
// Rows of a block's S buffer: row = g·C + il for kv group g of the call's batch and local
// query row il; query head hh = g·(heads/groups) + r for the call's head-in-group r.
#include "kernels/cuda/common.cuh"
#include "kernels/hash_random.h"

namespace paratune::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = 4;

// Query rows [i0, i0 + rows) of head-in-group r of batch element bi, over keys [k0, k0 + kv).
struct Block {
  int64_t bi, r, i0, rows, k0, kv;
};

__device__ __forceinline__ float Keep(const AttentionArgs& a, int64_t bi, int64_t hh, int64_t i,
                                      int64_t j) {
  if (a.dropout <= 0.0f) return 1.0f;
  const uint64_t idx = AttentionDropoutIndex(bi, a.head_offset + hh, i, j, a.global_heads, a.seq);
  return DropoutKeep(a.seed, idx, a.dropout) ? 1.0f / (1.0f - a.dropout) : 0.0f;
}

// (lse / D index, global query row i, head hh) of row `row` of a block buffer.
struct RowOf {
  int64_t index, i, hh;
  __device__ RowOf(const AttentionArgs& a, const Block& k, int64_t row) {
    const int64_t g = row / k.rows, il = row % k.rows;
    i = k.i0 + il;
    hh = g * (a.heads / a.groups) + k.r;
    index = (k.bi * a.heads + hh) * a.seq + i;
  }
};

// Buffer columns [lo, hi] of a row hold its keys FirstKey(i)..i (global key = k0 + column).
struct KeysOf {
  int64_t lo, hi;
  __device__ KeysOf(const AttentionArgs& a, const Block& k, int64_t i)
      : lo(FirstKey(a, i) - k.k0), hi(i - k.k0) {}
};

template <typename T>
__global__ void BlockSoftmaxKernel(AttentionArgs a, Block k, T* s, float* lse) {
  const RowOf w(a, k, blockIdx.x);
  const KeysOf c(a, k, w.i);
  T* sr = s + blockIdx.x * k.kv;
  float mx = -INFINITY;
  for (int64_t j = c.lo + threadIdx.x; j <= c.hi; j += blockDim.x) {
    mx = fmaxf(mx, ToF(sr[j]) * a.scale);
  }
  mx = BlockMax(mx);
  float sum = 0.0f;
  for (int64_t j = c.lo + threadIdx.x; j <= c.hi; j += blockDim.x) {
    sum += __expf(ToF(sr[j]) * a.scale - mx);
  }
  sum = BlockSum(sum);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < k.kv; j += blockDim.x) {
    const float p = j >= c.lo && j <= c.hi ? __expf(ToF(sr[j]) * a.scale - mx) * inv : 0.0f;
    sr[j] = FromF<T>(p == 0.0f ? 0.0f : p * Keep(a, k.bi, w.hh, w.i, k.k0 + j));
  }
  if (threadIdx.x == 0) lse[w.index] = mx + logf(sum);
}

template <typename T>
__global__ void BlockGradKernel(AttentionArgs a, Block k, T* s, T* dp, const float* lse,
                                const float* D) {
  const RowOf w(a, k, blockIdx.x);
  const KeysOf c(a, k, w.i);
  T* sr = s + blockIdx.x * k.kv;
  T* dr = dp + blockIdx.x * k.kv;
  const float l = lse[w.index], di = D[w.index];
  for (int64_t j = threadIdx.x; j < k.kv; j += blockDim.x) {
    float pt = 0.0f, ds = 0.0f;
    if (j >= c.lo && j <= c.hi) {
      const float p = __expf(ToF(sr[j]) * a.scale - l);
      const float z = Keep(a, k.bi, w.hh, w.i, k.k0 + j);
      pt = p * z;
      ds = a.scale * p * (z * ToF(dr[j]) - di);
    }
    sr[j] = FromF<T>(pt);
    dr[j] = FromF<T>(ds);
  }
}

// D[(bi·heads + hh)·s + i] = dO(t, hh)·O(t, hh), t = i·b + bi: one warp per row.
template <typename T>
__global__ void RowDotKernel(AttentionArgs a, const T* d_o, float* D) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= a.batch * a.heads * a.seq) return;
  const int64_t i = row % a.seq, bh = row / a.seq, bi = bh / a.heads, hh = bh % a.heads;
  const int64_t off = (i * a.batch + bi) * a.ld_o + hh * a.head_dim;
  const T* o = static_cast<const T*>(a.o) + off;
  const T* g = d_o + off;
  float sum = 0.0f;
  for (int64_t e = lane; e < a.head_dim; e += 32) sum += ToF(o[e]) * ToF(g[e]);
  sum = WarpSum(sum);
  if (lane == 0) D[row] = sum;
}

Block MakeBlock(const AttentionArgs& a, int64_t bi, int64_t r, int64_t i0, int64_t rows) {
  const int64_t k0 = FirstKey(a, i0);
  return Block{bi, r, i0, rows, k0, i0 + rows - k0};
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t attention_block_softmax(ElemType t, const AttentionArgs& args, void* s, float* lse,
                                    int64_t bi, int64_t r, int64_t i0, int64_t rows,
                                    cudaStream_t stream) {
  const Block k = MakeBlock(args, bi, r, i0, rows);
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    BlockSoftmaxKernel<T><<<args.groups * rows, kThreads, 0, stream>>>(args, k,
                                                                       static_cast<T*>(s), lse);
  });
}

cudaError_t attention_block_grad(ElemType t, const AttentionArgs& args, void* s, void* dp,
                                 const float* lse, const float* D, int64_t bi, int64_t r,
                                 int64_t i0, int64_t rows, cudaStream_t stream) {
  const Block k = MakeBlock(args, bi, r, i0, rows);
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    BlockGradKernel<T><<<args.groups * rows, kThreads, 0, stream>>>(
        args, k, static_cast<T*>(s), static_cast<T*>(dp), lse, D);
  });
}

cudaError_t attention_row_dot(ElemType t, const AttentionArgs& args, const void* d_o, float* D,
                              cudaStream_t stream) {
  const int64_t rows = args.batch * args.heads * args.seq;
  const int blocks = static_cast<int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    RowDotKernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(args, static_cast<const T*>(d_o),
                                                                 D);
  });
}

}  // namespace paratune::kernels::cuda
