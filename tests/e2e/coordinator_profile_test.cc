// The coordinator, two CPU workers and the CLI as real processes on 127.0.0.1:
//   - a profile job submitted with `paratune submit`, watched to SUCCEEDED with
//     `paratune watch`, every ranked layout measured; the identical second job is served
//     from the profile cache (zero new tasks) with the same ranking;
//   - durability: the coordinator is killed with SIGKILL while a profile job runs and
//     restarted on the same database; the job finishes, and its ranking equals the one an
//     uninterrupted job composes from the same measurements; a `paratune watch` started
//     before the crash reconnects and ends with exit code 0;
//   - a profile job submitted over REST is served identically over gRPC (the CLI) and REST.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/fault_harness.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using paratune::e2e::Output;
using paratune::e2e::PollUntil;
using paratune::e2e::Process;
using paratune::e2e::ReadFile;
using paratune::e2e::RunCommand;

class CoordinatorProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("PARATUNE_BIN_DIR");
    ASSERT_NE(bin, nullptr) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    bin_ = bin;
    for (const char* b : {"paratune", "paratune-coordinator", "paratune-worker"}) {
      ASSERT_TRUE(fs::exists(bin_ / b)) << bin_ / b;
    }
    dir_ = fs::temp_directory_path() /
           ("paratune_e2e_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A tiny model on the CPU device kind: workers measure its layers for real.
    spec_ = dir_ / "tiny.yaml";
    std::ofstream(spec_) << R"(name: tiny-e2e
model: {name: tiny, num_layers: 4, hidden_size: 64, num_attention_heads: 4, vocab_size: 256}
training: {seq_length: 64, global_batch_size: 8, precision: fp32}
cluster: {gpu: cpu, num_gpus: 2, gpus_per_node: 2}
search: {mode: profile, top_k: 4}
)";
    db_ = dir_ / "coordinator.db";
    err_ = dir_ / "cli.log";
  }
  void TearDown() override {
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  /// Starts the coordinator; the first start picks a gRPC port below the kernel's
  /// ephemeral range (remembered for restarts: nothing else can be handed it while the
  /// coordinator is down), trying up to three.
  void StartCoordinator(int profile_iters, bool http = false) {
    const bool first = port_ == 0;
    int port = 0;
    for (int attempt = 0; attempt < (first ? 3 : 1) && port <= 0; ++attempt) {
      if (first) port_ = paratune::e2e::PortBelowEphemeralRange();
      const fs::path ports = dir_ / "ports";
      fs::remove(ports);
      coordinator_ = std::make_unique<Process>(
          std::vector<std::string>{(bin_ / "paratune-coordinator").string(), "--bind",
                                   "127.0.0.1", "--grpc-port", std::to_string(port_),
                                   "--http-port", http ? "0" : "-1", "--db", db_.string(),
                                   "--port-file",
                                   ports.string(), "--lease-timeout-ms", "3000",
                                   "--heartbeat-interval-ms", "300", "--profile-warmup", "1",
                                   "--profile-iters", std::to_string(profile_iters)},
          dir_ / "coordinator.log");
      ASSERT_TRUE(coordinator_->ok());
      // A deadline generous for a loaded machine (CI runs tests side by side on two cores);
      // a coordinator that exits ends the wait at once.
      PollUntil([&] { return !ReadFile(ports).empty() || !coordinator_->Alive(); }, 60000);
      std::istringstream in(ReadFile(ports));
      in >> port >> http_port_;
    }
    ASSERT_GT(port, 0) << ReadFile(dir_ / "coordinator.log");
    port_ = port;
  }
  void StartWorker(const std::string& name) {
    workers_.push_back(std::make_unique<Process>(
        std::vector<std::string>{(bin_ / "paratune-worker").string(), "--coordinator",
                                 Address(), "--backend", "cpu", "--devices", "0,1", "--name",
                                 name, "--lease-wait-ms", "500", "--backoff-max-ms", "500"},
        dir_ / (name + ".log")));
    ASSERT_TRUE(workers_.back()->ok());
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  Output Cli(const std::string& args) {
    return RunCommand((bin_ / "paratune").string() + " " + args + " --coordinator " + Address(), err_);
  }
  std::string Submit() {
    Output o = Cli("submit --spec " + spec_.string());
    EXPECT_EQ(o.exit_code, 0) << ReadFile(err_);
    std::string id = o.out;
    id.erase(id.find_last_not_of("\n") + 1);
    return id;
  }
  /// The last Job `paratune watch --json` printed; expects exit 0 (SUCCEEDED).
  json Watch(const std::string& id) {
    Output o = Cli("watch " + id + " --json");
    EXPECT_EQ(o.exit_code, 0) << o.out << ReadFile(err_);
    std::string last;
    std::istringstream lines(o.out);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) last = line;
    }
    return json::parse(last, nullptr, false);
  }
  json Results(const std::string& id) {
    Output o = Cli("results " + id + " --json");
    EXPECT_EQ(o.exit_code, 0) << ReadFile(err_);
    return json::parse(o.out, nullptr, false);
  }
  static int64_t Num(const json& j, const char* key) {
    if (!j.contains(key)) return 0;
    return j[key].is_string() ? std::stoll(j[key].get<std::string>()) : j[key].get<int64_t>();
  }
  /// `j` with every field at its proto default (false, 0, "0", "", empty) removed.
  static json WithoutDefaults(const json& j) {
    if (j.is_object()) {
      json out = json::object();
      for (auto it = j.begin(); it != j.end(); ++it) {
        json v = WithoutDefaults(it.value());
        const bool is_default = v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
                                (v.is_number() && v.get<double>() == 0) ||
                                (v.is_string() && (v == "" || v == "0")) ||
                                ((v.is_object() || v.is_array()) && v.empty());
        if (!is_default) out[it.key()] = v;
      }
      return out;
    }
    if (j.is_array()) {
      json out = json::array();
      for (const json& e : j) out.push_back(WithoutDefaults(e));
      return out;
    }
    return j;
  }
  /// (config, iteration time) per rank.
  static std::vector<std::pair<std::string, double>> Ranking(const json& results) {
    std::vector<std::pair<std::string, double>> out;
    for (const json& r : results["plan"]["ranked"]) {
      out.emplace_back(r["config"].dump(), r["iteration_time_s"].get<double>());
    }
    return out;
  }

  fs::path bin_, dir_, spec_, db_, err_;
  int port_ = 0;
  int http_port_ = -1;
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(CoordinatorProfileTest, TwoWorkersProfileAJobAndTheSecondJobComesFromTheCache) {
  StartCoordinator(/*profile_iters=*/3);
  StartWorker("cpu-a");
  StartWorker("cpu-b");
  // Both registered before the job: on a loaded machine a worker that starts slowly could
  // otherwise miss a short job and be absent from the list checked after it.
  ASSERT_TRUE(PollUntil(
      [&] {
        json w = json::parse(Cli("workers --json").out, nullptr, false);
        return !w.is_discarded() && w.contains("workers") && w["workers"].size() == 2;
      },
      60000, 100))
      << Cli("workers").out;
  const std::string first = Submit();
  ASSERT_FALSE(first.empty());
  json job = Watch(first);
  ASSERT_FALSE(job.is_discarded());
  EXPECT_EQ(job["state"], "JOB_STATE_SUCCEEDED") << job.dump();
  const json& progress = job["progress"];
  const int64_t total = Num(progress, "tasks_total");
  EXPECT_GT(total, 0);
  EXPECT_EQ(Num(progress, "tasks_done"), total);
  EXPECT_EQ(Num(progress, "tasks_cached"), 0);
  json results = Results(first);
  ASSERT_FALSE(results.is_discarded());
  ASSERT_GT(results["plan"]["ranked"].size(), 0u);
  for (const json& r : results["plan"]["ranked"]) {
    EXPECT_EQ(r["source"], "measured");
    // The stage-extras and optimizer tasks were measured and composed, not modelled.
    EXPECT_NE(r["notes"].dump().find("measured parts: layers, embedding, logits, optimizer"),
              std::string::npos)
        << r["notes"].dump();
  }

  // Both workers registered; both ran tasks or at least took part.
  Output workers = Cli("workers --json");
  ASSERT_EQ(workers.exit_code, 0);
  json w = json::parse(workers.out, nullptr, false);
  EXPECT_EQ(w["workers"].size(), 2u) << workers.out;

  const std::string second = Submit();
  json again = Watch(second);
  EXPECT_EQ(again["state"], "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(Num(again["progress"], "tasks_total"), total);
  EXPECT_EQ(Num(again["progress"], "tasks_cached"), total);  // zero new tasks
  EXPECT_EQ(Ranking(Results(second)), Ranking(results));

  // The human-readable forms end the same way.
  Output table = Cli("results " + first);
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("measured"), std::string::npos) << table.out;
  EXPECT_EQ(Cli("results job-does-not-exist").exit_code, 1);
}

