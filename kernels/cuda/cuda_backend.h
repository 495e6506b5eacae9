// The CUDA backend: tensors in device memory (cudaMalloc through the tracking allocator),
// GEMMs through cuBLAS (cublasGemmStridedBatchedEx, fp32 compute for bf16/fp16/fp32
// storage), and ParaTune's own kernels (kernels/cuda/*.cu) for everything else. All work
// is queued on one stream per backend; NCCL collectives use the same stream.
#ifndef PARATUNE_KERNELS_CUDA_CUDA_BACKEND_H_
#define PARATUNE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include "kernels/backend.h"

namespace paratune::kernels {

/// Implemented in cuda_backend.cc; exposed for the NCCL communicator.
class CudaBackendBase : public Backend {
 public:
  virtual cudaStream_t stream() const = 0;
  virtual int device() const = 0;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_CUDA_CUDA_BACKEND_H_
