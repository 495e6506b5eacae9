// prediction_accuracy: how well profile composition predicts real end-to-end training.
//
// For each layout of a small GPT model on this machine (2 ranks, one per worker process,
// Gloo over TCP on 127.0.0.1 with a FileStore rendezvous), the prediction is what the
// coordinator's profile mode computes: the analytical estimate (search/planner.h Estimate)
// with its layer and DP-reduce parts replaced by measurements (kernels' step runner for
// each layer task of search/profile_plan.h LayerTasksFor, the collective sweep for
// DpSweepFor; search/compose.h ComposeCandidate). The measurement is the whole model
// trained end to end (kernels/training: embedding, layers, loss, the layout's pipeline
// schedule, DP reduce and AdamW) and the largest per-rank tracking-allocator peak.
//
// Layer tasks run with every core of the job busy (kRanks / tp concurrent copies, the
// slowest kept): CPU ranks share caches and memory bandwidth, unlike GPUs.
//
// Timing estimator: the build host is shared (its load is printed), so both sides use the
// least-disturbed run: the minimum over the timed steps of each layer task's phases (the
// step runner's min_s) and the minimum iteration time after the first training step, each
// over --repeats runs (the fastest run kept).
// Memory: the model's peak without its fixed framework workspace and fragmentation
// allowance (search/memory_model.h FrameworkMemory), which the CPU tracking allocator
// does not see; what remains (weights, gradients, optimizer, activations, transient
// buffers) is what it counts.
//
// Prints one row per layout (predicted, measured, error for time and memory) and
//   # prediction error: median X %, max Y %, best layout predicted: yes|no
// --json prints the same as one JSON object.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/backend.h"
#include "kernels/collective_bench.h"
#include "kernels/step_runner.h"
#include "kernels/training/training.h"
#include "nlohmann/json.hpp"
#include "search/compose.h"
#include "search/memory_model.h"
#include "search/planner.h"
#include "search/profile_plan.h"

extern char** environ;

namespace {

using paratune::JobSpec;
using paratune::ParallelConfig;
using paratune::Recompute;
namespace kt = paratune::kernels::training;
namespace k = paratune::kernels;

constexpr int64_t kRanks = 2;

JobSpec SmallModel() {
  JobSpec spec;
  spec.name = "verify-small-gpt";
  spec.model.name = "small-gpt";
  spec.model.num_layers = 4;
  spec.model.hidden_size = 256;
  spec.model.num_attention_heads = 8;
  spec.model.num_query_groups = 8;
  spec.model.ffn_hidden_size = 1024;
  spec.model.vocab_size = 2048;  // a multiple of 128·tp: no Megatron padding
  spec.training.seq_length = 128;
  spec.training.global_batch_size = 8;
  spec.training.precision = paratune::Precision::kFp32;
  spec.training.flash_attention = false;
  spec.training.dropout = false;
  spec.cluster.gpu = "cpu";
  spec.cluster.num_gpus = kRanks;
  spec.cluster.gpus_per_node = kRanks;
  spec.search.mode = paratune::SearchMode::kProfile;
  return spec;
}

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, vp = 1, mb = 1;
  bool sp = false, dopt = false;
  Recompute recompute = Recompute::kNone;
};

std::vector<Layout> Layouts() {
  return {
      {1, 1, 2, 1, 1, false, false, Recompute::kNone},
      {1, 1, 2, 1, 2, false, false, Recompute::kNone},
      {1, 1, 2, 1, 1, false, false, Recompute::kFull},
      {1, 1, 2, 1, 2, false, true, Recompute::kNone},
      {2, 1, 1, 1, 1, false, false, Recompute::kNone},
      {2, 1, 1, 1, 2, true, false, Recompute::kNone},
      {2, 1, 1, 1, 2, false, false, Recompute::kSelective},
      {1, 2, 1, 1, 1, false, false, Recompute::kNone},
      {1, 2, 1, 1, 2, false, false, Recompute::kNone},
      {1, 2, 1, 2, 1, false, false, Recompute::kNone},
  };
}

