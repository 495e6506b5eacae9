// host_noise: how far apart this host measures two copies of the same work, the floor under
// any "which layout is faster" that prediction_accuracy asks of it.
//
//   host_noise [--threads 0] [--rep-seconds 0.5] [--rounds 10] [--steps 4] [--trials 10]
//              [--size 512] [--json]
//
// Each of --threads threads (default: one per core, as prediction_accuracy runs one rank per
// core) owns a CPU backend with one BLAS thread and repeats the same fixed work (GEMMs of
// --size³, as many as take about --rep-seconds on the first measurement) in lockstep: the
// threads meet at a barrier before every repetition, and a repetition's step time is the
// wall time from one barrier to the next, the slowest thread's, as a data-parallel step
// waits for its slowest rank. Per thread it also records the thread's CPU time: a repetition
// whose CPU time falls short of its wall time lost the core to something else on this
// machine; one whose CPU time grew with its wall time ran slower on the core it had.
// /proc/stat's steal counter says how much of the run the hypervisor gave this machine's
// CPUs to other guests.
//
// The A/A comparison: the repetitions are cut into trials of 2 × --rounds × --steps, and in
// each trial into --rounds rounds in which a pretend layout A takes --steps repetitions and
// then a pretend layout B the next --steps, as prediction_accuracy alternates its layouts
// round by round (defaults: its 10 rounds of 4 timed steps). A and B are the same work, so
// every difference between their step times is the host's (each side's 10 % trimmed mean,
// prediction_accuracy's estimator). The median and the largest
// |A / B − 1| over the trials are what two equally fast layouts measure apart in
// one prediction_accuracy run: layouts predicted closer than that cannot be ordered by it.
//
// Prints the table and
//   # A/A: identical work measures median X %, max Y % apart (N trials of R rounds × S steps)
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "bench/verify/estimators.h"
#include "kernels/backend.h"

