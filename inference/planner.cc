// The inference search: enumerate serving layouts, screen each with a steady-state estimate
// of its engine steps, simulate the scheduler for the most promising ones (and the Pareto
// front of the screening), rank under the limits.
#include "inference/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "inference/engine_profile.h"
#include "inference/layout_eval.h"
#include "inference/simulator.h"
#include "inference/step_model.h"
#include "search/device_catalog.h"
#include "search/model_math.h"

namespace paratune::inference {
namespace {

// Layouts simulated after screening (beside the screening's Pareto front).
constexpr size_t kSimulatedTop = 48;
constexpr size_t kSimulatedFront = 24;
// Rejected layouts listed in a result (all are counted by rule).
constexpr size_t kRejectedListed = 50;

std::vector<int64_t> Or(const std::vector<int64_t>& given, std::vector<int64_t> fallback) {
  return given.empty() ? fallback : given;
}

// True when `a` ranks before `b` under the objective (both meet the limits or neither).
bool Better(const InferenceRankedConfig& a, const InferenceRankedConfig& b,
            ServingObjective objective) {
  if (a.meets_limits != b.meets_limits) return a.meets_limits;
  switch (objective) {
    case ServingObjective::kLatency:
      if (a.tpot_ms.p50 != b.tpot_ms.p50) return a.tpot_ms.p50 < b.tpot_ms.p50;
      return a.ttft_ms.p50 < b.ttft_ms.p50;
    case ServingObjective::kCost:
      if (a.cost_per_million_output_tokens && b.cost_per_million_output_tokens) {
        return *a.cost_per_million_output_tokens < *b.cost_per_million_output_tokens;
      }
      [[fallthrough]];
    case ServingObjective::kThroughput:
      break;
  }
  return a.output_tokens_per_sec_per_gpu > b.output_tokens_per_sec_per_gpu;
}

}  // namespace

bool RanksBefore(const InferenceRankedConfig& a, const InferenceRankedConfig& b,
                 ServingObjective objective) {
  return Better(a, b, objective);
}

std::vector<InferenceRankedConfig> ParetoFront(std::vector<InferenceRankedConfig> v) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    if (a.output_tokens_per_sec_per_gpu != b.output_tokens_per_sec_per_gpu) {
      return a.output_tokens_per_sec_per_gpu > b.output_tokens_per_sec_per_gpu;
    }
    return a.tokens_per_sec_per_user > b.tokens_per_sec_per_user;
  });
  std::vector<InferenceRankedConfig> front;
  double best_user = -1;
  for (auto& r : v) {
    if (r.tokens_per_sec_per_user > best_user) {
      best_user = r.tokens_per_sec_per_user;
      r.pareto_optimal = true;
      front.push_back(r);
    }
  }
  return front;
}

std::string Recommendation(const InferenceRankedConfig& best, ServingObjective objective,
                           const std::string& detail) {
  return absl::StrFormat(
      "%s: %.0f output tokens/s per GPU, %.1f tokens/s per user, TTFT p99 %.0f ms, TPOT "
      "p99 %.1f ms%s (objective %s%s)",
      best.config.ToString(), best.output_tokens_per_sec_per_gpu, best.tokens_per_sec_per_user,
      best.ttft_ms.p99, best.tpot_ms.p99,
      best.meets_limits ? ", within the limits" : "; no layout meets the limits",
      std::string(ToString(objective)), detail.empty() ? "" : "; " + detail);
}

