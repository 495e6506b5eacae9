// collectives: nccl-tests-style sweep of one collective over ranks that are threads of
// this process: Gloo over TCP on 127.0.0.1 on CPU (NCCL with --backend cuda where a GPU
// and the CUDA backend exist). Sizes double from --min-bytes to --max-bytes (nccl-tests
// -b/-e/-f); every size's result is checked (#wrong).
//
//   collectives [--op all_reduce|all_gather|reduce_scatter|send_recv|all_to_all|all] [--ranks 2]
//               [--min-bytes 1024] [--max-bytes 16777216] [--factor 2] [--warmup 2]
//               [--iters 10] [--dtype fp32] [--backend cpu] [--json]
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kernels/collective_bench.h"

namespace paratune::kernels {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"collectives: nccl-tests-style collective sweep"};
  std::string op_name = "all", dtype_name = "fp32", backend_name = "cpu";
  std::vector<int64_t> ranks = {2};
  int64_t min_bytes = 1024, max_bytes = 16 << 20, factor = 2, warmup = 2, iters = 10;
  bool json_out = false;
  app.add_option("--op", op_name, "all_reduce|all_gather|reduce_scatter|send_recv|all_to_all|all");
  app.add_option("--ranks", ranks, "group sizes")->delimiter(',');
  app.add_option("--min-bytes", min_bytes, "smallest size");
  app.add_option("--max-bytes", max_bytes, "largest size");
  app.add_option("--factor", factor, "size multiplier");
  app.add_option("--warmup", warmup, "untimed calls per size");
  app.add_option("--iters", iters, "timed calls per size");
  app.add_option("--dtype", dtype_name, "fp32|fp64");
  app.add_option("--backend", backend_name, "cpu (Gloo) | cuda (NCCL)");
  app.add_flag("--json", json_out, "print JSON");
  CLI11_PARSE(app, argc, argv);
  std::vector<CollectiveOp> ops;
  if (op_name == "all") {
    ops = {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
           CollectiveOp::kSendRecv, CollectiveOp::kAllToAll};
  } else {
    auto op = ParseCollectiveOp(op_name);
    if (!op.ok()) {
      std::fprintf(stderr, "%s\n", std::string(op.status().message()).c_str());
      return 2;
    }
    ops = {*op};
  }
  auto dtype = ParseDType(dtype_name);
  auto backend = ParseBackendKind(backend_name);
  if (!dtype.ok() || !backend.ok() || factor < 2) {
    std::fprintf(stderr, "bad --dtype, --backend or --factor (must be >= 2)\n");
    return 2;
  }
  nlohmann::json out = nlohmann::json::array();
  double bus_sum = 0;
  int64_t bus_n = 0, wrong_total = 0;
  for (int64_t k : ranks) {
    for (CollectiveOp op : ops) {
      CollectiveSweepConfig c;
      c.op = op;
      c.group_size = k;
      c.dtype = *dtype;
      c.warmup = warmup;
      c.iters = iters;
      c.backend = *backend;
      const int64_t unit = k * SizeOf(*dtype);
      for (int64_t s = min_bytes; s <= max_bytes; s *= factor) {
        c.sizes_bytes.push_back((s + unit - 1) / unit * unit);
      }
      auto samples = RunCollectiveSweep(c);
      if (!samples.ok()) {
        std::fprintf(stderr, "%s\n", std::string(samples.status().message()).c_str());
        return 1;
      }
      if (!json_out) {
        std::printf("# %s, %s, ranks %lld (threads), dtype %s, warmup %lld, iters %lld\n",
                    ToString(op),
                    *backend == BackendKind::kCpu ? "Gloo TCP 127.0.0.1" : "NCCL",
                    static_cast<long long>(k), dtype_name.c_str(),
                    static_cast<long long>(warmup), static_cast<long long>(iters));
        std::printf("# %12s %12s %6s %10s %11s %11s %7s\n", "size", "count", "type", "time",
                    "algbw", "busbw", "#wrong");
        std::printf("# %12s %12s %6s %10s %11s %11s %7s\n", "(B)", "(elements)", "", "(us)",
                    "(GB/s)", "(GB/s)", "");
      }
      for (const CollectiveSample& smp : *samples) {
        bus_sum += smp.busbw_gbps;
        ++bus_n;
        wrong_total += smp.wrong;
        if (json_out) {
          out.push_back({{"op", ToString(op)}, {"ranks", k}, {"size_bytes", smp.size_bytes},
                         {"count", smp.count}, {"type", dtype_name}, {"time_us", 1e6 * smp.time_s},
                         {"algbw_gbps", smp.algbw_gbps}, {"busbw_gbps", smp.busbw_gbps},
                         {"wrong", smp.wrong}});
        } else {
          std::printf("  %12lld %12lld %6s %10.1f %11.3f %11.3f %7lld\n",
                      static_cast<long long>(smp.size_bytes), static_cast<long long>(smp.count),
                      *dtype == DType::kF32 ? "float" : "double", 1e6 * smp.time_s,
                      smp.algbw_gbps, smp.busbw_gbps, static_cast<long long>(smp.wrong));
        }
      }
      if (!json_out) std::fflush(stdout);
    }
  }
  if (json_out) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total),
                wrong_total == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", bus_n ? bus_sum / bus_n : 0.0);
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paratune::kernels

int main(int argc, char** argv) { return paratune::kernels::Main(argc, argv); }
