#include "server/grpc_services.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "server/limits.h"

namespace paratune::server {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " '", path, "' cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs one call: token check, the handler, metrics.
template <typename F>
grpc::Status Serve(const char* method, Role role, grpc::ServerContext* context,
                   const Authenticator* auth, Metrics* metrics, F&& body) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  if (auth != nullptr && auth->Enabled(role)) {
    std::string header;
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    if (it != md.end()) header.assign(it->second.data(), it->second.size());
    status = auth->Check(header, role);
  }
  if (status.ok()) status = body();
  if (metrics != nullptr) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics->ObserveRequest(method, Transport::kGrpc, status.code(), s);
  }
  return ToGrpcStatus(status);
}

// Copies a StatusOr's value into the response.
template <typename T>
absl::Status Fill(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return result.status();
  *response = *std::move(result);
  return absl::OkStatus();
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

class GrpcServer::Autotuner final : public v1::Autotuner::Service {
 public:
  Autotuner(AutotunerHandler* h, const Authenticator* auth, Metrics* metrics)
      : h_(h), auth_(auth), metrics_(metrics) {}

  grpc::Status SubmitJob(grpc::ServerContext* c, const v1::SubmitJobRequest* req,
                         v1::Job* resp) override {
    return Serve("SubmitJob", Role::kClient, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateSubmitJobRequest(*req); !s.ok()) return s;
      return Fill(h_->SubmitJob(*req), resp);
    });
  }
  grpc::Status GetJob(grpc::ServerContext* c, const v1::GetJobRequest* req,
                      v1::Job* resp) override {
    return Serve("GetJob", Role::kClient, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateId("id", req->id()); !s.ok()) return s;
      return Fill(h_->GetJob(*req), resp);
    });
  }
  grpc::Status ListJobs(grpc::ServerContext* c, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    return Serve("ListJobs", Role::kClient, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateListJobsRequest(*req); !s.ok()) return s;
      return Fill(h_->ListJobs(*req), resp);
    });
  }
  grpc::Status WatchJob(grpc::ServerContext* c, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Job>* writer) override {
    return Serve("WatchJob", Role::kClient, c, auth_, metrics_, [&] {
      if (absl::Status s = ValidateId("id", req->id()); !s.ok()) return s;
      return h_->WatchJob(*req, [&](const v1::Job& job) {
        return !c->IsCancelled() && writer->Write(job);
      });
    });
  }
  grpc::Status CancelJob(grpc::ServerContext* c, const v1::CancelJobRequest* req,
                         v1::Job* resp) override {
    return Serve("CancelJob", Role::kClient, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateId("id", req->id()); !s.ok()) return s;
      return Fill(h_->CancelJob(*req), resp);
    });
  }
  grpc::Status GetResults(grpc::ServerContext* c, const v1::GetResultsRequest* req,
                          v1::JobResults* resp) override {
    return Serve("GetResults", Role::kClient, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateId("id", req->id()); !s.ok()) return s;
      return Fill(h_->GetResults(*req), resp);
    });
  }
  grpc::Status ListWorkers(grpc::ServerContext* c, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override {
    return Serve("ListWorkers", Role::kClient, c, auth_, metrics_,
                 [&] { return Fill(h_->ListWorkers(*req), resp); });
  }

 private:
  AutotunerHandler* const h_;
  const Authenticator* const auth_;
  Metrics* const metrics_;
};

class GrpcServer::Hub final : public v1::WorkerHub::Service {
 public:
  Hub(WorkerHubHandler* h, const Authenticator* auth, Metrics* metrics)
      : h_(h), auth_(auth), metrics_(metrics) {}

  grpc::Status Register(grpc::ServerContext* c, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    return Serve("Register", Role::kWorker, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateRegisterRequest(*req); !s.ok()) return s;
      return Fill(h_->Register(*req), resp);
    });
  }
  grpc::Status Heartbeat(grpc::ServerContext* c, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return Serve("Heartbeat", Role::kWorker, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateHeartbeatRequest(*req); !s.ok()) return s;
      return Fill(h_->Heartbeat(*req), resp);
    });
  }
  grpc::Status LeaseTask(grpc::ServerContext* c, const v1::LeaseTaskRequest* req,
                         v1::LeaseTaskResponse* resp) override {
    return Serve("LeaseTask", Role::kWorker, c, auth_, metrics_,
                 [&] { return Fill(h_->LeaseTask(*req), resp); });
  }
  grpc::Status ReportResult(grpc::ServerContext* c, const v1::ReportResultRequest* req,
                            v1::ReportResultResponse* resp) override {
    return Serve("ReportResult", Role::kWorker, c, auth_, metrics_,
                 [&] {
      if (absl::Status s = ValidateReportResultRequest(*req); !s.ok()) return s;
      return Fill(h_->ReportResult(*req), resp);
    });
  }
  grpc::Status Deregister(grpc::ServerContext* c, const v1::DeregisterRequest* req,
                          v1::DeregisterResponse* resp) override {
    return Serve("Deregister", Role::kWorker, c, auth_, metrics_,
                 [&] { return Fill(h_->Deregister(*req), resp); });
  }

 private:
  WorkerHubHandler* const h_;
  const Authenticator* const auth_;
  Metrics* const metrics_;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    AutotunerHandler* autotuner, WorkerHubHandler* hub, const GrpcServerOptions& options) {
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(options.tls_cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(options.tls_key_file, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<GrpcServer> out(new GrpcServer());
  out->autotuner_ = std::make_unique<Autotuner>(autotuner, options.auth, options.metrics);
  out->hub_ = std::make_unique<Hub>(hub, options.auth, options.metrics);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the same port and
  // take half of the connections: a coordinator owns its port or refuses to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxGrpcReceiveBytes);
  if (!options.address.empty()) builder.AddListeningPort(options.address, creds, &out->port_);
  builder.RegisterService(out->autotuner_.get());
  builder.RegisterService(out->hub_.get());
  for (grpc::Service* service : options.extra_services) builder.RegisterService(service);
  out->server_ = builder.BuildAndStart();
  if (out->server_ == nullptr || (!options.address.empty() && out->port_ == 0)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for gRPC on ", options.address,
        " (is the port in use, e.g. by another coordinator? choose another --grpc-port)"));
  }
  return out;
}

