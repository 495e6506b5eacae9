// The grouped expert GEMMs of mixture-of-experts layers on the GPU against the time model:
// cuBLAS strided-batched BF16 GEMMs (one per local expert, equal rows: balanced routing)
// at the expert shapes of Qwen3-235B-A22B, Mixtral 8x7B and DeepSeek-V3, over per-expert
// row counts from 128 to 16384, beside search/gemm_efficiency.h's GemmSeconds for the same
// shape on the catalog device. Prints measured and modelled milliseconds and their ratio;
// the time model's expert layers use these GemmSeconds. Needs a CUDA device; exits 2 with
// the reason otherwise.
//
//   expert_gemm_cuda [--device-kind h100-sxm-80gb] [--reps 20] [--json]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/device_catalog.h"
#include "search/gemm_efficiency.h"

#if PARATUNE_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bench/kernels/cuda_bench.h"
#endif

namespace {

#if PARATUNE_HAVE_CUDA
void Check(cudaError_t e, const char* what) { paratune::bench::CudaCheck(e, what); }
void Check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(s));
    std::exit(1);
  }
}

using paratune::bench::DeviceRandom;

// Median milliseconds of `batch` row-major [m x k] x [k x n] BF16 GEMMs (FP32 accumulate).
double BatchedGemmMs(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, int64_t batch,
                     int reps) {
  void* a = DeviceRandom(batch * m * k * 2, 1);
  void* b = DeviceRandom(batch * k * n * 2, 2);
  void* c = nullptr;
  Check(cudaMalloc(&c, batch * m * n * 2), "cudaMalloc");
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T.
  auto launch = [&] {
    Check(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                                     static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                     CUDA_R_16BF, static_cast<int>(n), k * n, a, CUDA_R_16BF,
                                     static_cast<int>(k), m * k, &beta, c, CUDA_R_16BF,
                                     static_cast<int>(n), m * n, static_cast<int>(batch),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
  };
  const double ms = paratune::bench::MedianMs(launch, 3, reps);
  cudaFree(a), cudaFree(b), cudaFree(c);
  return ms;
}
#endif

struct ExpertShape {
  const char* model;
  int64_t hidden, expert_ffn, local_experts;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Grouped expert GEMMs on the GPU against the time model's GemmSeconds"};
  std::string kind = "h100-sxm-80gb";
  int reps = 20;
  bool json = false;
  app.add_option("--device-kind", kind, "catalog device the model's times are for");
  app.add_option("--reps", reps, "timed launches per shape (median)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "print JSON instead of the table");
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<paratune::DeviceProfile> device = paratune::FindDevice(kind);
  if (!device.ok()) {
    std::fprintf(stderr, "--device-kind: %s\n", std::string(device.status().message()).c_str());
    return 2;
  }
#if !PARATUNE_HAVE_CUDA
  std::fprintf(stderr, "expert_gemm_cuda: built without the CUDA backend\n");
  return 2;
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "expert_gemm_cuda: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  cublasHandle_t handle;
  Check(cublasCreate(&handle), "cublasCreate");
  const ExpertShape shapes[] = {{"Qwen3-235B-A22B (EP 8: 16 local)", 4096, 1536, 16},
                                {"Mixtral 8x7B (EP 2: 4 local)", 4096, 14336, 4},
                                {"DeepSeek-V3 (EP 32: 8 local)", 7168, 2048, 8}};
  nlohmann::json out;
  out["device"] = prop.name;
  out["model_device_kind"] = kind;
  if (!json) {
    std::printf("# %s; model: GemmSeconds on %s; BF16, %d reps, median\n", prop.name,
                kind.c_str(), reps);
    std::printf("%-34s %-4s %6s %6s %6s %9s %9s %8s %7s\n", "experts", "gemm", "rows", "n", "k",
                "meas ms", "model ms", "TFLOP/s", "m/model");
  }
  const double dense_ms = BatchedGemmMs(handle, 8192, 8192, 8192, 1, reps);
  const double dense_tflops = 2.0 * 8192.0 * 8192 * 8192 / (dense_ms / 1e3) / 1e12;
  const double dense_model_ms =
      1e3 * paratune::GemmSeconds(*device, 8192, 8192, 8192, 1, paratune::Precision::kBf16);
  out["dense_8192_tflops"] = dense_tflops;
  out["dense_8192_measured_ms"] = dense_ms;
  out["dense_8192_modelled_ms"] = dense_model_ms;
  for (const ExpertShape& s : shapes) {
    for (int64_t rows : {128, 256, 512, 1024, 2048, 4096, 8192, 16384}) {
      // FC1 (gated: 2f wide) and FC2, forward shapes.
      for (const auto& [name, n, k] :
           {std::tuple<const char*, int64_t, int64_t>{"fc1", 2 * s.expert_ffn, s.hidden},
            {"fc2", s.hidden, s.expert_ffn}}) {
        const double measured = BatchedGemmMs(handle, rows, n, k, s.local_experts, reps);
        const double modelled =
            1e3 * paratune::GemmSeconds(*device, static_cast<double>(rows),
                                        static_cast<double>(n), static_cast<double>(k),
                                        static_cast<double>(s.local_experts),
                                        paratune::Precision::kBf16);
        const double tflops = 2.0 * rows * n * k * s.local_experts / (measured / 1e3) / 1e12;
        out["rows"].push_back({{"experts", s.model}, {"gemm", name}, {"rows", rows},
                               {"n", n}, {"k", k}, {"batch", s.local_experts},
                               {"measured_ms", measured}, {"modelled_ms", modelled},
                               {"tflops", tflops}});
        if (!json) {
          std::printf("%-34s %-4s %6ld %6ld %6ld %9.3f %9.3f %8.0f %7.2f\n", s.model, name,
                      static_cast<long>(rows), static_cast<long>(n), static_cast<long>(k),
                      measured, modelled, tflops, measured / modelled);
        }
      }
    }
  }
  cublasDestroy(handle);
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("# dense 8192^3 BF16 GEMM in the same run: %.0f TFLOP/s, %.3f ms measured, "
                "%.3f ms modelled (%.2f)\n",
                dense_tflops, dense_ms, dense_model_ms, dense_ms / dense_model_ms);
  }
  return 0;
#endif
}
