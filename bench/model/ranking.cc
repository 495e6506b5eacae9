// ranking: how well the model orders measured layouts of one job. Every group of measured
// layouts of one job in sweeps.json (Aleph Alpha's Llama 13B/30B/65B sweep by model,
// sequence length and GPU count; BLOOM's topology sweep by candidate model, GPU count and
// global batch) is predicted layout by layout, and per group and overall the program
// prints: the Spearman correlation of predicted and measured throughput, the share of
// pairs (measured more than 2 % apart) that the prediction puts in the measured order,
// and the regret of the predicted best (how much slower it measured than the measured
// best).
//
// The job facts each sweep states or its sources document, the same for every row:
//  - Aleph Alpha: the global batch is not recorded; 4M tokens per step as in Llama 2
//    (2048 sequences of 2048, 512 of 8192; the recorded MFU and step times agree with it),
//    rounded up to a multiple of micro-batch x dp. ZeRO-1 whenever dp > 1 (the paper's
//    setup), as its codebase (Aleph-Alpha/scaling, core/optimizer) runs it: the optimizer
//    step all-reduces the whole gradient over the data-parallel group in FP32 after the
//    last backward (no bucket overlap), then all-gathers the updated 16-bit parameters.
//    The time is modelled as an unsharded, unoverlapped FP32 all-reduce: 8 of the 10
//    bytes per parameter that cross the links (the parameter all-gather's 2 are not
//    counted). Measured throughput: the recorded MFU (same model and GPUs within a group,
//    so proportional to tokens/s/GPU).
//  - BLOOM (Megatron-DeepSpeed, 2022): activation checkpointing of every layer (the tr11
//    scripts' --checkpoint-activations), ZeRO-1 unless the row states stage 0, BLOOM's
//    250,880-entry padded vocabulary, and DeepSpeed's pipeline engine: the gradient reduce
//    runs after the last backward (no bucket overlap) and every pipeline transfer blocks.
//    Measured throughput: global batch x sequence / (iteration time x GPUs).
//
//   ranking [--data DIR] [--json] [--verbose]   (--verbose: one line per layout)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/model/records.h"
#include "bench/model/records_bloom.h"
#include "search/planner.h"

namespace paratune::bench {
namespace {

// Aleph Alpha's global batch: 4M tokens per step (Llama 2's).
constexpr double kAlephTokensPerStep = 4.0 * 1024 * 1024;
// Pairs measured closer than this are not counted: within the sweeps' run-to-run noise.
constexpr double kPairThreshold = 0.02;

struct Layout {
  std::string group;
  std::string id;
  JobSpec spec;
  ParallelConfig config;
  double measured = 0;   ///< Throughput, any unit common to the group.
  double predicted = 0;  ///< tokens/s/GPU.
};

// Aleph Alpha's rows: one group per model, sequence length and GPU count.
std::vector<Layout> AlephLayouts(const nlohmann::json& sweep) {
  std::vector<Layout> out;
  for (const nlohmann::json& r : sweep) {
    if (Str(r, "status") != "ok" || !r["mfu_fraction"].is_number()) continue;
    Layout l;
    l.spec = SpecFromRecord(r);
    l.config = LayoutFromRecord(r).config;
    ParallelConfig& c = l.config;
    c.vp = 1;
    const int64_t per_step = c.micro_batch_size * c.dp;
    const auto sequences = static_cast<int64_t>(
        std::ceil(kAlephTokensPerStep / static_cast<double>(l.spec.training.seq_length)));
    l.spec.training.global_batch_size = (sequences + per_step - 1) / per_step * per_step;
    l.spec.training.dropout = false;
    // The gradient all-reduce after the backward (see the header).
    c.data_parallel_sharding = DataParallelSharding::kNone;
    c.overlap_grad_reduce = false;
    c.overlap_param_gather = false;
    l.group = absl::StrFormat("%s s%d n%d", Str(r, "model_name").substr(0, 9),
                              l.spec.training.seq_length, l.spec.cluster.num_gpus);
    l.id = Str(r, "trial_id");
    l.measured = r["mfu_fraction"].get<double>();
    out.push_back(std::move(l));
  }
  return out;
}

// Ranks 1..n with ties averaged.
std::vector<double> Ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = 0.5 * static_cast<double>(i + j) + 1;
    i = j + 1;
  }
  return rank;
}

