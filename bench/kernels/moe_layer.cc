// moe_layer: forward + backward of the real MoE layer (kernels/moe_layer.h) per expert
// parallel size, ranks as threads (Gloo all-to-all), with the expert GEMMs' achieved
// GFLOP/s against cblas_sgemm on a rank's routed rows as one fc1 GEMM ([T·k, h] x [h, 2f]) in
// the same run, so the ratio means something on a shared machine. Each row checks its
// routing: rows over all experts must equal tokens·ep·k (#wrong counts the difference).
//
//   moe_layer [--hidden 512] [--experts 8] [--topk 2] [--ffn 1024] [--shared 0]
//             [--tokens 512] [--ep 1,2,4] [--etp 1] [--routing balanced|dropless]
//             [--backend cpu|cuda] [--dtype fp32|bf16|fp16] [--grouped-gemm 0|1]
//             [--warmup 1] [--iters 3] [--json]
// --grouped-gemm 1 runs the experts' GEMMs as one grouped call per projection (on cuda one
// cuBLAS grouped batched GEMM) instead of one call per expert; the same numbers.
// On cuda each rank is a device (NCCL all-to-all); the sgemm reference is the CPU's, so
// the ratio column is printed for cpu runs only.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/moe_step.h"

namespace paratune::kernels {
namespace {

// Median GFLOP/s of cblas_sgemm C[m,n] = A[m,k]·B[k,n] over `iters` calls after one.
double SgemmGflops(int64_t m, int64_t n, int64_t k, int iters) {
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  std::vector<double> rates;
  for (int i = 0; i <= iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) rates.push_back(2.0 * m * n * k / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double Median(const MoeStepResult& r, const std::string& phase) {
  for (const PhaseTiming& p : r.phases) {
    if (p.phase == phase) return p.median_s;
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"moe_layer: real MoE layer step per EP vs sgemm"};
  int64_t hidden = 512, experts = 8, topk = 2, ffn = 1024, shared = 0, tokens = 512, etp = 1;
  int64_t warmup = 1, iters = 3;
  std::vector<int64_t> eps = {1, 2, 4};
  std::string routing = "balanced", backend_name = "cpu", dtype_name = "fp32";
  bool json_out = false;
  int64_t grouped = 0;
  app.add_option("--hidden", hidden, "hidden size");
  app.add_option("--experts", experts, "routed experts");
  app.add_option("--topk", topk, "experts per token");
  app.add_option("--ffn", ffn, "FFN size of one expert");
  app.add_option("--shared", shared, "shared experts (FFN size --ffn)");
  app.add_option("--tokens", tokens, "tokens per EP rank");
  app.add_option("--ep", eps, "expert parallel sizes (ranks are threads)")->delimiter(',');
  app.add_option("--etp", etp, "expert tensor parallel size");
  app.add_option("--routing", routing, "balanced|dropless");
  app.add_option("--backend", backend_name, "cpu|cuda");
  app.add_option("--dtype", dtype_name, "fp32 (cpu: or fp64) | bf16 | fp16 (cuda)");
  app.add_option("--warmup", warmup, "untimed steps");
  app.add_option("--iters", iters, "timed steps");
  app.add_option("--grouped-gemm", grouped,
                 "1: one grouped GEMM call per projection; 0: per expert");
  app.add_flag("--json", json_out, "print JSON");
  CLI11_PARSE(app, argc, argv);
  if (routing != "balanced" && routing != "dropless") {
    std::fprintf(stderr, "--routing must be balanced or dropless\n");
    return 2;
  }
  absl::StatusOr<BackendKind> backend = ParseBackendKind(backend_name);
  absl::StatusOr<DType> dtype = ParseDType(dtype_name);
  if (!backend.ok() || !dtype.ok()) {
    std::fprintf(stderr, "--backend must be cpu or cuda, --dtype fp32, fp64, bf16 or fp16\n");
    return 2;
  }
  const bool cpu = *backend == BackendKind::kCpu;
  // Every rank is a thread; one BLAS thread each keeps the ranks from oversubscribing.
  SetBlasThreads(1);
  const double ref = cpu ? SgemmGflops(tokens * topk, hidden, 2 * ffn, 3) : 0.0;
  if (!json_out) {
    std::printf(
        "# moe_layer: h %lld, %lld experts of f %lld, top-%lld, %lld shared, %lld tokens"
        " per EP rank, %s routing, etp %lld, %s on %s%s, %s expert GEMMs\n",
        static_cast<long long>(hidden), static_cast<long long>(experts),
        static_cast<long long>(ffn), static_cast<long long>(topk), static_cast<long long>(shared),
        static_cast<long long>(tokens), routing.c_str(), static_cast<long long>(etp),
        dtype_name.c_str(), backend_name.c_str(), cpu ? " (1 BLAS thread per rank)" : "",
        grouped ? "grouped" : "per-expert");
    std::printf(
        "# warmup %lld, iters %lld; sgemm = cblas_sgemm [T*k, h]x[h, 2f], 1 thread, "
        "same run: %.2f GFLOP/s\n",
        static_cast<long long>(warmup), static_cast<long long>(iters), ref);
    std::printf("# %4s %10s %10s %10s %10s %10s %10s %9s %7s %10s %7s\n", "ep", "fwd", "bwd",
                "a2a fwd", "a2a bwd", "exp fwd", "exp bwd", "experts", "ratio", "peak/rank",
                "#wrong");
    std::printf("# %4s %10s %10s %10s %10s %10s %10s %9s %7s %10s %7s\n", "", "ms", "ms", "ms",
                "ms", "ms", "ms", "GFLOP/s", "%", "MiB", "");
  }
  nlohmann::json out = nlohmann::json::array();
  int64_t wrong_total = 0;
  for (int64_t ep : eps) {
    MoeStepConfig c;
    c.layer.hidden = hidden;
    c.layer.num_experts = experts;
    c.layer.topk = topk;
    c.layer.ffn_hidden = ffn;
    c.layer.num_shared_experts = shared;
    c.layer.shared_ffn_hidden = ffn;
    c.layer.routing = routing == "balanced" ? ExpertRouting::kBalanced : ExpertRouting::kDropless;
    c.layer.ep = ep;
    c.layer.etp = etp;
    c.layer.grouped_gemm = grouped != 0;
    c.tokens = tokens;
    c.backend = *backend;
    c.dtype = *dtype;
    c.blas_threads_per_rank = 1;
    c.warmup = warmup;
    c.iters = iters;
    absl::StatusOr<MoeStepResult> r = RunMoeLayerStep(c);
    if (!r.ok()) {
      std::printf("  %4lld %s\n", static_cast<long long>(ep), r.status().ToString().c_str());
      ++wrong_total;
      continue;
    }
    const int64_t rows =
        std::accumulate(r->tokens_per_expert.begin(), r->tokens_per_expert.end(), int64_t{0});
    const int64_t wrong = std::abs(rows - tokens * ep * topk);
    wrong_total += wrong;
    // Per rank: T·k rows (balanced) through three h×f/etp GEMMs; backward twice that.
    const double flops = 2.0 * 3.0 * tokens * topk * hidden * ffn / static_cast<double>(etp);
    const double exp_s = Median(*r, "experts_forward") + Median(*r, "experts_backward");
    const double gflops = 3.0 * flops / exp_s / 1e9;
    const int64_t peak =
        *std::max_element(r->peak_bytes_per_rank.begin(), r->peak_bytes_per_rank.end());
    nlohmann::json row = {{"ep", ep},
                          {"forward_ms", 1e3 * Median(*r, "forward")},
                          {"backward_ms", 1e3 * Median(*r, "backward")},
                          {"a2a_forward_ms", 1e3 * Median(*r, "dispatch_combine_forward")},
                          {"a2a_backward_ms", 1e3 * Median(*r, "dispatch_combine_backward")},
                          {"experts_forward_ms", 1e3 * Median(*r, "experts_forward")},
                          {"experts_backward_ms", 1e3 * Median(*r, "experts_backward")},
                          {"experts_gflops", gflops},
                          {"ratio", cpu ? gflops / ref : 0.0},
                          {"peak_bytes_per_rank", peak},
                          {"wrong", wrong}};
    out.push_back(row);
    if (!json_out) {
      std::printf("  %4lld %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %9.2f %7.1f %10.1f %7lld\n",
                  static_cast<long long>(ep), row["forward_ms"].get<double>(),
                  row["backward_ms"].get<double>(), row["a2a_forward_ms"].get<double>(),
                  row["a2a_backward_ms"].get<double>(), row["experts_forward_ms"].get<double>(),
                  row["experts_backward_ms"].get<double>(), gflops,
                  cpu ? 100.0 * gflops / ref : 0.0, static_cast<double>(peak) / (1 << 20),
                  static_cast<long long>(wrong));
    }
  }
  if (json_out) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("# wrong: %lld\n", static_cast<long long>(wrong_total));
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paratune::kernels

int main(int argc, char** argv) { return paratune::kernels::Main(argc, argv); }