TEST_F(CoordinatorProfileTest, KilledCoordinatorRestartsOnTheSameDatabaseAndFinishesTheJob) {
  // More timed steps (20) so that the job is still running when the coordinator dies.
  StartCoordinator(/*profile_iters=*/20);
  StartWorker("cpu-a");
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  // Wait until the first task is done, then kill -9.
  bool started = false;
  for (int i = 0; i < 300 && !started; ++i) {
    Output o = Cli("jobs --json");
    json jobs = json::parse(o.out, nullptr, false);
    if (!jobs.is_discarded() && jobs.contains("jobs") && !jobs["jobs"].empty()) {
      const json& j = jobs["jobs"][0];
      ASSERT_NE(j["state"], "JOB_STATE_SUCCEEDED") << "the job ended before the kill";
      started = Num(j.value("progress", json::object()), "tasks_done") >= 1;
    }
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(started) << ReadFile(dir_ / "coordinator.log");
  // A watcher started before the crash reconnects to the restarted coordinator.
  // It must have seen the job before the kill (only a watch that has seen the job retries
  // an UNAVAILABLE coordinator): wait for its first line, not a fixed pause, which a loaded
  // machine can outlast while the watch is still starting.
  Process watcher({(bin_ / "paratune").string(), "watch", id, "--coordinator", Address()},
                  dir_ / "watch.log");
  ASSERT_TRUE(PollUntil([&] { return !ReadFile(dir_ / "watch.log").empty(); }, 60000));
  coordinator_->Kill();

  StartCoordinator(/*profile_iters=*/20);  // same port, same database
  EXPECT_EQ(watcher.Wait(), 0) << ReadFile(dir_ / "watch.log");
  EXPECT_NE(ReadFile(dir_ / "watch.log").find("SUCCEEDED"), std::string::npos);
  json job = Watch(id);
  EXPECT_EQ(job["state"], "JOB_STATE_SUCCEEDED") << job.dump();
  const int64_t total = Num(job["progress"], "tasks_total");
  EXPECT_EQ(Num(job["progress"], "tasks_done"), total);
  EXPECT_EQ(Num(job["progress"], "tasks_failed"), 0);
  const json recovered = Results(id);
  for (const json& r : recovered["plan"]["ranked"]) EXPECT_EQ(r["source"], "measured");

  // An uninterrupted job on the same measurements (all from the cache) ranks identically.
  const std::string fresh = Submit();
  json again = Watch(fresh);
  EXPECT_EQ(Num(again["progress"], "tasks_cached"), total);
  EXPECT_EQ(Ranking(Results(fresh)), Ranking(recovered));
}

}  // namespace

