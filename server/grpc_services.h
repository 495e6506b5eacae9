// The gRPC side of the coordinator: thin `final` services that translate between gRPC and
// the handler interfaces (server/handlers.h), check bearer tokens (server/auth.h), record
// request metrics, and a GrpcServer that hosts them with health checking and reflection.
//
// The services use gRPC's synchronous API: LeaseTask long-polls and WatchJob streams
// block a thread each, which the sync server's thread pool is made for.
#ifndef PARATUNE_SERVER_GRPC_SERVICES_H_
#define PARATUNE_SERVER_GRPC_SERVICES_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paratune/v1/service.grpc.pb.h"
#include "server/auth.h"
#include "server/handlers.h"
#include "server/metrics.h"

namespace paratune::server {

/// absl::Status -> grpc::Status (the codes are the same numbers).
grpc::Status ToGrpcStatus(const absl::Status& status);
/// grpc::Status -> absl::Status.
absl::Status FromGrpcStatus(const grpc::Status& status);

struct GrpcServerOptions {
  /// Listening address, e.g. "0.0.0.0:50051"; port 0 picks a free one (see port()).
  std::string address = "0.0.0.0:50051";
  /// PEM files; both empty = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  /// Token checks; null = open.
  const Authenticator* auth = nullptr;
  /// Request counters and latencies; null = none.
  Metrics* metrics = nullptr;
  /// More services on the same port (e.g. RendezvousService); not owned, must outlive it.
  std::vector<grpc::Service*> extra_services;
};

/// Hosts paratune.v1.Autotuner and paratune.v1.WorkerHub plus grpc.health.v1 and server
/// reflection. Thread-safe.
class GrpcServer {
 public:
  /// Builds and starts the server; the handlers must outlive it. Unavailable when the
  /// address cannot be bound, NotFound/InvalidArgument for unreadable TLS files.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(AutotunerHandler* autotuner,
                                                           WorkerHubHandler* hub,
                                                           const GrpcServerOptions& options);
  ~GrpcServer();

  /// The bound port.
  int port() const { return port_; }
  /// Stops accepting calls and waits up to `grace_ms` for running ones. Idempotent.
  void Shutdown(int64_t grace_ms);

 private:
  GrpcServer() = default;
  class Autotuner;
  class Hub;
  std::unique_ptr<Autotuner> autotuner_;
  std::unique_ptr<Hub> hub_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_GRPC_SERVICES_H_
