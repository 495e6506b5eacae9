// step_accuracy: the serving kernels' measured step times against the inference step
// model. Runs the worker's serving step (kernels/serving/serving_step_runner.h: the real
// layers over a paged cache, greedy sampling included) for a grid of prefill and decode
// shapes of one dense preset on this machine's backend, and prints per shape the measured
// median step time next to the StepModel's prediction for --gpu: its compute, memory and
// TP communication, without the engine's scheduling and sampling overheads, which the
// kernels do not have. Last, the median and max absolute error.
//
//   step_accuracy [--backend cuda|cpu] [--gpu h100-sxm-80gb] [--preset llama3.1-8b]
//                 [--layers N] [--dtype bf16|fp16|fp32] [--kv bf16|fp32]
//                 [--decode_batches 1,8,32,128] [--contexts 1024,4096]
//                 [--prefills 1x512,1x2048,4x2048] [--iters 5]
//
// The CPU backend runs fp32 only; its predictions still use --gpu (a smoke run, not a
// comparison).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "inference/engine_profile.h"
#include "inference/step_model.h"
#include "kernels/serving/serving_step_runner.h"
#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/presets.h"

namespace paratune::bench {
namespace {

namespace ks = kernels::serving;

struct Shape {
  ks::ServingPhase phase = ks::ServingPhase::kDecode;
  int64_t batch = 1;
  int64_t length = 0;  ///< Prompt tokens (prefill) or cached context (decode).
};

// The StepModel's work for a shape: what one step of the serving step task computes.
inference::StepWork WorkOf(const Shape& s) {
  inference::StepWork w;
  const double b = static_cast<double>(s.batch), n = static_cast<double>(s.length);
  if (s.phase == ks::ServingPhase::kPrefill) {
    w.prefill_tokens = b * n;
    w.prefill_attention_pairs = b * n * (n / 2.0);
    w.prefill_chunks = b;
  } else {
    w.decode_sequences = b;
    w.decode_context_tokens = b * (n + 1.0);
  }
  w.sampled_sequences = b;
  return w;
}

int Main(int argc, char** argv) {
  CLI::App app{"step_accuracy: measured serving steps against the inference step model"};
  std::string backend_name = "cuda", gpu = "h100-sxm-80gb", preset = "llama3.1-8b";
  std::string dtype_name = "bf16", kv_name = "bf16";
  int64_t layers = 0, iters = 5;
  std::vector<int64_t> decode_batches = {1, 8, 32, 128}, contexts = {1024, 4096};
  std::vector<std::string> prefills = {"1x512", "1x2048", "4x2048"};
  app.add_option("--backend", backend_name, "cuda | cpu");
  app.add_option("--gpu", gpu, "device profile of the prediction");
  app.add_option("--preset", preset, "a dense model preset");
  app.add_option("--layers", layers, "layers to run (default: the model's)");
  app.add_option("--dtype", dtype_name, "weights and activations: bf16 | fp16 | fp32");
  app.add_option("--kv", kv_name, "KV cache: bf16 | fp32");
  app.add_option("--decode_batches", decode_batches)->delimiter(',');
  app.add_option("--contexts", contexts, "decode context lengths")->delimiter(',');
  app.add_option("--prefills", prefills, "prefill shapes BATCHxTOKENS")->delimiter(',');
  app.add_option("--iters", iters, "timed steps per shape");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<kernels::BackendKind> backend = kernels::ParseBackendKind(backend_name);
  absl::StatusOr<kernels::DType> dtype = kernels::ParseDType(dtype_name);
  absl::StatusOr<kernels::DType> kv = kernels::ParseDType(kv_name);
  absl::StatusOr<ModelSpec> model = FindPreset(preset);
  absl::StatusOr<DeviceProfile> device = FindDevice(gpu);
  for (const absl::Status& s :
       {backend.status(), dtype.status(), kv.status(), model.status(), device.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "step_accuracy: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (model->num_experts > 1) {
    std::fprintf(stderr, "step_accuracy: --preset %s is a mixture of experts; give a dense one\n",
                 preset.c_str());
    return 2;
  }
  if (layers > 0) model->num_layers = layers;

  std::vector<Shape> shapes;
  for (const std::string& p : prefills) {
    const std::vector<std::string> parts = absl::StrSplit(p, 'x');
    Shape s;
    s.phase = ks::ServingPhase::kPrefill;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &s.batch) ||
        !absl::SimpleAtoi(parts[1], &s.length) || s.batch <= 0 || s.length <= 0) {
      std::fprintf(stderr, "step_accuracy: --prefills %s must be BATCHxTOKENS\n", p.c_str());
      return 2;
    }
    shapes.push_back(s);
  }
  for (int64_t c : contexts) {
    for (int64_t b : decode_batches) shapes.push_back({ks::ServingPhase::kDecode, b, c});
  }

