// model_accuracy: predicts every published run of calibration_runs.json with the
// analytical model (the published layout pinned; knobs a source leaves unstated are chosen
// by the planner, as for a user) and prints predicted vs published tokens/s/GPU, the
// error per record, then the median and maximum error. Korthikanti Table 4 rows compare
// the per-layer forward and backward times. Also checks the published ordering: sequence
// parallelism + selective recompute beats full recompute by 1.29-1.33x (Table 5). The
// sharded-data-parallel rows of moe_fsdp_calibration.json (llm-foundry's FSDP runs;
// bench/model/records_fsdp.h) are a second table with their own summary line.
//
// Then the mixture-of-experts records of moe_fsdp_calibration.json (records_moe.h), with
// their own median and maximum error; records the model cannot express are listed with the
// reason.
//
//   model_accuracy [--data DIR] [--json] [--verbose]   (--verbose: time breakdown per row;
//   --json: one document with the dense rows, "moe", "fsdp_records", "nemo_table",
//   "mbridge_table" and "mbridge_moe_table")
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/model/records.h"
#include "bench/model/records_fsdp.h"
#include "bench/model/records_moe.h"
#include "search/device_catalog.h"
#include "search/model_math.h"
#include "search/planner.h"
#include "search/spec_io.h"
#include "search/time_model.h"

