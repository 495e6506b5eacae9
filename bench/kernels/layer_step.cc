// layer_step: forward + backward of one real parallel transformer layer (kernels/), its
// achieved GFLOP/s, and the ratio to a plain GEMM measured in the same run on the layer's
// largest GEMM shape ([s·b, h] × [h, 4h/t]): OpenBLAS cblas_sgemm with the same thread
// count on CPU, cuBLAS on GPU, so the ratio means something on a shared machine.
//
//   layer_step [--hidden 1024,2048,4096] [--seq 512,2048] [--batch 1,2] [--tp 1,2]
//              [--recompute none] [--attention flash|naive] [--window 0] [--warmup 1] [--iters 3]
//              [--threads 0] [--backend cpu|cuda] [--dtype fp32|bf16|fp16] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "kernels/step_runner.h"

namespace paratune::kernels {
namespace {

// Median GFLOP/s of C[m,n] = A[m,k]·B[k,n] through the backend's GEMM (cblas_sgemm on CPU,
// cuBLAS on GPU) over `iters` calls after one warm-up.
absl::StatusOr<double> GemmGflops(Backend& be, DType dt, int64_t m, int64_t n, int64_t k,
                                  int iters) {
  auto a = be.Empty({m, k}, dt, MemoryTag::kWorkspace);
  auto b = be.Empty({k, n}, dt, MemoryTag::kWorkspace);
  auto c = be.Empty({m, n}, dt, MemoryTag::kWorkspace);
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  if (!c.ok()) return c.status();
  if (auto s = be.Fill(*a, 0.5); !s.ok()) return s;
  if (auto s = be.Fill(*b, 0.25); !s.ok()) return s;
  GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.a = a->data(), g.lda = k;
  g.b = b->data(), g.ldb = n;
  g.c = c->data(), g.ldc = n;
  std::vector<double> rates;
  for (int i = 0; i <= iters; ++i) {
    if (auto s = be.Synchronize(); !s.ok()) return s;
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = be.Gemm(dt, g); !s.ok()) return s;
    if (auto s = be.Synchronize(); !s.ok()) return s;
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) rates.push_back(2.0 * m * n * k / sec / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// The reference rate of one rank on the layer's largest GEMM: per_rank BLAS threads on
// CPU, one device on GPU.
absl::StatusOr<double> ReferenceGflops(bool gpu, int per_rank, DType dtype, int64_t m, int64_t n,
                                       int64_t k) {
  std::unique_ptr<Backend> ref_backend;
  if (gpu) {
    absl::StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(0, 0);
    if (!made.ok()) return made.status();
    ref_backend = std::move(*made);
  } else {
    SetBlasThreads(per_rank);
    ref_backend = MakeCpuBackend(0, per_rank);
  }
  return GemmGflops(*ref_backend, dtype, m, n, k, 3);
}

void PrintHeader(const std::string& attention, int64_t window, const std::string& recompute,
                 const std::string& dtype_name, bool gpu, int cores, int64_t warmup,
                 int64_t iters) {
  std::printf(
      "# layer_step: one GPT layer (GeLU, LayerNorm, dropout 0.1, %s attention%s, "
      "recompute %s), %s on %s (%d cores)\n",
      attention.c_str(),
      window > 0 ? (" over a " + std::to_string(window) + "-key window").c_str() : "",
      recompute.c_str(), dtype_name.c_str(), gpu ? "cuda" : "cpu", cores);
  std::printf("# warmup %lld, iters %lld; gemm = %s [s*b,h]x[h,4h/t] in the same run\n",
              static_cast<long long>(warmup), static_cast<long long>(iters),
              gpu ? "cuBLAS (one device)" : "cblas_sgemm with the rank's threads, x ranks");
  std::printf("# %6s %6s %3s %3s %10s %10s %10s %10s %10s %9s %9s %7s %10s %10s\n", "h", "s",
              "b", "tp", "fwd", "bwd", "recomp", "comm", "total", "layer", "gemm", "ratio",
              "peak/rank", "act/rank");
  std::printf("# %6s %6s %3s %3s %10s %10s %10s %10s %10s %9s %9s %7s %10s %10s\n", "", "", "",
              "", "ms", "ms", "ms", "ms", "ms", "GFLOP/s", "GFLOP/s", "%", "MiB", "MiB");
}

int Main(int argc, char** argv) {
  CLI::App app{"layer_step: real transformer-layer step vs sgemm"};
  std::vector<int64_t> hidden = {1024, 2048, 4096}, seq = {512, 2048}, batch = {1, 2},
                       tps = {1, 2};
  std::string recompute = "none", attention = "flash", backend_name = "cpu", dtype_name = "fp32";
  int64_t warmup = 1, iters = 3, threads = 0, head_dim = 128, window = 0;
  bool json_out = false;
  app.add_option("--hidden", hidden, "hidden sizes")->delimiter(',');
  app.add_option("--seq", seq, "sequence lengths")->delimiter(',');
  app.add_option("--batch", batch, "micro-batch sizes")->delimiter(',');
  app.add_option("--tp", tps, "tensor-parallel sizes (ranks are threads)")->delimiter(',');
  app.add_option("--recompute", recompute, "none|selective|full");
  app.add_option("--attention", attention, "flash|naive");
  app.add_option("--window", window,
                 "sliding-window attention: keys per query, itself included (0: the whole "
                 "sequence); FLOPs count the window's 2sw - w^2 pairs");
  app.add_option("--head-dim", head_dim, "head dimension (heads = hidden / head-dim)");
  app.add_option("--warmup", warmup, "untimed steps");
  app.add_option("--iters", iters, "timed steps");
  app.add_option("--threads", threads, "BLAS threads per rank (0: cores / tp)");
  app.add_option("--backend", backend_name, "cpu (OpenBLAS + Gloo) | cuda (cuBLAS + NCCL)");
  app.add_option("--dtype", dtype_name, "fp32 (cpu) | fp32, bf16, fp16 (cuda)");
  app.add_flag("--json", json_out, "print JSON");
  CLI11_PARSE(app, argc, argv);
  auto rc = ParseRecompute(recompute);
  if (!rc.ok() || (attention != "flash" && attention != "naive")) {
    std::fprintf(stderr, "%s\n", rc.ok() ? "--attention must be flash or naive"
                                         : std::string(rc.status().message()).c_str());
    return 2;
  }
  auto backend = ParseBackendKind(backend_name);
  auto dtype = ParseDType(dtype_name);
  if (!backend.ok() || !dtype.ok()) {
    std::fprintf(stderr, "%s\n", std::string((backend.ok() ? dtype.status() : backend.status())
                                                .message()).c_str());
    return 2;
  }
  const bool gpu = *backend == BackendKind::kCuda;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  nlohmann::json out = nlohmann::json::array();
  if (!json_out) PrintHeader(attention, window, recompute, dtype_name, gpu, cores, warmup, iters);
  double worst_ratio_big = 1e9;
  int failures = 0;
  for (int64_t h : hidden) {
    for (int64_t s : seq) {
      for (int64_t b : batch) {
        for (int64_t t : tps) {
          StepConfig c;
          c.layer.shape.hidden_size = h;
          c.layer.shape.num_attention_heads = std::max<int64_t>(1, h / head_dim);
          c.layer.seq_length = s;
          c.layer.parallel.micro_batch_size = b;
          c.layer.parallel.tp = t;
          c.layer.parallel.recompute = *rc;
          c.layer.flash_attention = attention == "flash";
          c.layer.attention_window = window;
          c.layer.hidden_dropout = 0.1f;
          c.layer.attention_dropout = 0.1f;
          c.warmup = warmup;
          c.iters = iters;
          c.blas_threads_per_rank = threads;
          c.backend = *backend;
          c.layer.dtype = *dtype;
          const int per_rank = threads > 0 ? static_cast<int>(threads)
                                           : std::max(1, cores / static_cast<int>(t));
          absl::StatusOr<StepResult> r = RunLayerStep(c);
          if (!r.ok()) {
            ++failures;
            std::printf("  %6lld %6lld %3lld %3lld  %s\n", static_cast<long long>(h),
                        static_cast<long long>(s), static_cast<long long>(b),
                        static_cast<long long>(t), std::string(r.status().message()).c_str());
            continue;
          }
          // The reference runs alone, as one rank would (per_rank BLAS threads on CPU, one
          // device on GPU) on rank 0's largest GEMM; the t ranks run side by side (threads
          // share the cores; on GPU each rank has its own device), so the machine's
          // reference rate is t times the per-rank rate (capped at the cores on CPU).
          absl::StatusOr<double> gemm = ReferenceGflops(gpu, per_rank, *dtype, s * b, 4 * h / t, h);
          if (!gemm.ok()) {
            std::fprintf(stderr, "%s\n", std::string(gemm.status().message()).c_str());
            return 1;
          }
          const double total = r->Find("total")->median_s;
          // Aggregate layer rate over the t ranks (each does flops_per_step).
          const double layer = r->flops_per_step * static_cast<double>(t) / total / 1e9;
          const double ref =
              *gemm * static_cast<double>(gpu ? t : std::min<int64_t>(t, cores));
          const double ratio = 100.0 * layer / ref;
          if (h >= 2048 && t == 1) worst_ratio_big = std::min(worst_ratio_big, ratio);
          const double peak_mib = r->peak_bytes_per_rank[0] / 1048576.0;
          if (json_out) {
            out.push_back({{"hidden", h}, {"seq", s}, {"batch", b}, {"tp", t},
                           {"forward_ms", 1e3 * r->Find("forward")->median_s},
                           {"backward_ms", 1e3 * r->Find("backward")->median_s},
                           {"recompute_ms", 1e3 * r->Find("recompute")->median_s},
                           {"comm_ms", 1e3 * r->Find("tp_comm")->median_s},
                           {"total_ms", 1e3 * total}, {"layer_gflops", layer},
                           {"gemm_gflops", ref}, {"ratio_pct", ratio},
                           {"peak_bytes_per_rank", r->peak_bytes_per_rank},
                           {"activation_bytes", r->activation_bytes}});
          } else {
            std::printf("  %6lld %6lld %3lld %3lld %10.1f %10.1f %10.1f %10.1f %10.1f %9.1f %9.1f "
                        "%7.1f %10.1f %10.1f\n",
                        static_cast<long long>(h), static_cast<long long>(s),
                        static_cast<long long>(b), static_cast<long long>(t),
                        1e3 * r->Find("forward")->median_s, 1e3 * r->Find("backward")->median_s,
                        1e3 * r->Find("recompute")->median_s, 1e3 * r->Find("tp_comm")->median_s,
                        1e3 * total, layer, ref, ratio, peak_mib,
                        r->activation_bytes / 1048576.0);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  if (json_out) {
    std::printf("%s\n", out.dump(2).c_str());
  } else if (worst_ratio_big < 1e9) {
    std::printf("# layer/gemm at h >= 2048, tp = 1: min %.1f %% (target >= 60 %%)\n",
                worst_ratio_big);
  } else {
    std::printf("# no case with h >= 2048 and tp = 1 ran\n");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paratune::kernels

int main(int argc, char** argv) { return paratune::kernels::Main(argc, argv); }
