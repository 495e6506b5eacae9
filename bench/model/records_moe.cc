#include "bench/model/records_moe.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/model/records.h"
#include "search/device_catalog.h"
#include "search/framework_profile.h"
#include "search/model_math.h"
#include "search/parallel_config.h"
#include "search/presets.h"

namespace paratune::bench {
namespace {

// The preset of a record's model_name ("Qwen3-235B-A22B" -> qwen3-235b-a22b).
std::string PresetOf(const std::string& model_name) {
  // "DeepSeek V3 671B" and "DeepSeek-V3" alike.
  const std::string lower = absl::StrReplaceAll(absl::AsciiStrToLower(model_name), {{" ", "-"}});
  for (const char* p : {"qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b",
                        "mixtral-8x22b", "gpt-oss-120b", "kimi-k2", "moonlight-16b-a3b"}) {
    if (absl::StrContains(lower, p)) return p;
  }
  if (absl::StrContains(lower, "qwen3-moe-30b")) return "qwen3-30b-a3b";
  if (absl::StrContains(lower, "deepseek-v3")) return "deepseek-v3";
  if (absl::StrContains(lower, "moonlight-16b")) return "moonlight-16b-a3b";
  return "";
}

// The catalog key of a record's gpu_type.
std::string DeviceOf(const std::string& gpu) {
  if (absl::StrContains(gpu, "GB300")) return "gb300";
  if (absl::StrContains(gpu, "GB200")) return "gb200";
  if (absl::StrContains(gpu, "H800")) return "h800-80gb";
  if (absl::StrContains(gpu, "H100")) return "h100-sxm-80gb";
  return gpu;
}

// Why a record cannot be expressed, or "".
std::string SkipReason(const nlohmann::json& r, const std::string& preset) {
  const std::string family = absl::AsciiStrToLower(Str(r, "model_family"));
  if (absl::StrContains(family, "hybrid") || absl::StrContains(family, "mamba")) {
    return "hybrid Mamba/attention layers are not modelled";
  }
  const std::string gpu = Str(r, "gpu_type");
  if (!FindDevice(DeviceOf(gpu)).ok()) {
    return absl::StrCat("device '", gpu, "' is not in the catalog");
  }
  if (!ParsePrecision(absl::AsciiStrToLower(Str(r, "precision"))).ok()) {
    return absl::StrCat("precision '", Str(r, "precision"), "' is not modelled");
  }
  if (preset.empty() && !Stated(r, "vocab_size")) {
    return "model shape not stated (no preset for its model_name)";
  }
  if (!Stated(r, "global_batch_size") || !Stated(r, "tp") || !Stated(r, "ep")) {
    return "global batch, tp or ep not stated";
  }
  return "";
}

MoeTokenDispatcher DispatcherOf(const std::string& text) {
  if (absl::StrContains(text, "DeepEP") || absl::StrContains(text, "HybridEP") ||
      absl::StrContains(text, "flex")) {
    return MoeTokenDispatcher::kFlex;
  }
  if (absl::StrContains(text, "allgather")) return MoeTokenDispatcher::kAllGather;
  return MoeTokenDispatcher::kAllToAll;
}

}  // namespace

std::vector<MoeRecord> MoeRecordsFromCalibration(const nlohmann::json& data) {
  std::vector<MoeRecord> out;
  for (const nlohmann::json& r : data) {
    const std::string family = absl::AsciiStrToLower(Str(r, "model_family"));
    if (!absl::StrContains(family, "moe")) continue;
    MoeRecord rec;
    rec.id = Str(r, "id");
    if (absl::StrContains(Str(r, "notes"), "only recompute_modules varies between rows")) {
      rec.relative_study = absl::StrCat(Str(r, "source"), " | ", Str(r, "model_name"));
      rec.study_control = absl::StrContains(Str(r, "recompute"), "control");
    }
    const std::string preset = PresetOf(Str(r, "model_name"));
    rec.skip_reason = SkipReason(r, preset);
    if (!rec.skip_reason.empty()) {
      out.push_back(rec);
      continue;
    }
    JobSpec& spec = rec.spec;
    spec.name = rec.id;
    spec.model = *FindPreset(preset);
    spec.training.seq_length = Int(r, "seq_length", 4096);
    spec.training.global_batch_size = Int(r, "global_batch_size", 0);
    spec.training.precision = *ParsePrecision(absl::AsciiStrToLower(Str(r, "precision")));
    // The model zoo's benchmark script (sbatch_benchmarking.sh) runs its FP8 and MXFP8
    // recipes with --fp8-param-gather and the precision-aware optimizer's BF16 moments
    // (--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16).
    if (absl::StrContains(Str(r, "source"), "Megatron-MoE-ModelZoo") &&
        (spec.training.precision == Precision::kFp8 ||
         spec.training.precision == Precision::kMxfp8)) {
      spec.training.fp8_param_gather = true;
      spec.training.optimizer_state_dtype = Precision::kBf16;
    }
    spec.training.flash_attention = true;
    spec.training.dropout = false;
    // Forced balance where the source says so, and for the model-zoo benchmarks; dropless
    // where the source names it.
    const std::string drop = Str(r, "moe_token_drop");
    spec.training.moe_routing =
        absl::StrContains(drop, "dropless") ? MoeRouting::kDropless : MoeRouting::kBalanced;
    spec.cluster.gpu = DeviceOf(Str(r, "gpu_type"));
    spec.cluster.num_gpus = Int(r, "num_gpus", 0);
    // NeMo AutoModel is PyTorch FSDP2 with expert parallelism (ReadAsAutoModel); the
    // others get their framework's attention kernel on the device.
    const bool automodel = ReadAsAutoModel(r, &spec);
    if (auto device = FindDevice(spec.cluster.gpu); device.ok() && !automodel) {
      spec.training.attention_kernel = DefaultAttentionKernel(spec.training.framework, *device);
    }
    // GB200/GB300 NVL72 trays hold 4 GPUs; the rack's NVLink domain is the device's.
    spec.cluster.gpus_per_node = absl::StartsWith(spec.cluster.gpu, "gb") ? 4 : 8;

    ParallelConfig& c = rec.config;
    c.tp = Int(r, "tp", 1);
    c.pp = Int(r, "pp", 1);
    c.cp = Int(r, "cp", 1);
    c.dp = spec.cluster.num_gpus / (c.tp * c.pp * c.cp);
    c.vp = Int(r, "vp", 1);
    c.micro_batch_size = Int(r, "micro_batch_size", 1);
    c.sequence_parallel = c.tp > 1;  // Megatron-Core requires SP with TP in MoE models.
    const std::string rc = Str(r, "recompute");
    c.recompute = absl::StartsWith(rc, "full")        ? Recompute::kFull
                  : absl::StartsWith(rc, "selective") ? Recompute::kSelective
                                                      : Recompute::kNone;
    if (c.recompute == Recompute::kSelective) {
      // "selective: layernorm, moe" names Megatron-Core's --recompute-modules ("norm" and
      // "act" in the model zoo's shorthand are layernorm and moe_act); an explicit empty
      // list recomputes nothing.
      std::vector<RecomputeModule> modules;
      const size_t colon = rc.find(':');
      if (colon != std::string::npos) {
        for (absl::string_view name : absl::StrSplit(rc.substr(colon + 1), ',')) {
          name = absl::StripAsciiWhitespace(name);
          if (name == "norm") name = "layernorm";
          if (name == "act") name = "moe_act";
          absl::StatusOr<RecomputeModule> m = ParseRecomputeModule(name);
          if (m.ok()) modules.push_back(*m);
        }
      }
      if (absl::StrContains(rc, "empty list")) {
        c.recompute = Recompute::kNone;
      } else if (!modules.empty()) {
        spec.training.recompute_modules = modules;
      }
    }
    // "activation offloading required": the model zoo's command for it offloads the expert
    // FC1 and MoE activation inputs (--fine-grained-activation-offloading --offload-modules
    // expert_fc1 moe_act, best_practice/qwen3/readme.md).
    if (absl::StrContains(Str(r, "notes"), "activation offloading required")) {
      c.activation_offload = true;
      spec.training.offload_modules = {OffloadModule::kExpertFc1, OffloadModule::kMoeAct};
      spec.search.activation_offload = {true};
    }
    // FSDP (PyTorch FSDP2, Megatron-FSDP) shards parameters, gradients and optimizer state;
    // a shard degree below dp*cp is hybrid sharding. Else the distributed optimizer. NeMo
    // AutoModel's MoE parallelizer keeps the gathered parameters and defers the gradient
    // sync to the last micro-batch by default (MoEParallelizerConfig.reshard_after_forward
    // false, defer_fsdp_grad_sync true; the benchmark configs set neither): its optimizer
    // stage.
    const bool full =
        Int(r, "zero_stage", 0) >= 3 || absl::StrContains(Str(r, "zero_or_fsdp"), "FSDP");
    c.data_parallel_sharding = c.dp * c.cp == 1    ? DataParallelSharding::kNone
                               : full && automodel ? DataParallelSharding::kOptimizer
                               : full              ? DataParallelSharding::kFull
                                                   : DataParallelSharding::kOptimizer;
    if (full && Stated(r, "fsdp_shard_size")) {
      const int64_t shard = Int(r, "fsdp_shard_size", 0);
      if (shard > 1 && shard < c.dp * c.cp) c.shard_group_size = shard;
    }
    // The framework's gradient-reduce overlap for the layout (off for AutoModel's pipelined
    // FSDP2, which reduces a stage's gradients after its last backward).
    c.overlap_grad_reduce =
        DefaultOverlapGradReduce(spec.training.framework, c.data_parallel_sharding, c.pp);
    c.ep = Int(r, "ep", 1);
    c.etp = Int(r, "etp", 1);
    c.moe_token_dispatcher = DispatcherOf(Str(r, "token_dispatcher"));
    // NeMo AutoModel's DeepSeek-V3 has no MTP module (models/deepseek_v3/model.py). The
    // split where p*v does not divide the layers is the framework's (Megatron-Core counts
    // the embedding and the loss; AutoModel splits the layers alone).
    if (automodel) spec.model.mtp_layers = 0;
    c.split_counts_embedding_and_loss = SplitCountsEmbeddingAndLoss(spec, c.pp, c.vp);

    SearchOptions& o = spec.search;
    o.tp = {c.tp};
    o.pp = {c.pp};
    o.cp = {c.cp};
    o.dp = {c.dp};
    o.ep = {c.ep};
    o.etp = {c.etp};
    o.moe_token_dispatcher = {c.moe_token_dispatcher};
    o.sequence_parallel = {c.sequence_parallel};
    o.data_parallel_sharding = {c.data_parallel_sharding};
    o.top_k = 1;
    if (Stated(r, "vp")) o.vp = {c.vp};
    if (Stated(r, "micro_batch_size")) o.micro_batch_size = {c.micro_batch_size};
    if (!rc.empty()) o.recompute = {c.recompute};
    rec.all_stated = Stated(r, "vp") && Stated(r, "micro_batch_size") && !rc.empty();

    const double tokens = static_cast<double>(spec.training.global_batch_size) *
                          static_cast<double>(spec.training.seq_length);
    const double gpus = static_cast<double>(spec.cluster.num_gpus);
    if (r["tokens_per_sec_per_gpu"].is_number()) {
      rec.published_tokens_per_gpu = r["tokens_per_sec_per_gpu"].get<double>();
    } else if (r["iteration_time_s"].is_number()) {
      rec.published_tokens_per_gpu = tokens / (r["iteration_time_s"].get<double>() * gpus);
    } else if (r["tflops_per_gpu"].is_number()) {
      // Model TFLOP/s (active experts) as Megatron-Core logs them: causal attention halved.
      // The two model-zoo rows that publish both TFLOP/s and the step time imply 147.3 and
      // 147.8 GFLOP per token, against 148.3 with the halving and 167.3 without it.
      rec.published_tokens_per_gpu =
          r["tflops_per_gpu"].get<double>() * 1e12 /
          (CausalModelFlopsPerIteration(spec.model, 1,
                                        static_cast<double>(spec.training.seq_length)) /
           static_cast<double>(spec.training.seq_length));
    }
    out.push_back(rec);
  }
  return out;
}

}  // namespace paratune::bench
