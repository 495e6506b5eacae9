#include "kernels/rank_threads.h"

#include <thread>
#include <vector>

namespace paratune::kernels {

absl::Status RunRankThreads(int n, const std::function<absl::Status(int rank)>& body) {
  std::vector<absl::Status> status(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r]() { status[static_cast<size_t>(r)] = body(r); });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (absl::IsResourceExhausted(s)) return s;
  }
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeGroupCommunicator(
    Backend& backend, bool cuda, std::shared_ptr<GlooRendezvous> rendezvous,
    const std::string& prefix, int rank, int size) {
  if (size == 1) return MakeSelfCommunicator(backend);
  if (cuda) return MakeNcclCommunicator(backend, std::move(rendezvous), prefix, rank, size);
  return MakeGlooCommunicator(std::move(rendezvous), prefix, rank, size);
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeGroupCommunicator(
    std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix, int rank, int size) {
  if (size == 1) return MakeSelfCommunicator();
  return MakeGlooCommunicator(std::move(rendezvous), prefix, rank, size);
}

}  // namespace paratune::kernels
