// Launchers of ParaTune's own CUDA kernels (llm.c style: one .cu file per op, a
// "kernels" section and a "launchers" section; every launcher takes the stream and
// returns cudaGetLastError() after its launch). Plain C++ so that both nvcc (the .cu
// files) and g++ (cuda_backend.cc, which turns the error into a Status with file:line)
// can include it. Each launcher has a CPU twin of the same shape in kernels/cpu/.
// Storage types: fp32, bf16, fp16; all math and accumulation in fp32.
#ifndef PARATUNE_KERNELS_CUDA_LAUNCHERS_H_
#define PARATUNE_KERNELS_CUDA_LAUNCHERS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention_args.h"

namespace paratune::kernels::cuda {

enum class ElemType { kF32, kBF16, kF16, kF64, kU8, kI32 };

// convert.cu
cudaError_t fill(ElemType t, void* dst, int64_t n, double value, cudaStream_t stream);
cudaError_t convert_from_f64(ElemType t, void* dst, const double* src, int64_t n,
                             cudaStream_t stream);
cudaError_t convert_to_f64(ElemType t, double* dst, const void* src, int64_t n,
                           cudaStream_t stream);
// layernorm.cu
cudaError_t layernorm_forward(ElemType t, void* y, float* mean, float* rstd, const void* x,
                              const void* gamma, const void* beta, int64_t rows, int64_t cols,
                              float eps, cudaStream_t stream);
cudaError_t layernorm_backward(ElemType t, void* dx, void* dgamma, void* dbeta, const void* dy,
                               const void* x, const void* gamma, const float* mean,
                               const float* rstd, int64_t rows, int64_t cols,
                               float* scratch, cudaStream_t stream);
cudaError_t rmsnorm_forward(ElemType t, void* y, float* rstd, const void* x, const void* gamma,
                            int64_t rows, int64_t cols, float eps, cudaStream_t stream);
cudaError_t rmsnorm_backward(ElemType t, void* dx, void* dgamma, const void* dy, const void* x,
                             const void* gamma, const float* rstd, int64_t rows, int64_t cols,
                             float* scratch, cudaStream_t stream);
// softmax.cu
cudaError_t causal_softmax_forward(ElemType t, void* p, int64_t batch, int64_t seq, float scale,
                                   int64_t window, cudaStream_t stream);
cudaError_t causal_softmax_backward(ElemType t, void* dx, const void* p, const void* dp,
                                    int64_t batch, int64_t seq, float scale,
                                    cudaStream_t stream);
// mlp_activations.cu: GeLU, squared ReLU; SwiGLU and GeGLU (x rows [gate | up], y =
// act(gate)·up).
cudaError_t gelu_forward(ElemType t, void* y, const void* x, int64_t n, cudaStream_t stream);
cudaError_t gelu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                          cudaStream_t stream);
cudaError_t swiglu_forward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                           cudaStream_t stream);
cudaError_t swiglu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                            int64_t f, cudaStream_t stream);
cudaError_t geglu_forward(ElemType t, void* y, const void* x, int64_t rows, int64_t f,
                          cudaStream_t stream);
cudaError_t geglu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t rows,
                           int64_t f, cudaStream_t stream);
cudaError_t squared_relu_forward(ElemType t, void* y, const void* x, int64_t n,
                                 cudaStream_t stream);
cudaError_t squared_relu_backward(ElemType t, void* dx, const void* dy, const void* x, int64_t n,
                                  cudaStream_t stream);
// dropout.cu
cudaError_t dropout_forward(ElemType t, void* y, uint8_t* mask, const void* x, int64_t n,
                            float p, uint64_t seed, uint64_t index_offset, cudaStream_t stream);
cudaError_t dropout_backward(ElemType t, void* dx, const void* dy, const uint8_t* mask,
                             int64_t n, float p, cudaStream_t stream);
cudaError_t attention_dropout_forward(ElemType t, void* y, uint8_t* mask, const void* x,
                                      const AttentionArgs& args, cudaStream_t stream);
// residual.cu
// x *= s in place (fp32 math).
cudaError_t scale(ElemType t, void* x, float s, int64_t n, cudaStream_t stream);
// dst = src converted between float storage types (fp32, bf16, fp16).
cudaError_t cast(ElemType dst_t, void* dst, ElemType src_t, const void* src, int64_t n,
                 cudaStream_t stream);
cudaError_t residual_add(ElemType t, void* out, const void* a, const void* b, int64_t n,
                         cudaStream_t stream);
