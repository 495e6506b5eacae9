// The coordinator goes away for a minute (PARATUNE_FAULT_DOWNTIME_S, default 60) in the
// middle of a profile job and comes back on the same database and port: the workers keep
// retrying with backoff (they do not exit) and register again, a `paratune watch` started
// before the outage keeps retrying (250 ms doubling to 5 s, up to 300 s) and exits 0 when
// the job succeeds, and the job finishes with every task done once.
#include <httplib.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/fault_harness.h"

namespace paratune::e2e {
namespace {

using nlohmann::json;

constexpr char kSpec[] = R"(name: tiny-downtime
model: {name: tiny, num_layers: 4, hidden_size: 64, num_attention_heads: 4, vocab_size: 256}
training: {seq_length: 64, global_batch_size: 8, precision: fp32}
cluster: {gpu: cpu, num_gpus: 2, gpus_per_node: 2}
search: {mode: profile, top_k: 4}
)";

int64_t Num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  return j[key].is_string() ? std::stoll(j[key].get<std::string>()) : j[key].get<int64_t>();
}

class DowntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    dir_ = TestDir("paratune_down_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    spec_ = dir_ / "tiny.yaml";
    std::ofstream(spec_) << kSpec;
    coordinator_ = std::make_unique<Coordinator>(
        bin_, dir_, dir_ / "coordinator.db",
        std::vector<std::string>{"--lease-timeout-ms", "3000", "--heartbeat-interval-ms", "300",
                                 "--profile-warmup", "1", "--profile-iters", "10"});
  }
  void TearDown() override {
    watch_.reset();
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  void Start() {
    std::string error;
    ASSERT_TRUE(coordinator_->Start(&error)) << error;
    http_ = std::make_unique<httplib::Client>("127.0.0.1", coordinator_->http_port());
    http_->set_read_timeout(60, 0);  // httplib's 5 s: too short on a loaded machine
  }
  void StartWorker(const std::string& name) {
    // The worker's default backoff: 100 ms doubling to 5 s.
    workers_.push_back(std::make_unique<Process>(
        std::vector<std::string>{(bin_ / "paratune-worker").string(), "--coordinator",
                                 coordinator_->address(), "--backend", "cpu", "--devices", "0,1",
                                 "--name", name, "--lease-wait-ms", "500"},
        dir_ / (name + ".log")));
  }
  json Job(const std::string& id) {
    auto res = http_->Get(("/v1/jobs/" + id).c_str());
    json j = res ? json::parse(res->body, nullptr, false) : json();
    return j.is_object() ? j : json::object();
  }
  std::string Submit() {
    const Output o = RunCommand((bin_ / "paratune").string() + " submit --spec " +
                                    spec_.string() + " --coordinator " + coordinator_->address(),
                                dir_ / "cli.log");
    EXPECT_EQ(o.exit_code, 0) << ReadFile(dir_ / "cli.log");
    std::string id = o.out;
    id.erase(id.find_last_not_of("\n") + 1);
    return id;
  }
  /// Waits until the job has at least one task done and not all.
  bool WaitMidJob(const std::string& id) {
    return PollUntil(
        [&] {
          json j = Job(id);
          return Num(j["progress"], "tasks_done") >= 1;
        },
        90000, 20);
  }
  json WaitDone(const std::string& id) {
    json j;
    PollUntil(
        [&] {
          j = Job(id);
          const std::string s = j.value("state", "");
          return s == "JOB_STATE_SUCCEEDED" || s == "JOB_STATE_FAILED";
        },
        180000, 100);
    return j;
  }

  fs::path bin_, dir_, spec_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<httplib::Client> http_;
  std::vector<std::unique_ptr<Process>> workers_;
  std::unique_ptr<Process> watch_;
};

TEST_F(DowntimeTest, WorkersAndWatchRetryThroughAMinuteOfDowntimeAndTheJobFinishes) {
  const char* env = std::getenv("PARATUNE_FAULT_DOWNTIME_S");
  const int downtime_s = env != nullptr ? std::atoi(env) : 60;
  Start();
  StartWorker("cpu-a");
  StartWorker("cpu-b");
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  const fs::path out = dir_ / "watch.out";
  watch_ = std::make_unique<Process>(
      std::vector<std::string>{(bin_ / "paratune").string(), "watch", id, "--json",
                               "--coordinator", coordinator_->address()},
      out);
  // The watch is following before the job is caught in the middle (a slow start of the
  // watch on a loaded machine must not let the job finish first).
  ASSERT_TRUE(PollUntil([&] { return !ReadFile(out).empty(); }, 60000));
  ASSERT_TRUE(WaitMidJob(id)) << ReadFile(coordinator_->log());
  // The workers are paused from the moment a task is seen done until the coordinator is
  // gone, so that the job cannot finish between that observation and the kill; they are
  // woken at once and go through the whole outage running.
  for (auto& w : workers_) w->Send(SIGSTOP);
  ASSERT_NE(Job(id).value("state", ""), "JOB_STATE_SUCCEEDED") << "the job ended too soon";
  coordinator_->Kill();
  for (auto& w : workers_) w->Send(SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(downtime_s));
  for (const char* name : {"cpu-a", "cpu-b"}) {
    const size_t i = std::string(name) == "cpu-a" ? 0 : 1;
    ASSERT_TRUE(workers_[i]->Alive())
        << "worker " << name << " gave up during the outage; its log:\n"
        << ReadFile(dir_ / (std::string(name) + ".log"));
  }
  ASSERT_TRUE(watch_->Alive()) << "paratune watch gave up during the outage: " << ReadFile(out);
  Start();
  ASSERT_TRUE(PollUntil([&] { return !watch_->Alive(); }, 180000)) << ReadFile(out);
  ASSERT_TRUE(WIFEXITED(watch_->exit_status()));
  EXPECT_EQ(WEXITSTATUS(watch_->exit_status()), 0) << ReadFile(out);
  EXPECT_NE(ReadFile(out).find("JOB_STATE_SUCCEEDED"), std::string::npos) << ReadFile(out);
  json job = WaitDone(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  const int64_t total = Num(job["progress"], "tasks_total");
  EXPECT_EQ(Num(job["progress"], "tasks_done"), total);
  EXPECT_EQ(Num(job["progress"], "tasks_failed"), 0);
  // Both workers noticed the outage and registered again.
  for (const char* name : {"cpu-a", "cpu-b"}) {
    const std::string log = ReadFile(dir_ / (std::string(name) + ".log"));
    EXPECT_NE(log.find("re-register"), std::string::npos) << name << ":\n" << log;
  }
  // Both are registered again (one may still be in its backoff, up to 5 s, when the
  // other has finished the job).
  std::string listed;
  EXPECT_TRUE(PollUntil(
      [&] {
        auto workers = http_->Get("/v1/workers");
        if (!workers) return false;
        listed = workers->body;
        const json w = json::parse(listed, nullptr, false);
        if (!w.is_object() || !w.contains("workers")) return false;
        int alive = 0;
        for (const json& x : w["workers"]) alive += x.value("state", "") != "lost";
        return alive >= 2;
      },
      60000, 200))
      << listed;
}

}  // namespace
}  // namespace paratune::e2e
