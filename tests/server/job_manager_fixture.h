// A test fixture for jobs driven through the job manager end to end: the manager on a SQLite
// database (in memory, or in a temporary folder removed after the test) with a fake clock,
// and the calls a test makes as a client and as a CPU worker. One test thread drives it.
#ifndef PARATUNE_TESTS_SERVER_JOB_MANAGER_FIXTURE_H_
#define PARATUNE_TESTS_SERVER_JOB_MANAGER_FIXTURE_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "server/clock.h"
#include "server/job_manager.h"

namespace paratune::server {

class JobManagerFixture : public ::testing::Test {
 protected:
  /// `name` tells this test program's temporary folders from other programs'.
  explicit JobManagerFixture(std::string name) : name_(std::move(name)) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("paratune-" + name_ + "-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    manager_.reset();
    std::filesystem::remove_all(dir_);
  }

  /// The database in the test's temporary folder.
  std::string DatabasePath() const { return (dir_ / "paratune.db").string(); }
  /// Opens the job manager on the SQLite database `db` (a path, or ":memory:"); again on the
  /// same path, it is a coordinator restart.
  void OpenManager(const JobManagerOptions& options, const std::string& db) {
    manager_.reset();
    auto store = OpenSqliteStore(db);
    ASSERT_TRUE(store.ok()) << store.status();
    auto m = JobManager::Create(*std::move(store), &clock_, options);
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = *std::move(m);
  }
  /// Submits `spec`, waits until the manager is idle, and returns the job's id.
  std::string SubmitSpec(const v1::JobSpec& spec) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    absl::StatusOr<v1::Job> job = manager_->SubmitJob(req);
    EXPECT_TRUE(job.ok()) << job.status();
    manager_->WaitIdle();
    return job.ok() ? job->id() : "";
  }
  /// Registers a CPU worker named "cpu" with `devices` rank slots and returns its id.
  std::string RegisterCpuWorker(int devices, int64_t memory_bytes = int64_t{16} << 30) {
    v1::RegisterRequest req;
    req.mutable_worker()->set_name("cpu");
    req.mutable_worker()->set_device_kind("cpu");
    req.mutable_worker()->set_backend("cpu");
    req.mutable_worker()->set_memory_bytes(memory_bytes);
    for (int i = 0; i < devices; ++i) req.mutable_worker()->add_devices()->set_index(i);
    return manager_->Register(req)->worker_id();
  }
  /// Leases up to `limit` queued tasks as `worker` and reports `answer(task)` for each (its
  /// task id, attempt and worker filled in); returns how many it answered.
  int AnswerTasks(const std::string& worker,
                  const std::function<v1::TaskResult(const v1::ProfileTask&)>& answer,
                  int limit = 1 << 30) {
    int n = 0;
    while (n < limit) {
      v1::LeaseTaskRequest req;
      req.set_worker_id(worker);
      req.set_wait_ms(0);
      absl::StatusOr<v1::LeaseTaskResponse> lease = manager_->LeaseTask(req);
      EXPECT_TRUE(lease.ok()) << lease.status();
      if (!lease.ok() || !lease->has_task()) break;
      v1::ReportResultRequest report;
      report.set_worker_id(worker);
      *report.mutable_result() = answer(lease->task());
      report.mutable_result()->set_task_id(lease->task().id());
      report.mutable_result()->set_attempt(lease->task().attempt());
      report.mutable_result()->set_worker_id(worker);
      EXPECT_TRUE(manager_->ReportResult(report)->accepted());
      ++n;
    }
    manager_->WaitIdle();
    return n;
  }
  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_id(id);
    return *manager_->GetJob(req);
  }
  /// The job's results in their wire form.
  v1::JobResults ResultsProto(const std::string& id) {
    v1::GetResultsRequest req;
    req.set_id(id);
    absl::StatusOr<v1::JobResults> r = manager_->GetResults(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::JobResults();
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<JobManager> manager_;

 private:
  std::string name_;
};

}  // namespace paratune::server

#endif  // PARATUNE_TESTS_SERVER_JOB_MANAGER_FIXTURE_H_
