// Metrics: prometheus-cpp families, serialized with TextSerializer (no civetweb exposer).
#include "server/metrics.h"

#include <cctype>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace paratune::server {

struct Metrics::Families {
  prometheus::Family<prometheus::Gauge>* jobs;
  prometheus::Family<prometheus::Gauge>* tasks;
  prometheus::Family<prometheus::Gauge>* workers;
  prometheus::Family<prometheus::Histogram>* latency;
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Gauge>* jobs_by_kind;
  prometheus::Family<prometheus::Counter>* candidates;
};

namespace {

std::string TransportLabel(Transport transport) {
  return transport == Transport::kGrpc ? "grpc" : "rest";
}

std::string TaskStateLabel(TaskGaugeState state) {
  switch (state) {
    case TaskGaugeState::kQueued:
      return "queued";
    case TaskGaugeState::kLeased:
      return "leased";
    case TaskGaugeState::kDone:
      return "done";
    case TaskGaugeState::kFailed:
      return "failed";
  }
  return "unknown";
}

// Latency buckets from 0.5 ms to 10 s: REST/gRPC calls are sub-millisecond to tens of ms;
// WatchJob and long-polls can last seconds.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *buckets;
}

}  // namespace

std::string Metrics::JobStateLabel(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  if (name.rfind(kPrefix, 0) == 0) name = name.substr(kPrefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>()) {
  families_->jobs = &prometheus::BuildGauge()
                         .Name("paratune_jobs")
                         .Help("Tuning jobs by state.")
                         .Register(*registry_);
  families_->tasks = &prometheus::BuildGauge()
                          .Name("paratune_tasks")
                          .Help("Profiling tasks by state.")
                          .Register(*registry_);
  families_->workers = &prometheus::BuildGauge()
                            .Name("paratune_workers")
                            .Help("Registered workers by state.")
                            .Register(*registry_);
  families_->latency = &prometheus::BuildHistogram()
                            .Name("paratune_rpc_latency_seconds")
                            .Help("Latency of API requests, by method and transport.")
                            .Register(*registry_);
  families_->requests = &prometheus::BuildCounter()
                             .Name("paratune_requests_total")
                             .Help("API requests by method, transport and status code.")
                             .Register(*registry_);
  families_->jobs_by_kind = &prometheus::BuildGauge()
                                 .Name("paratune_jobs_by_kind")
                                 .Help("Jobs of every state, by kind (training, inference).")
                                 .Register(*registry_);
  families_->candidates = &prometheus::BuildCounter()
                               .Name("paratune_candidates_scored_total")
                               .Help("Layouts the planner scored, by job kind.")
                               .Register(*registry_);
  for (std::string_view kind : {"training", "inference"}) {
    SetJobsOfKind(kind, 0);
    SetCandidatesScored(kind, 0);
  }
  // Every known state is present from the start (as 0), so dashboards and alerts see a
  // series instead of "no data".
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (v1::JobState_IsValid(s) && s != v1::JOB_STATE_UNSPECIFIED) {
      SetJobs(static_cast<v1::JobState>(s), 0);
    }
  }
  for (TaskGaugeState s : {TaskGaugeState::kQueued, TaskGaugeState::kLeased,
                           TaskGaugeState::kDone, TaskGaugeState::kFailed}) {
    SetTasks(s, 0);
  }
  for (std::string_view s : {"idle", "busy", "lost"}) SetWorkers(s, 0);
}

Metrics::~Metrics() = default;

void Metrics::SetJobs(v1::JobState state, int64_t count) {
  if (state == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(state)) return;
  families_->jobs->Add({{"state", JobStateLabel(state)}}).Set(static_cast<double>(count));
}

void Metrics::SetTasks(TaskGaugeState state, int64_t count) {
  families_->tasks->Add({{"state", TaskStateLabel(state)}}).Set(static_cast<double>(count));
}

void Metrics::SetWorkers(std::string_view state, int64_t count) {
  families_->workers->Add({{"state", std::string(state)}}).Set(static_cast<double>(count));
}

void Metrics::SetJobsOfKind(std::string_view kind, int64_t count) {
  families_->jobs_by_kind->Add({{"kind", std::string(kind)}}).Set(static_cast<double>(count));
}

void Metrics::SetCandidatesScored(std::string_view kind, int64_t total) {
  prometheus::Counter& counter = families_->candidates->Add({{"kind", std::string(kind)}});
  const double delta = static_cast<double>(total) - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

void Metrics::ObserveRequest(std::string_view method, Transport transport,
                             absl::StatusCode code, double seconds) {
  const std::string method_label(method);
  const std::string transport_label = TransportLabel(transport);
  families_->latency
      ->Add({{"method", method_label}, {"transport", transport_label}}, LatencyBuckets())
      .Observe(seconds);
  families_->requests
      ->Add({{"method", method_label},
             {"transport", transport_label},
             {"code", absl::StatusCodeToString(code)}})
      .Increment();
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

prometheus::Registry& Metrics::registry() { return *registry_; }

}  // namespace paratune::server
