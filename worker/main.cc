// paratune-worker: runs ParaTune profiling tasks leased from the coordinator on this
// node's devices. SIGTERM/SIGINT: finish (or, after --stop-grace-s, release) the running
// task, deregister, exit 0.
//
// Exit codes: 0 clean stop; 1 runtime failure (coordinator unreachable within
// --connect-timeout-s, registration rejected, devices missing); 2 bad flags.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "server/limits.h"
#include "worker/daemon.h"
#include "worker/device_discovery.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int64_t kMaxMs = 3'600'000;  // bound of every *-ms flag: one hour
constexpr double kMaxS = 86'400;       // bound of every *-s flag: one day

int g_signal_pipe = -1;  // write end; the handler writes the signal number

void OnStopSignal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int saved = errno;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe, &byte, 1);
  errno = saved;
}

int UsageError(const std::string& message) {
  std::cerr << "paratune-worker: error: " << message << " (see --help)\n";
  return kExitUsage;
}

// "0,1,2" or "0-3" or "0-1,4": device indices. Empty: all.
bool ParseDeviceList(const std::string& text, std::vector<int>* out, std::string* error) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto parse = [&](const std::string& s, int* v) {
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
      return ec == std::errc() && p == s.data() + s.size() && !s.empty() && *v >= 0;
    };
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!parse(item, &lo)) {
        *error = "--devices: '" + item + "' is not a device index (e.g. 0,1 or 0-3)";
        return false;
      }
      hi = lo;
    } else if (!parse(item.substr(0, dash), &lo) || !parse(item.substr(dash + 1), &hi) ||
               hi < lo) {
      *error = "--devices: '" + item + "' is not a range LO-HI with LO <= HI";
      return false;
    }
    // The coordinator's bound (server/limits.h), checked before anything is allocated.
    if (static_cast<size_t>(hi - lo) + 1 + out->size() > paratune::server::kMaxDevicesPerWorker) {
      *error = "--devices: '" + text + "' lists more than " +
               std::to_string(paratune::server::kMaxDevicesPerWorker) +
               " devices, the most one worker registers";
      return false;
    }
    for (int d = lo; d <= hi; ++d) out->push_back(d);
  }
  return true;
}

bool ReadToken(const std::string& path, std::string* token, std::string* error) {
  std::ifstream file(path);
  if (!file) {
    *error = "--token-file: cannot read " + path;
    return false;
  }
  std::stringstream text;
  text << file.rdbuf();
  std::string t = text.str();
  auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  t.erase(t.begin(), std::find_if_not(t.begin(), t.end(), space));
  t.erase(std::find_if_not(t.rbegin(), t.rend(), space).base(), t.end());
  if (t.empty()) {
    *error = "--token-file: " + path + " is empty";
    return false;
  }
  *token = t;
  return true;
}

// The flags that are not fields of WorkerOptions, as given.
struct RawFlags {
  std::string token_file;
  std::string devices;
  std::string tls_ca;
};

void AddFlags(CLI::App& app, paratune::worker::WorkerOptions& options, RawFlags& raw) {
  app.option_defaults()->always_capture_default();
  app.add_option("--coordinator", options.coordinator,
                 "Coordinator WorkerHub address HOST:PORT")
      ->required();
  app.add_option("--token-file", raw.token_file,
                 "File holding the bearer token (sent as 'authorization: Bearer <token>'); "
                 "empty: no token");
  app.add_flag("--tls", options.tls,
               "Connect to the coordinator with TLS, trusting the system's root certificates "
               "(default: off, plaintext)");
  app.add_option("--tls-ca", raw.tls_ca,
                 "PEM file of the root certificate(s) that sign the coordinator's "
                 "certificate (implies --tls); empty: system roots")
      ->check(CLI::ExistingFile);
  app.add_option("--backend", options.backend,
                 "auto (CUDA when built with CUDA and a device exists, else CPU) | cuda | cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  app.add_option("--devices", raw.devices,
                 "Device indices to use, e.g. 0,1 or 0-3 (CPU: rank slots, a rank is a "
                 "thread); empty: all (CPU: one per online core)");
  app.add_option("--device-kind", options.device_kind,
                 "Catalog device kind to announce, e.g. h100-sxm-80gb; empty: derived from "
                 "the devices (cpu on CPU)");
  app.add_option("--name", options.name, "Worker name; empty: the host name");
  app.add_option("--heartbeat-interval-ms", options.heartbeat_interval_ms,
                 "Heartbeat period; 0: the coordinator's")
      ->check(CLI::Range(int64_t{0}, kMaxMs));
  app.add_option("--lease-wait-ms", options.lease_wait_ms, "Long-poll time of one LeaseTask")
      ->check(CLI::Range(int64_t{0}, kMaxMs));
  app.add_option("--rpc-timeout-ms", options.rpc_timeout_ms, "Deadline of each RPC")
      ->check(CLI::Range(int64_t{1}, kMaxMs));
  app.add_option("--connect-timeout-s", options.connect_timeout_s,
                 "At startup, retry an unreachable coordinator this long, then exit 1; "
                 "0: forever")
      ->check(CLI::Range(0.0, kMaxS));
  app.add_option("--backoff-initial-ms", options.backoff_initial_ms,
                 "First reconnect delay (doubled per failure)")
      ->check(CLI::Range(int64_t{1}, kMaxMs));
  app.add_option("--backoff-max-ms", options.backoff_max_ms, "Reconnect delay cap")
      ->check(CLI::Range(int64_t{1}, kMaxMs));
  app.add_option("--stop-grace-s", options.stop_grace_s,
                 "On SIGTERM, let the running task finish this long before releasing it")
      ->check(CLI::Range(0.0, kMaxS));
}