namespace {

TEST_F(CoordinatorProfileTest, CliExitCodesForCancelledJobsBadSpecsAndNoCoordinator) {
  StartCoordinator(/*profile_iters=*/3);
  // No worker: the profile job waits in PROFILING until it is cancelled.
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  Output cancel = Cli("cancel " + id + " --json");
  EXPECT_EQ(cancel.exit_code, 0) << ReadFile(err_);
  EXPECT_NE(cancel.out.find("JOB_STATE_CANCELLED"), std::string::npos) << cancel.out;
  EXPECT_EQ(Cli("watch " + id).exit_code, 1);      // ended, but not SUCCEEDED
  EXPECT_EQ(Cli("cancel " + id).exit_code, 1);     // FAILED_PRECONDITION: already ended
  EXPECT_EQ(Cli("results " + id).exit_code, 1);    // no results
  const fs::path bad = dir_ / "bad.yaml";
  std::ofstream(bad) << "model: {preset: gpt3-175b}\ncluster: {gpu: a100-80gb, num_gpus: 0}\n";
  EXPECT_EQ(Cli("submit --spec " + bad.string()).exit_code, 2);
  EXPECT_EQ(Cli("submit --spec " + (dir_ / "missing.yaml").string()).exit_code, 2);
  Output unreachable = RunCommand(
      (bin_ / "paratune").string() + " workers --coordinator 127.0.0.1:1", err_);
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_NE(ReadFile(err_).find("cannot reach the coordinator at 127.0.0.1:1"),
            std::string::npos);
}

TEST_F(CoordinatorProfileTest, TuneRunsCoordinatorAndWorkerInOneProcess) {
  const fs::path db = dir_ / "tune.db";
  Output first = RunCommand((bin_ / "paratune").string() + " tune --spec " + spec_.string() +
                                " --db " + db.string() + " --json",
                            err_);
  ASSERT_EQ(first.exit_code, 0) << ReadFile(err_);
  json results = json::parse(first.out, nullptr, false);
  ASSERT_FALSE(results.is_discarded()) << first.out;
  ASSERT_GT(results["plan"]["ranked"].size(), 0u);
  for (const json& r : results["plan"]["ranked"]) EXPECT_EQ(r["source"], "measured");
  // The SQLite file keeps the profile cache: a second run measures nothing new.
  Output second = RunCommand((bin_ / "paratune").string() + " tune --spec " + spec_.string() +
                                 " --db " + db.string() + " --json",
                             err_);
  ASSERT_EQ(second.exit_code, 0);
  EXPECT_EQ(Ranking(json::parse(second.out)), Ranking(results));
  // Model mode needs no worker and answers at once.
  Output model = RunCommand((bin_ / "paratune").string() + " tune --spec " + spec_.string() +
                                " --mode model --db " + db.string(),
                            err_);
  EXPECT_EQ(model.exit_code, 0);
  EXPECT_NE(model.out.find("0 measured"), std::string::npos) << model.out;
}


TEST_F(CoordinatorProfileTest, RestSubmittedJobIsServedIdenticallyOverGrpcAndRest) {
  StartCoordinator(/*profile_iters=*/2, /*http=*/true);
  ASSERT_GT(http_port_, 0) << ReadFile(dir_ / "coordinator.log");
  StartWorker("cpu-a");
  StartWorker("cpu-b");
  httplib::Client rest("127.0.0.1", http_port_);
  rest.set_read_timeout(30, 0);
  // The same tiny model as the YAML spec, in the REST form (proto JSON mapping).
  const json body = {
      {"spec",
       {{"name", "tiny-rest"},
        {"model",
         {{"name", "tiny"}, {"num_layers", 4}, {"hidden_size", 64},
          {"num_attention_heads", 4}, {"vocab_size", 256}}},
        {"training", {{"seq_length", 64}, {"global_batch_size", 8}, {"precision", "fp32"}}},
        {"cluster", {{"gpu", "cpu"}, {"num_gpus", 2}, {"gpus_per_node", 2}}},
        {"search", {{"mode", "profile"}, {"top_k", 4}}}}}};
  auto posted = rest.Post("/v1/jobs", body.dump(), "application/json");
  ASSERT_TRUE(posted) << httplib::to_string(posted.error());
  ASSERT_EQ(posted->status, 200) << posted->body;
  const json job = json::parse(posted->body, nullptr, false);
  ASSERT_TRUE(job.contains("id")) << posted->body;
  const std::string id = job["id"].get<std::string>();

  // Watched over gRPC to the end.
  json done = Watch(id);
  EXPECT_EQ(done["state"], "JOB_STATE_SUCCEEDED") << done.dump();

  // The results: `paratune results --json` (gRPC GetResults) and GET .../results (REST).
  const json over_grpc = Results(id);
  auto got = rest.Get("/v1/jobs/" + id + "/results");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  const json over_rest = json::parse(got->body, nullptr, false);
  ASSERT_FALSE(over_rest.is_discarded());
  ASSERT_GT(over_grpc["plan"]["ranked"].size(), 0u);
  for (const json& r : over_rest["plan"]["ranked"]) EXPECT_EQ(r["source"], "measured");
  // REST prints fields at their default values, the CLI omits them (both are the proto
  // JSON mapping); with defaults dropped the two must be equal to the last digit.
  EXPECT_EQ(WithoutDefaults(over_rest["plan"]["ranked"]),
            WithoutDefaults(over_grpc["plan"]["ranked"]));

  // And the job itself reads the same both ways.
  auto job_rest = rest.Get("/v1/jobs/" + id);
  ASSERT_TRUE(job_rest);
  EXPECT_EQ(json::parse(job_rest->body, nullptr, false)["state"], "JOB_STATE_SUCCEEDED");
}

}  // namespace
