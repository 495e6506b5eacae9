// Test harness: runs one TransformerLayer forward + backward over `tp` thread ranks and
// returns everything in the unsharded (TP = 1) layout, so layouts can be compared.
#ifndef PARATUNE_TESTS_KERNELS_LAYER_HARNESS_H_
#define PARATUNE_TESTS_KERNELS_LAYER_HARNESS_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/hash_random.h"
#include "kernels/transformer_layer.h"

namespace paratune::kernels::testing {

struct LayerRun {
  std::vector<double> y;                                ///< [s·b, h]
  std::vector<double> dx;                               ///< [s·b, h]
  std::map<std::string, std::vector<double>> grads;     ///< unsharded layout
  std::vector<int64_t> saved_bytes;                     ///< per rank
  std::vector<std::vector<std::pair<std::string, int64_t>>> breakdown;  ///< per rank
  std::vector<int64_t> peak_activation_bytes;           ///< allocator, per rank
  /// Allocator's activation-tag bytes right after Forward (input + kept + output).
  std::vector<int64_t> activation_bytes_after_forward;
};

/// Deterministic values in [-1, 1).
inline std::vector<double> RandomVector(int64_t n, uint64_t seed) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 2.0 * HashUniform(seed, i) - 1.0;
  return v;
}

inline absl::StatusOr<LayerRun> RunLayer(const LayerConfig& config, const std::vector<double>& x,
                                         const std::vector<double>& dy) {
  const int t = static_cast<int>(config.parallel.tp);
  const int64_t h = config.shape.hidden_size;
  const int64_t n = config.seq_length * config.parallel.micro_batch_size;
  const int64_t n_sp = config.parallel.sequence_parallel ? n / t : n;
  auto rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> group{0};
  const std::string prefix = absl::StrCat("layer", group.fetch_add(1));
  LayerRun run;
  run.y.assign(n * h, 0);
  run.dx.assign(n * h, 0);
  run.saved_bytes.assign(t, 0);
  run.breakdown.resize(t);
  run.peak_activation_bytes.assign(t, 0);
  run.activation_bytes_after_forward.assign(t, 0);
  std::vector<absl::Status> status(t);
  std::vector<std::map<std::string, std::vector<double>>> grads(t);
  std::vector<std::map<std::string, std::pair<std::vector<int64_t>, int64_t>>> index(t);
  std::vector<std::thread> threads;
  for (int r = 0; r < t; ++r) {
    threads.emplace_back([&, r]() {
      status[r] = [&]() -> absl::Status {
        std::unique_ptr<Communicator> comm;
        if (t == 1) {
          comm = MakeSelfCommunicator();
        } else {
          auto c = MakeGlooCommunicator(rendezvous, prefix, r, t);
          if (!c.ok()) return c.status();
          comm = std::move(*c);
        }
        auto backend = MakeCpuBackend(0, 1);
        ParallelContext ctx{backend.get(), comm.get(), nullptr};
        auto layer = TransformerLayer::Create(config, ctx);
        if (!layer.ok()) return layer.status();
        const int64_t row0 = config.parallel.sequence_parallel ? r * n_sp : 0;
        auto xt = backend->Empty({n_sp, h}, config.dtype, MemoryTag::kActivations);
        auto dyt = backend->Empty({n_sp, h}, config.dtype, MemoryTag::kWorkspace);
        if (!xt.ok()) return xt.status();
        if (!dyt.ok()) return dyt.status();
        std::vector<double> xs(x.begin() + row0 * h, x.begin() + (row0 + n_sp) * h);
        std::vector<double> dys(dy.begin() + row0 * h, dy.begin() + (row0 + n_sp) * h);
        if (auto s = backend->CopyFromHost(*xt, xs); !s.ok()) return s;
        if (auto s = backend->CopyFromHost(*dyt, dys); !s.ok()) return s;
        backend->allocator().ResetPeaks();
        auto y = (*layer)->Forward(*xt);
        if (!y.ok()) return y.status();
        run.saved_bytes[r] = (*layer)->saved().TotalBytes();
        run.activation_bytes_after_forward[r] =
            backend->allocator().Stats().current_by_tag[static_cast<int>(MemoryTag::kActivations)];
        run.breakdown[r] = (*layer)->saved().Breakdown();
        auto dx = (*layer)->Backward(*dyt);
        if (!dx.ok()) return dx.status();
        if (auto s = (*layer)->FinishGradients(); !s.ok()) return s;
        run.peak_activation_bytes[r] =
            backend->allocator().Stats().peak_by_tag[static_cast<int>(MemoryTag::kActivations)];
        auto yh = backend->CopyToHost(*y);
        auto dxh = backend->CopyToHost(*dx);
        if (!yh.ok()) return yh.status();
        if (!dxh.ok()) return dxh.status();
        if (r == 0 || config.parallel.sequence_parallel) {
          std::copy(yh->begin(), yh->end(), run.y.begin() + row0 * h);
          std::copy(dxh->begin(), dxh->end(), run.dx.begin() + row0 * h);
        }
        for (Parameter* p : (*layer)->Parameters()) {
          auto g = backend->CopyToHost(p->grad);
          if (!g.ok()) return g.status();
          grads[r][p->name] = *g;
          index[r][p->name] = {p->global_index, p->global_numel};
        }
        return absl::OkStatus();
      }();
    });
  }
  for (auto& th : threads) th.join();
  for (auto& s : status) {
    if (!s.ok()) return s;
  }
  for (const auto& [name, idx] : index[0]) {
    std::vector<double> global(idx.second, 0.0);
    for (int r = 0; r < t; ++r) {
      const auto& [gi, numel] = index[r][name];
      const auto& local = grads[r][name];
      for (size_t i = 0; i < local.size(); ++i) global[gi[i]] = local[i];
    }
    run.grads[name] = std::move(global);
  }
  return run;
}

/// max |a − b| / (atol + rtol·|b|) over elements; ≤ 1 means within tolerance.
inline double ToleranceRatio(const std::vector<double>& a, const std::vector<double>& b,
                             double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / (atol + rtol * std::abs(b[i])));
  }
  return a.size() == b.size() ? worst : 1e30;
}

}  // namespace paratune::kernels::testing

#endif  // PARATUNE_TESTS_KERNELS_LAYER_HARNESS_H_
