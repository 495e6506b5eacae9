// step_accuracy: the serving kernels' measured step times against the inference step
// model. For a grid of prefill and decode shapes of one dense preset it builds the serving
// step tasks profile mode sends (server::ToProto of inference::ServingStepTaskSpec), runs
// them on this machine's worker executor (kernels/serving: the real layers over a paged
// cache, greedy sampling included), and prints per shape the measured median step time
// next to the StepModel's prediction for --gpu: its compute, memory and TP communication,
// without the engine's scheduling and sampling overheads, which the kernels do not have.
// Last, the median and max absolute error.
//
//   step_accuracy [--backend cuda|cpu] [--gpu h100-sxm-80gb] [--preset llama3.1-8b]
//                 [--layers N] [--weights bf16|fp16|int8|int4] [--kv bf16|fp8]
//                 [--decode_batches 1,8,32,128] [--contexts 1024,4096]
//                 [--prefills 1x512,1x2048,4x2048] [--iters 5]
//
// CUDA workers run bf16/fp16 weights, CPU workers int8/int4 (in fp32 math); a CPU run's
// predictions still use --gpu (a smoke run, not a comparison).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "inference/engine_profile.h"
#include "inference/serving_profile.h"
#include "inference/step_model.h"
#include "search/device_catalog.h"
#include "search/presets.h"
#include "server/convert_inference.h"
#include "worker/device_discovery.h"
#include "worker/kernels_executor.h"

