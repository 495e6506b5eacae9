// Flash attention on the GPU: one warp per query row (forward, dQ) or key row (dK, dV);
// each lane holds head_dim/32 elements (head_dim a multiple of 32, at most 256). The
// forward keeps a running max m, sum l and output accumulator (online softmax) and writes
// only o and lse = m + log(l): nothing s×s is ever stored. Backward first forms
// D_i = dO_i·O_i, then recomputes each probability from q, k and lse:
//   dQ_i = scale·Σ_{j≤i} dS_ij k_j,   dK_j = scale·Σ_h Σ_{i≥j} dS_ij q_i,
//   dV_j = Σ_h Σ_{i≥j} P̃_ij dO_i,     dS_ij = P_ij·(Z_ij·dO_i·v_j − D_i),
// with P̃ = P·Z and Z the regenerated dropout factor. No atomics: each warp owns the rows
// it writes, and dK/dV of a kv group sum over the group's heads inside the warp.
#include "kernels/cuda/common.cuh"
#include "kernels/hash_random.h"

namespace paratune::kernels::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // head_dim <= 256
constexpr int kWarpsPerBlock = 4;

struct Rows {
  int64_t rs;    // row stride of q/k/v between sequence positions (b·ld_qkv)
  int64_t rs_o;  // same for o / dO
};

__device__ __forceinline__ float Keep(const AttentionArgs& a, int64_t bi, int64_t hh, int64_t i,
                                      int64_t j) {
  if (a.dropout <= 0.0f) return 1.0f;
  const uint64_t idx = AttentionDropoutIndex(bi, a.head_offset + hh, i, j, a.global_heads, a.seq);
  return DropoutKeep(a.seed, idx, a.dropout) ? 1.0f / (1.0f - a.dropout) : 0.0f;
}

template <typename T>
__device__ __forceinline__ void LoadRow(float* r, const T* p, int per_lane, int lane) {
  for (int e = 0; e < per_lane; ++e) r[e] = ToF(p[lane + 32 * e]);
}

template <typename T>
__device__ __forceinline__ float Dot(const float* r, const T* p, int per_lane, int lane) {
  float s = 0.0f;
  for (int e = 0; e < per_lane; ++e) s += r[e] * ToF(p[lane + 32 * e]);
  return WarpSum(s);
}

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void FlashForwardKernel(AttentionArgs a, float* lse) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= a.batch * a.heads * a.seq) return;
  const int64_t i = row % a.seq, bh = row / a.seq, bi = bh / a.heads, hh = bh % a.heads;
  const int64_t gg = hh / (a.heads / a.groups), d = a.head_dim;
  const int per_lane = static_cast<int>(d / 32);
  const Rows R{a.batch * a.ld_qkv, a.batch * a.ld_o};
  const T* q = static_cast<const T*>(a.q) + bi * a.ld_qkv + hh * d;
  const T* k = static_cast<const T*>(a.k) + bi * a.ld_qkv + gg * d;
  const T* v = static_cast<const T*>(a.v) + bi * a.ld_qkv + gg * d;
  float qr[kMaxPerLane], acc[kMaxPerLane];
  LoadRow(qr, q + i * R.rs, per_lane, lane);
  for (int e = 0; e < per_lane; ++e) acc[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j <= i; ++j) {
    const float s = Dot(qr, k + j * R.rs, per_lane, lane) * a.scale;
    const float m_new = fmaxf(m, s);
    const float alpha = __expf(m - m_new), p = __expf(s - m_new);
    l = l * alpha + p;
    const float pz = p * Keep(a, bi, hh, i, j);
    const T* vj = v + j * R.rs;
    for (int e = 0; e < per_lane; ++e) acc[e] = acc[e] * alpha + pz * ToF(vj[lane + 32 * e]);
    m = m_new;
  }
  T* o = static_cast<T*>(a.o) + bi * a.ld_o + hh * d + i * R.rs_o;
  for (int e = 0; e < per_lane; ++e) o[lane + 32 * e] = FromF<T>(acc[e] / l);
  if (lane == 0) lse[(bi * a.heads + hh) * a.seq + i] = m + logf(l);
}

template <typename T>
__global__ void RowDotKernel(AttentionArgs a, const T* d_o, float* D) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= a.batch * a.heads * a.seq) return;
  const int64_t i = row % a.seq, bh = row / a.seq, bi = bh / a.heads, hh = bh % a.heads;
  const int per_lane = static_cast<int>(a.head_dim / 32);
  const int64_t off = bi * a.ld_o + hh * a.head_dim + i * a.batch * a.ld_o;
  float r[kMaxPerLane];
  LoadRow(r, d_o + off, per_lane, lane);
  const float dot = Dot(r, static_cast<const T*>(a.o) + off, per_lane, lane);
  if (lane == 0) D[row] = dot;
}

