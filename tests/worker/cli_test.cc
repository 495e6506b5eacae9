// The paratune-worker command line: --help lists every flag with its default, bad flags
// give one line and exit 2, an unreachable coordinator one line and exit 1, SIGTERM a
// clean exit 0.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/worker/fake_hub.h"

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// $PARATUNE_BIN_DIR/paratune-worker, else the path CMake compiled in.
std::string Binary() {
  const char* dir = std::getenv("PARATUNE_BIN_DIR");
  return dir != nullptr ? std::string(dir) + "/paratune-worker" : PARATUNE_WORKER_BIN;
}

// Runs a shell command line with stderr folded into stdout.
Outcome RunShell(const std::string& command) {
  Outcome out;
  FILE* pipe = popen(("{ " + command + "; } 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.output.append(buf.data(), n);
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

Outcome RunWorker(const std::string& args) { return RunShell(Binary() + " " + args); }

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(WorkerCliTest, HelpDocumentsEveryFlagWithItsDefault) {
  Outcome out = RunWorker("--help");
  EXPECT_EQ(out.exit_code, 0);
  for (const char* flag :
       {"--coordinator TEXT REQUIRED", "--token-file TEXT", "--tls ",
        "(default: off, plaintext)", "--tls-ca TEXT:FILE", "--backend TEXT:{auto,cuda,cpu}=auto",
        "--devices TEXT", "--device-kind TEXT", "--name TEXT",
        "--heartbeat-interval-ms INT:INT in [0 - 3600000]=0",
        "--lease-wait-ms INT:INT in [0 - 3600000]=2000",
        "--rpc-timeout-ms INT:INT in [1 - 3600000]=10000",
        "--connect-timeout-s FLOAT:FLOAT in [0 - 86400]=30",
        "--backoff-initial-ms INT:INT in [1 - 3600000]=100",
        "--backoff-max-ms INT:INT in [1 - 3600000]=5000",
        "--stop-grace-s FLOAT:FLOAT in [0 - 86400]=10"}) {
    EXPECT_NE(out.output.find(flag), std::string::npos) << flag << "\n" << out.output;
  }
  // Flags whose default is empty say what empty means.
  for (const char* empty : {"empty: no token", "empty: all", "empty: derived from",
                            "empty: the host name"}) {
    EXPECT_NE(out.output.find(empty), std::string::npos) << empty;
  }
}

TEST(WorkerCliTest, BadFlagsGiveOneLineAndExitTwo) {
  for (const std::string& args :
       {std::string(""), std::string("--coordinator h:1 --bogus"),
        std::string("--coordinator h:1 --backend tpu"),
        std::string("--coordinator h:1 --lease-wait-ms -5"),
        std::string("--coordinator h:1 --devices 3-1"),
        std::string("--coordinator h:1 --devices 0,0"),
        std::string("--coordinator h:1 --token-file /nonexistent/token"),
        std::string("--coordinator h:1 --tls-ca /nonexistent/ca.pem"),
        std::string("--coordinator h:1 --tls-ca /etc/hostname")}) {
    Outcome out = RunWorker(args);
    EXPECT_EQ(out.exit_code, 2) << args << ": " << out.output;
    EXPECT_EQ(Lines(out.output), 1) << args << ": " << out.output;
    EXPECT_EQ(out.output.rfind("paratune-worker: error: ", 0), 0u) << out.output;
  }
  EXPECT_EQ(RunWorker("--coordinator h:1 --devices 3-1").output,
            "paratune-worker: error: --devices: '3-1' is not a range LO-HI with LO <= HI "
            "(see --help)\n");
  EXPECT_EQ(RunWorker("--coordinator h:1 --devices 0,0").output,
            "paratune-worker: error: devices lists 0 twice (see --help)\n");
}

TEST(WorkerCliTest, UnreachableCoordinatorGivesOneLineAndExitOne) {
  // Port 1 on loopback: nothing listens there (connection refused).
  Outcome out = RunWorker("--coordinator 127.0.0.1:1 --connect-timeout-s 0.3 --backend cpu");
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_EQ(Lines(out.output), 1) << out.output;
  EXPECT_EQ(out.output.rfind("paratune-worker: error: cannot reach coordinator 127.0.0.1:1 "
                             "after 0.3 s: ",
                             0),
            0u)
      << out.output;
}

TEST(WorkerCliTest, SigtermDuringStartupRetriesExitsZero) {
  // Retry forever, then SIGTERM 1 s after the worker has its SIGTERM handler: Stop() ends
  // the retries, exit 0. A fixed 1 s from the start was not enough on a loaded machine: a
  // SIGTERM before the handler is installed kills the process (exit 143, no output). The
  // handler shows in /proc/PID/status as bit 14 (SIGTERM - 1) of SigCgt; up to 60 s.
  Outcome out = RunShell(Binary() +
                         " --coordinator 127.0.0.1:1 --connect-timeout-s 0 & pid=$!; "
                         "i=0; while [ $i -lt 600 ]; do "
                         "c=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null); "
                         "[ -n \"$c\" ] && [ $(( 0x${c#${c%????}} & 0x4000 )) -ne 0 ] && break; "
                         "i=$((i + 1)); sleep 0.1; done; "
                         "sleep 1; kill -TERM $pid; wait $pid");
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.output, "paratune-worker: SIGTERM: stopping\n");
}

TEST(WorkerCliTest, SigtermWhileServingDeregistersAndExitsZero) {
  paratune::worker::testing::HubServer server(0, "tok");
  const std::string dir = ::testing::TempDir();
  // Names with the pid: another run of the suite on this machine must not share them.
  const std::string token_file = dir + "/worker_cli_token_" + std::to_string(::getpid());
  const std::string log_file = dir + "/worker_cli_log_" + std::to_string(::getpid());
  std::ofstream(token_file) << "tok\n";

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  const std::string binary = Binary();
  std::vector<std::string> args = {binary,          "--coordinator", server.address(),
                                   "--token-file",  token_file,      "--backend",
                                   "cpu",           "--devices",     "0-1",
                                   "--name",        "cli-worker",    "--lease-wait-ms",
                                   "100"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);

  paratune::worker::testing::FakeHub& hub = server.hub();
  const bool registered = hub.WaitFor([&] { return hub.registers_unlocked().size() == 1; });
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(registered);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(hub.deregistered(), std::vector<std::string>{"w1"});
  const auto regs = hub.registers();
  EXPECT_EQ(regs[0].worker().name(), "cli-worker");
  EXPECT_EQ(regs[0].worker().devices_size(), 2);
  for (const std::string& auth : hub.auth_seen()) EXPECT_EQ(auth, "Bearer tok");
  std::stringstream log;
  log << std::ifstream(log_file).rdbuf();
  EXPECT_NE(log.str().find("paratune-worker: registered as w1"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("paratune-worker: SIGTERM: stopping"), std::string::npos);
  EXPECT_NE(log.str().find("paratune-worker: deregistered w1"), std::string::npos);
  std::remove(token_file.c_str());
  std::remove(log_file.c_str());
}

}  // namespace
