#include "inference/exporters.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "inference/engine_profile.h"

namespace paratune::inference {
namespace {

struct Pool {
  const char* role;  // "", "prefill", "decode"
  int64_t instances;
};

std::vector<Pool> Pools(const ServingConfig& c) {
  if (c.disaggregated) return {{"prefill", c.prefill_replicas}, {"decode", c.decode_replicas}};
  return {{"", c.replicas}};
}

double KvFraction(const InferenceJobSpec& spec, ServingEngine engine) {
  // The spec's fraction is the planned engine's; another engine keeps its own default.
  if (spec.serving.engine == engine && spec.serving.kv_cache_fraction) {
    return *spec.serving.kv_cache_fraction;
  }
  return EngineProfileFor(engine).kv_cache_fraction;
}

std::string Header(const InferenceJobSpec& spec, const ServingConfig& c) {
  return absl::StrCat("# ", spec.name, ": ", c.ToString(), " on ", c.num_gpus(), " x ",
                      spec.cluster.gpu, "\n# MODEL: the checkpoint of ", spec.model.name,
                      " (quantised checkpoints carry their own scales)\n");
}

// What an engine calls the precisions where the engines differ; the rest is shared.
struct PrecisionNames {
  const char* engine;             // names the engine in errors
  const char* fp8_kv_cache;       // the KV-cache dtype of an FP8 cache
  const char* int8_quantization;  // --quantization of INT8 weights; "": the checkpoint's scheme
};

// TensorRT-LLM takes the weight precision from the checkpoint: it names KV dtypes only.
constexpr PrecisionNames kTrtllmPrecisions{"trtllm", "fp8", ""};
// INT8 weight-only checkpoints (compressed-tensors) carry their scheme.
constexpr PrecisionNames kVllmPrecisions{"vllm", "fp8", ""};
constexpr PrecisionNames kSglangPrecisions{"sglang", "fp8_e4m3", "w8a8_int8"};

// The engine's KV-cache dtype: FP8, or "auto" (the model's 16-bit dtype).
absl::StatusOr<std::string> KvCacheDtype(QuantFormat kv, const PrecisionNames& names) {
  switch (kv) {
    case QuantFormat::kFp8:
      return names.fp8_kv_cache;
    case QuantFormat::kBf16:
    case QuantFormat::kFp16:
      return "auto";
    default:
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_precision ",
                                                     std::string(ToString(kv)), " has no ",
                                                     names.engine, " export (fp8 or 16-bit)"));
  }
}

// vLLM's and SGLang's weight flags: --quantization for quantised weights, else --dtype.
std::string WeightFlags(QuantFormat weights, const PrecisionNames& names) {
  switch (weights) {
    case QuantFormat::kFp8:
      return " --quantization fp8";
    case QuantFormat::kInt4:
      return " --quantization awq";
    case QuantFormat::kFp4:
      return " --quantization modelopt_fp4";
    case QuantFormat::kInt8:
      return names.int8_quantization[0] == '\0'
                 ? ""
                 : absl::StrCat(" --quantization ", names.int8_quantization);
    case QuantFormat::kFp16:
      return " --dtype float16";
    case QuantFormat::kBf16:
      return " --dtype bfloat16";
  }
  return "";
}

// When "# one per instance (N)" precedes a pool's command.
enum class InstanceNote { kNever, kSeveral, kAlways };

// How an engine starts the servers of one pool; PoolCommands writes them for every pool.
struct PoolLaunch {
  std::string command;  // the engine's command with the layout's flags
  // The comment line opening a disaggregated pool; null: none.
  std::string (*role_comment)(const Pool& pool) = nullptr;
  // The flag handing a disaggregated pool's role to the command; "": none.
  const char* role_flag = "";
  InstanceNote instance_note = InstanceNote::kNever;
  // The flag that serves a pool's N > 1 instances from one command; "": one per instance.
  const char* replicas_flag = "";
};

