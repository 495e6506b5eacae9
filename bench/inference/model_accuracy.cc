// Predicted against published serving figures for every row of inference_calibration.json
// the inference spec can express: offline maximum throughput (the planner searches the
// engine limits trtllm-bench's build heuristic sets, TrtllmBenchEngineLimits), static-batch
// throughput and batch-1 first-token latency. Prints one row per record and a summary:
// `# output tok/s per GPU error: median X %, p90 Y %` and the same for TTFT.
// Usage: inference_model_accuracy [--data DIR] [--json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inference/planner.h"
#include "inference/spec_io.h"
#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/presets.h"

namespace paratune::inference {
namespace {

using nlohmann::json;

// Published "kv_cache_free_gpu_mem_fraction 0.95 in most cases" (the data's notes for the
// v0.17 table): a documented setting of the measured runs, not a fitted constant.
constexpr double kTrtllm017KvFraction = 0.95;

std::string Gpu(const std::string& t) {
  if (t == "H100 SXM") return "h100-sxm-80gb";
  if (t == "H200 SXM") return "h200-141gb";
  if (t == "A100 SXM") return "a100-80gb";
  if (t == "GH200") return "gh200-96gb";
  if (t == "L40S") return "l40s-48gb";
  return "";
}

double Num(const json& v) { return v.is_number() ? v.get<double>() : 0; }

// The engine limits trtllm-bench build sets for a model, mapping and dataset, which built
// the engines of the v0.17 table (tensorrt_llm/bench/build/tuning.py: calc_engine_setting
// and finetune_setting): the requests of isl + osl tokens that fit in 0.95 of the memory
// the weights leave (param_count · 1 byte in FP8, 2 otherwise; KV per token 2 · layers ·
// max(tp, kv heads) · head_dim · 1 or 2 bytes over all the instance's GPUs), capped at
// 4096 and divided by pp, rounded up (at least 64) to the documented steps; max_num_tokens
// that many requests' prompt-to-output share, capped at 32768, rounded up (at least 2048).
std::pair<int64_t, int64_t> TrtllmBenchEngineLimits(const ModelSpec& m, const std::string& gpu,
                                                    int64_t tp, int64_t pp, bool fp8_weights,
                                                    bool fp8_kv, int64_t isl, int64_t osl) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const absl::StatusOr<DeviceProfile> device = FindDevice(gpu);
  if (!device.ok()) return {0, 0};
  const double engine_gib = TotalParams(m) / 1e9 * (fp8_weights ? 1.0 : 2.0);
  const double kv_gib_per_token = 2.0 * static_cast<double>(m.num_layers) *
                                  static_cast<double>(std::max(tp, QueryGroups(m))) *
                                  static_cast<double>(HeadDim(m)) * (fp8_kv ? 1.0 : 2.0) / kGiB;
  const double total_gib = device->memory_bytes / kGiB * static_cast<double>(tp * pp);
  const double requests = (total_gib - engine_gib) * kTrtllm017KvFraction / kv_gib_per_token /
                          static_cast<double>(isl + osl);
  const double raw_bs = std::min(requests, 4096.0) / static_cast<double>(pp);
  const double raw_tokens =
      std::min(raw_bs * (1.0 + static_cast<double>(isl) / static_cast<double>(osl)), 32768.0);
  const auto up = [](double v, double step) { return step * std::ceil(v / step); };
  const double bs = raw_bs < 256    ? std::max(64.0, up(raw_bs, 32))
                    : raw_bs < 1024 ? up(raw_bs, 128)
                                    : up(raw_bs, 256);
  const double tokens = raw_tokens < 4096   ? std::max(2048.0, up(raw_tokens, 256))
                        : raw_tokens < 8192 ? up(raw_tokens, 512)
                                            : up(raw_tokens, 1024);
  return {static_cast<int64_t>(bs), static_cast<int64_t>(tokens)};
}

struct Row {
  std::string id, metric, skip;
  double measured = 0, predicted = 0;
  bool moe = false;  // A mixture-of-experts model's row.
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = std::clamp<size_t>(static_cast<size_t>(std::ceil(q * v.size())), 1, v.size());
  return v[rank - 1];
}

// The model of a record: its stated shape (Llama-style layers), or, where the record
// leaves the shape incomplete, the preset of its model_key (GPT-J, Falcon: their
// config.json). Null when neither.
json ModelOf(const json& r) {
  if (r["vocab_size"].is_number() && r["ffn_hidden_size"].is_number() &&
      r["num_kv_heads"].is_number()) {
    return {{"name", r.value("model_key", "")},
            {"num_layers", r["num_layers"]},
            {"hidden_size", r["hidden_size"]},
            {"num_attention_heads", r["num_attention_heads"]},
            {"num_query_groups", r["num_kv_heads"]},
            {"ffn_hidden_size", r["ffn_hidden_size"]},
            {"vocab_size", r["vocab_size"]},
            {"activation", "swiglu"},
            {"normalization", "rmsnorm"},
            {"position_embedding", "rope"},
            {"tie_embeddings", false}};
  }
  const std::string key = r.value("model_key", "");
  const std::string preset = key == "gptj-6b" ? "gpt-j-6b" : key;
  absl::StatusOr<ModelSpec> m = FindPreset(preset);
  if (!m.ok()) return nullptr;
  return {{"name", key},
          {"num_layers", m->num_layers},
          {"hidden_size", m->hidden_size},
          {"num_attention_heads", m->num_attention_heads},
          {"num_query_groups", m->num_query_groups},
          {"ffn_hidden_size", m->ffn_hidden_size},
          {"vocab_size", m->vocab_size},
          {"activation", ToString(m->activation)},
          {"normalization", ToString(m->normalization)},
          {"position_embedding", "rope"},
          {"tie_embeddings", m->tie_embeddings}};
}

Row Predict(const json& r) {
  Row row;
  row.id = r.value("id", "");
  const json model = ModelOf(r);
  if (model.is_null()) {
    row.skip = "architecture incomplete in the data and no preset for its model";
    return row;
  }
  const std::string gpu = Gpu(r.value("gpu_type", ""));
  if (gpu.empty()) {
    row.skip = "device not in the catalog";
    return row;
  }
  const std::string type = r.value("record_type", "");
  const json& m = r["measured"];
  const std::string wprec =
      r["precision_weights"].is_string() ? r["precision_weights"].get<std::string>() : "fp16";
  std::string kvprec =
      r["precision_kv_cache"].is_string() ? r["precision_kv_cache"].get<std::string>() : "";
  if (kvprec.empty()) kvprec = wprec == "fp8" ? "fp8" : wprec;
  const int64_t tp = r.value("tp", 1), pp = r["pp"].is_number() ? r["pp"].get<int64_t>() : 1;
  json spec = {{"kind", "inference"},
               {"model", model},
               {"cluster", {{"gpu", gpu}, {"num_gpus", tp * pp}, {"gpus_per_node", 8}}},
               {"serving",
                {{"engine", "trtllm"},
                 {"isl", r["isl"]},
                 {"osl", r["osl"]},
                 {"kv_cache_fraction", kTrtllm017KvFraction}}},
               {"search",
                {{"tp", tp},
                 {"pp", pp},
                 {"weight_precision", wprec},
                 {"kv_cache_precision", kvprec},
                 {"disaggregated", false},
                 {"top_k", 1}}}};
  if (r["head_dim"].is_number()) spec["model"]["kv_channels"] = r["head_dim"];
  if (r.value("is_moe", false)) {
    // Mixtral: every layer an expert layer, no shared experts; the record's
    // ffn_hidden_size is the per-expert width.
    if (!r["num_experts"].is_number() || !r["experts_per_token"].is_number() ||
        !r["moe_ffn_hidden_size"].is_number() || Num(r["num_shared_experts"]) > 0 ||
        Num(r["first_k_dense_layers"]) > 0 ||
        (r["attention_type"].is_string() && r["attention_type"] == "MLA")) {
      row.skip = "mixture-of-experts shape the record does not give whole";
      return row;
    }
    row.moe = true;
    spec["model"]["num_experts"] = r["num_experts"];
    spec["model"]["moe_router_topk"] = r["experts_per_token"];
    spec["model"]["moe_ffn_hidden_size"] = r["moe_ffn_hidden_size"];
  }
  if (type == "offline_max_throughput") {
    row.metric = "out tok/s/gpu";
    spec["serving"]["num_requests"] = r["num_requests"];
    row.measured = Num(m["output_tokens_per_s_total"]) / static_cast<double>(tp * pp);
  } else if (type == "static_batch_throughput") {
    row.metric = "out tok/s/gpu";
    const std::string label = r["measured_labels"].dump();
    if (m["output_tokens_per_s_per_gpu"].is_number()) {
      row.measured = Num(m["output_tokens_per_s_per_gpu"]);
    } else if (tp * pp == 1) {
      row.measured = Num(m["output_tokens_per_s_total"]);
    } else {
      row.skip = "unit ambiguous for tp > 1 (\"out tok/s\": per GPU or total)";
      return row;
    }
    spec["serving"]["batching"] = "static";
    spec["serving"]["batch_size"] = r["batch_size"];
    spec["serving"]["num_requests"] = r["batch_size"];
    spec["search"]["max_batch_size"] = r["batch_size"];
    spec["search"]["max_num_tokens"] = Num(r["batch_size"]) * Num(r["isl"]);
  } else if (type == "static_bs1_first_token_latency") {
    row.metric = "TTFT ms";
    row.measured = Num(m["ttft_ms_mean"]);
    spec["serving"]["batching"] = "static";
    spec["serving"]["batch_size"] = 1;
    spec["serving"]["num_requests"] = 1;
    spec["search"]["max_batch_size"] = 1;
    spec["search"]["max_num_tokens"] = r["isl"];
  } else {
    row.skip = "record type " + type + " not predicted";
    return row;
  }
  if (row.measured <= 0) {
    row.skip = "no measured value";
    return row;
  }
  auto parsed = InferenceJobSpecFromJson(spec);
  if (!parsed.ok()) {
    row.skip = std::string(parsed.status().message());
    return row;
  }
  if (type == "offline_max_throughput") {
    const auto [bs, tokens] = TrtllmBenchEngineLimits(
        parsed->model, gpu, tp, pp, wprec == "fp8", kvprec == "fp8", Num(r["isl"]), Num(r["osl"]));
    if (bs > 0) {
      parsed->search.max_batch_size = {bs};
      parsed->search.max_num_tokens = {tokens};
    }
    auto plan = PlanInference(*parsed);
    if (!plan.ok() || plan->ranked.empty()) {
      row.skip = plan.ok() ? "no layout fits" : std::string(plan.status().message());
      return row;
    }
    row.predicted = plan->ranked[0].output_tokens_per_sec_per_gpu;
  } else {
    auto c = PinnedServingConfig(*parsed);
    if (!c.ok()) {
      row.skip = std::string(c.status().message());
      return row;
    }
    auto e = EstimateInference(*parsed, *c);
    if (!e.ok()) {
      row.skip = std::string(e.status().message());
      return row;
    }
    row.predicted = row.metric == "TTFT ms" ? e->ttft_ms.mean : e->output_tokens_per_sec_per_gpu;
  }
  return row;
}

int Main(int argc, char** argv) {
  std::string dir = PARATUNE_DEFAULT_DATA_DIR;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--json") {
      as_json = true;
    } else {
      std::cerr << "usage: inference_model_accuracy [--data DIR] [--json]\n";
      return 2;
    }
  }
  std::ifstream in(dir + "/inference_calibration.json");
  if (!in) {
    std::cerr << "cannot read " << dir << "/inference_calibration.json\n";
    return 1;
  }
  const json records = json::parse(in);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  for (const json& r : records) rows.push_back(Predict(r));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> thr, ttft;
  json out = json::array();
  if (!as_json) {
    std::printf("# inference model accuracy: %zu records of %s/inference_calibration.json\n",
                records.size(), dir.c_str());
    std::printf("# %-52s %-14s %10s %10s %8s\n", "id", "metric", "published", "predicted", "error");
  }
  size_t skipped = 0;
  std::vector<double> thr_dense, thr_moe;
  for (const Row& r : rows) {
    if (!r.skip.empty()) {
      ++skipped;
      if (!as_json) std::printf("  %-52s skipped: %s\n", r.id.c_str(), r.skip.c_str());
      out.push_back({{"id", r.id}, {"skipped", r.skip}});
      continue;
    }
    const double err = std::fabs(r.predicted - r.measured) / r.measured * 100;
    (r.metric == "TTFT ms" ? ttft : thr).push_back(err);
    if (r.metric != "TTFT ms") (r.moe ? thr_moe : thr_dense).push_back(err);
    if (!as_json) {
      std::printf("  %-52s %-14s %10.1f %10.1f %7.1f%%\n", r.id.c_str(), r.metric.c_str(),
                  r.measured, r.predicted, err);
    }
    out.push_back({{"id", r.id},
                   {"metric", r.metric},
                   {"published", r.measured},
                   {"predicted", r.predicted},
                   {"error_pct", err}});
  }
  if (as_json) {
    std::cout << json{{"rows", out},
                      {"throughput_error_median_pct", Percentile(thr, 0.5)},
                      {"throughput_error_p90_pct", Percentile(thr, 0.9)},
                      {"dense_throughput_error_median_pct", Percentile(thr_dense, 0.5)},
                      {"moe_throughput_error_median_pct", Percentile(thr_moe, 0.5)},
                      {"ttft_error_median_pct", Percentile(ttft, 0.5)},
                      {"ttft_error_p90_pct", Percentile(ttft, 0.9)}}
                     .dump(1)
              << "\n";
    return 0;
  }
  std::printf("# rows predicted: %zu throughput, %zu TTFT; skipped %zu; %.1f s\n", thr.size(),
              ttft.size(), skipped, seconds);
  std::printf("# output tok/s per GPU error: median %.1f %%, p90 %.1f %%\n", Percentile(thr, 0.5),
              Percentile(thr, 0.9));
  std::printf("#   dense models (%zu rows): median %.1f %%, p90 %.1f %%\n", thr_dense.size(),
              Percentile(thr_dense, 0.5), Percentile(thr_dense, 0.9));
  std::printf("#   mixture-of-experts models (%zu rows): median %.1f %%, p90 %.1f %%\n",
              thr_moe.size(), Percentile(thr_moe, 0.5), Percentile(thr_moe, 0.9));
  std::printf("# TTFT error: median %.1f %%, p90 %.1f %%\n", Percentile(ttft, 0.5),
              Percentile(ttft, 0.9));
  return 0;
}

}  // namespace
}  // namespace paratune::inference

int main(int argc, char** argv) { return paratune::inference::Main(argc, argv); }
