// The scheduler of a continuous-batching engine (vLLM V1 / TensorRT-LLM in-flight
// batching), independent of the model and of the clock. Each step it
//   1. gives every running sequence whose prompt is done one decode token,
//   2. fills the remaining token budget (max_num_tokens) with prompt chunks: first the
//      running sequences still prefilling, then new requests in arrival order, admitted
//      while fewer than max_batch_size sequences run and the KV cache can hold their whole
//      prompt and output (so a running sequence is never preempted); with a sliding
//      window, a windowed layer group counts only the blocks its window needs at most.
// Without chunked prefill a prompt runs whole or waits for a step with room for it.
// Thread-safety: not thread-safe; every rank runs an identical copy.
#ifndef PARATUNE_KERNELS_SERVING_CONTINUOUS_BATCHER_H_
#define PARATUNE_KERNELS_SERVING_CONTINUOUS_BATCHER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "kernels/serving/step_batch.h"

namespace paratune::kernels::serving {

struct BatcherLimits {
  int64_t max_batch_size = 8;    ///< Sequences running at once.
  int64_t max_num_tokens = 256;  ///< Tokens per step (prompt chunks + decodes).
  bool chunked_prefill = true;   ///< Split prompts over steps to fill the token budget.
  int64_t kv_block_size = 16;    ///< Of the model's KV cache.
  int64_t num_kv_blocks = 64;    ///< Of the model's KV cache (KvLayerGroups::blocks).
  /// The cache's layer groups (KvLayerGroups) and window: a request holds, per group, the
  /// blocks of its whole context or (windowed) of the window its chunks read.
  int64_t kv_full_groups = 1;
  int64_t kv_windowed_groups = 0;
  int64_t kv_window = 0;

  /// First violated rule, e.g. `max_num_tokens (4) must be >= max_batch_size (8)`.
  absl::Status Validate() const;
};

/// A sequence's token produced by a step.
struct TokenEvent {
  int64_t seq = 0;
  bool first = false;     ///< The first output token (end of the prompt).
  bool finished = false;  ///< The request's last output token.
};

class ContinuousBatcher {
 public:
  explicit ContinuousBatcher(const BatcherLimits& limits) : limits_(limits) {}

  /// Queues a request; InvalidArgument if it can never run (its prompt and output exceed
  /// the KV cache, or, without chunked prefill, its prompt exceeds max_num_tokens).
  absl::Status Add(int64_t seq, int64_t isl, int64_t osl);
  /// Queues a request whose prompt another instance computed, with its first output token
  /// (disaggregated serving's decode instance): once admitted under the same limits, it
  /// decodes from position isl on. InvalidArgument as Add, or when osl < 2.
  absl::Status AddPrefilled(int64_t seq, int64_t isl, int64_t osl);
  /// The next step's chunks (empty when nothing can run).
  std::vector<SeqChunk> Plan();
  /// Records that `plan` ran; returns the tokens it produced, in chunk order.
  std::vector<TokenEvent> Commit(const std::vector<SeqChunk>& plan);

  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t free_blocks() const { return limits_.num_kv_blocks - used_blocks_; }

 private:
  struct Seq {
    int64_t isl = 0, osl = 0;
    int64_t prefilled = 0;  ///< Prompt tokens in the cache.
    int64_t generated = 0;  ///< Output tokens produced.
    int64_t blocks = 0;     ///< KV blocks held for isl + osl.
  };
  int64_t BlocksFor(const Seq& s) const;

  BatcherLimits limits_;
  std::map<int64_t, Seq> seqs_;
  std::vector<int64_t> running_;  ///< In admission order.
  std::deque<int64_t> waiting_;
  int64_t used_blocks_ = 0;
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_CONTINUOUS_BATCHER_H_
