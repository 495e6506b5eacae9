#include "client/render_inference.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace paratune::client {
namespace {

using inference::InferenceJobSpec;
using inference::InferencePlanResult;
using inference::InferenceRankedConfig;
using inference::LatencyStats;
using inference::StepBreakdown;

std::string Workload(const InferenceJobSpec& spec) {
  const inference::ServingSpec& s = spec.serving;
  std::string load = "offline (all requests at once)";
  if (s.concurrency) load = absl::StrCat("concurrency ", *s.concurrency);
  if (s.request_rate) load = absl::StrFormat("%.2f req/s (Poisson)", *s.request_rate);
  return absl::StrFormat("%s on %d x %s, %s, isl %d / osl %d, %s, %d requests", spec.model.name,
                         spec.cluster.num_gpus, spec.cluster.gpu,
                         std::string(inference::ToString(s.engine)), s.isl, s.osl, load,
                         s.num_requests);
}

std::string Stats(const char* name, const LatencyStats& s) {
  return absl::StrFormat("  %-6s ms   mean %9.1f   p50 %9.1f   p90 %9.1f   p99 %9.1f\n", name,
                         s.mean, s.p50, s.p90, s.p99);
}

std::string Step(const char* name, const StepBreakdown& b) {
  return absl::StrFormat(
      "  %-8s step %8.2f ms = compute %.2f + memory %.2f + tp %.2f + pp %.2f + overhead "
      "%.2f%s\n",
      name, b.total, b.compute, b.memory, b.tp_comm, b.pp_comm, b.overhead,
      b.kv_transfer > 0 ? absl::StrFormat(" (KV transfer %.2f ms per request)", b.kv_transfer)
                        : "");
}

}  // namespace

std::string FormatInferencePlanTable(const InferencePlanResult& result,
                                     const InferenceJobSpec& spec) {
  std::string out = absl::StrCat("# ", spec.name, ": ", Workload(spec), "\n");
  absl::StrAppend(&out, absl::StrFormat("%-4s %-48s %9s %8s %9s %8s %6s %-8s %s\n", "rank",
                                        "layout", "tok/s/gpu", "tok/s/u", "TTFTp99", "TPOTp99",
                                        "GiB", "steps", "limits"));
  bool profiled = false;
  for (const InferenceRankedConfig& r : result.ranked) {
    absl::StrAppend(
        &out, absl::StrFormat("%-4d %-48s %9.0f %8.1f %9.0f %8.1f %6.1f %-8s %s%s\n", r.rank,
                              r.config.ToString(), r.output_tokens_per_sec_per_gpu,
                              r.tokens_per_sec_per_user, r.ttft_ms.p99, r.tpot_ms.p99,
                              r.memory.peak, r.decode_step.source, r.meets_limits ? "ok" : "missed",
                              r.pareto_optimal ? " *" : ""));
    if (!r.notes.empty() && (r.notes.front().rfind("measured steps", 0) == 0 ||
                             r.notes.front().rfind("modelled steps", 0) == 0)) {
      profiled = true;
    }
  }
  // A profiled job: each layout's measured-step figures next to the model's.
  for (const InferenceRankedConfig& r : result.ranked) {
    if (profiled && !r.notes.empty()) {
      absl::StrAppend(&out, "#   rank ", r.rank, ": ", r.notes.front(), "\n");
    }
  }
  // search.verify_top_k: measured with the serving loop next to predicted.
  for (const InferenceRankedConfig& r : result.ranked) {
    if (!r.verification) continue;
    const inference::InferenceVerification& v = *r.verification;
    if (v.status != "verified") {
      absl::StrAppend(&out, "#   rank ", r.rank, " ", v.status, "\n");
      continue;
    }
    const auto vs = [](const char* what, double measured, double predicted, const char* unit) {
      return absl::StrFormat("%s %.3f%s measured vs %.3f%s predicted (%+.1f %%)", what, measured,
                             unit, predicted, unit,
                             measured > 0 ? (predicted - measured) / measured * 100 : 0.0);
    };
    absl::StrAppend(
        &out, "#   rank ", r.rank, " verified (", v.measured_requests,
        " requests): ", vs("TTFT p50", v.measured_ttft_ms.p50, r.ttft_ms.p50, " ms"), "; ",
        vs("TPOT p50", v.measured_tpot_ms.p50, r.tpot_ms.p50, " ms"), "; ",
        vs("output tok/s", v.measured_output_tokens_per_sec, r.output_tokens_per_sec, ""), "\n");
  }
  absl::StrAppend(
      &out, absl::StrFormat("# %d candidates, %d simulated within the limits, %d rejected; "
                            "%.0f ms (* = on the Pareto front)\n",
                            result.candidates_considered, result.feasible, result.rejected_total,
                            result.elapsed_ms));
  for (const auto& [rule, n] : result.rejected_reasons) {
    std::string example;
    for (const auto& r : result.rejected) {
      if (r.rule == rule) {
        example = absl::StrCat(": e.g. ", r.config.ToString(), " ", r.reason);
        break;
      }
    }
    absl::StrAppend(&out, absl::StrFormat("#   rejected (%s): %d%s\n", rule, n, example));
  }
  absl::StrAppend(&out, "Recommendation: ", result.recommendation, "\n");
  if (!result.ranked.empty()) {
    for (const std::string& note : result.ranked.front().notes) {
      absl::StrAppend(&out, "  - ", note, "\n");
    }
  }
  return out;
}

