// Faults with real processes on 127.0.0.1 (coordinator, CPU workers):
//   - a worker killed with SIGKILL in the middle of a task: the lease expires, another
//     worker takes the task, the job finishes with every task done exactly once;
//   - a worker stopped (SIGSTOP) while it holds a lease loses it; woken (SIGCONT), its late
//     report is not counted and it goes on to run the next job alone;
//   - the coordinator killed with SIGKILL while planning and while tasks are leased: after
//     a restart on the same database every job finishes, none lost or duplicated, and the
//     results equal those of an undisturbed coordinator (model mode is deterministic) or of
//     the profile cache (profile mode: the same measurements);
//   - a result the worker finished while the coordinator was down is accepted after the
//     restart (the task is not run again);
//   - the coordinator killed on first sight of COMPOSING (2 ms poll; skipped when never
//     seen) finishes the job after a restart;
//   - the database file is created 0600; a database that stops accepting writes
//     (chattr +i) or a full disk (16 MiB tmpfs; skipped where mount is not permitted) makes
//     requests fail with a message and the coordinator survives; a read-only database at
//     startup is a one-line error (exit 1);
//   - tokens never appear in the worker's, the CLI's or the coordinator's output.
#include <httplib.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <functional>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/fault_harness.h"

namespace paratune::e2e {
namespace {

using nlohmann::json;

/// A tiny model on the CPU device kind: workers measure its layers for real.
json TinyProfileSpec(int seq_length = 64) {
  json j = json::parse(R"({"name": "tiny-fault",
    "model": {"name": "tiny", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
              "vocab_size": 256},
    "training": {"seq_length": 64, "global_batch_size": 8, "precision": "fp32"},
    "cluster": {"gpu": "cpu", "num_gpus": 2, "gpus_per_node": 2},
    "search": {"mode": "profile", "top_k": 4}})");
  j["training"]["seq_length"] = seq_length;
  return j;
}

/// A model-mode job whose planning takes a noticeable time (about 20,000 candidates).
json BigModelSpec(int num_gpus) {
  return json{{"model", {{"preset", "gpt3-175b"}}},
              {"training", {{"seq_length", 2048}, {"global_batch_size", 1536}}},
              {"cluster", {{"gpu", "a100-80gb"}, {"num_gpus", num_gpus}}},
              {"search", {{"mode", "model"}, {"top_k", 10}}}};
}

int64_t Num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  return j[key].is_string() ? std::stoll(j[key].get<std::string>()) : j[key].get<int64_t>();
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    dir_ = TestDir("paratune_fault_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    db_ = dir_ / "coordinator.db";
  }
  void TearDown() override {
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void StartCoordinator(int profile_iters, int lease_timeout_ms = 2000) {
    if (!coordinator_) {
      coordinator_ = std::make_unique<Coordinator>(
          bin_, dir_, db_,
          std::vector<std::string>{"--lease-timeout-ms", std::to_string(lease_timeout_ms),
                                   "--heartbeat-interval-ms", "300", "--profile-warmup", "1",
                                   "--profile-iters", std::to_string(profile_iters)});
    }
    std::string error;
    ASSERT_TRUE(coordinator_->Start(&error)) << error;
    http_ = std::make_unique<httplib::Client>("127.0.0.1", coordinator_->http_port());
    http_->set_read_timeout(60, 0);
  }
  Process* StartWorker(const std::string& name) {
    workers_.push_back(std::make_unique<Process>(
        std::vector<std::string>{(bin_ / "paratune-worker").string(), "--coordinator",
                                 coordinator_->address(), "--backend", "cpu", "--devices",
                                 "0,1", "--name", name, "--lease-wait-ms", "500",
                                 "--backoff-max-ms", "500", "--heartbeat-interval-ms", "300"},
        dir_ / (name + ".log")));
    EXPECT_TRUE(workers_.back()->ok());
    return workers_.back().get();
  }
  json Get(const std::string& path) {
    auto res = http_->Get(path.c_str());
    json j = res ? json::parse(res->body, nullptr, false) : json();
    return j.is_object() ? j : json::object();  // never null: value() needs an object
  }
  std::string Submit(const json& spec) {
    auto res = http_->Post("/v1/jobs", spec.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return "";
    EXPECT_EQ(res->status, 200) << res->body;
    json job = json::parse(res->body, nullptr, false);
    return job.is_object() ? job.value("id", "") : "";
  }
  std::string State(const std::string& id) {
    json job = Get("/v1/jobs/" + id);
    return job.is_object() ? job.value("state", "") : "";
  }
  /// Waits for a final state; returns the job.
  json WaitDone(const std::string& id, int timeout_ms = 120000) {
    json job;
    PollUntil(
        [&] {
          job = Get("/v1/jobs/" + id);
          const std::string s = job.is_object() ? job.value("state", "") : "";
          return s == "JOB_STATE_SUCCEEDED" || s == "JOB_STATE_FAILED" ||
                 s == "JOB_STATE_CANCELLED";
        },
        timeout_ms, 100);
    return job;
  }
  /// The worker named `name` in GET /v1/workers (null when absent).
  json Worker(const std::string& name) {
    json w = Get("/v1/workers");
    if (w.is_object() && w.contains("workers")) {
      for (const json& x : w["workers"]) {
        if (x.value("name", "") == name) return x;
      }
    }
    return json::object();
  }
  /// (config, iteration time) per rank.
  std::vector<std::pair<std::string, double>> Ranking(const std::string& id) {
    std::vector<std::pair<std::string, double>> out;
    json results = Get("/v1/jobs/" + id + "/results");
    if (!results.is_object() || !results.contains("plan")) return out;
    for (const json& r : results["plan"]["ranked"]) {
      out.emplace_back(r["config"].dump(), r["iteration_time_s"].get<double>());
    }
    return out;
  }
  void ExpectAllMeasured(const std::string& id) {
    json results = Get("/v1/jobs/" + id + "/results");
    ASSERT_TRUE(results.is_object() && results.contains("plan")) << results.dump();
    ASSERT_GT(results["plan"]["ranked"].size(), 0u);
    for (const json& r : results["plan"]["ranked"]) EXPECT_EQ(r["source"], "measured");
  }
  /// Waits until `name` holds a lease; returns its task id.
  std::string WaitBusy(const std::string& name) {
    std::string task;
    PollUntil(
        [&] {
          json w = Worker(name);
          task = w.value("current_task_id", "");
          return !task.empty();
        },
        60000, 20);
    return task;
  }
  /// Pauses `worker` (SIGSTOP) in the middle of a task and returns that task's id ("" if it
  /// never held one). The lease seen before the pause can end before the signal lands (a
  /// short task reported in between), so the lease is read again after the pause, and once
  /// more 300 ms later (a report sent just before the pause has arrived by then); when it
  /// changed, the worker is woken and caught on a later task.
  std::string StopWhileBusy(Process* worker, const std::string& name) {
    for (int attempt = 0; attempt < 20; ++attempt) {
      const std::string task = WaitBusy(name);
      if (task.empty()) return "";
      worker->Send(SIGSTOP);
      const std::string paused = Worker(name).value("current_task_id", "");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (paused == task && Worker(name).value("current_task_id", "") == task) return task;
      std::cerr << "task " << task << " ended as " << name << " was paused; trying again\n";
      worker->Send(SIGCONT);
    }
    return "";
  }

  fs::path bin_, dir_, db_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<httplib::Client> http_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(FaultTest, WorkerKilledMidTaskLosesItsLeaseAndAnotherWorkerFinishesTheJob) {
  StartCoordinator(/*profile_iters=*/20);
  Process* a = StartWorker("cpu-a");
  const std::string id = Submit(TinyProfileSpec());
  ASSERT_FALSE(id.empty());
  const std::string task = StopWhileBusy(a, "cpu-a");
  ASSERT_FALSE(task.empty()) << ReadFile(dir_ / "cpu-a.log");
  a->Kill();  // SIGKILL in the middle of `task`
  StartWorker("cpu-b");
  json job = WaitDone(id);
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  const int64_t total = Num(job["progress"], "tasks_total");
  EXPECT_GT(total, 0);
  EXPECT_EQ(Num(job["progress"], "tasks_done"), total);  // each task counted once
  EXPECT_EQ(Num(job["progress"], "tasks_failed"), 0);
  ExpectAllMeasured(id);
  // cpu-b ran the task cpu-a died in (its log names it), after the lease expired.
  EXPECT_NE(ReadFile(dir_ / "cpu-b.log").find("task " + task), std::string::npos);
  // The same spec again is served from the profile cache (no new task) and ranks
  // identically: the interrupted run stored the same measurements an undisturbed run
  // composes from.
  const std::string again = Submit(TinyProfileSpec());
  json cached = WaitDone(again);
  EXPECT_EQ(Num(cached["progress"], "tasks_cached"), total);
  EXPECT_EQ(Ranking(again), Ranking(id));
}

TEST_F(FaultTest, StoppedWorkerLosesItsLeaseItsLateReportIsIgnoredAndItRecovers) {
  StartCoordinator(/*profile_iters=*/20);
  Process* a = StartWorker("cpu-a");
  const std::string id = Submit(TinyProfileSpec());
  ASSERT_FALSE(id.empty());
  const std::string task = StopWhileBusy(a, "cpu-a");
  ASSERT_FALSE(task.empty()) << ReadFile(dir_ / "cpu-a.log");
  Process* b = StartWorker("cpu-b");
  json job = WaitDone(id);
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  const int64_t total = Num(job["progress"], "tasks_total");
  EXPECT_EQ(Num(job["progress"], "tasks_done"), total);
  EXPECT_NE(ReadFile(dir_ / "cpu-b.log").find("task " + task), std::string::npos);
  const auto ranking = Ranking(id);

  a->Send(SIGCONT);  // wakes with a stale lease and finishes its task late
  const fs::path a_log = dir_ / "cpu-a.log";
  EXPECT_TRUE(PollUntil(
      [&] {
        const std::string log = ReadFile(a_log);
        return log.find("report of task " + task) != std::string::npos ||
               log.find("dropping the result of task " + task) != std::string::npos ||
               log.find("re-registering") != std::string::npos;
      },
      60000))
      << ReadFile(a_log);
  // The late report changed nothing: same counts, same ranking.
  json after = Get("/v1/jobs/" + id);
  EXPECT_EQ(Num(after["progress"], "tasks_done"), total);
  EXPECT_EQ(after.value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(Ranking(id), ranking);

  // cpu-a recovers: alone, it runs a new job (another sequence length: no cache hits).
  b->Kill();
  const std::string next = Submit(TinyProfileSpec(/*seq_length=*/32));
  json done = WaitDone(next);
  EXPECT_EQ(done.value("state", ""), "JOB_STATE_SUCCEEDED") << done.dump() << ReadFile(a_log);
  // At least one task is new (the shorter sequence changes the layer shapes).
  EXPECT_GT(Num(done["progress"], "tasks_total") - Num(done["progress"], "tasks_cached"), 0);
  EXPECT_EQ(Num(done["progress"], "tasks_done"), Num(done["progress"], "tasks_total"));
}

TEST_F(FaultTest, CoordinatorKilledWhilePlanningFinishesEveryJobAfterRestart) {
  StartCoordinator(/*profile_iters=*/3);
  // Three big model-mode jobs: planned one after another, so one is PLANNING for a while.
  std::vector<std::string> ids;
  for (int gpus : {3072, 2048, 1536}) ids.push_back(Submit(BigModelSpec(gpus)));
  bool seen = false;
  PollUntil(
      [&] {
        for (const std::string& id : ids) seen = seen || State(id) == "JOB_STATE_PLANNING";
        return seen;
      },
      60000, 5);
  ASSERT_TRUE(seen) << "no job was seen in PLANNING";
  coordinator_->Kill();

  StartCoordinator(/*profile_iters=*/3);
  std::vector<std::vector<std::pair<std::string, double>>> rankings;
  for (const std::string& id : ids) {
    json job = WaitDone(id);
    EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
    rankings.push_back(Ranking(id));
    EXPECT_FALSE(rankings.back().empty());
  }
  // Exactly these three jobs: none lost, none duplicated.
  json list = Get("/v1/jobs?page_size=100");
  std::multiset<std::string> listed;
  for (const json& j : list["jobs"]) listed.insert(j.value("id", ""));
  EXPECT_EQ(listed, std::multiset<std::string>(ids.begin(), ids.end()));

  // An undisturbed coordinator on a fresh database plans the same results.
  coordinator_.reset();
  db_ = dir_ / "fresh.db";
  StartCoordinator(/*profile_iters=*/3);
  int i = 0;
  for (int gpus : {3072, 2048, 1536}) {
    const std::string id = Submit(BigModelSpec(gpus));
    EXPECT_EQ(WaitDone(id).value("state", ""), "JOB_STATE_SUCCEEDED");
    EXPECT_EQ(Ranking(id), rankings[i++]) << gpus << " GPUs";
  }
}

TEST_F(FaultTest, CoordinatorKilledWhileTasksAreLeasedLosesNoResult) {
  StartCoordinator(/*profile_iters=*/20);
  StartWorker("cpu-a");
  const std::string id = Submit(TinyProfileSpec());
  ASSERT_FALSE(id.empty());
  // Kill while a task is leased and at least one result is stored.
  ASSERT_TRUE(PollUntil(
      [&] {
        json job = Get("/v1/jobs/" + id);
        return job.is_object() && Num(job["progress"], "tasks_done") >= 1 &&
               !Worker("cpu-a").value("current_task_id", "").empty();
      },
      90000, 20))
      << ReadFile(coordinator_->log());
  const int64_t done_before = Num(Get("/v1/jobs/" + id)["progress"], "tasks_done");
  coordinator_->Kill();
  StartCoordinator(/*profile_iters=*/20);
  // Stored results survive the restart at once (before any new report).
  EXPECT_GE(Num(Get("/v1/jobs/" + id)["progress"], "tasks_done"), done_before);
  json job = WaitDone(id);
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  const int64_t total = Num(job["progress"], "tasks_total");
  EXPECT_EQ(Num(job["progress"], "tasks_done"), total);
  EXPECT_EQ(Num(job["progress"], "tasks_failed"), 0);
  ExpectAllMeasured(id);
  const std::string again = Submit(TinyProfileSpec());
  EXPECT_EQ(Num(WaitDone(again)["progress"], "tasks_cached"), total);
  EXPECT_EQ(Ranking(again), Ranking(id));
}

TEST_F(FaultTest, AResultFinishedWhileTheCoordinatorWasDownIsAcceptedAfterRestart) {
  // 100 timed steps: a layer task takes seconds, so the kill lands while it runs.
  StartCoordinator(/*profile_iters=*/100);
  StartWorker("cpu-a");
  const std::string id = Submit(TinyProfileSpec());
  ASSERT_FALSE(id.empty());
  const std::string task = WaitBusy("cpu-a");
  ASSERT_FALSE(task.empty()) << ReadFile(coordinator_->log());
  const fs::path worker_log = dir_ / "cpu-a.log";
  coordinator_->Kill();
  const size_t killed_at = ReadFile(worker_log).size();
  // The worker finishes the task with nobody to report to and keeps the result.
  const std::string finished = "task " + task + ": OUTCOME_OK";
  ASSERT_TRUE(PollUntil(
      [&] { return ReadFile(worker_log).find(finished, killed_at) != std::string::npos; },
      60000, 50))
      << ReadFile(worker_log);
  StartCoordinator(/*profile_iters=*/100);
  json job = WaitDone(id);
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  EXPECT_EQ(Num(job["progress"], "tasks_done"), Num(job["progress"], "tasks_total"));
  const std::string log = ReadFile(worker_log);
  // The report counted: not refused as "not leased", and the task was not run again.
  EXPECT_EQ(log.find("not accepted"), std::string::npos) << log;
  EXPECT_EQ(log.find("task " + task + " attempt 2"), std::string::npos) << log;
}

TEST_F(FaultTest, CoordinatorKilledWhileComposingFinishesTheJobAfterRestart) {
  // No test-only delay flag: the state is polled every 2 ms and the coordinator killed on
  // first sight of COMPOSING. Up to eight jobs (different shapes, so no cache hits) are
  // tried; when COMPOSING is never seen (shorter than a poll), the test says so and skips.
  StartCoordinator(/*profile_iters=*/3);
  StartWorker("cpu-a");
  std::string id;
  int seq_length = 0;
  bool seen = false;
  for (int attempt = 0; attempt < 8 && !seen; ++attempt) {
    seq_length = 64 + 32 * attempt;
    id = Submit(TinyProfileSpec(seq_length));
    ASSERT_FALSE(id.empty());
    PollUntil(
        [&] {
          const std::string s = State(id);
          seen = s == "JOB_STATE_COMPOSING";
          return seen || s == "JOB_STATE_SUCCEEDED" || s == "JOB_STATE_FAILED";
        },
        120000, 2);
  }
  if (!seen) GTEST_SKIP() << "COMPOSING was never seen by a 2 ms poll";
  coordinator_->Kill();
  StartCoordinator(/*profile_iters=*/3);
  json job = WaitDone(id);
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  const int64_t total = Num(job["progress"], "tasks_total");
  EXPECT_EQ(Num(job["progress"], "tasks_done"), total);
  EXPECT_EQ(Num(job["progress"], "tasks_failed"), 0);
  ExpectAllMeasured(id);
  // The ranking is composed from the stored measurements: a cached resubmission agrees.
  const std::string again = Submit(TinyProfileSpec(seq_length));
  EXPECT_EQ(Num(WaitDone(again)["progress"], "tasks_cached"), total);
  EXPECT_EQ(Ranking(again), Ranking(id));
}

TEST_F(FaultTest, TokensNeverAppearInWorkerOrCliOutput) {
  const std::string client_token = "client-tok-5d81c0e2a7";
  const std::string worker_token = "worker-tok-94be31f06c";
  const std::string wrong_token = "wrong-tok-0c6e2d9a11";
  std::ofstream(dir_ / "client.token") << client_token << "\n";
  std::ofstream(dir_ / "worker.token") << worker_token << "\n";
  std::ofstream(dir_ / "wrong.token") << wrong_token << "\n";
  coordinator_ = std::make_unique<Coordinator>(
      bin_, dir_, db_,
      std::vector<std::string>{"--client-token-file", (dir_ / "client.token").string(),
                               "--worker-token-file", (dir_ / "worker.token").string(),
                               "--profile-warmup", "1", "--profile-iters", "3"});
  std::string error;
  ASSERT_TRUE(coordinator_->Start(&error)) << error;
  const std::string cli = (bin_ / "paratune").string();
  const std::string at = " --coordinator " + coordinator_->address();
  const fs::path cli_log = dir_ / "cli.log";
  // A worker with the wrong token is refused (exit 1) and says so without the token.
  Process bad({(bin_ / "paratune-worker").string(), "--coordinator", coordinator_->address(),
               "--backend", "cpu", "--devices", "0", "--name", "bad", "--token-file",
               (dir_ / "wrong.token").string()},
              dir_ / "bad.log");
  ASSERT_TRUE(PollUntil([&] { return !bad.Alive(); }, 60000)) << ReadFile(dir_ / "bad.log");
  EXPECT_EQ(WEXITSTATUS(bad.exit_status()), 1);
  // The CLI with the wrong token (exit 1), the worker's token (wrong role), and the right
  // one; and a worker with the right token doing a job.
  EXPECT_EQ(RunCommand(cli + " workers --token-file " + (dir_ / "wrong.token").string() + at,
                       cli_log).exit_code, 1);
  EXPECT_EQ(RunCommand(cli + " workers --token-file " + (dir_ / "worker.token").string() + at,
                       cli_log).exit_code, 1);
  Process good({(bin_ / "paratune-worker").string(), "--coordinator", coordinator_->address(),
                "--backend", "cpu", "--devices", "0,1", "--name", "good", "--token-file",
                (dir_ / "worker.token").string(), "--lease-wait-ms", "500"},
               dir_ / "good.log");
  const fs::path spec = dir_ / "tiny.json";
  std::ofstream(spec) << TinyProfileSpec().dump();
  const Output run = RunCommand(cli + " submit --watch --spec " + spec.string() +
                                    " --token-file " + (dir_ / "client.token").string() + at,
                                cli_log);
  EXPECT_EQ(run.exit_code, 0) << ReadFile(cli_log);
  good.Kill();
  const std::string logs = ReadFile(dir_ / "bad.log") + ReadFile(dir_ / "good.log") +
                           ReadFile(cli_log) + run.out + ReadFile(coordinator_->log());
  EXPECT_NE(ReadFile(dir_ / "bad.log").find("invalid worker token"), std::string::npos)
      << ReadFile(dir_ / "bad.log");
  for (const std::string& token : {client_token, worker_token, wrong_token}) {
    EXPECT_EQ(logs.find(token), std::string::npos) << token << " appears in:\n" << logs;
  }
}

TEST_F(FaultTest, DatabaseFilesAreCreatedOwnerOnly) {
  StartCoordinator(/*profile_iters=*/3);
  ASSERT_FALSE(Submit(BigModelSpec(64)).empty());  // something written to the WAL
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const fs::path p = db_.string() + suffix;
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p << " has mode " << std::oct << (st.st_mode & 0777);
  }
}

TEST_F(FaultTest, UnwritableDatabaseFailsRequestsWithAMessageAndTheCoordinatorSurvives) {
  StartCoordinator(/*profile_iters=*/3);
  const std::string first = Submit(BigModelSpec(64));
  ASSERT_EQ(WaitDone(first).value("state", ""), "JOB_STATE_SUCCEEDED");
  // chattr +i: even root cannot write the files, also through descriptors already open.
  // Not on tmpfs, where writes through the coordinator's open descriptors still succeed.
  struct statfs fs_info {};
  if (::statfs(dir_.c_str(), &fs_info) == 0 && fs_info.f_type == TMPFS_MAGIC) {
    GTEST_SKIP() << dir_ << " is on tmpfs: chattr +i does not stop writes through open files";
  }
  const std::string files = db_.string() + " " + db_.string() + "-wal";
  if (std::system(("chattr +i " + files + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "chattr +i is not available on " << dir_;
  }
  auto res = http_->Post("/v1/jobs", BigModelSpec(128).dump(), "application/json");
  const int status = res ? res->status : -1;
  const std::string body = res ? res->body : "";
  std::system(("chattr -i " + files).c_str());
  ASSERT_TRUE(res);
  EXPECT_GE(status, 500) << body;
  EXPECT_NE(body.find("sqlite"), std::string::npos) << body;
  EXPECT_TRUE(coordinator_->process()->Alive()) << ReadFile(coordinator_->log());
  // Writable again: the coordinator goes on.
  const std::string id = Submit(BigModelSpec(128));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitDone(id).value("state", ""), "JOB_STATE_SUCCEEDED");
}

TEST_F(FaultTest, FullDiskFailsRequestsWithAMessageAndTheCoordinatorSurvives) {
  // A 16 MiB tmpfs holds the database (mount needs root or CAP_SYS_ADMIN; skipped without).
  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  if (std::system(("mount -t tmpfs -o size=16m tmpfs " + small.string() + " 2>/dev/null")
                      .c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (not root?)";
  }
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } unmount{[&] {
    coordinator_.reset();
    std::system(("umount " + small.string()).c_str());
  }};
  db_ = small / "coordinator.db";
  StartCoordinator(/*profile_iters=*/3);
  const std::string first = Submit(BigModelSpec(64));
  ASSERT_EQ(WaitDone(first).value("state", ""), "JOB_STATE_SUCCEEDED");
  // Fill the rest of the file system, then submit jobs with a 20 KB spec (a Hugging Face
  // config padded with whitespace, under the 24 KiB bound) until the WAL cannot take one.
  const fs::path filler = small / "filler";
  std::system(("dd if=/dev/zero of=" + filler.string() + " bs=4k 2>/dev/null").c_str());
  json big = BigModelSpec(64);
  big["model"] = {{"hf_config_json",
                   R"({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
                       "num_attention_heads": 4, "intermediate_size": 512,
                       "vocab_size": 1024})" + std::string(20 * 1024, ' ')}};
  auto res = http_->Post("/v1/jobs", big.dump(), "application/json");
  for (int i = 1; i < 200 && res && res->status == 200; ++i) {
    res = http_->Post("/v1/jobs", big.dump(), "application/json");
  }
  ASSERT_TRUE(res) << "the coordinator did not answer";
  EXPECT_EQ(res->status, 500) << res->body;
  EXPECT_NE(res->body.find("database or disk is full"), std::string::npos) << res->body;
  EXPECT_TRUE(coordinator_->process()->Alive()) << ReadFile(coordinator_->log());
  // Small jobs on the full disk: each is refused at once or, when it still fits in the
  // WAL, reaches a final state (SUCCEEDED, or FAILED with "store: ..."); none hangs.
  for (int i = 0; i < 5; ++i) {
    auto r = http_->Post("/v1/jobs", BigModelSpec(64 << i).dump(), "application/json");
    ASSERT_TRUE(r);
    if (r->status != 200) continue;
    json job = WaitDone(json::parse(r->body).value("id", ""), 60000);
    const std::string state = job.value("state", "");
    EXPECT_TRUE(state == "JOB_STATE_SUCCEEDED" ||
                (state == "JOB_STATE_FAILED" &&
                 job.value("error", "").find("store: ") != std::string::npos))
        << job.dump().substr(0, 500);
  }
  // Space again: the same request is stored and the job runs.
  fs::remove(filler);
  res = http_->Post("/v1/jobs", big.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string id = json::parse(res->body).value("id", "");
  EXPECT_EQ(WaitDone(id).value("state", ""), "JOB_STATE_SUCCEEDED");
}

TEST_F(FaultTest, ReadOnlyDatabaseAtStartupIsAOneLineErrorNotACrash) {
  StartCoordinator(/*profile_iters=*/3);  // creates the database
  coordinator_.reset();
  const std::string files = db_.string() + "*";
  if (std::system(("chattr +i " + files + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "chattr +i is not available on " << dir_;
  }
  Process p({(bin_ / "paratune-coordinator").string(), "--bind", "127.0.0.1", "--grpc-port",
             "0", "--http-port", "-1", "--db", db_.string()},
            dir_ / "readonly.log");
  const bool exited = PollUntil([&] { return !p.Alive(); }, 60000);
  std::system(("chattr -i " + files).c_str());
  ASSERT_TRUE(exited) << "the coordinator kept running on a read-only database";
  ASSERT_TRUE(WIFEXITED(p.exit_status())) << "killed by a signal: " << p.exit_status();
  EXPECT_EQ(WEXITSTATUS(p.exit_status()), 1);
  const std::string log = ReadFile(dir_ / "readonly.log");
  EXPECT_NE(log.find("paratune-coordinator: "), std::string::npos) << log;
  EXPECT_NE(log.find("is read-only"), std::string::npos) << log;
}

}  // namespace
}  // namespace paratune::e2e
