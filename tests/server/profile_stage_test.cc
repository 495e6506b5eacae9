#include "server/profile_stage.h"

#include <gtest/gtest.h>

namespace paratune::server {
namespace {

TaskRecord Task(const std::string& id, TaskState state, v1::TaskResult::Outcome outcome,
                const std::string& message = "") {
  TaskRecord t;
  t.task.set_id(id);
  t.task.set_job_id("job-a");
  t.task.set_device_kind("cpu");
  t.task.mutable_layer()->set_tp(1);
  t.state = state;
  if (state != TaskState::kPending) {
    v1::TaskResult r;
    r.set_task_id(id);
    r.set_outcome(outcome);
    r.set_message(message);
    t.result = r;
  }
  return t;
}

class ProfileStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenSqliteStore(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    stage_ = std::make_unique<ProfileStage>(store_.get(), &broker_, &clock_, ProfilePlanOptions());
    job_.record.job.set_id("job-a");
    job_.record.job.set_state(v1::JOB_STATE_PROFILING);
  }

  FakeClock clock_;
  LeaseBroker broker_{&clock_, /*lease_timeout_ms=*/1000, /*max_attempts=*/2};
  std::unique_ptr<Store> store_;
  std::unique_ptr<ProfileStage> stage_;
  JobEntry job_;
};

TEST_F(ProfileStageTest, CheckWaitsForEveryTaskThenComposesOrFailsWhenAllBroke) {
  using O = v1::TaskResult;
  job_.tasks = {Task("job-a-t0", TaskState::kDone, O::OUTCOME_OK),
                Task("job-a-t1", TaskState::kPending, O::OUTCOME_UNSPECIFIED)};
  EXPECT_FALSE(stage_->Check(job_).has_value());
  job_.tasks[1] = Task("job-a-t1", TaskState::kFailed, O::OUTCOME_FAILED, "crashed");
  EXPECT_EQ(stage_->Check(job_)->state, v1::JOB_STATE_COMPOSING);
  // Nothing measured, something broke: FAILED naming the first failure.
  job_.tasks[0] = Task("job-a-t0", TaskState::kFailed, O::OUTCOME_UNSUPPORTED, "needs 4 ranks");
  std::optional<Transition> t = stage_->Check(job_);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->state, v1::JOB_STATE_FAILED);
  EXPECT_EQ(t->error, "all 2 profile tasks failed; first: needs 4 ranks");
  // Nothing measured because nothing could run as asked: the modelled ranking (COMPOSING).
  job_.tasks[1] = Task("job-a-t1", TaskState::kFailed, O::OUTCOME_UNSUPPORTED, "needs 8 ranks");
  EXPECT_EQ(stage_->Check(job_)->state, v1::JOB_STATE_COMPOSING);
  job_.record.job.set_state(v1::JOB_STATE_COMPOSING);
  EXPECT_FALSE(stage_->Check(job_).has_value());
}

TEST_F(ProfileStageTest, AFailedAttemptIsQueuedAgainUntilMaxAttemptsThenFails) {
  job_.tasks = {Task("job-a-t0", TaskState::kPending, v1::TaskResult::OUTCOME_UNSPECIFIED)};
  ASSERT_TRUE(store_->PutTasks(job_.tasks).ok());
  stage_->QueuePending(job_);
  EXPECT_EQ(broker_.queued(), 1);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    std::optional<GrantedLease> lease =
        broker_.Lease({"w1", "cpu", "", nullptr}, std::chrono::steady_clock::now());
    ASSERT_TRUE(lease.has_value());
    ASSERT_EQ(lease->task.attempt(), attempt);
    ASSERT_TRUE(broker_.Complete(lease->task.id(), attempt, "w1").ok());
    job_.tasks[0].task.set_attempt(attempt);
    v1::TaskResult failed;
    failed.set_task_id(lease->task.id());
    failed.set_attempt(attempt);
    failed.set_outcome(v1::TaskResult::OUTCOME_FAILED);
    failed.set_message("segfault");
    ASSERT_TRUE(stage_->ApplyReport(job_.tasks[0], "w1", failed).ok());
  }
  EXPECT_EQ(broker_.queued(), 0);
  EXPECT_EQ(job_.tasks[0].state, TaskState::kFailed);
  EXPECT_EQ(job_.tasks[0].result->message(), "segfault; gave up after 2 attempts");
  EXPECT_EQ(job_.tasks[0].result->worker_id(), "w1");
  absl::StatusOr<std::vector<TaskRecord>> stored = store_->ListTasks("job-a");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ((*stored)[0].state, TaskState::kFailed);
}

}  // namespace
}  // namespace paratune::server
