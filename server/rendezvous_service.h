// The coordinator's rendezvous key-value store (paratune.v1.Rendezvous,
// proto/paratune/v1/rendezvous.proto): worker processes on different nodes exchange their
// Gloo addresses (or NCCL ids) through it, as torch's TCPStore does.
//
// RendezvousStore is the in-memory store (no gRPC): keys in namespaces, Get waits on a
// condition variable, idle namespaces expire. RendezvousService is the gRPC service over
// it, guarded by the worker token.
//
// Threads: the service runs on the synchronous server, so a waiting Get holds one of its
// threads. That is bounded three ways: one call waits at most `max_wait_ms` (clients call
// again), at most `max_waiters` Gets wait at once (more answer UNAVAILABLE, which clients
// retry with backoff), and a waiter leaves within 100 ms of its client cancelling or of
// Shutdown().
#ifndef PARATUNE_SERVER_RENDEZVOUS_SERVICE_H_
#define PARATUNE_SERVER_RENDEZVOUS_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paratune/v1/rendezvous.grpc.pb.h"
#include "server/auth.h"
#include "server/clock.h"
#include "server/metrics.h"

namespace paratune::server {

struct RendezvousOptions {
  /// Longest namespace or key, in bytes.
  int64_t max_name_bytes = 512;
  /// Longest value.
  int64_t max_value_bytes = 1 << 20;
  int64_t max_keys_per_namespace = 4096;
  int64_t max_namespaces = 4096;
  /// All values together.
  int64_t max_total_bytes = int64_t{256} << 20;
  /// Longest wait of one Get call (a longer wait_ms is cut to this).
  int64_t max_wait_ms = 30'000;
  /// Gets waiting at the same time (each holds a server thread).
  int64_t max_waiters = 256;
  /// A namespace not touched (Set, Get, Add) for this long is dropped with its keys.
  int64_t idle_ttl_ms = 15 * 60 * 1000;
};

/// Thread-safe.
class RendezvousStore {
 public:
  /// `clock` (for the idle TTL) must outlive the store.
  explicit RendezvousStore(const Clock* clock, RendezvousOptions options = {});
  ~RendezvousStore();

  /// Sets (or overwrites) and wakes the waiters. InvalidArgument for an empty or too long
  /// namespace/key or a value over max_value_bytes; ResourceExhausted when the namespace,
  /// namespace count or total byte cap is full.
  absl::Status Set(const std::string& ns, const std::string& key, std::string value);

  /// The value, waiting up to min(wait_ms, max_wait_ms) for it; nullopt when not set in
  /// time. `cancelled` (may be empty) is polled every 100 ms to end the wait early.
  /// InvalidArgument for bad names or a negative wait_ms; Unavailable when max_waiters Gets
  /// already wait or the store shut down.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& ns, const std::string& key,
                                                 int64_t wait_ms,
                                                 const std::function<bool()>& cancelled = {});

  /// Adds `delta` to the decimal counter held in the key (absent = 0), stores it, wakes the
  /// waiters and returns it. FailedPrecondition when the value is not a decimal int64,
  /// OutOfRange when the sum overflows.
  absl::StatusOr<int64_t> Add(const std::string& ns, const std::string& key, int64_t delta);

  /// Removes the namespace; the number of keys it held.
  absl::StatusOr<int64_t> DeleteNamespace(const std::string& ns);

  /// Wakes every waiting Get (it answers Unavailable) and refuses new waits.
  void Shutdown();

  int64_t namespace_count() const;
  int64_t total_bytes() const;
  int64_t waiters() const;

 private:
  struct Namespace {
    std::map<std::string, std::string> keys;
    int64_t last_used_ms = 0;
  };
  // Drops namespaces idle for idle_ttl_ms (at most once per second of clock time).
  void ExpireLocked(int64_t now_ms);
  absl::Status SetLocked(const std::string& ns, const std::string& key, std::string value);

  const Clock* const clock_;
  const RendezvousOptions options_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Namespace> namespaces_;
  int64_t total_bytes_ = 0;
  int64_t waiters_ = 0;
  int64_t last_expiry_ms_ = 0;
  bool shut_down_ = false;
};

/// paratune.v1.Rendezvous over a RendezvousStore: every method needs the worker token.
class RendezvousService final : public v1::Rendezvous::Service {
 public:
  /// `store` must outlive the service; `auth` and `metrics` may be null (open, none).
  RendezvousService(RendezvousStore* store, const Authenticator* auth, Metrics* metrics)
      : store_(store), auth_(auth), metrics_(metrics) {}

  grpc::Status Set(grpc::ServerContext* c, const v1::RendezvousSetRequest* req,
                   v1::RendezvousSetResponse* resp) override;
  grpc::Status Get(grpc::ServerContext* c, const v1::RendezvousGetRequest* req,
                   v1::RendezvousGetResponse* resp) override;
  grpc::Status Add(grpc::ServerContext* c, const v1::RendezvousAddRequest* req,
                   v1::RendezvousAddResponse* resp) override;
  grpc::Status DeleteNamespace(grpc::ServerContext* c,
                               const v1::RendezvousDeleteNamespaceRequest* req,
                               v1::RendezvousDeleteNamespaceResponse* resp) override;

 private:
  template <typename F>
  grpc::Status Serve(const char* method, grpc::ServerContext* c, F&& body);

  RendezvousStore* const store_;
  const Authenticator* const auth_;
  Metrics* const metrics_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_RENDEZVOUS_SERVICE_H_
