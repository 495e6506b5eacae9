// Vocab-parallel embedding and cross entropy pieces (Megatron's VocabParallelEmbedding and
// vocab_parallel_cross_entropy), CPU twins of kernels/cuda/vocab.cu. Each rank holds rows
// [vocab_start, vocab_start + v) of the table / logits columns; the caller combines the
// per-rank partials with all-reduce (sum) and all-gather (max).
#ifndef PARATUNE_KERNELS_CPU_VOCAB_H_
#define PARATUNE_KERNELS_CPU_VOCAB_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace paratune::kernels::cpu {

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t tokens,
                       int64_t hidden, int64_t vocab_start, int64_t vocab_end) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = ids[t];
    T* o = out + t * hidden;
    if (id >= vocab_start && id < vocab_end) {
      std::copy(table + (id - vocab_start) * hidden, table + (id - vocab_start + 1) * hidden, o);
    } else {
      std::fill(o, o + hidden, T(0));
    }
  }
}

// += so that gradients accumulate across micro-batches.
template <typename T>
void embedding_backward(T* dtable, const int32_t* ids, const T* dout, int64_t tokens,
                        int64_t hidden, int64_t vocab_start, int64_t vocab_end) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = ids[t];
    if (id < vocab_start || id >= vocab_end) continue;
    T* d = dtable + (id - vocab_start) * hidden;
    for (int64_t c = 0; c < hidden; ++c) d[c] += dout[t * hidden + c];
  }
}

template <typename T>
void row_max(float* out, const T* logits, int64_t rows, int64_t v) {
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = static_cast<float>(*std::max_element(logits + r * v, logits + (r + 1) * v));
  }
}

template <typename T>
void cross_entropy_partials(float* sumexp, float* target, const T* logits, const float* max,
                            const int32_t* targets, int64_t rows, int64_t v,
                            int64_t vocab_start) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * v;
    T s = 0;
    for (int64_t c = 0; c < v; ++c) s += std::exp(x[c] - T(max[r]));
    sumexp[r] = static_cast<float>(s);
    const int64_t t = targets[r] - vocab_start;
    target[r] = t >= 0 && t < v ? static_cast<float>(x[t]) : 0.0f;
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const float* max, const float* sumexp,
                            const int32_t* targets, int64_t rows, int64_t v,
                            int64_t vocab_start, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * v;
    T* d = dlogits + r * v;
    for (int64_t c = 0; c < v; ++c) d[c] = T(scale) * std::exp(x[c] - T(max[r])) / T(sumexp[r]);
    const int64_t t = targets[r] - vocab_start;
    if (t >= 0 && t < v) d[t] -= T(scale);
  }
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_VOCAB_H_
