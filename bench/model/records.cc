#include "bench/model/records.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "search/device_catalog.h"
#include "search/framework_profile.h"

namespace paratune::bench {

std::string Str(const nlohmann::json& r, const char* key) {
  return r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : std::string();
}
int64_t Int(const nlohmann::json& r, const char* key, int64_t fallback) {
  return r.contains(key) && r[key].is_number() ? r[key].get<int64_t>() : fallback;
}
bool Stated(const nlohmann::json& r, const char* key) {
  return r.contains(key) && !r[key].is_null();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string DataDir(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--data") == 0) return argv[i + 1];
  }
  if (const char* src = std::getenv("PARATUNE_SOURCE_DIR")) {
    return std::string(src) + "/../shared/data";
  }
  return PARATUNE_DEFAULT_DATA_DIR;
}

std::string BenchDataDir() {
  if (const char* src = std::getenv("PARATUNE_SOURCE_DIR")) {
    return std::string(src) + "/bench/model/data";
  }
  return PARATUNE_BENCH_DATA_DIR;
}

bool HasFlag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(path + ": " + e.what());
  }
}

JobSpec SpecFromRecord(const nlohmann::json& r) {
  JobSpec spec;
  spec.name = Str(r, "id");
  ModelSpec& m = spec.model;
  m.name = Str(r, "model_name");
  m.num_layers = Int(r, "num_layers", 0);
  m.hidden_size = Int(r, "hidden_size", 0);
  m.num_attention_heads = Int(r, "num_attention_heads", 0);
  m.num_query_groups = Int(r, "num_query_groups", m.num_attention_heads);
  m.ffn_hidden_size = Int(r, "ffn_hidden_size", 4 * m.hidden_size);
  const bool llama = Str(r, "activation") == "swiglu";
  // Sweeps of Llama models do not state the vocabulary: Llama 1/2's 32000.
  m.vocab_size = Int(r, "vocab_size", llama ? 32000 : 51200);
  spec.training.seq_length = Int(r, "seq_length", 2048);
  if (llama) {
    m.activation = Activation::kSwiglu;
    m.normalization = Normalization::kRmsNorm;
    m.position_embedding = PositionEmbedding::kRope;
    m.tie_embeddings = false;
  } else {
    m.activation = Activation::kGelu;
    m.normalization = Normalization::kLayerNorm;
    m.position_embedding = PositionEmbedding::kLearned;
    m.tie_embeddings = true;
    m.max_position_embeddings = spec.training.seq_length;
  }
  const std::string precision = absl::AsciiStrToLower(Str(r, "precision"));
  spec.training.precision = absl::StrContains(precision, "mxfp8")  ? Precision::kMxfp8
                            : absl::StrContains(precision, "nvfp4") ? Precision::kNvfp4
                            : absl::StrContains(precision, "fp8")   ? Precision::kFp8
                            : absl::StartsWith(precision, "fp16")   ? Precision::kFp16
                                                                    : Precision::kBf16;
  // Narayanan 2021 and Korthikanti 2022 predate flash attention and train with dropout;
  // Megatron-Core on H100 and the Llama runs use flash attention without dropout.
  const std::string source = Str(r, "source") + Str(r, "id");
  const bool megatron_2021_22 =
      absl::StrContains(source, "narayanan") || absl::StrContains(source, "korthikanti") ||
      absl::StrContains(source, "Narayanan") || absl::StrContains(source, "Korthikanti");
  spec.training.flash_attention = !megatron_2021_22;
  spec.training.dropout = megatron_2021_22;
  spec.training.attention_kernel =
      megatron_2021_22 ? AttentionKernel::kFused : AttentionKernel::kFlash2;
  // Aleph Alpha's sweep names its kernel per run: "flash_attention2 + RMS kernel" (fused
  // RMSNorm), "flash_attention2", "flash_attentionv1.0.8" / "flash_attention" (v1),
  // "fused" (Megatron's fused softmax) and "torch" (PyTorch ops); without "RMS kernel" the
  // norm is PyTorch ops.
  const std::string kernel = Str(r, "attention_kernel");
  if (!kernel.empty()) {
    spec.training.attention_kernel = absl::StrContains(kernel, "flash_attention2") ? AttentionKernel::kFlash2
                                     : absl::StrContains(kernel, "flash")          ? AttentionKernel::kFlash1
                                     : kernel == "torch"                            ? AttentionKernel::kUnfused
                                                                                    : AttentionKernel::kFused;
    spec.training.fused_norm = absl::StrContains(kernel, "RMS kernel");
  }
  spec.training.flash_attention = IsFlash(spec.training.attention_kernel);
  spec.training.global_batch_size = Int(r, "global_batch_size", 0);
  // Megatron-LM's Llama FP8 examples (examples/llama/train_llama3_8b_h100_fp8.sh and its
  // siblings, which follow NeMo's performance scripts) pass --grad-reduce-in-bf16 and
  // --fp8-param-gather.
  if (absl::StrContains(Str(r, "source"), "Megatron-LM examples/llama")) {
    spec.training.grad_reduce_in_fp32 = false;
    if (spec.training.precision == Precision::kFp8) spec.training.fp8_param_gather = true;
  }
  const std::string gpu = Str(r, "gpu_type");
  if (absl::StrContains(gpu, "H100")) {
    spec.cluster.gpu = "h100-sxm-80gb";
  } else if (absl::StrContains(gpu, "A100") && Int(r, "gpu_memory_gb", 80) == 40) {
    spec.cluster.gpu = "a100-40gb";
  } else {
    spec.cluster.gpu = "a100-80gb";
  }
  spec.cluster.num_gpus = Int(r, "num_gpus", 0);
  spec.cluster.gpus_per_node = 8;
  // A run that names no kernel gets the one Megatron-Core runs on its device (as a spec that
  // names none does).
  if (auto device = FindDevice(spec.cluster.gpu);
      device.ok() && !megatron_2021_22 && kernel.empty()) {
    spec.training.attention_kernel = DefaultAttentionKernel(spec.training.framework, *device);
  }
  return spec;
}

