// Test harness for the serving kernels: runs one scenario on a ServingModel over `tp` thread
// ranks (Gloo) and returns rank 0's result (or every rank's), so layouts can be compared.
#ifndef PARATUNE_TESTS_KERNELS_SERVING_HARNESS_H_
#define PARATUNE_TESTS_KERNELS_SERVING_HARNESS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_model.h"

namespace paratune::kernels::serving::testing {

/// A scenario: steps driven on every rank identically; returns values to compare.
using Scenario = std::function<absl::StatusOr<std::vector<float>>(ServingModel&)>;

/// A scenario that depends on the rank (attention data parallelism: each rank its own
/// sequences).
using RankScenario = std::function<absl::StatusOr<std::vector<float>>(ServingModel&, int rank)>;

/// What one of t thread ranks runs, with its serving groups and a CPU backend.
using RankBody = std::function<absl::StatusOr<std::vector<float>>(
    int rank, const ServingGroups& groups, Backend& backend)>;

/// `body` on t thread ranks (groups of ep expert-parallel ranks inside them): every rank's
/// result, rank by rank.
inline absl::StatusOr<std::vector<std::vector<float>>> RunRankBodies(int t, int ep,
                                                                     const RankBody& body) {
  auto rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> group{0};
  const std::string prefix = absl::StrCat("serving", group.fetch_add(1));
  std::vector<absl::Status> status(t);
  std::vector<std::vector<float>> results(t);
  std::vector<std::thread> threads;
  for (int r = 0; r < t; ++r) {
    threads.emplace_back([&, r]() {
      status[r] = [&]() -> absl::Status {
        auto groups = MakeServingGroups(rendezvous, prefix, r, t, ep);
        if (!groups.ok()) return groups.status();
        auto backend = MakeCpuBackend(0, 1);
        auto out = body(r, *groups, *backend);
        if (!out.ok()) return out.status();
        results[r] = std::move(*out);
        return absl::OkStatus();
      }();
    });
  }
  for (auto& th : threads) th.join();
  for (auto& s : status) {
    if (!s.ok()) return s;
  }
  return results;
}

/// Every rank's result, rank by rank.
inline absl::StatusOr<std::vector<std::vector<float>>> RunOnEachRank(const ServingConfig& config,
                                                                     const RankScenario& scenario,
                                                                     uint64_t shuffle_seed = 0) {
  return RunRankBodies(static_cast<int>(config.parallel.tp), static_cast<int>(config.parallel.ep),
                       [&](int r, const ServingGroups& groups,
                           Backend& backend) -> absl::StatusOr<std::vector<float>> {
                         auto model =
                             ServingModel::Create(config, groups.context(&backend), shuffle_seed);
                         if (!model.ok()) return model.status();
                         return scenario(**model, r);
                       });
}

/// Rank 0's result of a scenario every rank runs alike.
inline absl::StatusOr<std::vector<float>> RunOnRanks(const ServingConfig& config,
                                                     const Scenario& scenario,
                                                     uint64_t shuffle_seed = 0) {
  auto all = RunOnEachRank(
      config, [&](ServingModel& m, int) { return scenario(m); }, shuffle_seed);
  if (!all.ok()) return all.status();
  return std::move((*all)[0]);
}

/// A small Llama-style model: h 64, 8 heads in 4 KV groups, SwiGLU, RMSNorm, RoPE.
inline ServingConfig SmallModel(int64_t tp, int64_t layers = 2) {
  ServingConfig c;
  c.shape.hidden_size = 64;
  c.shape.num_attention_heads = 8;
  c.shape.num_query_groups = 4;
  c.shape.ffn_hidden_size = 128;
  c.shape.vocab_size = 96;
  c.shape.activation = Activation::kSwiglu;
  c.shape.normalization = Normalization::kRmsNorm;
  c.num_layers = layers;
  c.parallel.tp = tp;
  c.kv_block_size = 4;
  c.num_kv_blocks = 64;
  return c;
}

/// SmallModel with every layer an expert layer of 4 SwiGLU experts of 32, top-2, and one
/// shared expert of 32, on ep expert-parallel ranks inside tp.
inline ServingConfig SmallExpertModel(int64_t tp, int64_t ep = 1) {
  ServingConfig c = SmallModel(tp);
  c.parallel.ep = ep;
  MoeLayerConfig moe;
  moe.num_experts = 4;
  moe.topk = 2;
  moe.ffn_hidden = 32;
  moe.num_shared_experts = 1;
  moe.shared_ffn_hidden = 32;
  c.moe = moe;
  return c;
}

/// A tiny serving run of SmallModel(tp): 7 offline requests of about 12 prompt and 5
/// output tokens (jittered), a pool of 32 blocks of 8, at most 3 sequences and 16 tokens
/// a step.
inline ServeOptions TinyServe(int64_t tp) {
  ServeOptions o;
  o.model = SmallModel(tp);
  o.model.kv_block_size = 8;
  o.model.num_kv_blocks = 32;
  o.trace.num_requests = 7;
  o.trace.isl = 12;
  o.trace.osl = 5;
  o.trace.isl_jitter = 0.5;
  o.trace.osl_jitter = 0.5;
  o.max_batch_size = 3;
  o.max_num_tokens = 16;
  return o;
}

/// Deterministic prompt tokens of sequence `seq`.
inline std::vector<int32_t> Prompt(int64_t seq, int64_t len, int64_t vocab) {
  std::vector<int32_t> p(len);
  for (int64_t i = 0; i < len; ++i) p[i] = static_cast<int32_t>((seq * 131 + i * 37 + 11) % vocab);
  return p;
}

/// max |a − b| / (atol + rtol·|b|); ≤ 1 means within tolerance.
inline double ToleranceRatio(const std::vector<float>& a, const std::vector<float>& b, double atol,
                             double rtol) {
  if (a.size() != b.size() || a.empty()) return 1e30;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (atol + rtol * std::abs(double(b[i]))));
  }
  return worst;
}

}  // namespace paratune::kernels::serving::testing

#endif  // PARATUNE_TESTS_KERNELS_SERVING_HARNESS_H_
