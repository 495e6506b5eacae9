// The paratune-worker command line: --help lists every flag with its default, bad flags
// give one line and exit 2, an unreachable coordinator one line and exit 1, SIGTERM a
// clean exit 0.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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
       {"--coordinator TEXT REQUIRED", "--token-file TEXT", "--backend TEXT:{auto,cuda,cpu}=auto",
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
        std::string("--coordinator h:1 --token-file /nonexistent/token")}) {
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
  // Retry forever, then SIGTERM after 300 ms: Stop() ends the retries, exit 0.
  Outcome out = RunShell(Binary() +
                         " --coordinator 127.0.0.1:1 --connect-timeout-s 0 & pid=$!; "
                         "sleep 0.3; kill -TERM $pid; wait $pid");
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.output, "paratune-worker: SIGTERM: stopping\n");
}

}  // namespace