namespace paratune::bench {
namespace {

using inference::ServingStepPhase;

// The StepModel's work for a task: what one step of the serving step task computes.
inference::StepWork WorkOf(const inference::ServingStepTaskSpec& t) {
  inference::StepWork w;
  const double b = static_cast<double>(t.batch), n = static_cast<double>(t.length);
  if (t.phase == ServingStepPhase::kPrefill) {
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

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "step_accuracy: %s\n", std::string(s.message()).c_str());
  return 2;
}

int Main(int argc, char** argv) {
  CLI::App app{"step_accuracy: measured serving steps against the inference step model"};
  std::string backend = "cuda", gpu = "h100-sxm-80gb", preset = "llama3.1-8b";
  std::string weights = "bf16", kv = "bf16";
  int64_t layers = 0, iters = 5;
  std::vector<int64_t> decode_batches = {1, 8, 32, 128}, contexts = {1024, 4096};
  std::vector<std::string> prefills = {"1x512", "1x2048", "4x2048"};
  app.add_option("--backend", backend, "cuda | cpu");
  app.add_option("--gpu", gpu, "device profile of the prediction");
  app.add_option("--preset", preset, "a dense model preset");
  app.add_option("--layers", layers, "layers to run (default: the model's)");
  app.add_option("--weights", weights, "bf16 | fp16 (CUDA) | int8 | int4 (CPU)");
  app.add_option("--kv", kv, "KV cache: bf16 | fp8");
  app.add_option("--decode_batches", decode_batches)->delimiter(',');
  app.add_option("--contexts", contexts, "decode context lengths")->delimiter(',');
  app.add_option("--prefills", prefills, "prefill shapes BATCHxTOKENS")->delimiter(',');
  app.add_option("--iters", iters, "timed steps per shape");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<inference::QuantFormat> weight_format = inference::ParseQuantFormat(weights);
  absl::StatusOr<inference::QuantFormat> kv_format = inference::ParseQuantFormat(kv);
  absl::StatusOr<ModelSpec> model = FindPreset(preset);
  absl::StatusOr<DeviceProfile> device = FindDevice(gpu);
  for (const absl::Status& s :
       {weight_format.status(), kv_format.status(), model.status(), device.status()}) {
    if (!s.ok()) return Fail(s);
  }
  if (model->num_experts > 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--preset ", preset, " is a mixture of experts; give a dense one")));
  }
  if (layers > 0) model->num_layers = layers;

  // The tasks, as profile mode builds them for a tp 1 instance.
  inference::ServingStepTaskSpec base;
  base.model = *model;
  base.shape.weight_precision = *weight_format;
  base.shape.kv_cache_precision = *kv_format;
  base.warmup = 1;
  base.iters = iters;
  base.device_kind = gpu;
  std::vector<inference::ServingStepTaskSpec> tasks;
  for (const std::string& p : prefills) {
    const std::vector<std::string> parts = absl::StrSplit(p, 'x');
    inference::ServingStepTaskSpec t = base;
    t.phase = ServingStepPhase::kPrefill;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &t.batch) ||
        !absl::SimpleAtoi(parts[1], &t.length) || t.batch <= 0 || t.length <= 0) {
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("--prefills ", p, " must be BATCHxTOKENS")));
    }
    tasks.push_back(t);
  }
  for (int64_t c : contexts) {
    for (int64_t b : decode_batches) {
      inference::ServingStepTaskSpec t = base;
      t.phase = ServingStepPhase::kDecode;
      t.batch = b;
      t.length = c;
      tasks.push_back(t);
    }
  }

  inference::ServingConfig layout;
  layout.weight_precision = *weight_format;
  layout.kv_cache_precision = *kv_format;
  absl::StatusOr<inference::StepModel> step_model = inference::StepModel::Create(
      *model, *device, inference::EngineProfileFor(inference::ServingEngine::kTrtllm), layout,
      /*gpus_per_node=*/8);
  if (!step_model.ok()) return Fail(step_model.status());
  absl::StatusOr<worker::DeviceInventory> inventory = worker::DiscoverDevices(backend, {0}, "");
  if (!inventory.ok()) return Fail(inventory.status());
  std::shared_ptr<worker::TaskExecutor> executor = worker::CreateKernelsExecutor(*inventory);
  worker::CancelFlag cancel;

  std::printf("# step_accuracy: %s, %lld layers, %s weights, %s KV, on %s; predicted for %s\n",
              preset.c_str(), static_cast<long long>(model->num_layers), weights.c_str(),
              kv.c_str(), backend.c_str(), gpu.c_str());
  std::printf("# predicted = the step model's compute + memory + tp_comm (no engine overheads)\n");
  std::printf("# %-8s %6s %7s %12s %12s %8s %10s %10s\n", "phase", "batch", "length", "measured_ms",
              "predicted_ms", "error_%", "gemm_ms", "attn_ms");
  std::vector<double> errors;
  for (const inference::ServingStepTaskSpec& t : tasks) {
    const char* phase = t.phase == ServingStepPhase::kPrefill ? "prefill" : "decode";
    const v1::ProfileTask task = server::ToProto(t);
    const v1::TaskResult result = executor->Execute(task, cancel);
    absl::StatusOr<inference::StepSample> m =
        result.outcome() == v1::TaskResult::OUTCOME_OK
            ? server::StepSampleFromResult(task.serving_step(), result)
            : absl::StatusOr<inference::StepSample>(absl::InternalError(result.message()));
    if (!m.ok()) {
      std::printf("  %-8s %6lld %7lld  failed: %s\n", phase, static_cast<long long>(t.batch),
                  static_cast<long long>(t.length), std::string(m.status().message()).c_str());
      continue;
    }
    const inference::StepBreakdown b = step_model->Breakdown(WorkOf(t));
    const double predicted_ms = b.compute + b.memory + b.tp_comm;
    const double measured_ms = 1e3 * m->total_s;
    const double error = std::abs(predicted_ms - measured_ms) / measured_ms;
    errors.push_back(error);
    std::printf("  %-8s %6lld %7lld %12.3f %12.3f %8.1f %10.3f %10.3f\n", phase,
                static_cast<long long>(t.batch), static_cast<long long>(t.length), measured_ms,
                predicted_ms, 100 * error, 1e3 * m->gemm_s, 1e3 * m->attention_s);
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