ParallelConfig ToParallel(const Layout& l) {
  ParallelConfig c;
  c.tp = l.tp;
  c.pp = l.pp;
  c.dp = l.dp;
  c.vp = l.vp;
  c.micro_batch_size = l.mb;
  c.sequence_parallel = l.sp;
  c.distributed_optimizer = l.dopt;
  c.recompute = l.recompute;
  // kernels/training reduces the gradients after the backward (no bucket overlap), as
  // Megatron-LM 2021's local DDP.
  c.overlap_grad_reduce = false;
  return c;
}

kt::TrainConfig ToTrain(const JobSpec& spec, const Layout& l, int64_t steps) {
  kt::TrainConfig t;
  t.shape.hidden_size = spec.model.hidden_size;
  t.shape.num_attention_heads = spec.model.num_attention_heads;
  t.shape.num_query_groups = spec.model.num_query_groups;
  t.shape.ffn_hidden_size = spec.model.ffn_hidden_size;
  t.shape.vocab_size = spec.model.vocab_size;
  t.num_layers = spec.model.num_layers;
  t.seq_length = spec.training.seq_length;
  t.micro_batch_size = l.mb;
  t.num_micro_batches = spec.training.global_batch_size / (l.mb * l.dp);
  t.tp = l.tp;
  t.pp = l.pp;
  t.dp = l.dp;
  t.vp = l.vp;
  t.sequence_parallel = l.sp;
  t.distributed_optimizer = l.dopt;
  t.recompute = l.recompute == Recompute::kFull        ? k::RecomputeMode::kFull
                : l.recompute == Recompute::kSelective ? k::RecomputeMode::kSelective
                                                       : k::RecomputeMode::kNone;
  t.steps = steps;
  t.threads_per_rank = 1;
  return t;
}

absl::StatusOr<paratune::LayerMeasurement> MeasureLayer(const paratune::LayerProfileSpec& s) {
  k::StepConfig c;
  c.layer.shape.hidden_size = s.hidden_size;
  c.layer.shape.num_attention_heads = s.num_attention_heads;
  c.layer.shape.num_query_groups = s.num_query_groups;
  c.layer.shape.ffn_hidden_size = s.ffn_hidden_size;
  c.layer.shape.vocab_size = s.vocab_size;
  c.layer.tp = s.tp;
  c.layer.sequence_parallel = s.sequence_parallel;
  c.layer.micro_batch_size = s.micro_batch_size;
  c.layer.seq_length = s.seq_length;
  absl::StatusOr<k::RecomputeMode> rm = k::ParseRecompute(paratune::ToString(s.recompute));
  if (!rm.ok()) return rm.status();
  c.layer.recompute = *rm;
  c.layer.dtype = k::DType::kF32;
  c.layer.flash_attention = s.flash_attention;
  c.warmup = s.warmup;
  c.iters = s.iters;
  c.blas_threads_per_rank = 1;  // as the training ranks: one core each
  // The host's cores share caches and memory bandwidth (GPUs do not), so the task runs with
  // every core of the job busy: kRanks / tp copies at once; the slowest copy is kept.
  const int64_t copies = std::max<int64_t>(1, kRanks / s.tp);
  std::vector<absl::StatusOr<k::StepResult>> results(copies, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < copies; ++i) {
    threads.emplace_back([&, i] { results[i] = k::RunLayerStep(c); });
  }
  for (auto& t : threads) t.join();
  paratune::LayerMeasurement m;
  for (const auto& r : results) {
    if (!r.ok()) return r.status();
    paratune::LayerMeasurement one;
    for (const k::PhaseTiming& p : r->phases) {
      if (p.phase == "forward") one.forward_s = p.min_s;
      if (p.phase == "backward") one.backward_s = p.min_s;
      if (p.phase == "recompute") one.recompute_s = p.min_s;
      if (p.phase == "tp_comm") one.tp_comm_s = p.min_s;
    }
    for (int64_t b : r->peak_bytes_per_rank) one.peak_bytes = std::max(one.peak_bytes, double(b));
    if (one.LayerSeconds() > m.LayerSeconds()) m = one;
  }
  return m;
}