namespace paratune::kernels {
namespace {

using Clock = std::chrono::steady_clock;
using paratune::bench::kTrim;
using paratune::bench::Median;
using paratune::bench::TrimmedMean;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds of steal summed over the host's CPUs since boot (/proc/stat's first line, 8th
// value, in clock ticks); -1 where the kernel does not report it.
double StealSeconds() {
  std::ifstream f("/proc/stat");
  std::string line;
  if (!std::getline(f, line)) return -1;
  std::istringstream in(line);
  std::string cpu;
  in >> cpu;
  long long v = 0;
  for (int i = 0; i < 8; ++i) {
    if (!(in >> v)) return -1;
  }
  return static_cast<double>(v) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Coefficient of variation, %.
double CvPct(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return 100.0 * std::sqrt(ss / static_cast<double>(v.size() - 1)) / m;
}

// Per trial, |A / B − 1| in %, where A and B are the trimmed means (prediction_accuracy's
// estimator) of their steps: trial t covers reps [t·2RS, (t+1)·2RS); in its round r, A takes
// the S reps from (t·2R + 2r)·S and B the S after them.
std::vector<double> AaGapsPct(const std::vector<double>& steps, int rounds, int per_round) {
  const size_t r_count = static_cast<size_t>(rounds), s_count = static_cast<size_t>(per_round);
  const size_t trial = 2 * r_count * s_count;
  std::vector<double> gaps;
  for (size_t t = 0; (t + 1) * trial <= steps.size(); ++t) {
    std::vector<double> a, b;
    for (size_t r = 0; r < r_count; ++r) {
      const auto first = steps.begin() + static_cast<std::ptrdiff_t>(t * trial + 2 * r * s_count);
      const auto mid = first + static_cast<std::ptrdiff_t>(s_count);
      a.insert(a.end(), first, mid);
      b.insert(b.end(), mid, mid + static_cast<std::ptrdiff_t>(s_count));
    }
    gaps.push_back(100.0 * std::abs(TrimmedMean(a, kTrim) / TrimmedMean(b, kTrim) - 1.0));
  }
  return gaps;
}

struct Work {
  std::unique_ptr<Backend> backend;
  Tensor a, b, c;
  GemmArgs gemm;
};

absl::StatusOr<Work> MakeWork(int64_t n) {
  Work w;
  w.backend = MakeCpuBackend(int64_t{1} << 30, 1);
  auto a = w.backend->Empty({n, n}, DType::kF32, MemoryTag::kWorkspace);
  auto b = w.backend->Empty({n, n}, DType::kF32, MemoryTag::kWorkspace);
  auto c = w.backend->Empty({n, n}, DType::kF32, MemoryTag::kWorkspace);
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  if (!c.ok()) return c.status();
  w.a = *std::move(a), w.b = *std::move(b), w.c = *std::move(c);
  if (auto s = w.backend->Fill(w.a, 0.5); !s.ok()) return s;
  if (auto s = w.backend->Fill(w.b, 0.25); !s.ok()) return s;
  w.gemm.m = w.gemm.n = w.gemm.k = n;
  w.gemm.a = w.a.data(), w.gemm.lda = n;
  w.gemm.b = w.b.data(), w.gemm.ldb = n;
  w.gemm.c = w.c.data(), w.gemm.ldc = n;
  return w;
}

absl::Status Run(Work& w, int64_t gemms) {
  for (int64_t i = 0; i < gemms; ++i) {
    if (auto s = w.backend->Gemm(DType::kF32, w.gemm); !s.ok()) return s;
  }
  return absl::OkStatus();
}

struct Options {
  int threads = 0;  ///< 0: one per core.
  double rep_seconds = 0.5;
  int rounds = 10, per_round = 4, trials = 10;
  int64_t size = 512;
  bool json = false;
};

// Fills `o` from the command line; an exit code when the program should stop there.
std::optional<int> ParseFlags(int argc, char** argv, Options& o) {
  CLI::App app{"host_noise: how far apart this host measures two copies of the same work"};
  app.add_option("--threads", o.threads,
                 "threads in lockstep, one BLAS thread each (0: one per core)")
      ->check(CLI::Range(0, 256));
  app.add_option("--rep-seconds", o.rep_seconds,
                 "work per repetition, as seconds of it on the first measurement (a "
                 "prediction_accuracy step takes about 0.5-1 s on 2 cores)")
      ->check(CLI::Range(0.01, 10.0));
  app.add_option("--rounds", o.rounds, "A/A rounds per trial (prediction_accuracy's --repeats)")
      ->check(CLI::Range(1, 40));
  app.add_option("--steps", o.per_round, "repetitions per side and round (its timed steps)")
      ->check(CLI::Range(1, 100));
  app.add_option("--trials", o.trials, "A/A trials")->check(CLI::Range(1, 1000));
  app.add_option("--size", o.size, "GEMM size n (n×n by n×n, FP32)")->check(CLI::Range(16, 8192));
  app.add_flag("--json", o.json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  return std::nullopt;
}

// Seconds of one GEMM of `size`, measured on one thread alone after a warm-up.
absl::StatusOr<double> SecondsPerGemm(int64_t size) {
  auto probe = MakeWork(size);
  if (!probe.ok()) return probe.status();
  if (auto s = Run(*probe, 1); !s.ok()) return s;  // warm-up
  const auto p0 = Clock::now();
  if (auto s = Run(*probe, 2); !s.ok()) return s;
  return std::chrono::duration<double>(Clock::now() - p0).count() / 2;
}

// What the threads measured in lockstep.
struct Lockstep {
  std::vector<double> steps;                   ///< Each repetition, the slowest thread's.
  std::vector<std::vector<double>> wall, cpu;  ///< By thread and repetition.
  double elapsed = 0;
  std::optional<double> steal_pct;  ///< Unset where the kernel reports no steal.
  std::string error;                ///< The first thread's failure, if any.
};

// `threads` threads each run `gemms` GEMMs per repetition, `reps` times, meeting before
// every repetition.
Lockstep RunLockstep(int threads, int64_t size, int64_t gemms, size_t reps, long cpus) {
  Lockstep out;
  out.steps.assign(reps, 0.0);
  out.wall.assign(static_cast<size_t>(threads), std::vector<double>(reps));
  out.cpu.assign(static_cast<size_t>(threads), std::vector<double>(reps));
  std::vector<std::string> errors(static_cast<size_t>(threads));
  Clock::time_point step_start;
  // The completion step runs once per phase, on one thread, after all arrive: it closes the
  // step that just ended (the slowest thread's) and opens the next.
  size_t next = 0;
  const auto on_phase = [&]() noexcept {
    const auto now = Clock::now();
    if (next > 0) out.steps[next - 1] = std::chrono::duration<double>(now - step_start).count();
    ++next;
    step_start = Clock::now();
  };
  std::barrier sync(threads, on_phase);
  const double steal0 = StealSeconds();
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t ti = static_cast<size_t>(t);
      auto w = MakeWork(size);
      if (w.ok()) (void)Run(*w, 1);  // warm-up, outside the timed steps
      for (size_t r = 0; r < reps; ++r) {
        sync.arrive_and_wait();
        if (!w.ok()) continue;
        const auto c0 = ThreadCpuSeconds();
        const auto w0 = Clock::now();
        if (auto s = Run(*w, gemms); !s.ok() && errors[ti].empty()) errors[ti] = s.ToString();
        out.wall[ti][r] = std::chrono::duration<double>(Clock::now() - w0).count();
        out.cpu[ti][r] = ThreadCpuSeconds() - c0;
      }
      sync.arrive_and_wait();  // closes the last step
      if (!w.ok()) errors[ti] = w.status().ToString();
    });
  }
  for (auto& th : pool) th.join();
  out.elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double steal1 = StealSeconds();
  for (const std::string& e : errors) {
    if (!e.empty()) {
      out.error = e;
      return out;
    }
  }
  if (steal0 >= 0 && steal1 >= 0) {
    out.steal_pct = 100.0 * (steal1 - steal0) / (out.elapsed * static_cast<double>(cpus));
  }
  return out;
}

// The whole report (the --json output; the text is printed from it).
nlohmann::json Report(const Options& o, const Lockstep& m, int64_t gemms, size_t reps) {
  nlohmann::json j;
  j["threads"] = o.threads;
  j["gemm_size"] = o.size;
  j["gemms_per_repetition"] = gemms;
  j["repetitions"] = reps;
  j["elapsed_s"] = m.elapsed;
  j["steal_pct_of_cpu_time"] = m.steal_pct ? nlohmann::json(*m.steal_pct) : nlohmann::json();
  j["per_thread"] = nlohmann::json::array();
  for (int t = 0; t < o.threads; ++t) {
    const auto& w = m.wall[static_cast<size_t>(t)];
    const auto& c = m.cpu[static_cast<size_t>(t)];
    j["per_thread"].push_back({{"thread", t},
                               {"min_s", *std::min_element(w.begin(), w.end())},
                               {"median_s", Median(w)},
                               {"max_s", *std::max_element(w.begin(), w.end())},
                               {"cv_pct", CvPct(w)},
                               {"cpu_over_wall_pct", 100.0 * Mean(c) / Mean(w)}});
  }
  const std::vector<double>& steps = m.steps;
  j["step"] = {{"min_s", *std::min_element(steps.begin(), steps.end())},
               {"median_s", Median(steps)},
               {"max_s", *std::max_element(steps.begin(), steps.end())},
               {"cv_pct", CvPct(steps)}};
  const std::vector<double> gaps = AaGapsPct(steps, o.rounds, o.per_round);
  j["aa"] = {{"trials", gaps.size()},
             {"rounds", o.rounds},
             {"steps", o.per_round},
             {"gap_median_pct", Median(gaps)},
             {"gap_max_pct", *std::max_element(gaps.begin(), gaps.end())},
             {"gaps_pct", gaps}};
  return j;
}

void PrintText(const Options& o, const nlohmann::json& j, const Lockstep& m, int64_t gemms,
               size_t reps) {
  const std::vector<double> gaps = j["aa"]["gaps_pct"].get<std::vector<double>>();
  std::printf("# host_noise: %d threads in lockstep, %lld GEMMs of %lld³ FP32 per repetition, "
              "%zu repetitions in %.0f s; steal %s\n",
              o.threads, static_cast<long long>(gemms), static_cast<long long>(o.size), reps,
              m.elapsed,
              m.steal_pct ? absl::StrFormat("%.2f %% of CPU time", *m.steal_pct).c_str()
                          : "not reported");
  std::printf("%-8s %9s %9s %9s %7s %9s\n", "thread", "min_s", "median_s", "max_s", "cv_%",
              "cpu/wall");
  for (const auto& p : j["per_thread"]) {
    std::printf("%-8d %9.4f %9.4f %9.4f %7.1f %8.1f%%\n", p["thread"].get<int>(),
                p["min_s"].get<double>(), p["median_s"].get<double>(), p["max_s"].get<double>(),
                p["cv_pct"].get<double>(), p["cpu_over_wall_pct"].get<double>());
  }
  std::printf("%-8s %9.4f %9.4f %9.4f %7.1f\n", "step", j["step"]["min_s"].get<double>(),
              j["step"]["median_s"].get<double>(), j["step"]["max_s"].get<double>(),
              j["step"]["cv_pct"].get<double>());
  std::printf("# A/A gaps per trial (%%):");
  for (double g : gaps) std::printf(" %.1f", g);
  std::printf("\n# A/A: identical work measures median %.1f %%, max %.1f %% apart (%zu trials of "
              "%d rounds × %d steps)\n",
              Median(gaps), *std::max_element(gaps.begin(), gaps.end()), gaps.size(), o.rounds,
              o.per_round);
}

int Main(int argc, char** argv) {
  Options o;
  if (std::optional<int> exit = ParseFlags(argc, argv, o)) return *exit;
  const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  if (o.threads == 0) o.threads = static_cast<int>(cpus);
  SetBlasThreads(1);  // process-wide, before any worker thread runs a GEMM

  // Calibrate on one thread alone: GEMMs per repetition.
  absl::StatusOr<double> per_gemm = SecondsPerGemm(o.size);
  if (!per_gemm.ok()) {
    std::fprintf(stderr, "host_noise: %s\n", per_gemm.status().ToString().c_str());
    return 1;
  }
  const int64_t gemms = std::max<int64_t>(1, std::llround(o.rep_seconds / *per_gemm));
  const size_t reps = static_cast<size_t>(o.trials) * 2 * static_cast<size_t>(o.rounds) *
                      static_cast<size_t>(o.per_round);
  std::fprintf(stderr,
               "# %d threads, %lld GEMMs of %lld³ per repetition (%.3f s each alone), %zu "
               "repetitions\n",
               o.threads, static_cast<long long>(gemms), static_cast<long long>(o.size),
               *per_gemm * static_cast<double>(gemms), reps);
  const Lockstep m = RunLockstep(o.threads, o.size, gemms, reps, cpus);
  if (!m.error.empty()) {
    std::fprintf(stderr, "host_noise: %s\n", m.error.c_str());
    return 1;
  }
  const nlohmann::json j = Report(o, m, gemms, reps);
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    PrintText(o, j, m, gemms, reps);
  }
  return 0;
}

}  // namespace
}  // namespace paratune::kernels

int main(int argc, char** argv) { return paratune::kernels::Main(argc, argv); }
