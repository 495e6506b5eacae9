// The CLI's output forms (see render.h).
#include "client/render.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/convert.h"
#include "server/verify_plan.h"

namespace paratune::client {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string OnOff(bool b) { return b ? "y" : "-"; }

const std::string& DisplayName(const JobSpec& spec) {
  return spec.name.empty() ? spec.model.name : spec.name;
}

// "# name: L=.. h=.. a=.. | N x gpu (n/node) | B=.. s=.. precision", the first line of the
// table and of an estimate.
std::string JobHeader(const JobSpec& spec) {
  return absl::StrFormat("# %s: L=%d h=%d a=%d | %d x %s (%d/node) | B=%d s=%d %s\n",
                         DisplayName(spec), spec.model.num_layers, spec.model.hidden_size,
                         spec.model.num_attention_heads, spec.cluster.num_gpus,
                         spec.cluster.gpu, spec.cluster.gpus_per_node,
                         spec.training.global_batch_size, spec.training.seq_length,
                         ToString(spec.training.precision));
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

/// (predicted − measured) / measured in percent, signed; "n/a" without a measurement.
std::string ErrorPercent(double predicted, double measured) {
  if (measured <= 0) return "n/a";
  return absl::StrFormat("%+.1f %%", (predicted - measured) / measured * 100.0);
}

}  // namespace

std::string FormatPlanTable(const PlanResult& result, const JobSpec& spec) {
  std::string out = JobHeader(spec);
  // 79 columns.
  absl::StrAppend(&out,
                  absl::StrFormat("%4s %2s %2s %5s %2s %2s %3s %2s %-9s %4s %8s %9s %6s %8s\n",
                                  "rank", "TP", "PP", "DP", "CP", "VP", "mb", "SP", "recompute",
                                  "dopt", "iter s", "tok/s/GPU", "MFU", "mem GiB"));
  bool any_oom = false;
  for (const RankedConfig& r : result.ranked) {
    const ParallelConfig& c = r.config;
    std::string recompute = ToString(c.recompute);
    if (c.recompute == Recompute::kFull && c.recompute_num_layers > 0) {
      absl::StrAppend(&recompute, "/", c.recompute_num_layers);  // layers per stage
    }
    const double iter = r.iteration_time_s;
    const std::string iter_s =
        iter < 100 ? absl::StrFormat("%.3f", iter) : absl::StrFormat("%.1f", iter);
    const std::string mfu = absl::StrFormat("%.1f%%", 100.0 * r.mfu);
    const std::string mem = absl::StrFormat("%.1f%s", r.memory.Peak() / kGiB, r.fits ? " " : "!");
    any_oom = any_oom || !r.fits;
    absl::StrAppend(
        &out, absl::StrFormat(
                  "%4d %2d %2d %5d %2d %2d %3d %2s %-9s %4s %8s %9.0f %6s %8s\n", r.rank, c.tp,
                  c.pp, c.dp, c.cp, c.vp, c.micro_batch_size, OnOff(c.sequence_parallel), recompute,
                  OnOff(c.distributed_optimizer()), iter_s, r.tokens_per_sec_per_gpu, mfu, mem));
    // What the columns do not show, on a line of its own under the row.
    if (const std::string extras = c.ExtrasString(); !extras.empty()) {
      absl::StrAppend(&out, "     + ", extras, "\n");
    }
  }
  if (result.ranked.empty()) absl::StrAppend(&out, "(no layout to rank)\n");
  if (result.feasible == 0 && !result.rejected.empty()) {
    // Nothing fits or satisfies the rules: show a few distinct reasons.
    std::vector<std::string> reasons;
    for (const RejectedConfig& r : result.rejected) {
      if (std::find(reasons.begin(), reasons.end(), r.reason) != reasons.end()) continue;
      reasons.push_back(r.reason);
      absl::StrAppend(&out, "# rejected ", r.config.ToString(), ": ", r.reason, "\n");
      if (reasons.size() == 3) break;
    }
  }
  if (any_oom) absl::StrAppend(&out, "! does not fit in device memory\n");
  absl::StrAppend(&out, absl::StrFormat(
                            "# %d candidates, %d feasible, %d rejected with a reason, %.1f ms\n",
                            result.candidates_considered, result.feasible,
                            std::max<int64_t>(result.rejected_total,
                                              static_cast<int64_t>(result.rejected.size())),
                            result.elapsed_ms));
  if (!result.ranked.empty()) {
    const RankedConfig& best = result.ranked.front();
    if (best.time_to_train_days > 0) {
      absl::StrAppend(&out, absl::StrFormat("# rank 1 trains %g tokens in %.1f days\n",
                                            static_cast<double>(spec.training.total_tokens),
                                            best.time_to_train_days));
    }
    for (const std::string& note : best.notes) absl::StrAppend(&out, "# rank 1: ", note, "\n");
  }
  return out;
}

std::string FormatEstimate(const RankedConfig& r, const JobSpec& spec) {
  const MemoryBreakdown& m = r.memory;
  const TimeBreakdown& t = r.time;
  std::string out = JobHeader(spec);
  absl::StrAppend(&out, "layout          ", r.config.ToString(), " (",
                  NumMicroBatches(r.config, spec.training), " micro-batches)\n");
  absl::StrAppend(&out, absl::StrFormat("iteration       %.4f s, %.0f tokens/s/GPU, MFU %.1f%%, "
                                        "%.1f model / %.1f hardware TFLOP/s per GPU\n",
                                        r.iteration_time_s, r.tokens_per_sec_per_gpu,
                                        100.0 * r.mfu, r.model_tflops_per_gpu,
                                        r.hardware_tflops_per_gpu));
  absl::StrAppend(&out, absl::StrFormat("time (s)        compute %.4f  tp_comm %.4f  cp_comm %.4f"
                                        "\n                pp_bubble %.4f  pp_p2p %.4f  dp_comm "
                                        "%.4f  optimizer %.4f\n",
                                        t.compute, t.tp_comm, t.cp_comm, t.pp_bubble, t.pp_p2p,
                                        t.dp_comm, t.optimizer));
  if (t.ep_comm > 0 || t.offload > 0) {
    absl::StrAppend(&out, absl::StrFormat("                ep_comm %.4f  offload %.4f\n",
                                          t.ep_comm, t.offload));
  }
  absl::StrAppend(&out, absl::StrFormat("memory (GiB)    peak %.2f of %.2f (%s): weights %.2f  "
                                        "gradients %.2f\n                optimizer %.2f  "
                                        "activations %.2f  other %.2f\n",
                                        m.Peak() / kGiB, m.capacity / kGiB,
                                        r.fits ? "fits" : "DOES NOT FIT", m.weights / kGiB,
                                        m.gradients / kGiB, m.optimizer / kGiB,
                                        m.activations / kGiB, m.other / kGiB));
  if (r.time_to_train_days > 0) {
    absl::StrAppend(&out, absl::StrFormat("time to train   %.1f days for %g tokens\n",
                                          r.time_to_train_days,
                                          static_cast<double>(spec.training.total_tokens)));
  }
  for (const std::string& note : r.notes) absl::StrAppend(&out, "note            ", note, "\n");
  return out;
}

std::string FormatPlanCsv(const PlanResult& result) {
  std::string out =
      "rank,tp,pp,dp,cp,vp,micro_batch_size,sequence_parallel,recompute,recompute_num_layers,"
      "distributed_optimizer,iteration_time_s,tokens_per_sec_per_gpu,model_tflops_per_gpu,"
      "hardware_tflops_per_gpu,mfu,peak_gib,weights_gib,gradients_gib,optimizer_gib,"
      "activations_gib,other_gib,capacity_gib,fits,source,time_to_train_days,status,reason\n";
  auto config_fields = [](const ParallelConfig& c) {
    return absl::StrCat(c.tp, ",", c.pp, ",", c.dp, ",", c.cp, ",", c.vp, ",", c.micro_batch_size,
                        ",", c.sequence_parallel ? "true" : "false", ",", ToString(c.recompute),
                        ",", c.recompute_num_layers, ",",
                        c.distributed_optimizer() ? "true" : "false");
  };
  for (const RankedConfig& r : result.ranked) {
    const MemoryBreakdown& m = r.memory;
    absl::StrAppend(
        &out, r.rank, ",", config_fields(r.config), ",",
        absl::StrFormat("%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g",
                        r.iteration_time_s, r.tokens_per_sec_per_gpu, r.model_tflops_per_gpu,
                        r.hardware_tflops_per_gpu, r.mfu, m.Peak() / kGiB, m.weights / kGiB,
                        m.gradients / kGiB, m.optimizer / kGiB, m.activations / kGiB,
                        m.other / kGiB, m.capacity / kGiB),
        ",", r.fits ? "true" : "false", ",",
        r.source == ResultSource::kMeasured ? "measured" : "modelled", ",",
        r.time_to_train_days > 0 ? absl::StrFormat("%.6g", r.time_to_train_days) : "", ",",
        "ranked,", CsvField(absl::StrJoin(r.notes, "; ")), "\n");
  }
  for (const RejectedConfig& r : result.rejected) {
    // Fifteen empty fields: the figures, fits, source and time_to_train_days.
    absl::StrAppend(&out, ",", config_fields(r.config), ",", std::string(15, ','), "rejected,",
                    CsvField(r.reason), "\n");
  }
  return out;
}

std::string PlanJson(const PlanResult& result) {
  return server::WireJson(server::ToProto(result));
}

std::string EstimateJson(const RankedConfig& estimate) {
  return server::WireJson(server::ToProto(estimate));
}

std::string ProgressLine(const v1::Job& job) {
  const v1::JobProgress& p = job.progress();
  std::string line = absl::StrFormat("%s %-10s", job.id(), server::JobStateName(job.state()));
  if (p.tasks_total() > 0) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * (p.tasks_done() + p.tasks_failed()) /
                                        p.tasks_total());
    absl::StrAppend(&line, " [", std::string(filled, '#'), std::string(kWidth - filled, '.'),
                    "] ", p.tasks_done(), "/", p.tasks_total(), " tasks");
    if (p.tasks_cached() > 0) absl::StrAppend(&line, ", ", p.tasks_cached(), " cached");
    if (p.tasks_failed() > 0) absl::StrAppend(&line, ", ", p.tasks_failed(), " failed");
    if (p.eta_s() > 0) absl::StrAppend(&line, absl::StrFormat(", ETA %.0f s", p.eta_s()));
  }
  if (!job.error().empty()) absl::StrAppend(&line, ": ", job.error());
  return line;
}

