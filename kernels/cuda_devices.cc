#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {

absl::Status CheckCudaDevicesForRanks(int64_t ranks) {
  PT_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device (cudaGetDeviceCount reports none)");
  }
  if (ranks > count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ranks (", ranks, ") need one CUDA device each; found ", count));
  }
  return absl::OkStatus();
}

}  // namespace paratune::kernels
