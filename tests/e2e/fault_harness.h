// Shared pieces of the end-to-end tests (coordinator, faults, bad input): child processes with their
// output in a log file, commands run to completion, the coordinator on free ports.
#ifndef PARATUNE_TESTS_E2E_FAULT_HARNESS_H_
#define PARATUNE_TESTS_E2E_FAULT_HARNESS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace paratune::e2e {

namespace fs = std::filesystem;

inline std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Polls `done` every `period_ms` until it is true or `timeout_ms` passed.
inline bool PollUntil(const std::function<bool()>& done, int timeout_ms, int period_ms = 50) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
  }
  return done();
}

/// A child process with stdout and stderr appended to a log file; SIGKILLed and reaped on
/// destruction.
class Process {
 public:
  Process(const std::vector<std::string>& args, const fs::path& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Process() { Kill(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  bool ok() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  /// Sends a signal without waiting (SIGSTOP, SIGCONT).
  void Send(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  /// SIGKILL and reap.
  void Kill() {
    if (pid_ <= 0) return;
    // SIGKILL ends a stopped process too; the SIGCONT after it only makes sure that no
    // stopped process keeps the reaper waiting. In this order a paused process never runs
    // again (woken first, it could still send a report before the SIGKILL landed).
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  /// Waits for the process to exit; its exit code (-1 when killed by a signal).
  int Wait() {
    if (pid_ <= 0) return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_status_ = status;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  /// True while the process has not exited (reaps it when it has).
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = status;
      return false;
    }
    return true;
  }
  int exit_status() const { return exit_status_; }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

struct Output {
  int exit_code = -1;
  std::string out;
};

/// Runs a shell command to completion; stdout captured, stderr appended to `err_log`.
inline Output RunCommand(const std::string& command, const fs::path& err_log) {
  Output o;
  FILE* pipe = popen((command + " 2>>" + err_log.string()).c_str(), "r");
  if (pipe == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) o.out.append(buf, n);
  const int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

/// Resident set size of a process in KiB (VmRSS in /proc/PID/status), -1 if unknown.
inline long RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

/// A temporary folder named after the running test; removed unless the test failed.
inline fs::path TestDir(const std::string& prefix, const std::string& test_name) {
  const fs::path dir = fs::temp_directory_path() /
                       (prefix + std::to_string(::getpid()) + "_" + test_name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// Where the binaries are: $PARATUNE_BIN_DIR (ctest sets it).
inline fs::path BinDir() {
  const char* bin = std::getenv("PARATUNE_BIN_DIR");
  return bin != nullptr ? fs::path(bin) : fs::path();
}

/// A TCP port on 127.0.0.1 that nothing is bound to now, below the kernel's ephemeral
/// range (net.ipv4.ip_local_port_range); 0 (let the kernel pick) when there is no room
/// below it. The kernel never hands such a port to another program's port-0 bind or
/// outgoing connection, so a coordinator can go away (a minute in the downtime test) and
/// come back on it: a port from the ephemeral range could meanwhile be taken by a test
/// running in parallel, and gRPC's SO_REUSEPORT would even let the two servers share it.
inline int PortBelowEphemeralRange() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  if (low <= 21000) return 0;
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pick(20000, low - 1);
  for (int i = 0; i < 100; ++i) {
    const int port = pick(rng);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    // No SO_REUSEADDR/SO_REUSEPORT here: the bind fails on any socket bound to the port.
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);  // never listened or connected: nothing lingers in TIME_WAIT
    if (free) return port;
  }
  return 0;
}

/// The coordinator as a child process on 127.0.0.1; ports chosen below the ephemeral range
/// the first time (PortBelowEphemeralRange) and reused on restarts (same database, same
/// addresses).
class Coordinator {
 public:
  Coordinator(fs::path bin, fs::path dir, fs::path db, std::vector<std::string> extra_flags)
      : bin_(std::move(bin)), dir_(std::move(dir)), db_(std::move(db)),
        extra_(std::move(extra_flags)) {}

  /// Starts it and waits for the port file; false (log in `error`) if it does not come up.
  /// The first start tries up to three port pairs (another program can bind a chosen port
  /// before the coordinator does).
  bool Start(std::string* error) {
    if (grpc_port_ != 0) return StartOnce(error);
    for (int attempt = 0; attempt < 3; ++attempt) {
      grpc_port_ = PortBelowEphemeralRange();
      do {
        http_port_ = PortBelowEphemeralRange();
      } while (http_port_ != 0 && http_port_ == grpc_port_);
      if (StartOnce(error)) return true;
      std::cerr << "coordinator start on ports " << grpc_port_ << "/" << http_port_
                << " failed (try " << attempt + 1 << "): " << *error << "\n";
      grpc_port_ = 0;
      http_port_ = 0;
    }
    return false;
  }
  void Kill() {
    if (process_) process_->Kill();
  }
  Process* process() { return process_.get(); }
  fs::path log() const { return dir_ / "coordinator.log"; }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }

 private:
  bool StartOnce(std::string* error) {
    const fs::path ports = dir_ / "ports";
    fs::remove(ports);
    std::vector<std::string> args = {(bin_ / "paratune-coordinator").string(),
                                     "--bind",
                                     "127.0.0.1",
                                     "--grpc-port",
                                     std::to_string(grpc_port_),
                                     "--http-port",
                                     std::to_string(http_port_),
                                     "--db",
                                     db_.string(),
                                     "--port-file",
                                     ports.string()};
    args.insert(args.end(), extra_.begin(), extra_.end());
    process_ = std::make_unique<Process>(args, log());
    if (!process_->ok()) {
      *error = "cannot spawn the coordinator";
      return false;
    }
    // Generous for a loaded machine (CI runs tests side by side on two cores); a
    // coordinator that exits ends the wait at once.
    const bool up = PollUntil(
        [&] { return !ReadFile(ports).empty() || !process_->Alive(); }, 60000);
    std::istringstream in(ReadFile(ports));
    int grpc = 0, http = 0;
    in >> grpc >> http;
    if (!up || grpc <= 0) {
      *error = "the coordinator did not come up: " + ReadFile(log());
      return false;
    }
    grpc_port_ = grpc;
    http_port_ = http;
    return true;
  }

  fs::path bin_, dir_, db_;
  std::vector<std::string> extra_;
  int grpc_port_ = 0;
  int http_port_ = 0;
  std::unique_ptr<Process> process_;
};

/// Starts one CPU worker of devices 0 and 1 per name against the coordinator at `address`
/// (logs `<dir>/<name>.log`), appending them to `workers`, and waits until `paratune workers
/// --json` (run by `cli`) lists them all: a job submitted then is placed on every one.
/// False (with the reason in *error) when a worker does not start or the wait runs out.
inline bool StartCpuWorkers(const fs::path& bin, const std::string& address, const fs::path& dir,
                            const std::vector<std::string>& names,
                            const std::function<Output(const std::string&)>& cli,
                            std::vector<std::unique_ptr<Process>>* workers, std::string* error) {
  const auto registered = [&] {
    const nlohmann::json w = nlohmann::json::parse(cli("workers --json").out, nullptr, false);
    return !w.is_discarded() && w.contains("workers") && w["workers"].size() == names.size();
  };
  for (const std::string& name : names) {
    workers->push_back(std::make_unique<Process>(
        std::vector<std::string>{(bin / "paratune-worker").string(), "--coordinator", address,
                                 "--backend", "cpu", "--devices", "0,1", "--name", name,
                                 "--lease-wait-ms", "500"},
        dir / (name + ".log")));
    if (!workers->back()->ok()) {
      *error = "cannot spawn worker " + name;
      return false;
    }
  }
  if (!PollUntil(registered, 60000, 100)) {
    *error = "the workers did not register";
    return false;
  }
  return true;
}

}  // namespace paratune::e2e

#endif  // PARATUNE_TESTS_E2E_FAULT_HARNESS_H_