namespace paratune::bench {
namespace {

// Published tokens/s/GPU of a record (tflops converted with the record's own definition).
double PublishedTokensPerGpu(const nlohmann::json& r, const JobSpec& spec) {
  const double B = static_cast<double>(spec.training.global_batch_size);
  const double s = static_cast<double>(spec.training.seq_length);
  const double N = static_cast<double>(spec.cluster.num_gpus);
  if (r["tokens_per_sec_per_gpu"].is_number()) return r["tokens_per_sec_per_gpu"].get<double>();
  if (r["iteration_time_s"].is_number()) return B * s / (r["iteration_time_s"].get<double>() * N);
  if (!r["tflops_per_gpu"].is_number()) return 0;
  const double tflops = r["tflops_per_gpu"].get<double>();
  const std::string def = r["tflops_definition"].is_string() ? r["tflops_definition"].get<std::string>() : "";
  double flops_per_token;
  if (absl::StrContains(def, "96*B*s*l*h^2")) {
    // Narayanan Eq. 3 (counts the recompute forward).
    const double L = spec.model.num_layers, h = spec.model.hidden_size,
                 V = spec.model.vocab_size;
    flops_per_token = 96.0 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
  } else {
    flops_per_token = ModelFlopsPerIteration(spec.model, B, s) / (B * s);
  }
  return tflops * 1e12 / flops_per_token;
}

struct Row {
  std::string id, quantity, layout;
  double published = 0, predicted = 0, error = 0;
};

// A row in --json: its id, layout, published and predicted figures and the error.
nlohmann::json RowJson(const Row& r) {
  return {{"id", r.id},
          {"layout", r.layout},
          {"published", r.published},
          {"predicted", r.predicted},
          {"error", r.error}};
}

// A layer record (Korthikanti Table 4): its forward and backward time, two rows.
void AddLayerRows(const nlohmann::json& r, const JobSpec& spec, const RecordLayout& layout,
                  const Row& row, std::vector<Row>& rows) {
  const DeviceProfile device = *FindDevice(spec.cluster.gpu);
  const LayerTime lt = EstimateLayerTime(spec.model, spec.training, layout.config, device,
                                         spec.cluster.gpus_per_node);
  const double fwd = r["other_measured"]["forward_ms"].get<double>();
  const double bwd = r["other_measured"]["backward_ms"].get<double>();
  const double pf = lt.Forward() * 1e3, pb = lt.Backward() * 1e3;
  Row f = row, b = row;
  f.quantity = "layer fwd ms";
  f.published = fwd;
  f.predicted = pf;
  b.quantity = "layer bwd ms";
  b.published = bwd;
  b.predicted = pb;
  f.layout = b.layout = layout.config.ToString();
  for (Row* x : {&f, &b}) {
    x->error = std::abs(x->predicted - x->published) / x->published;
    rows.push_back(*x);
  }
}

// A whole-run record: every knob stated, that exact layout is estimated; otherwise the
// planner chooses the unstated knobs, with the stated ones pinned.
absl::StatusOr<PlanResult> PlanRecord(const RecordLayout& layout, JobSpec& spec) {
  const bool all_stated = layout.micro_batch_stated && layout.vp_stated && layout.sp_stated &&
                          layout.recompute_stated && layout.cp_stated && layout.dopt_stated;
  if (!all_stated) {
    PinStated(layout, &spec);
    return Plan(spec);
  }
  ParallelConfig c = layout.config;
  // Stages that do not split L evenly use the embedding/loss-aware split.
  c.split_counts_embedding_and_loss = spec.model.num_layers % (c.pp * c.vp) != 0;
  absl::StatusOr<RankedConfig> one = Estimate(spec, c);
  if (!one.ok()) return one.status();
  PlanResult plan;
  plan.ranked.push_back(*one);
  return plan;
}

// The verbose memory column: the peak and its parts, GiB.
std::string MemoryText(const MemoryBreakdown& m) {
  constexpr double kGiB = 1 << 30;
  return absl::StrFormat(
      "mem %.1f GiB (weights %.1f grads %.1f optimizer %.1f activations %.1f other %.1f, of it "
      "loss %.1f; capacity %.1f)",
      m.Peak() / kGiB, m.weights / kGiB, m.gradients / kGiB, m.optimizer / kGiB,
      m.activations / kGiB, m.other / kGiB, m.loss_buffers / kGiB, m.capacity / kGiB);
}

// The row of a whole-run record: published against predicted tokens/s per GPU of the best
// layout (with its time breakdown when `verbose`). Korthikanti's Table 5 iteration times go
// to `korthikanti_time` for the orderings.
Row RunRow(const nlohmann::json& r, JobSpec& spec, const RecordLayout& layout, Row row,
           bool verbose, std::map<std::string, double>& korthikanti_time) {
  absl::StatusOr<PlanResult> plan = PlanRecord(layout, spec);
  if (!plan.ok() || plan->ranked.empty()) {
    std::fprintf(stderr, "%s: %s\n", row.id.c_str(),
                 plan.ok() ? "no layout" : std::string(plan.status().message()).c_str());
    row.quantity = "FAILED";
    row.error = 1;
    return row;
  }
  const RankedConfig& best = plan->ranked[0];
  row.quantity = "tokens/s/GPU";
  row.layout = best.config.ToString() + (best.fits ? "" : " (OOM)");
  row.published = PublishedTokensPerGpu(r, spec);
  row.predicted = best.tokens_per_sec_per_gpu;
  row.error = std::abs(row.predicted - row.published) / row.published;
  if (verbose) {
    const TimeBreakdown& t = best.time;
    const double T = best.iteration_time_s;
    row.layout += absl::StrFormat(
        " | T %.2fs compute %.0f%% tp %.0f%% cp %.0f%% bubble %.0f%% p2p %.0f%% dp %.0f%% opt "
        "%.0f%% hw %.0f TF %s",
        T, 100 * t.compute / T, 100 * t.tp_comm / T, 100 * t.cp_comm / T, 100 * t.pp_bubble / T,
        100 * t.pp_p2p / T, 100 * t.dp_comm / T, 100 * t.optimizer / T,
        best.hardware_tflops_per_gpu, MemoryText(best.memory));
  }
  if (absl::StartsWith(row.id, "korthikanti22_t5")) {
    korthikanti_time[row.id] = best.iteration_time_s;
  }
  return row;
}

// The sharded-data-parallel records: each stated layout estimated as it is.
// A tokens/s/GPU row: the layout (marked when it does not fit), published and predicted.
void SetThroughput(const RankedConfig& r, double published, Row* row) {
  row->quantity = "tokens/s/GPU";
  row->layout = r.config.ToString() + (r.fits ? "" : " (OOM)");
  row->published = published;
  row->predicted = r.tokens_per_sec_per_gpu;
  row->error = std::abs(row->predicted - row->published) / row->published;
}

// A sharded record's layout as estimated: the stated one; with the recompute unstated, the
// fastest of none, selective and full that fits (the fastest overall when none fits), as
// the planner fills an unstated knob.
absl::StatusOr<RankedConfig> EstimateFsdpRecord(const FsdpRecord& f) {
  if (f.recompute_stated) return Estimate(f.spec, f.config);
  std::optional<RankedConfig> best;
  for (const Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    ParallelConfig c = f.config;
    c.recompute = recompute;
    c.recompute_num_layers = 0;  // every layer of the stage (full)
    absl::StatusOr<RankedConfig> one = Estimate(f.spec, c);
    if (!one.ok()) return one.status();
    const bool better =
        !best || (one->fits && !best->fits) ||
        (one->fits == best->fits && one->tokens_per_sec_per_gpu > best->tokens_per_sec_per_gpu);
    if (better) best = *one;
  }
  return *best;
}

std::vector<Row> FsdpRows(const nlohmann::json& data, bool verbose) {
  std::vector<Row> rows;
  for (const FsdpRecord& f : FsdpRecords(data)) {
    Row row;
    row.id = f.id;
    absl::StatusOr<RankedConfig> one = EstimateFsdpRecord(f);
    if (!one.ok()) {
      std::fprintf(stderr, "%s: %s\n", f.id.c_str(), std::string(one.status().message()).c_str());
      row.quantity = "FAILED";
      row.error = 1;
      rows.push_back(row);
      continue;
    }
    SetThroughput(*one, f.published_tokens_per_gpu, &row);
    if (verbose) {
      const TimeBreakdown& t = one->time;
      const double T = one->iteration_time_s;
      row.layout += absl::StrFormat(" | T %.2fs compute %.0f%% dp %.0f%% opt %.0f%% %s", T,
                                    100 * t.compute / T, 100 * t.dp_comm / T, 100 * t.optimizer / T,
                                    MemoryText(one->memory));
    }
    rows.push_back(row);
  }
  return rows;
}

// NVIDIA's published pretraining tables, each row's model preset and stated layout under
// training.framework nemo with the settings of NVIDIA's performance scripts (FP8, BF16
// gradient reduction, TP communication overlap and sequence parallelism with TP > 1, the
// distributed optimizer or, where the row says fsdp 1, Megatron-FSDP); the recompute is
// chosen by the planner. NeMo 24.09's (bench/model/data/nemo_24.09_h100_fp8.json, DGX
// H100) and Megatron-Bridge 25.11's dense and MoE rows (mbridge_25.11_perf.json and
// mbridge_25.11_moe.json: GB300, GB200, B200 and H100; a row's "gpu" names the device, H100
// when absent, its "precision" the recipe's, FP8 when absent, and its "ep" the expert
// parallelism, with the tokens force-balanced as the table's MoE runs are). Rows without a
// preset, or that the file marks with "skip", are listed as skipped with the reason.
struct PublishedTable {
  std::string title;
  std::string source;
  std::vector<Row> rows;
  std::vector<std::string> devices;  ///< Per row, the device's short name.
  std::vector<std::string> skipped;
};

// "h100-sxm-80gb" -> "h100", "b200-192gb" -> "b200", "gb200" -> "gb200".
std::string ShortDevice(const std::string& gpu) { return gpu.substr(0, gpu.find('-')); }

PublishedTable PublishedTableRows(const std::string& title, const std::string& id_prefix,
                                  const nlohmann::json& table) {
  PublishedTable out;
  out.title = title;
  out.source = Str(table, "source");
  for (const nlohmann::json& r : table["rows"]) {
    const std::string name = Str(r, "model");
    if (!r["preset"].is_string()) {
      out.skipped.push_back(name + " (no preset for its architecture)");
      continue;
    }
    const std::string gpu = r.contains("gpu") ? Str(r, "gpu") : "h100-sxm-80gb";
    const std::string precision = r.contains("precision") ? Str(r, "precision") : "fp8";
    const int64_t ep = Int(r, "ep", 1);
    const int64_t tp = Int(r, "tp", 1), pp = Int(r, "pp", 1), cp = Int(r, "cp", 1);
    const int64_t gpus = Int(r, "gpus", 0);
    const std::string id =
        absl::StrFormat("%s_%s_%s_%s_%dg", id_prefix, ShortDevice(gpu), precision, name, gpus);
    if (r.contains("skip")) {
      out.skipped.push_back(absl::StrCat(id, " (", Str(r, "skip"), ")"));
      continue;
    }
    nlohmann::json spec = {
        {"name", name},
        {"model", {{"preset", Str(r, "preset")}}},
        {"training",
         {{"seq_length", Int(r, "seq", 0)},
          {"global_batch_size", Int(r, "gbs", 0)},
          {"precision", precision},
          {"framework", "nemo"},
          {"grad_reduce_in_fp32", false}}},
        {"cluster",
         {{"gpu", gpu},
          {"num_gpus", gpus},
          {"gpus_per_node", absl::StartsWith(gpu, "gb") ? 4 : 8}}},
        {"search",
         {{"tp", {tp}},
          {"pp", {pp}},
          {"cp", {cp}},
          {"vp", {Int(r, "vp", 1)}},
          {"dp", {gpus / (tp * pp * cp)}},
          {"micro_batch_size", {Int(r, "mbs", 1)}},
          {"sequence_parallel", {tp > 1}},
          {"tp_comm_overlap", {tp > 1}},
          {"data_parallel_sharding", {Int(r, "fsdp", 0) == 1 ? "full" : "optimizer"}}}}};
    if (ep > 1) {
      // The tables' MoE runs force-balance the tokens over the experts.
      spec["training"]["moe_routing"] = "balanced";
      spec["search"]["ep"] = {ep};
    }
    Row row;
    row.id = id;
    absl::StatusOr<JobSpec> job = JobSpecFromJson(spec);
    absl::StatusOr<PlanResult> plan =
        job.ok() ? Plan(*job) : absl::StatusOr<PlanResult>(job.status());
    if (!plan.ok() || plan->ranked.empty()) {
      out.skipped.push_back(absl::StrCat(
          id, " (", plan.ok() ? "no layout fits" : std::string(plan.status().message()), ")"));
      continue;
    }
    SetThroughput(plan->ranked.front(), static_cast<double>(Int(r, "tokens_per_sec_per_gpu", 0)),
                  &row);
    out.rows.push_back(row);
    out.devices.push_back(ShortDevice(gpu));
  }
  return out;
}

void PrintPublishedTable(const PublishedTable& table) {
  std::printf("#\n# %s: %zu published runs\n# source: %s\n", table.title.c_str(), table.rows.size(),
              table.source.c_str());
  std::printf("# %-52s %12s %12s %8s  %s\n", "record", "published", "predicted", "error", "layout");
  std::vector<double> errors, signed_errors;
  std::map<std::string, std::vector<double>> by_device;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const Row& r = table.rows[i];
    std::printf("  %-52s %12.1f %12.1f %8.1f  %s\n", r.id.c_str(), r.published, r.predicted,
                100 * r.error, r.layout.c_str());
    errors.push_back(r.error);
    signed_errors.push_back(r.predicted / r.published - 1.0);
    by_device[table.devices[i]].push_back(r.predicted / r.published - 1.0);
  }
  for (const std::string& s : table.skipped) std::printf("# skipped: %s\n", s.c_str());
  const double max = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  std::printf(
      "# %s error: median %.1f %%, max %.1f %% over %zu rows; predicted over published %+.1f %% "
      "median\n",
      table.title.c_str(), 100 * Median(errors), 100 * max, errors.size(),
      100 * Median(signed_errors));
  if (by_device.size() > 1) {
    std::printf("# predicted over published by device, median:");
    for (const auto& [device, e] : by_device) {
      std::printf(" %s %+.1f %% (%zu)", device.c_str(), 100 * Median(e), e.size());
    }
    std::printf("\n");
  }
}

nlohmann::json PublishedTableJson(const PublishedTable& table) {
  nlohmann::json out = {{"source", table.source}, {"skipped", table.skipped}};
  std::vector<double> errors;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    nlohmann::json row = RowJson(table.rows[i]);
    row["device"] = table.devices[i];
    out["records"].push_back(row);
    errors.push_back(table.rows[i].error);
  }
  out["median_error"] = Median(errors);
  out["max_error"] = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  return out;
}

