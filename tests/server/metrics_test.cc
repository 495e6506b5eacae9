// Metrics: the text exposition has the series and numbers we set, and passes promtool.
#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace paratune::server {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, EveryStateStartsAtZero) {
  Metrics metrics;
  const std::string text = metrics.Serialize();
  for (const char* state : {"pending", "planning", "profiling", "composing", "verifying",
                            "succeeded", "failed", "cancelled"}) {
    EXPECT_TRUE(Contains(text, std::string("paratune_jobs{state=\"") + state + "\"} 0")) << state;
  }
  EXPECT_TRUE(Contains(text, R"(paratune_tasks{state="queued"} 0)"));
  EXPECT_TRUE(Contains(text, R"(paratune_workers{state="lost"} 0)"));
  EXPECT_EQ(text.find("unspecified"), std::string::npos);
}

TEST(MetricsTest, GaugesHoldTheLastValue) {
  Metrics metrics;
  metrics.SetJobs(v1::JOB_STATE_SUCCEEDED, 3);
  metrics.SetJobs(v1::JOB_STATE_SUCCEEDED, 5);
  metrics.SetJobs(v1::JOB_STATE_UNSPECIFIED, 9);  // ignored
  metrics.SetTasks(TaskGaugeState::kLeased, 12);
  metrics.SetWorkers("busy", 2);
  const std::string text = metrics.Serialize();
  EXPECT_TRUE(Contains(text, R"(paratune_jobs{state="succeeded"} 5)")) << text;
  EXPECT_TRUE(Contains(text, R"(paratune_tasks{state="leased"} 12)"));
  EXPECT_TRUE(Contains(text, R"(paratune_workers{state="busy"} 2)"));
  EXPECT_EQ(text.find(" 9\n"), std::string::npos);
}

TEST(MetricsTest, JobsAndScoredCandidatesByKind) {
  Metrics metrics;
  const std::string start = metrics.Serialize();
  EXPECT_TRUE(Contains(start, R"(paratune_jobs_by_kind{kind="inference"} 0)")) << start;
  EXPECT_TRUE(Contains(start, R"(paratune_candidates_scored_total{kind="training"} 0)"));
  metrics.SetJobsOfKind("inference", 2);
  metrics.SetCandidatesScored("inference", 140);
  metrics.SetCandidatesScored("inference", 212);
  metrics.SetCandidatesScored("inference", 100);  // a counter never goes down
  metrics.SetCandidatesScored("training", 9);
  const std::string text = metrics.Serialize();
  EXPECT_TRUE(Contains(text, R"(paratune_jobs_by_kind{kind="inference"} 2)")) << text;
  EXPECT_TRUE(Contains(text, R"(paratune_candidates_scored_total{kind="inference"} 212)"));
  EXPECT_TRUE(Contains(text, R"(paratune_candidates_scored_total{kind="training"} 9)"));
}

TEST(MetricsTest, LatencyHistogramBucketsAreCumulative) {
  Metrics metrics;
  metrics.ObserveRequest("GetJob", Transport::kGrpc, absl::StatusCode::kOk, 0.0007);
  metrics.ObserveRequest("GetJob", Transport::kGrpc, absl::StatusCode::kOk, 0.003);
  metrics.ObserveRequest("GetJob", Transport::kGrpc, absl::StatusCode::kNotFound, 0.2);
  metrics.ObserveRequest("GetJob", Transport::kRest, absl::StatusCode::kOk, 20.0);
  const std::string text = metrics.Serialize();
  const std::string g = R"(method="GetJob",transport="grpc")";
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + g + R"(,le="0.0005"} 0)"))
      << text;
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + g + R"(,le="0.001"} 1)"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + g + R"(,le="0.005"} 2)"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + g + R"(,le="0.1"} 2)"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + g + R"(,le="0.25"} 3)"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + g + R"(,le="+Inf"} 3)"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_count{" + g + "} 3"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_sum{" + g + "} 0.2037"));
  // 20 s is beyond the last bound (10 s): only +Inf counts it.
  const std::string r = R"(method="GetJob",transport="rest")";
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + r + R"(,le="10"} 0)"));
  EXPECT_TRUE(Contains(text, "paratune_rpc_latency_seconds_bucket{" + r + R"(,le="+Inf"} 1)"));
  EXPECT_TRUE(Contains(text, R"(paratune_requests_total{code="OK",method="GetJob",transport="grpc"} 2)"));
  EXPECT_TRUE(Contains(
      text, R"(paratune_requests_total{code="NOT_FOUND",method="GetJob",transport="grpc"} 1)"));
}

TEST(MetricsTest, ExpositionPassesPromtool) {
  const char* candidates[] = {"/usr/bin/promtool", "/usr/local/bin/promtool"};
  std::string promtool;
  for (const char* c : candidates) {
    if (std::filesystem::exists(c)) promtool = c;
  }
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package 'prometheus')";
  Metrics metrics;
  metrics.SetJobs(v1::JOB_STATE_PROFILING, 2);
  metrics.SetWorkers("idle", 4);
  metrics.ObserveRequest("SubmitJob", Transport::kRest, absl::StatusCode::kInvalidArgument, 0.01);
  metrics.ObserveRequest("LeaseTask", Transport::kGrpc, absl::StatusCode::kOk, 1.5);
  const std::string path = ::testing::TempDir() + "paratune_metrics_" +
                           std::to_string(::getpid()) + ".prom";
  std::ofstream(path) << metrics.Serialize();
  const std::string out = path + ".out";
  const std::string command = promtool + " check metrics < " + path + " > " + out + " 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream in(out);
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << report;
  EXPECT_EQ(report, "") << "promtool lint findings";
  std::remove(path.c_str());
  std::remove(out.c_str());
}

}  // namespace
}  // namespace paratune::server
