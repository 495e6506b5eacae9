// Entry points of the CUDA backend in a binary built without CUDA (-DPARATUNE_CUDA=OFF or
// no nvcc): they say so instead of pretending.
#ifndef PARATUNE_HAVE_CUDA

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace paratune::kernels {

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int, int64_t) {
  return absl::UnimplementedError(
      "UNIMPLEMENTED: this binary was built without the CUDA backend (PARATUNE_CUDA=OFF or no "
      "nvcc)");
}

absl::StatusOr<int> CudaDeviceCount() {
  return absl::UnimplementedError(
      "UNIMPLEMENTED: this binary was built without the CUDA backend (PARATUNE_CUDA=OFF or no "
      "nvcc)");
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    Backend&, std::shared_ptr<GlooRendezvous>, const std::string&, int, int) {
  return absl::UnimplementedError(
      "UNIMPLEMENTED: this binary was built without the CUDA backend (no NCCL)");
}

}  // namespace paratune::kernels

#endif  // PARATUNE_HAVE_CUDA
