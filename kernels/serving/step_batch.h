// What one engine step computes: a list of sequence chunks whose tokens are concatenated
// in list order. A chunk with start 0 and the whole prompt is a prefill, one token at
// start = the cached length is a decode, a part of a prompt is a chunked-prefill piece;
// one step may mix them (continuous batching with chunked prefill).
#ifndef PARATUNE_KERNELS_SERVING_STEP_BATCH_H_
#define PARATUNE_KERNELS_SERVING_STEP_BATCH_H_

#include <cstdint>
#include <vector>

namespace paratune::kernels::serving {

struct SeqChunk {
  int64_t seq = 0;         ///< Sequence id (KV-cache key).
  int64_t start = 0;       ///< Position of the chunk's first token (= tokens already cached).
  int64_t num_tokens = 0;  ///< New tokens of the chunk.
  bool sample = false;     ///< Produce the next token after the chunk's last token.
};

/// Total tokens of a step.
inline int64_t StepTokens(const std::vector<SeqChunk>& chunks) {
  int64_t n = 0;
  for (const SeqChunk& c : chunks) n += c.num_tokens;
  return n;
}

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_STEP_BATCH_H_
