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

absl::StatusOr<std::string> Trtllm(const InferenceJobSpec& spec, const ServingConfig& c) {
  std::string kv;
  switch (c.kv_cache_precision) {
    case QuantFormat::kFp8:
      kv = "fp8";
      break;
    case QuantFormat::kBf16:
    case QuantFormat::kFp16:
      kv = "auto";
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_precision ",
                                                     std::string(ToString(c.kv_cache_precision)),
                                                     " has no trtllm export (fp8 or 16-bit)"));
  }
  const double fraction = KvFraction(spec, ServingEngine::kTrtllm);
  std::string out = Header(spec, c);
  absl::StrAppend(&out, "cat > extra_llm_api_options.yaml <<EOF\nkv_cache_config:\n  dtype: ", kv,
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
  for (const Pool& p : Pools(c)) {
    if (p.role[0] != '\0')
      absl::StrAppend(&out, "# ", p.role, " pool: ", p.instances, " instance(s)\n");
    absl::StrAppend(&out, "# one per instance (", p.instances, ")\n");
    absl::StrAppend(&out, "trtllm-serve $MODEL --backend pytorch --tp_size ", c.tp, " --pp_size ",
                    c.pp, ep_flag, " --max_batch_size ", c.max_batch_size, " --max_num_tokens ",
                    c.max_num_tokens, " --kv_cache_free_gpu_memory_fraction ",
                    absl::StrFormat("%.2f", fraction),
                    " --extra_llm_api_options extra_llm_api_options.yaml\n");
  }
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
  std::string flags = absl::StrCat(
      c.attention_dp ? absl::StrCat(" --tensor-parallel-size 1 --data-parallel-size ", c.tp)
                     : absl::StrCat(" --tensor-parallel-size ", c.tp),
      " --pipeline-parallel-size ", c.pp, " --max-num-seqs ", c.max_batch_size,
      " --max-num-batched-tokens ", c.max_num_tokens,
      " --enable-chunked-prefill --gpu-memory-utilization ",
      absl::StrFormat("%.2f", KvFraction(spec, ServingEngine::kVllm)));
  switch (c.kv_cache_precision) {
    case QuantFormat::kFp8:
      absl::StrAppend(&flags, " --kv-cache-dtype fp8");
      break;
    case QuantFormat::kBf16:
    case QuantFormat::kFp16:
      absl::StrAppend(&flags, " --kv-cache-dtype auto");
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_precision ",
                                                     std::string(ToString(c.kv_cache_precision)),
                                                     " has no vllm export (fp8 or 16-bit)"));
  }
  switch (c.weight_precision) {
    case QuantFormat::kFp8:
      absl::StrAppend(&flags, " --quantization fp8");
      break;
    case QuantFormat::kInt4:
      absl::StrAppend(&flags, " --quantization awq");
      break;
    case QuantFormat::kFp4:
      absl::StrAppend(&flags, " --quantization modelopt_fp4");
      break;
    case QuantFormat::kInt8:
      // INT8 weight-only checkpoints (compressed-tensors) carry their scheme.
      break;
    case QuantFormat::kFp16:
      absl::StrAppend(&flags, " --dtype float16");
      break;
    case QuantFormat::kBf16:
      absl::StrAppend(&flags, " --dtype bfloat16");
      break;
  }
  if (c.ep > 1) absl::StrAppend(&flags, " --enable-expert-parallel");
  std::string out = Header(spec, c);
  for (const Pool& p : Pools(c)) {
    if (p.role[0] != '\0') {
      absl::StrAppend(&out, "# ", p.role, " pool (disaggregated serving pairs it with the ",
                      "other pool through a KV connector, --kv-transfer-config)\n");
    }
    if (c.ep > 1 && p.instances > 1) {
      absl::StrAppend(&out, "# one per instance (", p.instances, ")\n");
    }
    absl::StrAppend(&out, "vllm serve $MODEL", flags);
    if (p.instances > 1 && c.ep == 1 && !c.attention_dp) {
      absl::StrAppend(&out, " --data-parallel-size ", p.instances);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<std::string> Sglang(const InferenceJobSpec& spec, const ServingConfig& c) {
  // --ep-size splits the experts over ep groups inside the tp ranks (moe_tp = tp / ep).
  // --enable-dp-attention --dp-size tp: attention data parallelism over the tp ranks; SGLang
  // divides --max-running-requests and --chunked-prefill-size over the dp ranks, so they
  // carry the instance's totals (the per-rank limits x tp).
  const int64_t dp = c.attention_dp_size();
  std::string flags = absl::StrCat(
      " --tp-size ", c.tp, " --pp-size ", c.pp, c.ep > 1 ? absl::StrCat(" --ep-size ", c.ep) : "",
      c.attention_dp ? absl::StrCat(" --enable-dp-attention --dp-size ", c.tp) : "",
      " --max-running-requests ", c.max_batch_size * dp, " --chunked-prefill-size ",
      c.max_num_tokens * dp, " --mem-fraction-static ",
      absl::StrFormat("%.2f", KvFraction(spec, ServingEngine::kSglang)));
  switch (c.kv_cache_precision) {
    case QuantFormat::kFp8:
      absl::StrAppend(&flags, " --kv-cache-dtype fp8_e4m3");
      break;
    case QuantFormat::kBf16:
    case QuantFormat::kFp16:
      absl::StrAppend(&flags, " --kv-cache-dtype auto");
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_precision ",
                                                     std::string(ToString(c.kv_cache_precision)),
                                                     " has no sglang export (fp8 or 16-bit)"));
  }
  switch (c.weight_precision) {
    case QuantFormat::kFp8:
      absl::StrAppend(&flags, " --quantization fp8");
      break;
    case QuantFormat::kInt4:
      absl::StrAppend(&flags, " --quantization awq");
      break;
    case QuantFormat::kFp4:
      absl::StrAppend(&flags, " --quantization modelopt_fp4");
      break;
    case QuantFormat::kInt8:
      absl::StrAppend(&flags, " --quantization w8a8_int8");
      break;
    case QuantFormat::kFp16:
      absl::StrAppend(&flags, " --dtype float16");
      break;
    case QuantFormat::kBf16:
      absl::StrAppend(&flags, " --dtype bfloat16");
      break;
  }
  std::string out = Header(spec, c);
  for (const Pool& p : Pools(c)) {
    // With attention DP --dp-size names the attention ranks: one server per instance.
    if (c.attention_dp && p.instances > 1) {
      absl::StrAppend(&out, "# one per instance (", p.instances, ")\n");
    }
    absl::StrAppend(&out, "python3 -m sglang.launch_server --model-path $MODEL", flags);
    if (p.instances > 1 && !c.attention_dp) absl::StrAppend(&out, " --dp-size ", p.instances);
    if (p.role[0] != '\0') absl::StrAppend(&out, " --disaggregation-mode ", p.role);
    absl::StrAppend(&out, "\n");
  }
  return out;
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
