// Element types of kernel tensors. fp32 is the CPU default; fp64 exists so that the CPU
// twins can be checked against finite differences in double precision; bf16/fp16 are
// storage types of the CUDA backend (math and accumulation stay in fp32 there).
#ifndef PARATUNE_KERNELS_DTYPE_H_
#define PARATUNE_KERNELS_DTYPE_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace paratune::kernels {

/// kFp8E4M3: OCP FP8 E4M3 (bias 7, max ±448, no infinities), a storage format only (the
/// serving KV cache); no backend computes in it.
enum class DType { kF32, kF64, kBF16, kF16, kU8, kI32, kFp8E4M3 };

/// Bytes per element.
inline int64_t SizeOf(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kFp8E4M3:
      return 1;
  }
  return 0;
}

/// "fp32" | "fp64" | "bf16" | "fp16" | "u8" | "i32".
absl::string_view DTypeName(DType t);

/// Parses the wire names used in LayerProfileTask.dtype ("fp32", "bf16", "fp16", "fp64").
absl::StatusOr<DType> ParseDType(absl::string_view name);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_DTYPE_H_