RecordLayout LayoutFromRecord(const nlohmann::json& r) {
  RecordLayout out;
  ParallelConfig& c = out.config;
  c.tp = Int(r, "tp", 1);
  c.pp = Int(r, "pp", 1);
  c.dp = Int(r, "dp", 1);
  c.cp = Int(r, "cp", 1);
  out.cp_stated = Stated(r, "cp");
  c.vp = Int(r, "vp", 1);
  out.vp_stated = Stated(r, "vp");
  c.micro_batch_size = Int(r, "micro_batch_size", 1);
  out.micro_batch_stated = Stated(r, "micro_batch_size");
  out.sp_stated = Stated(r, "sequence_parallel");
  c.sequence_parallel = out.sp_stated && r["sequence_parallel"].get<bool>();
  const std::string rc = Str(r, "recompute");
  out.recompute_stated = !rc.empty();
  c.recompute = absl::StartsWith(rc, "full")        ? Recompute::kFull
                : absl::StartsWith(rc, "selective") ? Recompute::kSelective
                                                    : Recompute::kNone;
  const std::string zero = Str(r, "zero_or_fsdp");
  out.dopt_stated = !zero.empty();
  // Megatron-LM 2021's "local" DDP reduces gradients after the backward, unoverlapped.
  c.overlap_grad_reduce = !absl::StrContains(zero, "DDP impl: local");
  // Megatron-LM 2021-22 (Narayanan, Korthikanti) blocked on every pipeline transfer.
  const std::string source = Str(r, "source") + Str(r, "id");
  c.overlap_p2p_comm = !(absl::StrContains(source, "Narayanan") ||
                         absl::StrContains(source, "narayanan") ||
                         absl::StrContains(source, "Korthikanti") ||
                         absl::StrContains(source, "korthikanti"));
  if (absl::StrContains(zero, "distributed") || absl::StrContains(zero, "ZeRO-1") ||
      absl::StrContains(zero, "zero1")) {
    c.data_parallel_sharding = DataParallelSharding::kOptimizer;
  }
  return out;
}

bool ReadAsAutoModel(const nlohmann::json& r, JobSpec* spec) {
  if (!absl::StrContains(Str(r, "framework"), "AutoModel")) return false;
  spec->training.framework = Framework::kNemoAutomodel;
  const nlohmann::json* other = r.contains("other_measured") ? &r["other_measured"] : nullptr;
  const bool te = other != nullptr && other->is_object() &&
                  other->contains("kernel_optimizations") &&
                  absl::StrContains((*other)["kernel_optimizations"].get<std::string>(), "TE");
  if (auto device = FindDevice(spec->cluster.gpu); device.ok()) {
    spec->training.attention_kernel =
        DefaultAttentionKernel(te ? Framework::kMegatronCore : Framework::kTorchtitan, *device);
  }
  return true;
}

void PinStated(const RecordLayout& l, JobSpec* spec) {
  SearchOptions& s = spec->search;
  const ParallelConfig& c = l.config;
  s.tp = {c.tp};
  s.pp = {c.pp};
  s.dp = {c.dp};
  if (l.cp_stated) s.cp = {c.cp};
  if (l.vp_stated) s.vp = {c.vp};
  if (l.micro_batch_stated) s.micro_batch_size = {c.micro_batch_size};
  if (l.sp_stated) s.sequence_parallel = {c.sequence_parallel};
  if (l.recompute_stated) s.recompute = {c.recompute};
  if (l.dopt_stated) s.data_parallel_sharding = {c.data_parallel_sharding};
  s.top_k = 1;
}

}  // namespace paratune::bench
