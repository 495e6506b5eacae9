// The serving layer's operations that the training Backend does not have, one
// implementation per backend: rotary embedding, the KV-cache write, paged attention and
// the per-row argmax of greedy sampling. The CPU implementation runs the host kernels
// (rope.h, PagedKvCache::Write, paged_attention.h); the CUDA one their device twins
// (kernels/serving/cuda), reading the step's positions, slot mapping and block tables
// from device arrays that BeginStep stages once per step.
// Thread-safety: one ServingOps belongs to one rank (thread), as its Backend.
#ifndef PARATUNE_KERNELS_SERVING_SERVING_OPS_H_
#define PARATUNE_KERNELS_SERVING_SERVING_OPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/serving/paged_attention.h"
#include "kernels/serving/paged_kv_cache.h"
#include "kernels/serving/step_batch.h"

namespace paratune::kernels::serving {

class ServingOps {
 public:
  virtual ~ServingOps() = default;

  /// Stages one step's chunks: token i of the concatenated chunks sits at position
  /// chunk.start + offset, and every position the step writes or reads is held by
  /// `cache` (positions a windowed group has freed are skipped by WriteKv). Every call
  /// below until the next BeginStep refers to these chunks.
  virtual absl::Status BeginStep(const PagedKvCache& cache,
                                 const std::vector<SeqChunk>& chunks) = 0;
  /// Rotary embedding in place on `heads` heads of dim d at the start of each of the
  /// step's rows of x (fp32, backend memory, row stride ld), by the rows' positions.
  virtual absl::Status Rope(float* x, int64_t ld, int64_t heads, int64_t d, double theta) = 0;
  /// Writes K and V of the step's tokens (fp32 rows of groups·head_dim values at k + i·ld
  /// and v + i·ld, backend memory) into layer `layer` of `cache`.
  virtual absl::Status WriteKv(PagedKvCache& cache, int64_t layer, const float* k, const float* v,
                               int64_t ld) = 0;
  /// Paged attention of the step's tokens (args.q and args.o fp32, backend memory).
  virtual absl::Status PagedAttention(const PagedAttentionArgs& args, const PagedKvCache& cache,
                                      int64_t layer) = 0;
  /// Per row of logits [rows, v] (dtype, backend memory): the value and index of its first
  /// maximum, on the host.
  virtual absl::Status ArgMax(DType dtype, const void* logits, int64_t rows, int64_t v,
                              std::vector<double>* value, std::vector<int64_t>* index) = 0;
};

/// What a device's ServingOps::BeginStep stages for one step, built on the host: per token
/// its position; per chunk its start, first row, tokens and the tokens the paged kernel
/// runs (0 for a whole prompt of at least `flash_min_tokens`, which flash attention runs,
/// listed in `flash` as (first row, tokens)); per block-table group the slot of each token
/// (block · block_size + offset, −1 where the group holds no block) and the chunks' block
/// tables [chunks, max_blocks] (−1 padded).
struct StepArrays {
  std::vector<int64_t> positions, start, row0, tokens, paged_tokens;
  std::vector<std::pair<int64_t, int64_t>> flash;
  int64_t max_chunk_tokens = 0, paged_max_tokens = 0;
  struct Group {
    std::vector<int64_t> slots;
    std::vector<int32_t> tables;
    int64_t max_blocks = 1;
    bool used = false;  ///< Some layer reads the group.
  };
  std::vector<Group> groups;
};
StepArrays BuildStepArrays(const PagedKvCache& cache, const std::vector<SeqChunk>& chunks,
                           int64_t flash_min_tokens);

/// The operations of `backend` (which must outlive them); `threads` for the CPU loops.
/// Unimplemented for a CUDA backend in a build without CUDA.
absl::StatusOr<std::unique_ptr<ServingOps>> MakeServingOps(Backend& backend, int threads);

#if PARATUNE_HAVE_CUDA
/// The CUDA implementation (kernels/serving/cuda/serving_ops.cu).
absl::StatusOr<std::unique_ptr<ServingOps>> MakeCudaServingOps(Backend& backend);
#endif

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVING_OPS_H_
