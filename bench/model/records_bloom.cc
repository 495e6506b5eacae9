#include "bench/model/records_bloom.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/model/records.h"

namespace paratune::bench {
namespace {

// BLOOM's tokenizer has 250,680 entries, padded to 250,880 in Megatron-DeepSpeed.
constexpr int64_t kBloomPaddedVocab = 250880;
// Jean Zay's A100 nodes: four Omni-Path 100 Gb/s links per 8-GPU node (BLOOM paper, arXiv
// 2211.05100, Sec. 3.4.1): 6.25 GB/s per GPU, at the 88 % of the link that the catalog's
// A100 figure reaches on HDR (22 of 25 GB/s).
constexpr double kJeanZayNetworkGbps = 4 * 100.0 / 8 / 8 * (22.0 / 25.0);

}  // namespace

std::vector<BloomRecord> BloomRecords(const nlohmann::json& sweep) {
  std::vector<BloomRecord> out;
  int64_t row = 0;
  for (const nlohmann::json& r : sweep) {
    ++row;
    if (Str(r, "status") != "ok" || !r["iteration_time_s"].is_number() ||
        !r["global_batch_size"].is_number()) {
      continue;
    }
    BloomRecord b;
    b.spec = SpecFromRecord(r);
    b.spec.model.vocab_size = kBloomPaddedVocab;
    b.spec.training.framework = Framework::kMegatronDeepspeed;
    b.spec.cluster.network_bandwidth_gbps = kJeanZayNetworkGbps;
    b.config = LayoutFromRecord(r).config;
    ParallelConfig& c = b.config;
    c.vp = 1;
    c.recompute = Recompute::kFull;
    c.recompute_num_layers = 0;
    const bool stage0 = r.contains("zero_stage") && r["zero_stage"].is_number() &&
                        r["zero_stage"].get<int64_t>() == 0;
    c.data_parallel_sharding =
        c.dp > 1 && !stage0 ? DataParallelSharding::kOptimizer : DataParallelSharding::kNone;
    c.overlap_grad_reduce = false;
    c.overlap_p2p_comm = false;
    c.overlap_param_gather = false;
    b.group = absl::StrFormat("%s n%d B%d", Str(r, "model_name"), b.spec.cluster.num_gpus,
                              b.spec.training.global_batch_size);
    b.id = absl::StrCat("bloom#", row);
    b.tokens_per_sec_per_gpu =
        static_cast<double>(b.spec.training.global_batch_size) *
        static_cast<double>(b.spec.training.seq_length) /
        (r["iteration_time_s"].get<double>() * static_cast<double>(b.spec.cluster.num_gpus));
    if (r.contains("memory_gb_per_gpu_nvidia_smi") &&
        r["memory_gb_per_gpu_nvidia_smi"].is_number()) {
      b.memory_gib = r["memory_gb_per_gpu_nvidia_smi"].get<double>();
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace paratune::bench