double Spearman(const std::vector<double>& x, const std::vector<double>& y) {
  const std::vector<double> rx = Ranks(x), ry = Ranks(y);
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += rx[i] / n, my += ry[i] / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (rx[i] - mx) * (ry[i] - my);
    sxx += (rx[i] - mx) * (rx[i] - mx);
    syy += (ry[i] - my) * (ry[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

struct GroupScore {
  std::string name;
  size_t layouts = 0;
  double spearman = 0;
  int64_t pairs = 0, in_order = 0;
  /// Pairs the model predicts equal (the same layout run twice, differing in settings the
  /// sweep does not record): no prediction can order them.
  int64_t repeats = 0;
  double regret = 0;  ///< 1 - measured(predicted best) / measured best.
  bool best_found = false;
};

GroupScore Score(const std::string& name, const std::vector<const Layout*>& g) {
  GroupScore s;
  s.name = name;
  s.layouts = g.size();
  std::vector<double> measured, predicted;
  for (const Layout* l : g) {
    measured.push_back(l->measured);
    predicted.push_back(l->predicted);
  }
  s.spearman = Spearman(predicted, measured);
  for (size_t i = 0; i < g.size(); ++i) {
    for (size_t j = i + 1; j < g.size(); ++j) {
      const double hi = std::max(measured[i], measured[j]);
      if (std::abs(measured[i] - measured[j]) <= kPairThreshold * hi) continue;
      ++s.pairs;
      if ((predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0) ++s.in_order;
      if (predicted[i] == predicted[j]) ++s.repeats;
    }
  }
  const size_t best = std::max_element(measured.begin(), measured.end()) - measured.begin();
  const size_t chosen = std::max_element(predicted.begin(), predicted.end()) - predicted.begin();
  s.regret = 1.0 - measured[chosen] / measured[best];
  s.best_found = measured[chosen] == measured[best];
  return s;
}

int Main(int argc, char** argv) {
  const bool json_out = HasFlag(argc, argv, "--json");
  const bool verbose = HasFlag(argc, argv, "--verbose");
  absl::StatusOr<nlohmann::json> data = ReadJson(DataDir(argc, argv) + "/sweeps.json");
  if (!data.ok()) {
    std::fprintf(stderr, "ranking: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  std::vector<Layout> layouts = AlephLayouts((*data)["aleph_alpha_layout_sweep"]);
  for (BloomRecord& b : BloomRecords((*data)["bloom_tr11_topology_sweep"])) {
    layouts.push_back({.group = std::move(b.group),
                       .id = std::move(b.id),
                       .spec = std::move(b.spec),
                       .config = b.config,
                       .measured = b.tokens_per_sec_per_gpu});
  }
  std::map<std::string, std::vector<const Layout*>> groups;
  int64_t unscored = 0;
  for (Layout& l : layouts) {
    absl::StatusOr<RankedConfig> r = Estimate(l.spec, l.config);
    if (!r.ok()) {
      ++unscored;
      if (verbose) {
        std::printf("# unscored %s %s: %s\n", l.id.c_str(), l.config.ToString().c_str(),
                    std::string(r.status().message()).c_str());
      }
      continue;
    }
    l.predicted = r->tokens_per_sec_per_gpu;
    groups[l.group].push_back(&l);
  }

  std::vector<GroupScore> scores;
  for (const auto& [name, g] : groups) {
    if (g.size() >= 2) scores.push_back(Score(name, g));
  }
  std::vector<double> spearman, regret;
  int64_t pairs = 0, in_order = 0, best_found = 0, repeats = 0;
  for (const GroupScore& s : scores) {
    if (s.layouts >= 3) spearman.push_back(s.spearman);
    regret.push_back(s.regret);
    pairs += s.pairs;
    in_order += s.in_order;
    repeats += s.repeats;
    best_found += s.best_found ? 1 : 0;
  }
  const double pair_share = pairs ? static_cast<double>(in_order) / pairs : 0;
  const double regret_max = regret.empty() ? 0 : *std::max_element(regret.begin(), regret.end());

  if (json_out) {
    nlohmann::json out;
    out["groups"] = nlohmann::json::array();
    for (const GroupScore& s : scores) {
      out["groups"].push_back({{"group", s.name},
                               {"layouts", s.layouts},
                               {"spearman", s.spearman},
                               {"pairs", s.pairs},
                               {"pairs_in_order", s.in_order},
                               {"regret", s.regret},
                               {"predicted_best_is_measured_best", s.best_found}});
    }
    out["spearman_median"] = Median(spearman);
    out["pairs_in_order"] = pair_share;
    out["repeat_pairs"] = repeats;
    out["regret_median"] = Median(regret);
    out["regret_max"] = regret_max;
    out["best_found"] = best_found;
    out["unscored"] = unscored;
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("# ranking: predicted vs measured order of the layouts of one job (sweeps.json)\n");
  std::printf(
      "# pairs: measured more than %.0f %% apart; regret: 1 - measured(predicted best) "
      "/ measured best\n",
      100 * kPairThreshold);
  std::printf("# %-44s %7s %8s %11s %8s %5s\n", "group", "layouts", "spearman", "pairs", "regret",
              "best");
  std::printf("# %-44s %7s %8s %11s %8s %5s\n", "", "", "", "in order", "%", "");
  for (const GroupScore& s : scores) {
    std::printf("  %-44s %7zu %8.2f %5lld/%-5lld %8.1f %5s\n", s.name.c_str(), s.layouts,
                s.spearman, static_cast<long long>(s.in_order), static_cast<long long>(s.pairs),
                100 * s.regret, s.best_found ? "yes" : "no");
    if (!verbose) continue;
    for (const Layout* l : groups[s.name]) {
      std::printf("    %-12s %-40s measured %10.4g predicted %8.1f tok/s/GPU\n", l->id.c_str(),
                  l->config.ToString().c_str(), l->measured, l->predicted);
    }
  }
  std::printf("# layouts scored: %zu in %zu groups; unscored (break a rule): %lld\n",
              layouts.size() - static_cast<size_t>(unscored), scores.size(),
              static_cast<long long>(unscored));
  std::printf(
      "# ranking: Spearman median %.2f, pairs in order %.1f %% (%lld of %lld), regret median "
      "%.1f %%, max %.1f %%, predicted best = measured best in %lld of %zu groups\n",
      Median(spearman), 100 * pair_share, static_cast<long long>(in_order),
      static_cast<long long>(pairs), 100 * Median(regret), 100 * regret_max,
      static_cast<long long>(best_found), scores.size());
  // The level beside the order where the sweep records throughput (BLOOM's rows; Aleph
  // Alpha's record a relative figure): predicted over measured tokens/s/GPU.
  std::vector<double> bloom_errors;
  for (const auto& [name, g] : groups) {
    for (const Layout* l : g) {
      if (absl::StartsWith(l->id, "bloom#") && l->measured > 0) {
        bloom_errors.push_back(100.0 * (l->predicted / l->measured - 1.0));
      }
    }
  }
  if (!bloom_errors.empty()) {
    std::sort(bloom_errors.begin(), bloom_errors.end());
    const size_t n = bloom_errors.size();
    std::printf(
        "# BLOOM layouts: predicted over measured tokens/s/GPU %+.1f %% median (quartiles "
        "%+.1f, %+.1f %%) over %zu\n",
        Median(bloom_errors), bloom_errors[n / 4], bloom_errors[3 * n / 4], n);
  }
  std::printf(
      "# of the pairs, %lld are one layout measured twice (predicted equal, measured apart); "
      "the others in order: %.1f %%\n",
      static_cast<long long>(repeats),
      pairs > repeats ? 100.0 * static_cast<double>(in_order) / static_cast<double>(pairs - repeats)
                      : 0.0);
  return 0;
}

}  // namespace
}  // namespace paratune::bench

int main(int argc, char** argv) { return paratune::bench::Main(argc, argv); }
