// search_speed: the planner's full grid for GPT-3 175B on 1024 A100-80GB (GBS 1536, seq
// 2048), GPT-3 1T on 3072, and DeepSeek-V3 on 1024 H100s (GBS 8192, seq 4096; TP, PP, VP,
// EP, ETP, CP, micro-batch, recompute and the dispatcher all open): candidates enumerated
// and scored, wall time per plan.
//
//   search_speed [--iters N] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/model/records.h"
#include "search/planner.h"
#include "search/presets.h"

namespace paratune::bench {
namespace {

int Main(int argc, char** argv) {
  int iters = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::max(1, std::atoi(argv[i + 1]));
  }
  const bool json_out = HasFlag(argc, argv, "--json");
  struct Case {
    const char* model;
    int64_t gpus;
    const char* gpu;
    int64_t seq, batch;
    bool mixture_of_experts;  ///< H100, flash attention, no dropout (Megatron-Core MoE).
  };
  nlohmann::json out;
  if (!json_out) {
    std::printf("# search_speed: full planner grid, %d timed runs each (median)\n", iters);
    std::printf("# %-12s %6s %11s %9s %9s %10s %10s  %s\n", "model", "gpus", "candidates",
                "feasible", "rejected", "median", "max", "top-1");
    std::printf("# %-12s %6s %11s %9s %9s %10s %10s\n", "", "", "", "", "", "ms", "ms");
  }
  double worst = 0;
  for (const Case& c : {Case{"gpt3-175b", 1024, "a100-80gb", 2048, 1536, false},
                        Case{"gpt3-1t", 3072, "a100-80gb", 2048, 1536, false},
                        Case{"deepseek-v3", 1024, "h100-sxm-80gb", 4096, 8192, true}}) {
    JobSpec spec;
    spec.model = *FindPreset(c.model);
    spec.training.seq_length = c.seq;
    spec.training.global_batch_size = c.batch;
    spec.training.flash_attention = c.mixture_of_experts;
    spec.training.dropout = !c.mixture_of_experts;
    spec.cluster.gpu = c.gpu;
    spec.cluster.num_gpus = c.gpus;
    std::vector<double> ms;
    PlanResult last;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<PlanResult> plan = Plan(spec);
      const auto t1 = std::chrono::steady_clock::now();
      if (!plan.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.model, std::string(plan.status().message()).c_str());
        return 1;
      }
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      last = std::move(*plan);
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    worst = std::max(worst, ms.back());
    const std::string top = last.ranked.empty() ? "-" : last.ranked[0].config.ToString();
    if (json_out) {
      out["cases"].push_back({{"model", c.model}, {"gpus", c.gpus},
                              {"candidates", last.candidates_considered},
                              {"feasible", last.feasible},
                              {"rejected", last.rejected.size()}, {"median_ms", median},
                              {"max_ms", ms.back()}, {"top1", top}});
    } else {
      std::printf("  %-12s %6lld %11lld %9lld %9zu %10.1f %10.1f  %s\n", c.model,
                  static_cast<long long>(c.gpus),
                  static_cast<long long>(last.candidates_considered),
                  static_cast<long long>(last.feasible), last.rejected.size(), median,
                  ms.back(), top.c_str());
    }
  }
  if (json_out) {
    out["max_ms"] = worst;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("# slowest plan: %.1f ms (target < 1000 ms)\n", worst);
  }
  return 0;
}

}  // namespace
}  // namespace paratune::bench

int main(int argc, char** argv) { return paratune::bench::Main(argc, argv); }
