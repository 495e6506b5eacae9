#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "server/store.h"

namespace paratune::server {
namespace {

std::string TempDb(const char* name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("paratune_store_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + "-wal");
  std::filesystem::remove(path.string() + "-shm");
  return path.string();
}

JobRecord Job(const std::string& id, v1::JobState state) {
  JobRecord r;
  r.job.set_id(id);
  r.job.set_state(state);
  r.job.mutable_spec()->set_name("tiny");
  return r;
}

TEST(SqliteStoreTest, JobsTasksAndCacheRoundTripInMemory) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  Store& s = **store;
  JobRecord a = Job("job-a", v1::JOB_STATE_PENDING);
  ASSERT_TRUE(s.PutJob(a).ok());
  ASSERT_TRUE(s.PutJob(Job("job-b", v1::JOB_STATE_PLANNING)).ok());
  a.job.set_state(v1::JOB_STATE_SUCCEEDED);
  a.results.emplace();
  a.results->set_feasible(7);
  ASSERT_TRUE(s.PutJob(a).ok());  // Update keeps the insertion order.
  absl::StatusOr<std::vector<JobRecord>> jobs = s.ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job.id(), "job-a");
  EXPECT_EQ((*jobs)[0].job.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE((*jobs)[0].results.has_value());
  EXPECT_EQ((*jobs)[0].results->feasible(), 7);
  EXPECT_FALSE((*jobs)[1].results.has_value());
  EXPECT_EQ(s.GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  // UpdateJob changes the job message and keeps the ranking blobs.
  v1::Job progressed = a.job;
  progressed.mutable_progress()->set_tasks_done(5);
  ASSERT_TRUE(s.UpdateJob(progressed).ok());
  absl::StatusOr<JobRecord> updated = s.GetJob("job-a");
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->job.progress().tasks_done(), 5);
  ASSERT_TRUE(updated->results.has_value());
  EXPECT_EQ(updated->results->feasible(), 7);
  v1::Job unknown;
  unknown.set_id("job-unknown");
  EXPECT_EQ(s.UpdateJob(unknown).code(), absl::StatusCode::kNotFound);
  // GetJobMessage reads the job message alone, as UpdateJob last wrote it.
  absl::StatusOr<v1::Job> message = s.GetJobMessage("job-a");
  ASSERT_TRUE(message.ok()) << message.status();
  EXPECT_EQ(message->SerializeAsString(), progressed.SerializeAsString());
  EXPECT_EQ(s.GetJobMessage("nope").status(), absl::NotFoundError("job nope not found"));

  TaskRecord t;
  t.task.set_id("job-a-t0");
  t.task.set_job_id("job-a");
  t.task.set_device_kind("cpu");
  t.task.set_key("layer h=64");
  ASSERT_TRUE(s.PutTasks({t}).ok());
  EXPECT_FALSE(s.GetCached("cpu", "layer h=64")->has_value());
  t.state = TaskState::kDone;
  t.result.emplace();
  t.result->set_outcome(v1::TaskResult::OUTCOME_OK);
  t.result->set_elapsed_s(1.5);
  ASSERT_TRUE(s.PutTaskAndCache(t, /*cache=*/true).ok());
  absl::StatusOr<std::vector<TaskRecord>> tasks = s.ListTasks("job-a");
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ((*tasks)[0].state, TaskState::kDone);
  EXPECT_EQ((*tasks)[0].result->elapsed_s(), 1.5);
  auto cached = s.GetCached("cpu", "layer h=64");
  ASSERT_TRUE(cached.ok() && cached->has_value());
  EXPECT_EQ((*cached)->elapsed_s(), 1.5);
  // Another device kind does not share the measurement.
  EXPECT_FALSE(s.GetCached("h100-sxm-80gb", "layer h=64")->has_value());
  EXPECT_EQ(*s.CacheSize(), 1);
}

TEST(SqliteStoreTest, FileStoreUsesWalKeepsDataAndRecordsSchemaVersion) {
  const std::string path = TempDb("wal.db");
  {
    auto store = OpenSqliteStore(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutJob(Job("job-a", v1::JOB_STATE_PROFILING)).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto scalar = [db](const char* sql) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
  };
  EXPECT_EQ(scalar("PRAGMA journal_mode;"), "wal");
  EXPECT_EQ(scalar("SELECT version FROM schema_version;"), std::to_string(kStoreSchemaVersion));
  sqlite3_close(db);
  auto reopened = OpenSqliteStore(path);
  ASSERT_TRUE(reopened.ok());
  absl::StatusOr<JobRecord> job = (*reopened)->GetJob("job-a");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job.state(), v1::JOB_STATE_PROFILING);
}

TEST(SqliteStoreTest, RefusesADatabaseFromANewerSchema) {
  const std::string path = TempDb("newer.db");
  ASSERT_TRUE(OpenSqliteStore(path).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 99;", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("99"), std::string::npos);
}


TEST(SqliteStoreTest, RecoveryListingLeavesFinishedRankingsUnreadAndGetResultsBlobReadsThem) {
  absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  Store& s = **store;
  JobRecord done = Job("job-done", v1::JOB_STATE_SUCCEEDED);
  done.results.emplace();
  done.results->set_feasible(7);
  done.modelled.emplace();
  done.modelled->set_feasible(9);
  JobRecord failed = Job("job-failed", v1::JOB_STATE_FAILED);
  JobRecord running = Job("job-running", v1::JOB_STATE_VERIFYING);
  running.results.emplace();
  running.results->set_feasible(3);
  for (const JobRecord& r : {done, failed, running}) ASSERT_TRUE(s.PutJob(r).ok());

  absl::StatusOr<std::vector<JobRecord>> jobs = s.ListJobsForRecovery();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  // Finished: no blobs read, has_results tells whether one is stored.
  EXPECT_EQ((*jobs)[0].job.id(), "job-done");
  EXPECT_FALSE((*jobs)[0].results.has_value());
  EXPECT_FALSE((*jobs)[0].modelled.has_value());
  EXPECT_TRUE((*jobs)[0].has_results);
  EXPECT_FALSE((*jobs)[1].has_results);
  // Unfinished: complete.
  ASSERT_TRUE((*jobs)[2].results.has_value());
  EXPECT_EQ((*jobs)[2].results->feasible(), 3);
  EXPECT_TRUE((*jobs)[2].has_results);

  absl::StatusOr<std::optional<std::string>> blob = s.GetResultsBlob("job-done");
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(blob->has_value());
  v1::PlanResult parsed;
  ASSERT_TRUE(parsed.ParseFromString(**blob));
  EXPECT_EQ(parsed.feasible(), 7);
  blob = s.GetResultsBlob("job-failed");
  ASSERT_TRUE(blob.ok());
  EXPECT_FALSE(blob->has_value());
  EXPECT_EQ(s.GetResultsBlob("nope").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace paratune::server
