// AdmissionControl (server/grpc_services.h): SubmitJob is refused with RESOURCE_EXHAUSTED
// exactly when the jobs waiting to be planned reach the limit, admitted again once the
// planner has taken some (after the refresh interval), jobs found waiting at start count,
// and one refresh asks only about the jobs planned since the last one.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/clock.h"
#include "server/grpc_services.h"

namespace paratune::server {
namespace {

// Jobs with states set by hand; counts GetJob calls.
class FakeAutotuner final : public AutotunerHandler {
 public:
  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest&) override {
    const std::string id = absl::StrCat("job-", order_.size());
    return Add(id, v1::JOB_STATE_PENDING);
  }
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) override {
    ++get_calls;
    auto it = jobs_.find(request.id());
    if (it == jobs_.end()) return absl::NotFoundError(request.id());
    return it->second;
  }
  // Newest first, `page_size` per page, like the JobManager.
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) override {
    v1::ListJobsResponse out;
    size_t offset = request.page_token().empty() ? 0 : std::stoul(request.page_token());
    for (size_t i = offset; i < order_.size(); ++i) {
      if (out.jobs_size() == request.page_size()) {
        out.set_next_page_token(std::to_string(i));
        break;
      }
      *out.add_jobs() = jobs_.at(order_[order_.size() - 1 - i]);
    }
    return out;
  }
  absl::Status WatchJob(const v1::WatchJobRequest&,
                        const std::function<bool(const v1::Job&)>&) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest&) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<v1::JobResults> GetResults(const v1::GetResultsRequest&) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(const v1::ListWorkersRequest&) override {
    return v1::ListWorkersResponse();
  }

  v1::Job Add(const std::string& id, v1::JobState state) {
    v1::Job& job = jobs_[id];
    job.set_id(id);
    job.set_state(state);
    order_.push_back(id);
    return job;
  }
  void Set(const std::string& id, v1::JobState state) { jobs_.at(id).set_state(state); }

  int get_calls = 0;

 private:
  std::map<std::string, v1::Job> jobs_;
  std::vector<std::string> order_;  // Oldest first.
};

TEST(AdmissionControlTest, RefusesAtTheLimitAndAdmitsOncePlanned) {
  FakeAutotuner inner;
  FakeClock clock;
  AdmissionControl admission(&inner, /*max_pending=*/3, &clock, /*refresh_ms=*/100);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(admission.SubmitJob(v1::SubmitJobRequest()).ok()) << i;
  }
  EXPECT_EQ(admission.waiting(), 3);
  absl::StatusOr<v1::Job> refused = admission.SubmitJob(v1::SubmitJobRequest());
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "3 jobs are waiting to be planned, the limit is 3 (--max-pending-jobs); retry later");

  // The planner takes job-0 (PLANNING still waits) and finishes job-1 ... but job-1 is
  // behind job-0, so nothing is freed yet.
  inner.Set("job-0", v1::JOB_STATE_PLANNING);
  inner.Set("job-1", v1::JOB_STATE_SUCCEEDED);
  clock.AdvanceMs(100);
  EXPECT_EQ(admission.SubmitJob(v1::SubmitJobRequest()).status().code(),
            absl::StatusCode::kResourceExhausted);
  // job-0 done: job-0 and job-1 leave the count, but only after the refresh interval.
  inner.Set("job-0", v1::JOB_STATE_SUCCEEDED);
  clock.AdvanceMs(99);
  EXPECT_EQ(admission.SubmitJob(v1::SubmitJobRequest()).status().code(),
            absl::StatusCode::kResourceExhausted);
  clock.AdvanceMs(1);
  absl::StatusOr<v1::Job> admitted = admission.SubmitJob(v1::SubmitJobRequest());
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->id(), "job-3");
  EXPECT_EQ(admission.waiting(), 2);                              // job-2, job-3
  ASSERT_TRUE(admission.SubmitJob(v1::SubmitJobRequest()).ok());  // job-4: 3 waiting
  EXPECT_EQ(admission.SubmitJob(v1::SubmitJobRequest()).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(AdmissionControlTest, OneRefreshAsksOnlyAboutJobsPlannedSinceTheLast) {
  FakeAutotuner inner;
  FakeClock clock;
  AdmissionControl admission(&inner, /*max_pending=*/100, &clock, /*refresh_ms=*/0);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(admission.SubmitJob(v1::SubmitJobRequest()).ok());
  for (int i = 0; i < 10; ++i) inner.Set(absl::StrCat("job-", i), v1::JOB_STATE_FAILED);
  inner.get_calls = 0;
  ASSERT_TRUE(admission.SubmitJob(v1::SubmitJobRequest()).ok());
  // 10 planned jobs dropped, then one GetJob finds job-10 still PENDING and stops.
  EXPECT_EQ(inner.get_calls, 11);
  EXPECT_EQ(admission.waiting(), 91);
}

TEST(AdmissionControlTest, SeedCountsJobsWaitingAtStart) {
  FakeAutotuner inner;
  // 1,500 jobs (two ListJobs pages): every third one done, the others waiting.
  for (int i = 0; i < 1500; ++i) {
    inner.Add(absl::StrCat("old-", i), i % 3 == 0   ? v1::JOB_STATE_SUCCEEDED
                                       : i % 3 == 1 ? v1::JOB_STATE_PENDING
                                                    : v1::JOB_STATE_PLANNING);
  }
  FakeClock clock;
  AdmissionControl admission(&inner, /*max_pending=*/1001, &clock);
  ASSERT_TRUE(admission.Seed().ok());
  EXPECT_EQ(admission.waiting(), 1000);
  ASSERT_TRUE(admission.SubmitJob(v1::SubmitJobRequest()).ok());
  EXPECT_EQ(admission.SubmitJob(v1::SubmitJobRequest()).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Oldest first: finishing old-1 (the oldest waiting) frees exactly one place.
  inner.Set("old-1", v1::JOB_STATE_SUCCEEDED);
  clock.AdvanceMs(100);
  EXPECT_TRUE(admission.SubmitJob(v1::SubmitJobRequest()).ok());
  EXPECT_EQ(admission.waiting(), 1001);
}

TEST(AdmissionControlTest, ForwardsEverythingElse) {
  FakeAutotuner inner;
  inner.Add("a", v1::JOB_STATE_SUCCEEDED);
  FakeClock clock;
  AdmissionControl admission(&inner, 1, &clock);
  v1::GetJobRequest get;
  get.set_id("a");
  absl::StatusOr<v1::Job> job = admission.GetJob(get);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(admission.CancelJob(v1::CancelJobRequest()).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace paratune::server
