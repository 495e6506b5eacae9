// The validity rules of DESIGN.md for one parallel layout (core/parallel_config.h) within a
// job, and the figures of a layout that need the job.
#ifndef PARATUNE_SEARCH_PARALLEL_CONFIG_H_
#define PARATUNE_SEARCH_PARALLEL_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/parallel_config.h"
#include "search/specs.h"

namespace paratune {

/// Micro-batches per iteration m = B / (b * d) (0 when b * d is not positive).
int64_t NumMicroBatches(const ParallelConfig& config, const TrainingSpec& training);

/// Pipeline slots the split divides: num_layers, or with split_counts_embedding_and_loss
/// num_layers + 2 + mtp_layers (the embedding, the loss and each MTP module count as one
/// layer each, as Megatron-Core's pipeline layout "E...|mL" places them).
int64_t PipelineSlots(const ModelSpec& model, const ParallelConfig& config);
/// Whether the pipeline split of a layout with `pp` stages of `vp` chunks counts the
/// embedding and the loss as layers (ParallelConfig::split_counts_embedding_and_loss), as
/// training.framework splits: always with pp > 1 (torchtitan), never (DeepSpeed's
/// PipelineModule), or where the layers alone do not divide (Megatron-Core).
bool SplitCountsEmbeddingAndLoss(const JobSpec& spec, int64_t pp, int64_t vp);
/// Transformer layers (MTP modules not counted) in model chunk `chunk` of stage `stage`.
int64_t DecoderLayersInChunk(const ModelSpec& model, const ParallelConfig& config, int64_t stage,
                             int64_t chunk);
/// Transformer layers on pipeline stage `stage` (all its chunks; MTP modules not counted).
int64_t DecoderLayersOnStage(const ModelSpec& model, const ParallelConfig& config, int64_t stage);

/// Every rule of DESIGN.md "The search space": N = t*p*c*d, divisibility of heads,
/// groups, FFN, layers (with VP; L + 2 with split_counts_embedding_and_loss), batch;
/// interleaving (vp > 1) needs m % p == 0 (Megatron-LM's interleaved schedule runs
/// micro-batches in groups of p); SP only with t > 1; CP needs s % 2c == 0; TP inside a
/// node unless allowed; data-parallel sharding needs dp*cp > 1, and a shard_group_size
/// (only with sharding) of at least 2 that divides dp*cp; the expert layout (Megatron-Core's
/// parallel folding): ep divides num_experts, etp divides moe_ffn_hidden_size, etp*ep
/// divides tp*cp*dp, tp divides the shared experts' width, ep = etp = 1 and the default
/// dispatcher for dense models, a dispatcher other than alltoall only with ep*etp > 1. The
/// first violated rule, naming the fields and values:
/// `tp (3) must divide model.num_attention_heads (32)`.
absl::Status ValidateParallelConfig(const ParallelConfig& config, const JobSpec& spec);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PARALLEL_CONFIG_H_