std::string PoolCommands(const ServingConfig& c, const PoolLaunch& launch) {
  std::string out;
  for (const Pool& p : Pools(c)) {
    const bool has_role = p.role[0] != '\0';
    if (has_role && launch.role_comment != nullptr) absl::StrAppend(&out, launch.role_comment(p));
    if (launch.instance_note == InstanceNote::kAlways ||
        (launch.instance_note == InstanceNote::kSeveral && p.instances > 1)) {
      absl::StrAppend(&out, "# one per instance (", p.instances, ")\n");
    }
    absl::StrAppend(&out, launch.command);
    if (p.instances > 1 && launch.replicas_flag[0] != '\0') {
      absl::StrAppend(&out, launch.replicas_flag, p.instances);
    }
    if (has_role && launch.role_flag[0] != '\0') absl::StrAppend(&out, launch.role_flag, p.role);
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<std::string> Trtllm(const InferenceJobSpec& spec, const ServingConfig& c) {
  const absl::StatusOr<std::string> kv = KvCacheDtype(c.kv_cache_precision, kTrtllmPrecisions);
  if (!kv.ok()) return kv.status();
  const double fraction = KvFraction(spec, ServingEngine::kTrtllm);
  std::string out = Header(spec, c);
  absl::StrAppend(&out, "cat > extra_llm_api_options.yaml <<EOF\nkv_cache_config:\n  dtype: ", *kv,
                  "\n  free_gpu_memory_fraction: ", absl::StrFormat("%.2f", fraction),
                  "\nenable_chunked_prefill: true\n");
  // Hybrid expert parallelism: ep groups of tp / ep ranks (the LLM API's
  // moe_expert_parallel_size x moe_tensor_parallel_size = tensor_parallel_size).
  if (c.ep > 1) {
    absl::StrAppend(&out, "moe_expert_parallel_size: ", c.ep,
                    "\nmoe_tensor_parallel_size: ", c.tp / c.ep, "\n");
  }
  // Attention data parallelism: each rank runs attention on its own requests (max_batch_size
  // and max_num_tokens are per rank), the experts split over all of them (ep = tp).
  if (c.attention_dp) absl::StrAppend(&out, "enable_attention_dp: true\n");
  absl::StrAppend(&out, "EOF\n");
  const std::string ep_flag = c.ep > 1 ? absl::StrCat(" --ep_size ", c.ep) : "";
  absl::StrAppend(
      &out,
      PoolCommands(
          c, {.command = absl::StrCat("trtllm-serve $MODEL --backend pytorch --tp_size ", c.tp,
                                      " --pp_size ", c.pp, ep_flag, " --max_batch_size ",
                                      c.max_batch_size, " --max_num_tokens ", c.max_num_tokens,
                                      " --kv_cache_free_gpu_memory_fraction ",
                                      absl::StrFormat("%.2f", fraction),
                                      " --extra_llm_api_options extra_llm_api_options.yaml"),
              .role_comment =
                  [](const Pool& p) {
                    return absl::StrCat("# ", p.role, " pool: ", p.instances, " instance(s)\n");
                  },
              .instance_note = InstanceNote::kAlways}));
  absl::StrAppend(&out, "# benchmark one instance:\ntrtllm-bench --model $MODEL throughput ",
                  "--dataset dataset.jsonl --backend pytorch --tp ", c.tp, " --pp ", c.pp,
                  " --max_batch_size ", c.max_batch_size, " --max_num_tokens ", c.max_num_tokens,
                  " --kv_cache_free_gpu_mem_fraction ", absl::StrFormat("%.2f", fraction),
                  " --extra_llm_api_options extra_llm_api_options.yaml\n");
  return out;
}

absl::StatusOr<std::string> Vllm(const InferenceJobSpec& spec, const ServingConfig& c) {
  // vLLM's --enable-expert-parallel makes the expert-parallel group tp x dp (every expert
  // whole on one rank): it expresses ep = tp within one instance, with one server per
  // instance (--data-parallel-size would widen the group over the instances).
  // With attention data parallelism (vLLM's DP attention) the instance is tp data-parallel
  // ranks of tensor-parallel size 1, the experts split over them; --max-num-seqs and
  // --max-num-batched-tokens are per data-parallel rank.
  if (c.attention_dp && c.pp > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention_dp with pp (", c.pp,
                     ") has no vllm export: vLLM's data-parallel "
                     "attention runs with --pipeline-parallel-size 1"));
  }
  if (c.ep > 1 && c.ep != c.tp) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep (", c.ep, ") with tp (", c.tp,
                     ") has no vllm export: --enable-expert-parallel sets the expert-parallel "
                     "size to tp x dp (ep = tp only)"));
  }
  const absl::StatusOr<std::string> kv = KvCacheDtype(c.kv_cache_precision, kVllmPrecisions);
  if (!kv.ok()) return kv.status();
  const std::string flags = absl::StrCat(
      c.attention_dp ? absl::StrCat(" --tensor-parallel-size 1 --data-parallel-size ", c.tp)
                     : absl::StrCat(" --tensor-parallel-size ", c.tp),
      " --pipeline-parallel-size ", c.pp, " --max-num-seqs ", c.max_batch_size,
      " --max-num-batched-tokens ", c.max_num_tokens,
      " --enable-chunked-prefill --gpu-memory-utilization ",
      absl::StrFormat("%.2f", KvFraction(spec, ServingEngine::kVllm)), " --kv-cache-dtype ", *kv,
      WeightFlags(c.weight_precision, kVllmPrecisions),
      c.ep > 1 ? " --enable-expert-parallel" : "");
  return absl::StrCat(
      Header(spec, c),
      PoolCommands(
          c, {.command = absl::StrCat("vllm serve $MODEL", flags),
              .role_comment =
                  [](const Pool& p) {
                    return absl::StrCat("# ", p.role,
                                        " pool (disaggregated serving pairs it with the ",
                                        "other pool through a KV connector, "
                                        "--kv-transfer-config)\n");
                  },
              .instance_note = c.ep > 1 ? InstanceNote::kSeveral : InstanceNote::kNever,
              .replicas_flag = c.ep == 1 && !c.attention_dp ? " --data-parallel-size " : ""}));
}