template <typename T>
__global__ void FlashBackwardDqKernel(AttentionArgs a, const float* lse, const float* D,
                                      const T* d_o, T* dq) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= a.batch * a.heads * a.seq) return;
  const int64_t i = row % a.seq, bh = row / a.seq, bi = bh / a.heads, hh = bh % a.heads;
  const int64_t gg = hh / (a.heads / a.groups), d = a.head_dim;
  const int per_lane = static_cast<int>(d / 32);
  const Rows R{a.batch * a.ld_qkv, a.batch * a.ld_o};
  const T* q = static_cast<const T*>(a.q) + bi * a.ld_qkv + hh * d;
  const T* k = static_cast<const T*>(a.k) + bi * a.ld_qkv + gg * d;
  const T* v = static_cast<const T*>(a.v) + bi * a.ld_qkv + gg * d;
  float qr[kMaxPerLane], dor[kMaxPerLane], acc[kMaxPerLane];
  LoadRow(qr, q + i * R.rs, per_lane, lane);
  LoadRow(dor, d_o + bi * a.ld_o + hh * d + i * R.rs_o, per_lane, lane);
  for (int e = 0; e < per_lane; ++e) acc[e] = 0.0f;
  const float li = lse[row], Di = D[row];
  for (int64_t j = 0; j <= i; ++j) {
    const float p = __expf(Dot(qr, k + j * R.rs, per_lane, lane) * a.scale - li);
    const float dp = Dot(dor, v + j * R.rs, per_lane, lane);
    const float ds = p * (dp * Keep(a, bi, hh, i, j) - Di);
    const T* kj = k + j * R.rs;
    for (int e = 0; e < per_lane; ++e) acc[e] += ds * ToF(kj[lane + 32 * e]);
  }
  T* out = dq + bi * a.ld_qkv + hh * d + i * R.rs;
  for (int e = 0; e < per_lane; ++e) out[lane + 32 * e] = FromF<T>(a.scale * acc[e]);
}

template <typename T>
__global__ void FlashBackwardDkvKernel(AttentionArgs a, const float* lse, const float* D,
                                       const T* d_o, T* dk, T* dv) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= a.batch * a.groups * a.seq) return;
  const int64_t j = row % a.seq, bg = row / a.seq, bi = bg / a.groups, gg = bg % a.groups;
  const int64_t pg = a.heads / a.groups, d = a.head_dim;
  const int per_lane = static_cast<int>(d / 32);
  const Rows R{a.batch * a.ld_qkv, a.batch * a.ld_o};
  const T* k = static_cast<const T*>(a.k) + bi * a.ld_qkv + gg * d;
  const T* v = static_cast<const T*>(a.v) + bi * a.ld_qkv + gg * d;
  float kr[kMaxPerLane], vr[kMaxPerLane], dka[kMaxPerLane], dva[kMaxPerLane];
  LoadRow(kr, k + j * R.rs, per_lane, lane);
  LoadRow(vr, v + j * R.rs, per_lane, lane);
  for (int e = 0; e < per_lane; ++e) dka[e] = dva[e] = 0.0f;
  for (int64_t hh = gg * pg; hh < (gg + 1) * pg; ++hh) {
    const T* q = static_cast<const T*>(a.q) + bi * a.ld_qkv + hh * d;
    const T* dO = d_o + bi * a.ld_o + hh * d;
    const int64_t base = (bi * a.heads + hh) * a.seq;
    for (int64_t i = j; i < a.seq; ++i) {
      const float p = __expf(Dot(kr, q + i * R.rs, per_lane, lane) * a.scale - lse[base + i]);
      const float z = Keep(a, bi, hh, i, j);
      const float dp = Dot(vr, dO + i * R.rs_o, per_lane, lane);
      const float ds = p * (dp * z - D[base + i]);
      const T* qi = q + i * R.rs;
      const T* doi = dO + i * R.rs_o;
      for (int e = 0; e < per_lane; ++e) {
        dva[e] += p * z * ToF(doi[lane + 32 * e]);
        dka[e] += ds * ToF(qi[lane + 32 * e]);
      }
    }
  }
  T* dkr = dk + bi * a.ld_qkv + gg * d + j * R.rs;
  T* dvr = dv + bi * a.ld_qkv + gg * d + j * R.rs;
  for (int e = 0; e < per_lane; ++e) {
    dkr[lane + 32 * e] = FromF<T>(a.scale * dka[e]);
    dvr[lane + 32 * e] = FromF<T>(dva[e]);
  }
}

bool Supported(const AttentionArgs& a) {
  return a.head_dim % 32 == 0 && a.head_dim <= 32 * kMaxPerLane && a.groups > 0 &&
         a.heads % a.groups == 0;
}

int WarpBlocks(int64_t rows) {
  return static_cast<int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

cudaError_t flash_attention_forward(ElemType t, const AttentionArgs& args, float* lse,
                                    cudaStream_t stream) {
  if (!Supported(args)) return cudaErrorInvalidValue;
  const int64_t rows = args.batch * args.heads * args.seq;
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    FlashForwardKernel<T><<<WarpBlocks(rows), 32 * kWarpsPerBlock, 0, stream>>>(args, lse);
  });
}

cudaError_t flash_attention_backward(ElemType t, const AttentionArgs& args, const float* lse,
                                     const void* d_o, void* dq, void* dk, void* dv,
                                     float* scratch, cudaStream_t stream) {
  if (!Supported(args)) return cudaErrorInvalidValue;
  const int64_t rows = args.batch * args.heads * args.seq;
  const int64_t kv_rows = args.batch * args.groups * args.seq;
  return DispatchFloat(t, [&](auto z) {
    using T = decltype(z);
    const T* dO = static_cast<const T*>(d_o);
    RowDotKernel<T><<<WarpBlocks(rows), 32 * kWarpsPerBlock, 0, stream>>>(args, dO, scratch);
    FlashBackwardDqKernel<T><<<WarpBlocks(rows), 32 * kWarpsPerBlock, 0, stream>>>(
        args, lse, scratch, dO, static_cast<T*>(dq));
    FlashBackwardDkvKernel<T><<<WarpBlocks(kv_rows), 32 * kWarpsPerBlock, 0, stream>>>(
        args, lse, scratch, dO, static_cast<T*>(dk), static_cast<T*>(dv));
  });
}

}  // namespace paratune::kernels::cuda