// Orderings: full recompute / (SP + selective), published vs predicted.
struct Ordering {
  std::string model;
  double published, predicted;
  bool ok;
};

std::vector<Ordering> Orderings(const nlohmann::json& data,
                                std::map<std::string, double>& korthikanti_time) {
  std::vector<Ordering> orderings;
  for (const char* model : {"22B", "175B", "530B", "1T"}) {
    const std::string full = std::string("korthikanti22_t5_") + model + "_full_recompute";
    const std::string sel = std::string("korthikanti22_t5_") + model + "_seqpar_selective";
    double pub_full = 0, pub_sel = 0;
    for (const nlohmann::json& r : data) {
      if (r["id"] == full) pub_full = r["iteration_time_s"].get<double>();
      if (r["id"] == sel) pub_sel = r["iteration_time_s"].get<double>();
    }
    if (!korthikanti_time.count(full) || !korthikanti_time.count(sel)) continue;
    const double pred = korthikanti_time[full] / korthikanti_time[sel];
    const double pub = pub_full / pub_sel;
    orderings.push_back({model, pub, pred, std::abs(pred - pub) <= 0.05});
  }
  return orderings;
}

void PrintJson(const std::vector<Row>& rows, const std::vector<Ordering>& orderings, double median,
               double max, const std::vector<Row>& fsdp, const nlohmann::json& moe,
               const PublishedTable& nemo, const PublishedTable& mbridge,
               const PublishedTable& mbridge_moe) {
  nlohmann::json out;
  out["moe"] = moe;
  out["nemo_table"] = PublishedTableJson(nemo);
  out["mbridge_table"] = PublishedTableJson(mbridge);
  out["mbridge_moe_table"] = PublishedTableJson(mbridge_moe);
  std::vector<double> fsdp_errors;
  for (const Row& r : fsdp) {
    out["fsdp_records"].push_back(RowJson(r));
    fsdp_errors.push_back(r.error);
  }
  out["fsdp_median_error"] = Median(fsdp_errors);
  out["fsdp_max_error"] =
      fsdp_errors.empty() ? 0 : *std::max_element(fsdp_errors.begin(), fsdp_errors.end());
  for (const Row& r : rows) {
    nlohmann::json row = RowJson(r);
    row["quantity"] = r.quantity;
    out["records"].push_back(row);
  }
  for (const Ordering& o : orderings) {
    out["orderings"].push_back({{"model", o.model}, {"published_ratio", o.published},
                                {"predicted_ratio", o.predicted}, {"within_0.05", o.ok}});
  }
  out["median_error"] = median;
  out["max_error"] = max;
  std::printf("%s\n", out.dump(2).c_str());
}