std::string FormatInferencePlanCsv(const InferencePlanResult& result) {
  std::string out =
      "rank,tp,pp,ep,replicas,prefill_replicas,decode_replicas,max_batch_size,max_num_tokens,"
      "weight_precision,kv_cache_precision,disaggregated,attention_dp,num_gpus,"
      "output_tokens_per_sec_per_gpu,"
      "tokens_per_sec_per_user,ttft_p99_ms,tpot_p99_ms,peak_gib,meets_limits,rejected_rule,"
      "reason\n";
  const auto config = [](const inference::ServingConfig& c) {
    return absl::StrCat(c.tp, ",", c.pp, ",", c.ep, ",", c.replicas, ",", c.prefill_replicas, ",",
                        c.decode_replicas, ",", c.max_batch_size, ",", c.max_num_tokens, ",",
                        std::string(inference::ToString(c.weight_precision)), ",",
                        std::string(inference::ToString(c.kv_cache_precision)), ",",
                        c.disaggregated ? "true" : "false", ",", c.attention_dp ? "true" : "false",
                        ",", c.num_gpus());
  };
  for (const auto& r : result.ranked) {
    absl::StrAppend(&out, absl::StrFormat("%d,%s,%.1f,%.2f,%.1f,%.2f,%.2f,%s,,\n", r.rank,
                                          config(r.config), r.output_tokens_per_sec_per_gpu,
                                          r.tokens_per_sec_per_user, r.ttft_ms.p99, r.tpot_ms.p99,
                                          r.memory.peak, r.meets_limits ? "true" : "false"));
  }
  for (const auto& r : result.rejected) {
    std::string reason = r.reason;
    for (char& ch : reason) {
      if (ch == '"') ch = '\'';
    }
    absl::StrAppend(&out, ",", config(r.config), ",,,,,,false,", r.rule, ",\"", reason, "\"\n");
  }
  return out;
}

std::string FormatInferenceEstimate(const InferenceRankedConfig& r, const InferenceJobSpec& spec) {
  std::string out = absl::StrCat("# ", spec.name, ": ", Workload(spec), "\n");
  absl::StrAppend(&out, "Layout: ", r.config.ToString(), " (", r.config.num_gpus(), " GPUs)\n");
  absl::StrAppend(
      &out, absl::StrFormat("  output %.0f tok/s (%.0f per GPU), %.1f tok/s per user, %.2f "
                            "req/s, up to %d sequences at once\n",
                            r.output_tokens_per_sec, r.output_tokens_per_sec_per_gpu,
                            r.tokens_per_sec_per_user, r.requests_per_sec, r.max_concurrency));
  if (r.cost_per_million_output_tokens) {
    absl::StrAppend(&out, absl::StrFormat("  cost %.3f per million output tokens\n",
                                          *r.cost_per_million_output_tokens));
  }
  absl::StrAppend(&out, Stats("TTFT", r.ttft_ms), Stats("TPOT", r.tpot_ms),
                  Stats("E2E", r.e2e_latency_ms));
  absl::StrAppend(
      &out, absl::StrFormat("  memory per GPU: weights %.1f + KV cache %.1f + activations %.1f "
                            "+ reserve %.1f = %.1f of %.1f GiB\n",
                            r.memory.weights, r.memory.kv_cache, r.memory.activations,
                            r.memory.reserve, r.memory.peak, r.memory.capacity));
  absl::StrAppend(&out, Step("prefill", r.prefill_step), Step("decode", r.decode_step));
  absl::StrAppend(&out, "  limits: ", r.meets_limits ? "met" : "missed", "\n");
  for (const std::string& note : r.notes) absl::StrAppend(&out, "  - ", note, "\n");
  return out;
}

}  // namespace paratune::client
