// CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK: evaluate a device call and return an
// absl::Status naming the call, the file and the line when it fails (llm.c's
// cuda_common.h, but returning instead of exiting, as nccl-tests' testResult_t does).
#ifndef PARATUNE_KERNELS_CUDA_CUDA_CHECK_H_
#define PARATUNE_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#define PARATUNE_DEVICE_ERROR(kind, expr, text) \
  absl::InternalError(absl::StrCat(__FILE__, ":", __LINE__, ": ", kind, " ", #expr, ": ", text))

#define CUDA_CHECK(expr)                                                               \
  do {                                                                                 \
    cudaError_t _e = (expr);                                                           \
    if (_e != cudaSuccess) return PARATUNE_DEVICE_ERROR("CUDA", expr, cudaGetErrorString(_e)); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    cublasStatus_t _s = (expr);                                                             \
    if (_s != CUBLAS_STATUS_SUCCESS) {                                                      \
      return PARATUNE_DEVICE_ERROR("cuBLAS", expr, cublasGetStatusString(_s));              \
    }                                                                                       \
  } while (0)

#define NCCL_CHECK(expr)                                                                  \
  do {                                                                                    \
    ncclResult_t _r = (expr);                                                             \
    if (_r != ncclSuccess) return PARATUNE_DEVICE_ERROR("NCCL", expr, ncclGetErrorString(_r)); \
  } while (0)

#endif  // PARATUNE_KERNELS_CUDA_CUDA_CHECK_H_