void PrintTable(const std::string& dir, const std::vector<Row>& rows,
                const std::vector<Ordering>& orderings, double median, double max) {
  std::printf("# model_accuracy: analytical model vs %zu published measurements\n", rows.size());
  std::printf("# data: %s/calibration_runs.json\n", dir.c_str());
  std::printf("# %-52s %-14s %12s %12s %8s  %s\n", "record", "quantity", "published", "predicted",
              "error", "layout (planner fills unstated knobs)");
  std::printf("# %-52s %-14s %12s %12s %8s\n", "", "", "", "", "%");
  for (const Row& r : rows) {
    std::printf("  %-52s %-14s %12.2f %12.2f %8.1f  %s\n", r.id.c_str(), r.quantity.c_str(),
                r.published, r.predicted, 100 * r.error, r.layout.c_str());
  }
  std::printf(
      "#\n# ordering: iteration time full recompute / (SP + selective), Korthikanti Table 5\n");
  std::printf("# %-8s %10s %10s %6s\n", "model", "published", "predicted", "ok");
  int wrong = 0;
  for (const Ordering& o : orderings) {
    std::printf("  %-8s %10.3f %10.3f %6s\n", o.model.c_str(), o.published, o.predicted,
                o.ok ? "yes" : "NO");
    wrong += o.ok ? 0 : 1;
  }
  std::printf("# orderings outside +-0.05: %d of %zu\n", wrong, orderings.size());
  int over = 0;
  for (const Row& r : rows) over += r.error > 0.12 ? 1 : 0;
  std::printf("# #wrong (rows over the 12 %% target): %d of %zu\n", over, rows.size());
  std::printf("# model error: median %.1f %%, max %.1f %%\n", 100 * median, 100 * max);
}