// Fills `options` from the raw flags (device list, token file, TLS root certificates),
// validates them and selects the CUDA devices. Returns an exit code, or -1 to go on.
int ResolveFlags(const RawFlags& raw, paratune::worker::WorkerOptions& options) {
  std::string error;
  if (!raw.devices.empty() && !ParseDeviceList(raw.devices, &options.devices, &error)) {
    return UsageError(error);
  }
  if (!raw.token_file.empty() && !ReadToken(raw.token_file, &options.token, &error)) {
    return UsageError(error);
  }
  if (!raw.tls_ca.empty()) {
    std::ifstream file(raw.tls_ca);
    std::stringstream pem;
    pem << file.rdbuf();
    if (!file || pem.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return UsageError("--tls-ca: " + raw.tls_ca + " holds no PEM certificate");
    }
    options.tls = true;
    options.tls_root_certs_pem = pem.str();
  }
  if (absl::Status s = options.Validate(); !s.ok()) return UsageError(std::string(s.message()));
  if (options.backend != "cpu") {
    // GPU ranks use CUDA devices 0..n-1: select the listed ones process-wide.
    absl::StatusOr<bool> selected = paratune::worker::SelectCudaDevices(options.devices);
    if (!selected.ok()) {
      std::cerr << "paratune-worker: error: " << selected.status().message() << '\n';
      return 1;
    }
    if (*selected) options.devices.clear();
  }
  return -1;
}

// Runs the daemon until it stops by itself or on SIGTERM/SIGINT; returns the exit code.
int RunUntilStopped(const paratune::worker::WorkerOptions& options) {
  // SIGTERM/SIGINT: the handler only writes the signal number to a pipe (async-signal-
  // safe, whichever thread the signal lands on: libraries such as OpenBLAS start threads
  // before main, so blocking the signals here could not cover them); a watcher thread
  // reads it and calls Stop().
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    std::cerr << "paratune-worker: error: pipe: " << std::strerror(errno) << '\n';
    return 1;
  }
  g_signal_pipe = pipe_fds[1];
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  paratune::worker::WorkerDaemon daemon(options);
  std::atomic<bool> done{false};
  std::thread signal_thread([&] {
    while (!done.load()) {
      pollfd fd{pipe_fds[0], POLLIN, 0};
      if (poll(&fd, 1, 200) <= 0) continue;
      unsigned char sig = 0;
      if (read(pipe_fds[0], &sig, 1) != 1) continue;
      // One write: the daemon's threads may log at the same moment (std::cerr writes each
      // << piece separately, and a line split by theirs was seen in CI).
      std::cerr << absl::StrCat("paratune-worker: ", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                                ": stopping\n");
      daemon.Stop();
    }
  });

  absl::Status status = daemon.Run();
  done.store(true);
  signal_thread.join();
  if (status.ok()) return 0;
  std::string message(status.message());
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::cerr << "paratune-worker: error: " << message << '\n';
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : 1;
}

}  // namespace

int main(int argc, char** argv) {
  paratune::worker::WorkerOptions options;
  RawFlags raw;
  CLI::App app{
      "paratune-worker: runs ParaTune profiling tasks (transformer-layer profiles and\n"
      "collective sweeps on the real kernels) leased from a paratune-coordinator.\n"
      "SIGTERM/SIGINT finish or release the running task, deregister and exit 0.\n"
      "Exit codes: 0 stopped cleanly, 1 runtime failure, 2 bad flags."};
  AddFlags(app, options, raw);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return UsageError(what);
  }
  if (int code = ResolveFlags(raw, options); code >= 0) return code;
  return RunUntilStopped(options);
}