absl::StatusOr<InferencePlanResult> PlanInference(const InferenceJobSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  if (auto s = spec.Validate(); !s.ok()) return s;
  auto context = LayoutContext::Create(spec);
  if (!context.ok()) return context.status();
  LayoutContext& ctx = *context;
  const ServingSearchOptions& o = spec.search;
  const int64_t budget = spec.cluster.num_gpus;

  std::vector<int64_t> tps = o.tp, pps = o.pp;
  if (tps.empty()) {
    for (int64_t t = 1; t <= std::min(budget, spec.cluster.gpus_per_node); t *= 2) {
      if (spec.model.num_attention_heads % t == 0) tps.push_back(t);
    }
  }
  if (pps.empty()) {
    for (int64_t p = 1; p <= std::min<int64_t>(budget, 8); p *= 2) {
      if (p <= spec.model.num_layers) pps.push_back(p);
    }
  }
  // Expert parallelism only where asked: TensorRT-LLM's default is moe_tp_size = tp (ep 1),
  // and every (tp, ep) pair multiplies the candidates.
  const std::vector<int64_t> eps = Or(o.ep, {1});
  std::vector<int64_t> batches =
      spec.serving.batching == Batching::kStatic
          ? std::vector<int64_t>{*spec.serving.batch_size}
          : Or(o.max_batch_size, {16, 32, 64, 128, 256, 512, 1024, 2048});
  std::sort(batches.begin(), batches.end());
  // A static batch prefills in one step whatever the token limit: one value is enough.
  const std::vector<int64_t> token_limits =
      spec.serving.batching == Batching::kStatic
          ? Or(o.max_num_tokens, {ctx.engine().default_max_num_tokens})
          : Or(o.max_num_tokens, {2048, 8192, 16384});
  std::vector<QuantFormat> weights = o.weight_precision, kvs = o.kv_cache_precision;
  const bool fp8 = ctx.device().peak_fp8_tflops > 0;
  if (weights.empty()) {
    weights =
        fp8 ? std::vector<QuantFormat>{QuantFormat::kBf16, QuantFormat::kFp8, QuantFormat::kInt4}
            : std::vector<QuantFormat>{QuantFormat::kBf16, QuantFormat::kInt8, QuantFormat::kInt4};
  }
  if (kvs.empty()) {
    kvs = fp8 ? std::vector<QuantFormat>{QuantFormat::kBf16, QuantFormat::kFp8}
              : std::vector<QuantFormat>{QuantFormat::kBf16, QuantFormat::kInt8};
  }
  std::vector<bool> disaggs = o.disaggregated;
  if (disaggs.empty()) {
    disaggs = spec.serving.batching == Batching::kStatic ? std::vector<bool>{false}
                                                         : std::vector<bool>{false, true};
  }

  InferencePlanResult result;
  std::vector<ScreenedLayout> screened;
  std::map<std::string, int64_t> reasons;
  std::vector<InferenceRejected> rejected;
  double smallest_deficit_gib = -1;
  const auto reject = [&](const ServingConfig& c, std::string rule, std::string reason) {
    ++reasons[rule];
    ++result.rejected_total;
    if (rejected.size() < kRejectedListed || reasons[rule] == 1) {
      rejected.push_back({c, std::move(rule), std::move(reason)});
    }
  };

  // (tp, ep, attention_dp): ep groups of tp / ep ranks, so ep divides tp; attention data
  // parallelism (only where asked) on tp > 1 with ep = tp, where search.ep allows it.
  struct TpEp {
    int64_t tp, ep;
    bool attention_dp;
  };
  std::vector<TpEp> tp_eps;
  const std::vector<bool> adps = o.attention_dp.empty() ? std::vector<bool>{false} : o.attention_dp;
  for (int64_t tp : tps) {
    for (bool adp : adps) {
      if (!adp) {
        for (int64_t ep : eps) {
          if (tp % ep == 0) tp_eps.push_back({tp, ep, false});
        }
      } else if (tp > 1 && IsMoe(spec.model) &&
                 (o.ep.empty() || std::count(o.ep.begin(), o.ep.end(), tp) > 0)) {
        tp_eps.push_back({tp, tp, true});
      }
    }
  }

  for (const auto& [tp, ep, adp] : tp_eps) {
    for (int64_t pp : pps) {
      const int64_t per_instance = tp * pp;
      if (per_instance > budget) continue;
      const int64_t instances = budget / per_instance;
      for (QuantFormat w : weights) {
        for (QuantFormat kv : kvs) {
          ServingConfig base;
          base.tp = tp;
          base.pp = pp;
          base.ep = ep;
          base.attention_dp = adp;
          base.weight_precision = w;
          base.kv_cache_precision = kv;
          auto model = ctx.Model(base);
          if (!model.ok()) {
            ++result.candidates_considered;
            reject(base, "layout", std::string(model.status().message()));
            continue;
          }
          for (bool disagg : disaggs) {
            std::vector<std::pair<int64_t, int64_t>> pools;  // replicas or (prefill, decode)
            if (!disagg) {
              for (int64_t r : Or(o.replicas, {instances})) {
                if (r * per_instance <= budget) pools.push_back({r, 0});
              }
            } else if (!o.prefill_replicas.empty() && !o.decode_replicas.empty()) {
              // Both pools pinned: every pair given.
              for (int64_t p : o.prefill_replicas) {
                for (int64_t d : o.decode_replicas) pools.push_back({p, d});
              }
            } else {
              // Every split of the budget's instances (the prefill:decode ratio), filtered
              // by the one pool size given, if any.
              const auto allowed = [](const std::vector<int64_t>& v, int64_t x) {
                return v.empty() || std::count(v.begin(), v.end(), x) > 0;
              };
              for (int64_t p = 1; p < instances; ++p) {
                const int64_t d = instances - p;
                if (allowed(o.prefill_replicas, p) && allowed(o.decode_replicas, d)) {
                  pools.push_back({p, d});
                }
              }
            }
            std::erase_if(pools, [&](const auto& pd) {
              return (pd.first + pd.second) * per_instance > budget;
            });
            for (const auto& [first, second] : pools) {
              // Batch limits above the clients one decode engine can see are the same
              // layout: keep the smallest of them.
              const int64_t decode_engines = pp * (disagg ? second : first);
              std::optional<int64_t> clients;
              if (spec.serving.concurrency) clients = *spec.serving.concurrency;
              if (!spec.serving.concurrency && !spec.serving.request_rate) {
                clients = spec.serving.num_requests;
              }
              const int64_t per_engine =
                  clients ? (*clients + decode_engines - 1) / decode_engines : 0;
              bool saturated = false;
              for (int64_t mbs : batches) {
                if (clients && mbs * base.attention_dp_size() >= per_engine) {
                  if (saturated) continue;
                  saturated = true;
                }
                for (int64_t mnt : token_limits) {
                  ServingConfig c = base;
                  c.max_batch_size = mbs;
                  c.max_num_tokens = mnt;
                  c.disaggregated = disagg;
                  if (disagg) {
                    c.prefill_replicas = first;
                    c.decode_replicas = second;
                    c.replicas = first + second;
                  } else {
                    c.replicas = first;
                  }
                  ++result.candidates_considered;
                  auto s = ctx.Screen(c, *model);
                  if (!s.ok()) {
                    const std::string rule =
                        s.status().code() == absl::StatusCode::kResourceExhausted ? "memory"
                                                                                  : "layout";
                    if (rule == "memory") {
                      const double d = ctx.MemoryDeficitGib(c, **model);
                      if (smallest_deficit_gib < 0 || d < smallest_deficit_gib) {
                        smallest_deficit_gib = d;
                      }
                    }
                    reject(c, rule, std::string(s.status().message()));
                    continue;
                  }
                  screened.push_back(*s);
                }
              }
            }
          }
        }
      }
    }
  }
  if (screened.empty()) {
    if (smallest_deficit_gib > 0 && reasons.size() == 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model %s does not fit on %s at any layout the search allows: the closest "
          "layout misses by %.1f GiB per GPU",
          spec.model.name, spec.cluster.gpu, smallest_deficit_gib));
    }
  }

  // Simulate the best screened layouts by the objective and the screening's Pareto front.
  std::vector<size_t> order(screened.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return Better(screened[a].estimate, screened[b].estimate, o.objective);
  });
  std::vector<bool> pick(screened.size(), false);
  for (size_t i = 0; i < std::min(kSimulatedTop, order.size()); ++i) pick[order[i]] = true;
  {
    std::vector<size_t> by_gpu = order;
    std::sort(by_gpu.begin(), by_gpu.end(), [&](size_t a, size_t b) {
      return screened[a].estimate.output_tokens_per_sec_per_gpu >
             screened[b].estimate.output_tokens_per_sec_per_gpu;
    });
    double best_user = -1;
    size_t added = 0;
    for (size_t i : by_gpu) {
      if (screened[i].estimate.tokens_per_sec_per_user > best_user && added < kSimulatedFront) {
        best_user = screened[i].estimate.tokens_per_sec_per_user;
        pick[i] = true;
        ++added;
      }
    }
  }
  std::vector<InferenceRankedConfig> scored;
  for (size_t i = 0; i < screened.size(); ++i) {
    if (!pick[i]) continue;
    auto r = ctx.Evaluate(screened[i].estimate.config, *screened[i].model,
                          LayoutContext::kSearchRequests);
    if (!r.ok()) {
      reject(screened[i].estimate.config, "memory", std::string(r.status().message()));
      continue;
    }
    scored.push_back(*r);
  }
  for (const auto& r : scored) {
    if (r.meets_limits) continue;
    for (const std::string& note : r.notes) {
      if (note.rfind("misses ", 0) == 0 || note.rfind("below ", 0) == 0) {
        const std::string rule = note.find("TTFT") != std::string::npos   ? "ttft"
                                 : note.find("TPOT") != std::string::npos ? "tpot"
                                                                          : "tokens_per_user";
        reject(r.config, rule, note);
        break;
      }
    }
  }
  std::sort(scored.begin(), scored.end(),
            [&](const auto& a, const auto& b) { return Better(a, b, o.objective); });
  std::vector<InferenceRankedConfig> feasible;
  for (const auto& r : scored) {
    if (r.meets_limits) feasible.push_back(r);
  }
  result.feasible = static_cast<int64_t>(feasible.size());
  result.pareto_front = ParetoFront(feasible);
  for (auto& r : scored) {
    for (const auto& f : result.pareto_front) {
      if (f.config == r.config) r.pareto_optimal = true;
    }
  }
  for (size_t i = 0; i < scored.size() && static_cast<int64_t>(i) < o.top_k; ++i) {
    scored[i].rank = static_cast<int64_t>(i) + 1;
    result.ranked.push_back(scored[i]);
  }
  result.rejected = std::move(rejected);
  for (const auto& [rule, n] : reasons) result.rejected_reasons.push_back({rule, n});
  if (!result.ranked.empty()) {
    result.recommendation = Recommendation(result.ranked.front(), o.objective);
  } else {
    result.recommendation = "no layout fits: see the rejected layouts";
  }
  result.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

absl::StatusOr<InferenceRankedConfig> EstimateInference(const InferenceJobSpec& spec,
                                                        const ServingConfig& config) {
  if (auto s = spec.Validate(); !s.ok()) return s;
  auto context = LayoutContext::Create(spec);
  if (!context.ok()) return context.status();
  ServingConfig c = config;
  if (c.max_batch_size <= 0) {
    c.max_batch_size = spec.serving.batching == Batching::kStatic
                           ? *spec.serving.batch_size
                           : context->engine().default_max_batch_size;
  }
  if (c.max_num_tokens <= 0) c.max_num_tokens = context->engine().default_max_num_tokens;
  if (auto s = context->CheckConfig(c); !s.ok()) return s;
  auto model = context->Model(c);
  if (!model.ok()) return model.status();
  auto r = context->Evaluate(c, **model, LayoutContext::kAllRequests);
  if (!r.ok()) return r.status();
  r->rank = 1;
  return r;
}

}  // namespace paratune::inference