// The MoE records: the stated layout estimated (or, with unstated knobs, planned with the
// stated ones pinned); skipped records with their reason. Returns the rows scored.
struct MoeResult {
  std::vector<Row> rows;
  std::vector<std::pair<std::string, std::string>> skipped;  ///< id, reason
  /// Rows of relative studies (MoeRecord::relative_study): published and predicted are the
  /// row's throughput over its study's control row's; error in points of that ratio.
  std::vector<Row> study_rows;          ///< quantity: the study's key
  std::set<std::string> study_controls;  ///< ids of the studies' control rows
};

MoeResult MoeRows(const nlohmann::json& data, bool verbose) {
  MoeResult out;
  for (MoeRecord& rec : MoeRecordsFromCalibration(data)) {
    if (!rec.skip_reason.empty()) {
      out.skipped.emplace_back(rec.id, rec.skip_reason);
      continue;
    }
    absl::StatusOr<RankedConfig> best = absl::InternalError("no layout");
    if (rec.all_stated) {
      best = Estimate(rec.spec, rec.config);
    } else {
      absl::StatusOr<PlanResult> plan = Plan(rec.spec);
      if (!plan.ok()) {
        best = plan.status();
      } else if (!plan->ranked.empty()) {
        best = plan->ranked.front();
      } else if (!plan->rejected.empty()) {
        best = absl::InvalidArgumentError(plan->rejected.front().reason);
      }
    }
    if (!best.ok()) {
      out.skipped.emplace_back(rec.id, std::string(best.status().message()));
      continue;
    }
    Row row;
    row.id = rec.id;
    SetThroughput(*best, rec.published_tokens_per_gpu, &row);
    if (verbose) {
      const TimeBreakdown& t = best->time;
      const double T = best->iteration_time_s;
      row.layout += absl::StrFormat(
          " | T %.2fs compute %.0f%% tp %.0f%% ep %.0f%% bubble %.0f%% p2p %.0f%% dp %.0f%% "
          "%s",
          T, 100 * t.compute / T, 100 * t.tp_comm / T, 100 * t.ep_comm / T, 100 * t.pp_bubble / T,
          100 * t.pp_p2p / T, 100 * t.dp_comm / T, MemoryText(best->memory));
    }
    if (rec.relative_study.empty()) {
      out.rows.push_back(row);
    } else {
      row.quantity = rec.relative_study;
      if (rec.study_control) out.study_controls.insert(row.id);
      out.study_rows.push_back(row);
    }
  }
  // Each study's rows as ratios to its control (the row without recompute).
  std::map<std::string, Row> control;
  for (const Row& r : out.study_rows) {
    if (out.study_controls.count(r.id) > 0) control[r.quantity] = r;
  }
  for (Row& r : out.study_rows) {
    const auto it = control.find(r.quantity);
    if (it == control.end()) continue;
    r.published /= it->second.published;
    r.predicted /= it->second.predicted;
    r.error = r.predicted - r.published;
  }
  return out;
}

