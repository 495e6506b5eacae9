// Running the ranks of one in-process group, one thread each: the layer, MoE, collective
// and serving steps all start their ranks this way.
#ifndef PARATUNE_KERNELS_RANK_THREADS_H_
#define PARATUNE_KERNELS_RANK_THREADS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"

namespace paratune::kernels {

/// Runs `body(rank)` for ranks 0..n-1 on n threads and waits for all of them. An
/// out-of-memory rank leaves its peers failing in a collective (a closed connection, a
/// timeout), so the first ResourceExhausted status is the one returned; else the first
/// other failure; OK when every rank succeeded.
absl::Status RunRankThreads(int n, const std::function<absl::Status(int rank)>& body);

/// The communicator of rank `rank` in the group of `size` ranks named `prefix`: the
/// backend's own for one rank, NCCL on a CUDA backend (`cuda`), Gloo otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> MakeGroupCommunicator(
    Backend& backend, bool cuda, std::shared_ptr<GlooRendezvous> rendezvous,
    const std::string& prefix, int rank, int size);

/// The same for ranks whose tensors are in host memory: a memmove copy for one rank,
/// Gloo otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> MakeGroupCommunicator(
    std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix, int rank, int size);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_RANK_THREADS_H_
