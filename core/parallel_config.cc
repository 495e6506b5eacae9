#include "core/parallel_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace paratune {

int64_t ParallelConfig::LayersInChunk(int64_t num_layers, int64_t stage, int64_t chunk) const {
  const int64_t chunks = pp * vp;
  const int64_t slots = split_counts_embedding_and_loss ? num_layers + 2 : num_layers;
  // Chunk j of stage r is virtual stage j*p + r; a remainder goes one slot each to the
  // first virtual stages (torch.distributed.pipelining's split; none where chunks divide).
  const int64_t virtual_stage = chunk * pp + stage;
  int64_t layers = slots / chunks + (virtual_stage < slots % chunks ? 1 : 0);
  if (split_counts_embedding_and_loss) {
    if (virtual_stage == 0) --layers;           // The embedding's slot.
    if (virtual_stage == chunks - 1) --layers;  // The loss's slot.
  }
  return layers;
}

int64_t ParallelConfig::LayersOnStage(int64_t num_layers, int64_t stage) const {
  int64_t layers = 0;
  for (int64_t j = 0; j < vp; ++j) layers += LayersInChunk(num_layers, stage, j);
  return layers;
}

std::string ParallelConfig::ToString() const { return Describe(/*extras_only=*/false); }

std::string ParallelConfig::ExtrasString() const { return Describe(/*extras_only=*/true); }

std::string ParallelConfig::Describe(bool extras_only) const {
  std::vector<std::string> tokens;
  if (!extras_only) {
    tokens.push_back(
        absl::StrFormat("tp%d pp%d dp%d cp%d vp%d mb%d", tp, pp, dp, cp, vp, micro_batch_size));
  }
  if (sequence_parallel && (tp_comm_overlap || !extras_only)) {
    tokens.push_back(tp_comm_overlap ? "sp+overlap" : "sp");
  }
  if (!extras_only) {
    std::string recompute_token = paratune::ToString(recompute);
    if (recompute == Recompute::kFull && recompute_num_layers > 0) {
      absl::StrAppend(&recompute_token, "(", recompute_num_layers, ")");
    }
    tokens.push_back(recompute_token);
  }
  std::string sharding;
  switch (data_parallel_sharding) {
    case DataParallelSharding::kNone:
      break;
    case DataParallelSharding::kOptimizer:
      sharding = "dopt";
      break;
    case DataParallelSharding::kOptimizerGrads:
      sharding = "zero2";
      break;
    case DataParallelSharding::kFull:
      sharding = "fsdp";
      break;
  }
  if (shard_group_size > 0 && distributed_optimizer()) {
    absl::StrAppend(&sharding, "/", shard_group_size);
  }
  if (!sharding.empty() && !(extras_only && sharding == "dopt")) tokens.push_back(sharding);
  if (offload == Offload::kOptimizer) tokens.push_back("offload");
  if (offload == Offload::kOptimizerAndParams) tokens.push_back("offload+params");
  if (activation_offload) tokens.push_back("act-offload");
  if (!overlap_grad_reduce && dp * cp > 1) tokens.push_back("no-grad-overlap");
  if (!overlap_p2p_comm && pp > 1 && vp > 1) tokens.push_back("no-p2p-overlap");
  if (!overlap_param_gather && dp * cp > 1 &&
      (data_parallel_sharding == DataParallelSharding::kOptimizer ||
       data_parallel_sharding == DataParallelSharding::kOptimizerGrads)) {
    tokens.push_back("no-param-gather-overlap");
  }
  if (split_counts_embedding_and_loss) tokens.push_back("split+2");
  if (ep > 1 || etp > 1) {
    tokens.push_back(
        absl::StrCat("ep", ep, " etp", etp, " ", paratune::ToString(moe_token_dispatcher)));
  }
  return absl::StrJoin(tokens, " ");
}

}  // namespace paratune