void PrintMoeTable(const std::string& dir, const MoeResult& moe) {
  std::printf("#\n# model_accuracy (mixture of experts): %zu published runs scored, %zu skipped\n",
              moe.rows.size(), moe.skipped.size());
  std::printf("# data: %s/moe_fsdp_calibration.json\n", dir.c_str());
  std::printf("# %-52s %-14s %12s %12s %8s  %s\n", "record", "quantity", "published", "predicted",
              "error", "layout");
  std::printf("# %-52s %-14s %12s %12s %8s\n", "", "", "", "", "%");
  std::vector<double> errors;
  for (const Row& r : moe.rows) {
    std::printf("  %-52s %-14s %12.1f %12.1f %8.1f  %s\n", r.id.c_str(), r.quantity.c_str(),
                r.published, r.predicted, 100 * r.error, r.layout.c_str());
    errors.push_back(r.error);
  }
  for (const auto& [id, reason] : moe.skipped) {
    std::printf("  %-52s skipped: %s\n", id.c_str(), reason.c_str());
  }
  int over = 0;
  for (double e : errors) over += e > 0.20 ? 1 : 0;
  std::printf("# #wrong (MoE rows over the 20 %% bound): %d of %zu\n", over, errors.size());
  std::printf("# MoE model error: median %.1f %%, max %.1f %%\n", 100 * Median(errors),
              100 * (errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end())));
  if (moe.study_rows.empty()) return;
  // Studies whose source varies one knob over short runs: each row's throughput relative
  // to the study's row without recompute, published against predicted.
  std::printf("#\n# MoE relative studies (only recompute_modules varies; throughput over the\n"
              "# study's row without recompute; the absolute rows are not in the table above)\n");
  std::printf("# %-60s %10s %10s %10s\n", "record", "published", "predicted", "pred-pub");
  std::vector<double> gaps;
  for (const Row& r : moe.study_rows) {
    if (moe.study_controls.count(r.id) > 0) continue;
    std::printf("  %-60s %10.3f %10.3f %+10.3f\n", r.id.c_str(), r.published, r.predicted,
                r.error);
    gaps.push_back(std::abs(r.error));
  }
  std::printf("# relative studies: %zu rows, ratio error median %.3f, max %.3f\n", gaps.size(),
              Median(gaps), gaps.empty() ? 0.0 : *std::max_element(gaps.begin(), gaps.end()));
}