absl::StatusOr<paratune::CommMeasurement> MeasureSweep(const paratune::CollectiveSweepSpec& s) {
  k::CollectiveSweepConfig c;
  c.op = k::CollectiveOp::kAllReduce;
  c.group_size = s.group_size;
  c.sizes_bytes = s.sizes_bytes;
  c.dtype = k::DType::kF32;
  c.warmup = s.warmup;
  c.iters = s.iters;
  absl::StatusOr<std::vector<k::CollectiveSample>> r = k::RunCollectiveSweep(c);
  if (!r.ok()) return r.status();
  paratune::CommMeasurement m;
  for (const auto& x : *r) m.samples.push_back({x.size_bytes, x.time_s, x.busbw_gbps * 1e9});
  return m;
}

// Child process: runs rank 1 of layout `index` and writes its peak bytes to dir/peak.
int Child(int index, const std::string& dir, int64_t steps) {
  const JobSpec spec = SmallModel();
  const kt::TrainConfig t = ToTrain(spec, Layouts()[index], steps);
  absl::StatusOr<kt::TrainResult> r = kt::RunTraining(t, 1, 1, k::MakeFileRendezvous(dir));
  if (!r.ok()) {
    std::cerr << "child: " << r.status() << "\n";
    return 1;
  }
  std::ofstream(dir + "/peak") << r->ranks[0].peak_bytes << "\n";
  return 0;
}

struct Measured {
  double iteration_s = 0;
  double dp_s = 0, optimizer_s = 0;  ///< Rank 0, in the fastest step.
  double peak_bytes = 0;
  double final_loss = 0;
};

absl::StatusOr<Measured> RunEndToEnd(const std::string& self, int index, int64_t steps) {
  char tmpl[] = "/tmp/paratune-verify-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = tmpl;
  std::vector<std::string> args = {self, "--child", std::to_string(index), "--store", dir,
                                   "--steps", std::to_string(steps)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    return absl::InternalError("posix_spawn failed");
  }
  const JobSpec spec = SmallModel();
  absl::StatusOr<kt::TrainResult> r =
      kt::RunTraining(ToTrain(spec, Layouts()[index], steps), 0, 1, k::MakeFileRendezvous(dir));
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!r.ok()) return r.status();
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError("the second worker process failed");
  }
  int64_t child_peak = 0;
  std::ifstream(dir + "/peak") >> child_peak;
  std::filesystem::remove_all(dir);
  Measured m;
  const auto fastest = std::min_element(r->step_seconds.begin() + 1, r->step_seconds.end());
  m.iteration_s = *fastest;
  const size_t at = static_cast<size_t>(fastest - r->step_seconds.begin());
  m.dp_s = r->ranks[0].dp_seconds[at];
  m.optimizer_s = r->ranks[0].optimizer_seconds[at];
  m.peak_bytes = std::max<double>(r->ranks[0].peak_bytes, child_peak);
  m.final_loss = r->losses.back();
  return m;
}

