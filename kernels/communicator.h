// Collective communication behind one interface: Gloo on CPU (ranks as threads or
// processes, TCP on 127.0.0.1), NCCL on GPU. Buffers live where the backend keeps tensors
// (host for Gloo, device for NCCL). Counts are elements of `dtype`.
// Thread-safety: one Communicator belongs to one rank (one thread); not thread-safe.
#ifndef PARATUNE_KERNELS_COMMUNICATOR_H_
#define PARATUNE_KERNELS_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace gloo::rendezvous {
class Context;
}  // namespace gloo::rendezvous

namespace paratune::kernels {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// In place: buf[i] = sum over ranks of buf[i].
  virtual absl::Status AllReduce(void* buf, int64_t count, DType dtype) = 0;
  /// out (size()*count elements) = concatenation of every rank's `in` (count elements), in
  /// rank order. In place (as NCCL): `in` may be this rank's chunk of `out`,
  /// out + rank()*count elements.
  virtual absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype) = 0;
  /// in has size()*count elements; out (count elements) = sum over ranks of chunk rank().
  /// In place (as NCCL): `out` may be this rank's chunk of `in`, in + rank()*count elements.
  virtual absl::Status ReduceScatter(const void* in, void* out, int64_t count, DType dtype) = 0;
  /// All-to-all with equal chunks: `in` and `out` hold size() chunks of `count` elements;
  /// chunk q of `in` goes to rank q, chunk q of `out` comes from rank q (Gloo `alltoall`,
  /// NCCL grouped send/recv). Not in place.
  virtual absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype) = 0;
  /// All-to-all with variable chunks (Gloo `alltoallv`): `in` holds send_counts[q] elements
  /// for rank q, back to back in rank order; `out` receives recv_counts[q] elements from
  /// rank q, in rank order. recv_counts[q] must equal rank q's send_counts[rank()] (the
  /// caller exchanges the counts first, e.g. with AllToAll). Not in place.
  virtual absl::Status AllToAllV(const void* in, const std::vector<int64_t>& send_counts,
                                 void* out, const std::vector<int64_t>& recv_counts,
                                 DType dtype) = 0;
  virtual absl::Status Send(const void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual absl::Status Recv(void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual absl::Status Barrier() = 0;
};

/// InvalidArgument unless `send_counts` and `recv_counts` have one entry per rank of a
/// group of `size`, none negative. Every AllToAllV checks its counts with it.
absl::Status CheckAllToAllCounts(const std::vector<int64_t>& send_counts,
                                 const std::vector<int64_t>& recv_counts, int size);

/// Copies `bytes` from src to dst wherever the buffers live (host or device).
using CopyFn = std::function<absl::Status(void* dst, const void* src, int64_t bytes)>;
/// The group of one rank: every collective is a copy or a no-op. Copies use `copy`
/// (default: memmove, host buffers only; backend.h's overload copies on any backend).
std::unique_ptr<Communicator> MakeSelfCommunicator(CopyFn copy = nullptr);

/// Shared rendezvous for Gloo ranks that are threads of one process (a
/// gloo::rendezvous::HashStore). Create once, pass to every rank's MakeGlooCommunicator.
/// Also carries NCCL's unique id between the threads of a CUDA run.
class GlooRendezvous {
 public:
  virtual ~GlooRendezvous() = default;
  virtual void Set(const std::string& key, const std::vector<char>& value) = 0;
  /// Blocks until `key` is set.
  virtual std::vector<char> Get(const std::string& key) = 0;
};
std::shared_ptr<GlooRendezvous> MakeInProcessRendezvous();
/// Rendezvous through files in `dir` (gloo::rendezvous::FileStore), for ranks that are
/// processes on one machine.
std::shared_ptr<GlooRendezvous> MakeFileRendezvous(const std::string& dir);

/// The address this process's Gloo TCP devices bind to and announce to the other ranks:
/// $PARATUNE_GLOO_HOST (a host name or IP address of this node that the other nodes reach),
/// default 127.0.0.1 (every rank on this machine). Used wherever a Gloo device is created.
std::string GlooHost();

/// A Gloo context of rank `rank` of `size`, fully connected over TCP on GlooHost() through
/// `rendezvous` (keys under `prefix`); blocks until every rank joined. The base of
/// MakeGlooCommunicator and of the trainer's point-to-point groups.
absl::StatusOr<std::shared_ptr<gloo::rendezvous::Context>> ConnectGlooContext(
    std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix, int rank, int size);

/// Connects rank `rank` of `size` over TCP on GlooHost(). Blocks until every rank joined.
/// `prefix` separates groups that share one rendezvous. Any GlooRendezvous works (e.g.
/// worker::MakeGrpcRendezvous for ranks on several nodes).
absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix, int rank, int size);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_COMMUNICATOR_H_
