// Arguments of the attention kernels, shared by the C++ backends and the CUDA launchers
// (plain C++, no abseil, so nvcc can include it).
#ifndef PARATUNE_KERNELS_ATTENTION_ARGS_H_
#define PARATUNE_KERNELS_ATTENTION_ARGS_H_

#include <cstdint>

#if defined(__CUDACC__)
#define PARATUNE_ATTN_HD __host__ __device__ __forceinline__
#else
#define PARATUNE_ATTN_HD inline
#endif

namespace paratune::kernels {

/// Causal (self) attention over one rank's heads; with `window` > 0 query i attends keys
/// j in (i - window, i] only (sliding-window attention, Megatron's --window-size w,0). q/k/v/o rows
/// are tokens in [s, b] order with leading dimensions in elements; head hh of q uses kv group hh /
/// (heads/groups).
struct AttentionArgs {
  int64_t batch = 0;           ///< b.
  int64_t seq = 0;             ///< s.
  int64_t heads = 0;           ///< Local query heads.
  int64_t groups = 0;          ///< Local kv groups.
  int64_t head_dim = 0;        ///< d.
  const void* q = nullptr;     ///< q(token t=si·b+bi, head hh) at q + t·ld_q + hh·d.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t ld_qkv = 0;          ///< Row stride of q, k and v.
  void* o = nullptr;           ///< o(t, hh) at o + t·ld_o + hh·d.
  int64_t ld_o = 0;
  float scale = 1.0f;          ///< Softmax scale, 1/sqrt(d).
  float dropout = 0.0f;        ///< Attention dropout (mask regenerated from the seed).
  uint64_t seed = 0;
  int64_t global_heads = 0;    ///< a, for globally indexed dropout masks.
  int64_t head_offset = 0;     ///< Global index of local head 0.
  int64_t window = 0;          ///< Keys per query, itself included; 0 = every earlier key.
};

/// The first key query `i` attends to.
PARATUNE_ATTN_HD int64_t FirstKey(const AttentionArgs& a, int64_t i) {
  return a.window > 0 && i >= a.window ? i - a.window + 1 : 0;
}

/// Global element index of attention probability (bi, global head, i, j), the dropout key:
/// the same element drops on every TP layout.
PARATUNE_ATTN_HD uint64_t AttentionDropoutIndex(int64_t bi, int64_t head, int64_t i, int64_t j,
                                      int64_t heads_total, int64_t seq) {
  return static_cast<uint64_t>(((bi * heads_total + head) * seq + i) * seq + j);
}

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_ATTENTION_ARGS_H_
