#include "search/empty_result.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paratune {
namespace {

bool Allowed(const std::vector<int64_t>& pinned, int64_t value) {
  return pinned.empty() || std::find(pinned.begin(), pinned.end(), value) != pinned.end();
}

bool Divides(int64_t d, int64_t n) { return d > 0 && n % d == 0; }

// Whether some tp·cp·pp·dp = n uses only allowed values.
bool SomeProductFits(const SearchOptions& opt, int64_t n) {
  for (int64_t tp = 1; tp <= n; ++tp) {
    if (!Divides(tp, n) || !Allowed(opt.tp, tp)) continue;
    for (int64_t cp = 1; cp <= n / tp; ++cp) {
      if (!Divides(cp, n / tp) || !Allowed(opt.cp, cp)) continue;
      for (int64_t pp = 1; pp <= n / (tp * cp); ++pp) {
        if (!Divides(pp, n / (tp * cp)) || !Allowed(opt.pp, pp)) continue;
        if (Allowed(opt.dp, n / (tp * cp * pp))) return true;
      }
    }
  }
  return false;
}

// "all 12 candidate layouts were rejected; most often: <rule> (9), <rule> (3)".
std::string AllRejected(const PlanResult& result) {
  std::vector<std::pair<std::string, int64_t>> counts = result.rejected_reasons;
  if (counts.empty()) {
    std::map<std::string, int64_t> by_reason;
    for (const RejectedConfig& r : result.rejected) ++by_reason[r.reason];
    counts.assign(by_reason.begin(), by_reason.end());
    std::stable_sort(counts.begin(), counts.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
  }
  std::string out =
      absl::StrCat("all ", result.candidates_considered, " candidate layouts were rejected");
  if (counts.empty()) return out;
  if (counts.size() > 3) counts.resize(3);
  return absl::StrCat(
      out, "; most often: ", absl::StrJoin(counts, ", ", [](std::string* s, const auto& c) {
        absl::StrAppend(s, c.first, " (", c.second, ")");
      }));
}

}  // namespace

std::vector<std::string> EmptyPlanReasons(const JobSpec& spec, const PlanResult& result) {
  if (!result.ranked.empty()) return {};
  if (result.candidates_considered > 0) return {AllRejected(result)};
  const int64_t n = spec.cluster.num_gpus;
  const SearchOptions& opt = spec.search;
  std::vector<std::string> reasons;
  for (const auto& [field, values] :
       {std::pair<const char*, const std::vector<int64_t>*>{"search.tp", &opt.tp},
        {"search.cp", &opt.cp},
        {"search.pp", &opt.pp},
        {"search.dp", &opt.dp}}) {
    if (values->empty()) continue;
    if (std::any_of(values->begin(), values->end(), [n](int64_t v) { return Divides(v, n); })) {
      continue;
    }
    reasons.push_back(absl::StrCat(field, " [", absl::StrJoin(*values, ", "),
                                   "]: no value divides cluster.num_gpus (", n, ")"));
  }
  if (!reasons.empty()) return reasons;
  if (!SomeProductFits(opt, n)) {
    return {
        absl::StrCat("no combination of the pinned search.tp, search.cp, search.pp and "
                     "search.dp multiplies to cluster.num_gpus (",
                     n, ")")};
  }
  return {absl::StrCat(
      "every layout of ", n,
      " GPUs was excluded before scoring: unpinned tp must divide "
      "model.num_attention_heads (",
      spec.model.num_attention_heads, ")",
      opt.allow_tp_across_nodes
          ? ""
          : absl::StrCat(" and cluster.gpus_per_node (", spec.cluster.gpus_per_node, ")"),
      ", unpinned pp must divide model.num_layers (", spec.model.num_layers,
      ") or num_layers + 2, and unpinned cp needs training.seq_length divisible by 2·cp "
      "with at least 1024 tokens per rank")};
}

}  // namespace paratune