absl::StatusOr<std::string> Sglang(const InferenceJobSpec& spec, const ServingConfig& c) {
  // --ep-size splits the experts over ep groups inside the tp ranks (moe_tp = tp / ep).
  // --enable-dp-attention --dp-size tp: attention data parallelism over the tp ranks; SGLang
  // divides --max-running-requests and --chunked-prefill-size over the dp ranks, so they
  // carry the instance's totals (the per-rank limits x tp).
  const absl::StatusOr<std::string> kv = KvCacheDtype(c.kv_cache_precision, kSglangPrecisions);
  if (!kv.ok()) return kv.status();
  const int64_t dp = c.attention_dp_size();
  const std::string flags = absl::StrCat(
      " --tp-size ", c.tp, " --pp-size ", c.pp, c.ep > 1 ? absl::StrCat(" --ep-size ", c.ep) : "",
      c.attention_dp ? absl::StrCat(" --enable-dp-attention --dp-size ", c.tp) : "",
      " --max-running-requests ", c.max_batch_size * dp, " --chunked-prefill-size ",
      c.max_num_tokens * dp, " --mem-fraction-static ",
      absl::StrFormat("%.2f", KvFraction(spec, ServingEngine::kSglang)), " --kv-cache-dtype ", *kv,
      WeightFlags(c.weight_precision, kSglangPrecisions));
  // With attention DP --dp-size names the attention ranks: one server per instance.
  return absl::StrCat(
      Header(spec, c),
      PoolCommands(
          c, {.command = absl::StrCat("python3 -m sglang.launch_server --model-path $MODEL", flags),
              .role_flag = " --disaggregation-mode ",
              .instance_note = c.attention_dp ? InstanceNote::kSeveral : InstanceNote::kNever,
              .replicas_flag = c.attention_dp ? "" : " --dp-size "}));
}

struct Exporter {
  const char* name;
  std::function<absl::StatusOr<std::string>(const InferenceJobSpec&, const ServingConfig&)> run;
};

const std::vector<Exporter>& Exporters() {
  static const auto* const kTable =
      new std::vector<Exporter>{{"trtllm", Trtllm}, {"vllm", Vllm}, {"sglang", Sglang}};
  return *kTable;
}

}  // namespace

std::vector<std::string> ServingExportFormats() {
  std::vector<std::string> names;
  for (const Exporter& e : Exporters()) names.push_back(e.name);
  return names;
}

absl::StatusOr<std::string> FormatServingCommand(const InferenceJobSpec& spec,
                                                 const ServingConfig& c,
                                                 const std::string& format) {
  for (const Exporter& e : Exporters()) {
    if (format == e.name) return e.run(spec, c);
  }
  return absl::InvalidArgumentError(absl::StrCat("--format ", format,
                                                 " is not a serving export; use one of ",
                                                 absl::StrJoin(ServingExportFormats(), ", ")));
}

}  // namespace paratune::inference
