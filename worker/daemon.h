// WorkerDaemon: registers this node's devices with the coordinator's WorkerHub, leases
// ProfileTasks, runs them through a TaskExecutor and reports the results.
//
// Threads: Run() executes tasks on the calling thread; a heartbeat thread renews the
// leases of the running task and applies the coordinator's cancellations. Lost
// coordinator: every RPC that fails with UNAVAILABLE (or a HeartbeatResponse with
// `reregister`) makes the daemon re-register with capped exponential backoff; results
// not yet acknowledged are kept and re-sent (reports are idempotent: task id + attempt).
//
// No signal handling here: paratune-worker (main.cc) maps SIGTERM/SIGINT to Stop(), and
// the embedded `paratune tune` runs Run() in a thread and calls Stop() itself.
#ifndef PARATUNE_WORKER_DAEMON_H_
#define PARATUNE_WORKER_DAEMON_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "worker/task_executor.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace paratune::worker {

/// Everything the daemon needs; defaults are what `paratune-worker --help` prints.
struct WorkerOptions {
  /// Coordinator address HOST:PORT. Ignored when `channel` is set.
  std::string coordinator;
  /// Bearer token sent as gRPC metadata `authorization: Bearer <token>`; empty = none.
  std::string token;
  /// Connect with TLS (the coordinator runs with --tls-cert/--tls-key).
  bool tls = false;
  /// PEM root certificates that sign the coordinator's certificate (with `tls`); empty =
  /// the system's roots.
  std::string tls_root_certs_pem;
  /// "auto" (CUDA when built with CUDA and a device exists, else CPU) | "cuda" | "cpu".
  std::string backend = "auto";
  /// Device indices to use (CUDA ordinals; on CPU each index is one rank slot, a rank
  /// being a thread). Empty = every discovered device (CPU: one slot per online core).
  std::vector<int> devices;
  /// Catalog device kind to announce (e.g. "h100-sxm-80gb"); empty = derived from the
  /// discovered devices ("cpu" on the CPU backend).
  std::string device_kind;
  /// Worker name shown by `paratune workers`; empty = the host name.
  std::string name;
  /// Heartbeat period; 0 = the interval the coordinator returns at registration.
  int64_t heartbeat_interval_ms = 0;
  /// Long-poll time of one LeaseTask call.
  int64_t lease_wait_ms = 2000;
  /// Deadline of every RPC (LeaseTask: lease_wait_ms on top of it).
  int64_t rpc_timeout_ms = 10000;
  /// At startup, keep retrying an unreachable coordinator this long, then Run() returns
  /// UNAVAILABLE. 0 = retry forever. After the first registration the daemon always
  /// keeps retrying (a restarting coordinator is normal).
  double connect_timeout_s = 30;
  /// Reconnect backoff: first delay, doubled per failure up to the cap.
  int64_t backoff_initial_ms = 100;
  int64_t backoff_max_ms = 5000;
  /// On Stop(), the running task gets this long to finish (and be reported); after it the
  /// task is cancelled and left to the coordinator (Deregister releases its lease).
  double stop_grace_s = 10;

  /// Transport override (in-process embedding, tests): used instead of `coordinator`.
  std::shared_ptr<grpc::Channel> channel;
  /// Executor override (tests); null = the kernels/ executor for the chosen backend.
  std::shared_ptr<TaskExecutor> executor;
  /// Log sink, one line per call without the newline; null = stderr with a timestamp.
  std::function<void(std::string_view)> log;

  /// The first violated rule, naming the field (InvalidArgument), or OK.
  absl::Status Validate() const;
};

/// Counters for tests and status output. A snapshot; fields are independent reads.
struct WorkerStats {
  std::string worker_id;        ///< Id from the latest registration ("" before).
  int64_t registrations = 0;    ///< Successful Register calls (re-registrations count).
  int64_t tasks_executed = 0;   ///< Tasks run to an outcome (any outcome).
  int64_t reports_acked = 0;    ///< ReportResult calls answered by the coordinator.
  int64_t reports_pending = 0;  ///< Results waiting to be (re-)sent.
};

/// The daemon. Thread-safe: Stop() and stats() may be called from any thread while Run()
/// blocks in another. Run() may be called once.
class WorkerDaemon {
 public:
  explicit WorkerDaemon(WorkerOptions options);
  ~WorkerDaemon();
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;

  /// Discovers devices, registers, and serves tasks until Stop(). Returns OK after a clean
  /// stop (current task finished or released, pending results flushed when possible,
  /// Deregister sent); InvalidArgument for bad options; FailedPrecondition when the
  /// requested backend or devices do not exist; UNAVAILABLE when the coordinator could
  /// not be reached within connect_timeout_s; Unauthenticated/PermissionDenied when it
  /// rejects the token.
  absl::Status Run();

  /// Asks Run() to finish (see WorkerOptions::stop_grace_s). Returns immediately;
  /// idempotent. Not async-signal-safe: call it from a normal thread.
  void Stop();

  WorkerStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace paratune::worker

#endif  // PARATUNE_WORKER_DAEMON_H_