// The modelled peak less the framework terms the tracking allocator does not see:
// other = transient + workspace + fragmentation·(activations + transient).
double TrackedPeak(const paratune::MemoryBreakdown& m) {
  const paratune::FrameworkMemory f;
  const double transient =
      std::max(0.0, (m.other - f.workspace_bytes - f.fragmentation_fraction * m.activations) /
                        (1.0 + f.fragmentation_fraction));
  return m.weights + m.gradients + m.optimizer + m.activations + transient;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prediction_accuracy: profile-composed prediction vs end-to-end training"};
  bool json = false;
  int child = -1;
  std::string store;
  int64_t steps = 5;
  int repeats = 3;
  app.add_flag("--json", json, "print JSON");
  app.add_option("--steps", steps, "training steps per layout (the first is not timed)")
      ->check(CLI::Range(2, 100));
  app.add_option("--repeats", repeats,
                 "measure each layer task and each end-to-end run this often, keep the fastest")
      ->check(CLI::Range(1, 10));
  app.add_option("--child", child, "internal: run rank 1 of this layout")->group("");
  app.add_option("--store", store, "internal: FileStore directory")->group("");
  CLI11_PARSE(app, argc, argv);
  if (child >= 0) return Child(child, store, steps);

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const JobSpec spec = SmallModel();
  paratune::ProfilePlanOptions options;
  paratune::Measurements measurements;
  struct Row {
    std::string layout;
    double pred_s = 0, meas_s = 0, pred_mem = 0, meas_mem = 0, loss = 0;
    paratune::TimeBreakdown pred_time;
    double meas_dp = 0, meas_opt = 0;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < Layouts().size(); ++i) {
    const ParallelConfig pc = ToParallel(Layouts()[i]);
    absl::StatusOr<paratune::RankedConfig> modelled = paratune::Estimate(spec, pc);
    if (!modelled.ok()) {
      std::cerr << pc.ToString() << ": " << modelled.status() << "\n";
      return 1;
    }
    for (const auto& t : paratune::LayerTasksFor(spec, pc, options)) {
      if (measurements.layers.count(t.Key())) continue;
      paratune::LayerMeasurement best;
      for (int r = 0; r < repeats; ++r) {
        absl::StatusOr<paratune::LayerMeasurement> m = MeasureLayer(t);
        if (!m.ok()) {
          std::cerr << "layer task " << t.Key() << ": " << m.status() << "\n";
          return 1;
        }
        if (r == 0 || m->LayerSeconds() < best.LayerSeconds()) best = *m;
      }
      measurements.layers[t.Key()] = best;
    }
    if (auto sweep = paratune::DpSweepFor(spec, pc, options)) {
      if (!measurements.collectives.count(sweep->Key())) {
        absl::StatusOr<paratune::CommMeasurement> m = MeasureSweep(*sweep);
        if (!m.ok()) {
          std::cerr << "sweep " << sweep->Key() << ": " << m.status() << "\n";
          return 1;
        }
        measurements.collectives[sweep->Key()] = *m;
      }
    }
    absl::StatusOr<paratune::RankedConfig> composed =
        paratune::ComposeCandidate(spec, *modelled, options, measurements);
    if (!composed.ok()) {
      std::cerr << pc.ToString() << ": " << composed.status() << "\n";
      return 1;
    }
    absl::StatusOr<Measured> meas;
    for (int r = 0; r < repeats; ++r) {
      absl::StatusOr<Measured> one = RunEndToEnd(self, static_cast<int>(i), steps);
      if (!one.ok()) {
        std::cerr << pc.ToString() << ": end to end: " << one.status() << "\n";
        return 1;
      }
      if (r == 0 || one->iteration_s < meas->iteration_s) meas = one;
    }
    rows.push_back({pc.ToString(), composed->iteration_time_s, meas->iteration_s,
                    TrackedPeak(composed->memory), meas->peak_bytes, meas->final_loss,
                    composed->time, meas->dp_s, meas->optimizer_s});
  }

  std::vector<double> terr, merr;
  size_t best_pred = 0, best_meas = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    terr.push_back(100.0 * std::abs(rows[i].pred_s - rows[i].meas_s) / rows[i].meas_s);
    merr.push_back(100.0 * std::abs(rows[i].pred_mem - rows[i].meas_mem) / rows[i].meas_mem);
    if (rows[i].pred_s < rows[best_pred].pred_s) best_pred = i;
    if (rows[i].meas_s < rows[best_meas].meas_s) best_meas = i;
  }
  const double med = Median(terr), mx = *std::max_element(terr.begin(), terr.end());
  const double mmed = Median(merr), mmx = *std::max_element(merr.begin(), merr.end());
  const bool best_ok = best_pred == best_meas;
  if (json) {
    nlohmann::json j;
    j["model"] = {{"layers", spec.model.num_layers}, {"hidden", spec.model.hidden_size},
                  {"heads", spec.model.num_attention_heads}, {"ffn", spec.model.ffn_hidden_size},
                  {"vocab", spec.model.vocab_size}, {"seq", spec.training.seq_length},
                  {"global_batch", spec.training.global_batch_size}, {"ranks", kRanks},
                  {"processes", 2}, {"steps", steps}, {"repeats", repeats}};
    for (size_t i = 0; i < rows.size(); ++i) {
      j["layouts"].push_back({{"layout", rows[i].layout},
                              {"predicted_iteration_s", rows[i].pred_s},
                              {"measured_iteration_s", rows[i].meas_s},
                              {"time_error_pct", terr[i]},
                              {"predicted_peak_bytes", rows[i].pred_mem},
                              {"measured_peak_bytes", rows[i].meas_mem},
                              {"memory_error_pct", merr[i]},
                              {"final_loss", rows[i].loss},
                              {"measured_dp_s", rows[i].meas_dp},
                              {"measured_optimizer_s", rows[i].meas_opt},
                              {"predicted_time_s",
                               {{"compute", rows[i].pred_time.compute},
                                {"tp_comm", rows[i].pred_time.tp_comm},
                                {"pp_bubble", rows[i].pred_time.pp_bubble},
                                {"pp_p2p", rows[i].pred_time.pp_p2p},
                                {"dp_comm", rows[i].pred_time.dp_comm},
                                {"optimizer", rows[i].pred_time.optimizer}}}});
    }
    j["time_error_median_pct"] = med;
    j["time_error_max_pct"] = mx;
    j["memory_error_median_pct"] = mmed;
    j["memory_error_max_pct"] = mmx;
    j["predicted_best"] = rows[best_pred].layout;
    j["measured_best"] = rows[best_meas].layout;
    j["best_layout_predicted"] = best_ok;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("# prediction_accuracy: GPT L=%ld h=%ld a=%ld f=%ld V=%ld s=%ld B=%ld fp32, "
              "%ld ranks over 2 processes (Gloo/TCP, FileStore), %ld steps, min after the first\n",
              long(spec.model.num_layers), long(spec.model.hidden_size),
              long(spec.model.num_attention_heads), long(spec.model.ffn_hidden_size),
              long(spec.model.vocab_size), long(spec.training.seq_length),
              long(spec.training.global_batch_size), long(kRanks), long(steps));
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 1) load[0] = -1;
  std::printf("# host: %ld cores, load average %.1f at the end\n", sysconf(_SC_NPROCESSORS_ONLN),
              load[0]);
  std::printf("# %-36s %8s %8s %6s %7s %7s %7s %7s %8s %8s %6s %6s\n", "layout", "pred", "meas",
              "err", "pred_dp", "meas_dp", "pr_opt", "ms_opt", "pred_mem", "meas_mem", "err",
              "loss");
  std::printf("# %-36s %8s %8s %6s %7s %7s %7s %7s %8s %8s %6s %6s\n", "", "ms", "ms", "%", "ms",
              "ms", "ms", "ms", "MiB", "MiB", "%", "");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf("  %-36s %8.1f %8.1f %6.1f %7.1f %7.1f %7.1f %7.1f %8.2f %8.2f %6.1f %6.3f\n",
                rows[i].layout.c_str(), rows[i].pred_s * 1e3, rows[i].meas_s * 1e3, terr[i],
                rows[i].pred_time.dp_comm * 1e3, rows[i].meas_dp * 1e3,
                rows[i].pred_time.optimizer * 1e3, rows[i].meas_opt * 1e3,
                rows[i].pred_mem / 1048576.0,
                rows[i].meas_mem / 1048576.0, merr[i], rows[i].loss);
  }
  std::printf("# memory error: median %.1f %%, max %.1f %%\n", mmed, mmx);
  std::printf("# best layout: predicted %s, measured %s\n", rows[best_pred].layout.c_str(),
              rows[best_meas].layout.c_str());
  std::printf("# prediction error: median %.1f %%, max %.1f %%, best layout predicted: %s\n", med,
              mx, best_ok ? "yes" : "no");
  return 0;
}