std::string VerificationLines(const v1::PlanResult& plan) {
  std::string out;
  for (const v1::RankedConfig& r : plan.ranked()) {
    const v1::Verification& v = r.verification();
    if (v.status().empty()) continue;
    if (out.empty()) {
      out = "# verification: whole model trained end to end on the workers (measured vs "
            "predicted; error = (predicted - measured) / measured)\n";
    }
    absl::StatusOr<ParallelConfig> c = server::ParallelConfigFromProto(r.config());
    const std::string layout = c.ok() ? c->ToString() : std::string(c.status().message());
    absl::StrAppendFormat(&out, "#  %2d %-34s ", r.rank(), layout);
    if (v.status() != "verified") {
      absl::StrAppend(&out, v.status(), "\n");
      continue;
    }
    // Results stored before predicted_tracked_peak_gib existed compare with the whole peak.
    const double tracked = v.predicted_tracked_peak_gib() > 0 ? v.predicted_tracked_peak_gib()
                                                               : v.predicted_peak_gib();
    // The timed steps' range (after the first, which allocates and warms up): what a
    // difference between two layouts has to exceed to be more than the run's own spread.
    std::string spread;
    if (v.measured_step_seconds_size() >= 3) {
      const std::vector<double> steps = server::TimedSteps(v);
      const auto [lo, hi] = std::minmax_element(steps.begin(), steps.end());
      spread = absl::StrFormat(" (steps %.4g-%.4g s)", *lo, *hi);
    }
    absl::StrAppendFormat(
        &out,
        "time %.4g s measured%s, %.4g s predicted (%s); peak %.3f GiB measured, %.3f GiB "
        "predicted as the trainer allocates (%s; %.3f GiB with the framework); %d ranks\n",
        v.measured_iteration_time_s(), spread, v.predicted_iteration_time_s(),
        ErrorPercent(v.predicted_iteration_time_s(), v.measured_iteration_time_s()),
        v.measured_peak_gib(), tracked, ErrorPercent(tracked, v.measured_peak_gib()),
        v.predicted_peak_gib(), v.measured_peak_gib_per_rank_size());
  }
  if (plan.has_verification_summary()) {
    absl::StrAppend(&out, "# verification ranking: ", plan.verification_summary().verdict(), "\n");
  }
  return out;
}

