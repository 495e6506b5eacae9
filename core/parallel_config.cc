#include "core/parallel_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace paratune {

int64_t ParallelConfig::LayersInChunk(int64_t num_layers, int64_t stage, int64_t chunk) const {
  if (!split_counts_embedding_and_loss) return num_layers / (pp * vp);
  int64_t layers = (num_layers + 2) / (pp * vp);
  if (stage == 0 && chunk == 0) --layers;                  // The embedding's slot.
  if (stage == pp - 1 && chunk == vp - 1) --layers;        // The loss's slot.
  return layers;
}

int64_t ParallelConfig::LayersOnStage(int64_t num_layers, int64_t stage) const {
  int64_t layers = 0;
  for (int64_t j = 0; j < vp; ++j) layers += LayersInChunk(num_layers, stage, j);
  return layers;
}

std::string ParallelConfig::ToString() const {
  std::string out = absl::StrFormat("tp%d pp%d dp%d cp%d vp%d mb%d", tp, pp, dp, cp, vp,
                                    micro_batch_size);
  if (sequence_parallel) absl::StrAppend(&out, tp_comm_overlap ? " sp+overlap" : " sp");
  absl::StrAppend(&out, " ", paratune::ToString(recompute));
  if (recompute == Recompute::kFull && recompute_num_layers > 0) {
    absl::StrAppend(&out, "(", recompute_num_layers, ")");
  }
  switch (data_parallel_sharding) {
    case DataParallelSharding::kNone:
      break;
    case DataParallelSharding::kOptimizer:
      absl::StrAppend(&out, " dopt");
      break;
    case DataParallelSharding::kOptimizerGrads:
      absl::StrAppend(&out, " zero2");
      break;
    case DataParallelSharding::kFull:
      absl::StrAppend(&out, " fsdp");
      break;
  }
  if (shard_group_size > 0 && distributed_optimizer()) {
    absl::StrAppend(&out, "/", shard_group_size);
  }
  if (offload == Offload::kOptimizer) absl::StrAppend(&out, " offload");
  if (offload == Offload::kOptimizerAndParams) absl::StrAppend(&out, " offload+params");
  if (activation_offload) absl::StrAppend(&out, " act-offload");
  if (!overlap_grad_reduce && dp * cp > 1) absl::StrAppend(&out, " no-grad-overlap");
  if (!overlap_p2p_comm && pp > 1 && vp > 1) absl::StrAppend(&out, " no-p2p-overlap");
  if (!overlap_param_gather && dp * cp > 1 &&
      (data_parallel_sharding == DataParallelSharding::kOptimizer ||
       data_parallel_sharding == DataParallelSharding::kOptimizerGrads)) {
    absl::StrAppend(&out, " no-param-gather-overlap");
  }
  if (split_counts_embedding_and_loss) absl::StrAppend(&out, " split+2");
  if (ep > 1 || etp > 1) {
    absl::StrAppend(&out, " ep", ep, " etp", etp, " ", paratune::ToString(moe_token_dispatcher));
  }
  return out;
}

}  // namespace paratune