std::shared_ptr<grpc::Channel> GrpcServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void GrpcServer::Shutdown(int64_t grace_ms) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
}

GrpcServer::~GrpcServer() { Shutdown(0); }

// --- AdmissionControl ------------------------------------------------------------------------

namespace {

bool WaitsForPlanner(v1::JobState state) {
  return state == v1::JOB_STATE_PENDING || state == v1::JOB_STATE_PLANNING;
}

}  // namespace

AdmissionControl::AdmissionControl(AutotunerHandler* inner, int64_t max_pending, const Clock* clock,
                                   int64_t refresh_ms)
    : inner_(inner), max_pending_(max_pending), clock_(clock), refresh_ms_(refresh_ms) {}

absl::Status AdmissionControl::Seed() {
  // ListJobs pages newest first; the planner takes the oldest first.
  std::deque<std::string> found;
  v1::ListJobsRequest request;
  request.set_page_size(1000);
  while (true) {
    absl::StatusOr<v1::ListJobsResponse> page = inner_->ListJobs(request);
    if (!page.ok()) return page.status();
    for (const v1::Job& job : page->jobs()) {
      if (WaitsForPlanner(job.state())) found.push_front(job.id());
    }
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.insert(waiting_.begin(), found.begin(), found.end());
  return absl::OkStatus();
}

int64_t AdmissionControl::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(waiting_.size());
}

void AdmissionControl::RefreshLocked() {
  while (!waiting_.empty()) {
    v1::GetJobRequest request;
    request.set_id(waiting_.front());
    absl::StatusOr<v1::Job> job = inner_->GetJob(request);
    if (job.ok() && WaitsForPlanner(job->state())) break;
    waiting_.pop_front();
  }
  last_refresh_ms_ = clock_->NowMs();
  refreshed_ = true;
}

absl::StatusOr<v1::Job> AdmissionControl::SubmitJob(const v1::SubmitJobRequest& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto full = [this] {
      return static_cast<int64_t>(waiting_.size()) + in_flight_ >= max_pending_;
    };
    if (full() && (!refreshed_ || clock_->NowMs() - last_refresh_ms_ >= refresh_ms_)) {
      RefreshLocked();
    }
    if (full()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          waiting_.size() + in_flight_, " jobs are waiting to be planned, the limit is ",
          max_pending_, " (--max-pending-jobs); retry later"));
    }
    ++in_flight_;
  }
  absl::StatusOr<v1::Job> job = inner_->SubmitJob(request);
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  if (job.ok() && WaitsForPlanner(job->state())) waiting_.push_back(job->id());
  return job;
}

absl::StatusOr<v1::Job> AdmissionControl::GetJob(const v1::GetJobRequest& request) {
  return inner_->GetJob(request);
}
absl::StatusOr<v1::ListJobsResponse> AdmissionControl::ListJobs(
    const v1::ListJobsRequest& request) {
  return inner_->ListJobs(request);
}
absl::Status AdmissionControl::WatchJob(const v1::WatchJobRequest& request,
                                        const std::function<bool(const v1::Job&)>& on_update) {
  return inner_->WatchJob(request, on_update);
}
absl::StatusOr<v1::Job> AdmissionControl::CancelJob(const v1::CancelJobRequest& request) {
  return inner_->CancelJob(request);
}
absl::StatusOr<v1::JobResults> AdmissionControl::GetResults(const v1::GetResultsRequest& request) {
  return inner_->GetResults(request);
}
absl::StatusOr<v1::ListWorkersResponse> AdmissionControl::ListWorkers(
    const v1::ListWorkersRequest& request) {
  return inner_->ListWorkers(request);
}

}  // namespace paratune::server