  inference::ServingConfig layout;
  // The model's formats are 16-bit at least: fp32 runs are predicted as bf16.
  layout.weight_precision = *dtype == kernels::DType::kF16 ? inference::QuantFormat::kFp16
                                                           : inference::QuantFormat::kBf16;
  layout.kv_cache_precision = inference::QuantFormat::kBf16;
  absl::StatusOr<inference::StepModel> step_model = inference::StepModel::Create(
      *model, *device, inference::EngineProfileFor(inference::ServingEngine::kTrtllm), layout,
      /*gpus_per_node=*/8);
  if (!step_model.ok()) {
    std::fprintf(stderr, "step_accuracy: %s\n", std::string(step_model.status().message()).c_str());
    return 2;
  }

  std::printf("# step_accuracy: %s, %lld layers, %s weights, %s KV, on %s; predicted for %s\n",
              preset.c_str(), static_cast<long long>(model->num_layers), dtype_name.c_str(),
              kv_name.c_str(), backend_name.c_str(), gpu.c_str());
  std::printf("# predicted = the step model's compute + memory + tp_comm (no engine overheads)\n");
  std::printf("# %-8s %6s %7s %12s %12s %8s %10s %10s\n", "phase", "batch", "length", "measured_ms",
              "predicted_ms", "error_%", "gemm_ms", "attn_ms");
  std::vector<double> errors;
  for (const Shape& s : shapes) {
    ks::ServingStepConfig c;
    c.backend = *backend;
    c.model.shape.hidden_size = model->hidden_size;
    c.model.shape.num_attention_heads = model->num_attention_heads;
    c.model.shape.num_query_groups = QueryGroups(*model);
    c.model.shape.ffn_hidden_size = model->ffn_hidden_size;
    c.model.shape.vocab_size = model->vocab_size;
    c.model.shape.kv_channels = model->kv_channels;
    c.model.shape.activation = Activation::kSwiglu;
    c.model.shape.normalization = Normalization::kRmsNorm;
    c.model.num_layers = model->num_layers;
    c.model.dtype = *dtype;
    c.model.kv_dtype = *kv;
    c.phase = s.phase;
    c.batch = s.batch;
    (s.phase == ks::ServingPhase::kPrefill ? c.seq_length : c.context_length) = s.length;
    c.logits = true;
    c.iters = iters;
    const char* phase = s.phase == ks::ServingPhase::kPrefill ? "prefill" : "decode";
    absl::StatusOr<ks::ServingStepResult> r = ks::RunServingStep(c);
    if (!r.ok()) {
      std::printf("  %-8s %6lld %7lld  failed: %s\n", phase, static_cast<long long>(s.batch),
                  static_cast<long long>(s.length), std::string(r.status().message()).c_str());
      continue;
    }
    double total = 0, gemm = 0, attention = 0;
    for (const kernels::PhaseTiming& p : r->phases) {
      if (p.phase == "total") total = p.median_s;
      if (p.phase == "gemm") gemm = p.median_s;
      if (p.phase == "attention") attention = p.median_s;
    }
    const inference::StepBreakdown b = step_model->Breakdown(WorkOf(s));
    const double predicted_ms = b.compute + b.memory + b.tp_comm;
    const double measured_ms = 1e3 * total;
    const double error = std::abs(predicted_ms - measured_ms) / measured_ms;
    errors.push_back(error);
    std::printf("  %-8s %6lld %7lld %12.3f %12.3f %8.1f %10.3f %10.3f\n", phase,
                static_cast<long long>(s.batch), static_cast<long long>(s.length), measured_ms,
                predicted_ms, 100 * error, 1e3 * gemm, 1e3 * attention);
    std::fflush(stdout);
  }
  if (errors.empty()) return 1;
  std::sort(errors.begin(), errors.end());
  std::printf("# step_accuracy: %zu shapes, error median %.1f %%, max %.1f %%\n", errors.size(),
              100 * errors[errors.size() / 2], 100 * errors.back());
  return 0;
}

}  // namespace
}  // namespace paratune::bench

int main(int argc, char** argv) { return paratune::bench::Main(argc, argv); }