std::string ResultsTable(const v1::JobResults& results, const v1::JobSpec& spec_proto) {
  absl::StatusOr<PlanResult> plan = server::PlanResultFromProto(results.plan());
  absl::StatusOr<JobSpec> spec = server::SpecFromProto(spec_proto);
  if (!plan.ok() || !spec.ok()) return server::WireJson(results) + "\n";
  std::string out = FormatPlanTable(*plan, *spec);
  int measured = 0;
  for (const v1::RankedConfig& r : results.plan().ranked()) measured += r.source() == "measured";
  absl::StrAppend(&out, "# source: ", measured, " measured, ",
                  results.plan().ranked_size() - measured, " modelled\n");
  // The coordinator lists only the first rejected layouts; it counts all of them per rule.
  const v1::PlanResult& p = results.plan();
  if (p.rejected_total() > p.rejected_size()) {
    absl::StrAppend(&out, "# rejected: ", p.rejected_total(), " in all (", p.rejected_size(),
                    " listed in --json); by rule:\n");
    for (const v1::RejectedReason& r : p.rejected_reasons()) {
      absl::StrAppend(&out, "#   ", r.count(), "  ", r.reason(), "\n");
    }
  }
  absl::StrAppend(&out, VerificationLines(results.plan()));
  return out;
}

}  // namespace paratune::client