// adamw.cu
cudaError_t adamw(ElemType grad_type, float* param, const void* grad, float* m, float* v,
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t step, cudaStream_t stream);
// attention.cu: the elementwise parts of blocked flash attention (the backend runs the
// matrix products). A block is query rows [i0, i0 + rows) of batch element bi and
// head-in-group r, for every kv group; s and dp are [groups, rows, i0 + rows].
cudaError_t attention_block_softmax(ElemType t, const AttentionArgs& args, void* s, float* lse,
                                    int64_t bi, int64_t r, int64_t i0, int64_t rows,
                                    cudaStream_t stream);
cudaError_t attention_block_grad(ElemType t, const AttentionArgs& args, void* s, void* dp,
                                 const float* lse, const float* D, int64_t bi, int64_t r,
                                 int64_t i0, int64_t rows, cudaStream_t stream);
cudaError_t attention_row_dot(ElemType t, const AttentionArgs& args, const void* d_o, float* D,
                              cudaStream_t stream);
// vocab.cu
cudaError_t embedding_forward(ElemType t, void* out, const int32_t* ids, const void* table,
                              int64_t tokens, int64_t hidden, int64_t vocab_start,
                              int64_t vocab_end, cudaStream_t stream);
cudaError_t embedding_backward(ElemType t, void* dtable, const int32_t* ids, const void* dout,
                               int64_t tokens, int64_t hidden, int64_t vocab_start,
                               int64_t vocab_end, cudaStream_t stream);
cudaError_t row_max(ElemType t, float* out, const void* logits, int64_t rows, int64_t v,
                    cudaStream_t stream);
cudaError_t cross_entropy_partials(ElemType t, float* sumexp, float* target, const void* logits,
                                   const float* max, const int32_t* targets, int64_t rows,
                                   int64_t v, int64_t vocab_start, cudaStream_t stream);
cudaError_t cross_entropy_backward(ElemType t, void* dlogits, const void* logits,
                                   const float* max, const float* sumexp,
                                   const int32_t* targets, int64_t rows, int64_t v,
                                   int64_t vocab_start, float scale, cudaStream_t stream);

// moe.cu (router in fp32; rows in any float storage type)
cudaError_t moe_router_scores(float* scores, const float* logits, int64_t tokens,
                              int64_t experts, bool sigmoid, cudaStream_t stream);
/// Top-k experts per token (ties to the lower index) and their probabilities, optionally
/// divided by their sum, times `scale`.
cudaError_t moe_router_topk(int32_t* selected, float* probs, const float* scores,
                            int64_t tokens, int64_t experts, int64_t k, bool normalize,
                            float scale, cudaStream_t stream);
cudaError_t moe_permute(ElemType t, void* out, const void* x, const int32_t* perm,
                        int64_t rows, int64_t k, int64_t hidden, cudaStream_t stream);
/// probs may be null (weights 1); position_scratch holds tokens·k int32. Every assignment
/// has a row (dropless or balanced routing; capacity drops are CPU-only).
cudaError_t moe_unpermute(ElemType t, void* y, const void* in, const void* probs,
                          const int32_t* perm, int32_t* position_scratch, int64_t tokens,
                          int64_t k, int64_t hidden, cudaStream_t stream);
/// The forced uniform assignment: slot j of global token first_token + t goes to expert
/// ((first_token + t)·k + j) mod E; probabilities as moe_router_topk's.
cudaError_t moe_router_balanced(int32_t* selected, float* probs, const float* scores,
                                int64_t tokens, int64_t experts, int64_t k, int64_t first_token,
                                bool normalize, float scale, cudaStream_t stream);
/// dlogits [T, E] from dprobs [T, k] through the top-k probabilities and the score function.
cudaError_t moe_router_backward(float* dlogits, const float* dprobs, const float* scores,
                                const int32_t* selected, int64_t tokens, int64_t experts, int64_t k,
                                bool sigmoid, bool normalize, float scale, cudaStream_t stream);
/// din[i] = probs[perm[i]]·dy[perm[i]/k], dprobs[perm[i]] = dy[perm[i]/k]·in[i] over every
/// one of the `rows` = T·k permuted rows (one writer per element).
cudaError_t moe_unpermute_backward(ElemType t, void* din, void* dprobs, const void* dy,
                                   const void* in, const void* probs, const int32_t* perm,
                                   int64_t rows, int64_t k, int64_t hidden, cudaStream_t stream);

}  // namespace paratune::kernels::cuda

#endif  // PARATUNE_KERNELS_CUDA_LAUNCHERS_H_
