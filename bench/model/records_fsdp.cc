#include "bench/model/records_fsdp.h"

#include "absl/strings/match.h"
#include "bench/model/records.h"
#include "search/device_catalog.h"
#include "search/framework_profile.h"

namespace paratune::bench {

std::vector<FsdpRecord> FsdpRecords(const nlohmann::json& records) {
  std::vector<FsdpRecord> out;
  for (const nlohmann::json& r : records) {
    if (!r.contains("zero_stage") || !r["zero_stage"].is_number()) continue;
    if (!r.contains("tokens_per_sec_per_gpu") || !r["tokens_per_sec_per_gpu"].is_number()) {
      continue;
    }
    if (r.value("model_family", "") != "dense") continue;
    FsdpRecord f;
    f.id = r.value("id", "");
    f.spec = SpecFromRecord(r);
    if (!FindDevice(f.spec.cluster.gpu).ok()) continue;
    if (absl::StrContains(r.value("model_name", ""), "MPT")) {
      f.spec.model.position_embedding = PositionEmbedding::kRope;
      f.spec.model.max_position_embeddings = 0;
    }
    // The codebase the record names (its `framework` field): llm-foundry's runs are read
    // with llm-foundry's profile; any other keeps the default.
    if (absl::StrContains(r.value("framework", ""), "llm-foundry")) {
      f.spec.training.framework = Framework::kLlmFoundry;
      f.spec.training.attention_kernel =
          DefaultAttentionKernel(f.spec.training.framework, *FindDevice(f.spec.cluster.gpu));
      // The benchmark script's default attn_impl=triton: the Triton flash attention of the
      // FlashAttention-1 generation (MPT's ALiBi-capable kernel), not the flash-attn package.
      if (absl::StrContains(r.value("notes", ""), "attn_impl=triton")) {
        f.spec.training.attention_kernel = AttentionKernel::kFlash1;
      }
    }
    ReadAsAutoModel(r, &f.spec);
    f.spec.training.dropout = false;
    f.spec.training.flash_attention = true;
    const RecordLayout layout = LayoutFromRecord(r);
    f.config = layout.config;
    f.recompute_stated = layout.recompute_stated;
    ParallelConfig& c = f.config;
    c.vp = 1;
    switch (r["zero_stage"].get<int64_t>()) {
      case 1:
        c.data_parallel_sharding = DataParallelSharding::kOptimizer;
        break;
      case 2:
        c.data_parallel_sharding = DataParallelSharding::kOptimizerGrads;
        break;
      default:
        c.data_parallel_sharding = DataParallelSharding::kFull;
        break;
    }
    if (r.contains("fsdp_shard_size") && r["fsdp_shard_size"].is_number()) {
      const int64_t shard = r["fsdp_shard_size"].get<int64_t>();
      if (shard > 1 && shard < c.dp * c.cp) c.shard_group_size = shard;
    }
    if (c.dp * c.cp == 1) c.data_parallel_sharding = DataParallelSharding::kNone;
    f.published_tokens_per_gpu = r["tokens_per_sec_per_gpu"].get<double>();
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace paratune::bench