void PrintFsdpTable(const std::string& dir, const std::vector<Row>& rows) {
  std::printf("#\n# sharded data parallelism: %zu published runs\n", rows.size());
  std::printf("# data: %s/moe_fsdp_calibration.json (dense records with a ZeRO stage)\n",
              dir.c_str());
  std::printf("# %-52s %12s %12s %8s  %s\n", "record", "published", "predicted", "error", "layout");
  std::vector<double> errors;
  for (const Row& r : rows) {
    std::printf("  %-52s %12.1f %12.1f %8.1f  %s\n", r.id.c_str(), r.published, r.predicted,
                100 * r.error, r.layout.c_str());
    errors.push_back(r.error);
  }
  const double max = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  std::printf("# FSDP model error: median %.1f %%, max %.1f %% over %zu rows\n",
              100 * Median(errors), 100 * max, errors.size());
}

int Main(int argc, char** argv) {
  const bool json_out = HasFlag(argc, argv, "--json");
  const bool verbose = HasFlag(argc, argv, "--verbose");
  const std::string dir = DataDir(argc, argv);
  absl::StatusOr<nlohmann::json> data = ReadJson(dir + "/calibration_runs.json");
  if (!data.ok()) {
    std::fprintf(stderr, "model_accuracy: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  std::vector<Row> rows;
  std::map<std::string, double> korthikanti_time;  // id -> predicted iteration time.
  for (const nlohmann::json& r : *data) {
    JobSpec spec = SpecFromRecord(r);
    const RecordLayout layout = LayoutFromRecord(r);
    Row row;
    row.id = r["id"].get<std::string>();
    if (r["record_type"] == "single_transformer_layer_fwd_bwd_time") {
      AddLayerRows(r, spec, layout, row, rows);
      continue;
    }
    if (spec.training.global_batch_size == 0) continue;
    rows.push_back(RunRow(r, spec, layout, row, verbose, korthikanti_time));
  }

  std::vector<double> errors;
  for (const Row& r : rows) errors.push_back(r.error);
  std::sort(errors.begin(), errors.end());
  const double median =
      errors.empty()      ? 0
      : errors.size() % 2 ? errors[errors.size() / 2]
                          : 0.5 * (errors[errors.size() / 2 - 1] + errors[errors.size() / 2]);
  const double max = errors.empty() ? 0 : errors.back();
  const std::vector<Ordering> orderings = Orderings(*data, korthikanti_time);
  absl::StatusOr<nlohmann::json> moe_data = ReadJson(dir + "/moe_fsdp_calibration.json");
  MoeResult moe;
  if (moe_data.ok()) moe = MoeRows(*moe_data, verbose);
  const std::vector<Row> fsdp = moe_data.ok() ? FsdpRows(*moe_data, verbose) : std::vector<Row>{};
  absl::StatusOr<nlohmann::json> nemo_data = ReadJson(BenchDataDir() + "/nemo_24.09_h100_fp8.json");
  const PublishedTable nemo =
      nemo_data.ok() ? PublishedTableRows("NeMo table", "nemo24.09", *nemo_data) : PublishedTable{};
  absl::StatusOr<nlohmann::json> mbridge_data =
      ReadJson(BenchDataDir() + "/mbridge_25.11_perf.json");
  const PublishedTable mbridge =
      mbridge_data.ok() ? PublishedTableRows("Megatron-Bridge table", "mbridge25.11", *mbridge_data)
                        : PublishedTable{};
  absl::StatusOr<nlohmann::json> mbridge_moe_data =
      ReadJson(BenchDataDir() + "/mbridge_25.11_moe.json");
  const PublishedTable mbridge_moe =
      mbridge_moe_data.ok()
          ? PublishedTableRows("Megatron-Bridge MoE table", "mbridge25.11", *mbridge_moe_data)
          : PublishedTable{};
  if (json_out) {
    // One JSON document: the dense rows, "fsdp_records" and "moe".
    nlohmann::json m = nlohmann::json::object();
    std::vector<double> errors;
    for (const Row& r : moe.rows) {
      m["records"].push_back(RowJson(r));
      errors.push_back(r.error);
    }
    for (const auto& [id, reason] : moe.skipped) {
      m["skipped"].push_back({{"id", id}, {"reason", reason}});
    }
    m["median_error"] = Median(errors);
    m["max_error"] = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
    PrintJson(rows, orderings, median, max, fsdp, m, nemo, mbridge, mbridge_moe);
  } else {
    PrintTable(dir, rows, orderings, median, max);
    if (moe_data.ok()) {
      PrintMoeTable(dir, moe);
    } else {
      std::printf("# MoE records: %s\n", std::string(moe_data.status().message()).c_str());
    }
    PrintFsdpTable(dir, fsdp);
    if (nemo_data.ok()) {
      PrintPublishedTable(nemo);
    } else {
      std::printf("# NeMo table: %s\n", std::string(nemo_data.status().message()).c_str());
    }
    if (mbridge_data.ok()) {
      PrintPublishedTable(mbridge);
      PrintPublishedTable(mbridge_moe);
    } else {
      std::printf("# Megatron-Bridge tables: %s\n",
                  std::string(mbridge_data.status().message()).c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace paratune::bench

int main(int argc, char** argv) { return paratune::bench::Main(argc, argv); }
