#include "kernels/dtype.h"

#include "absl/strings/str_cat.h"

namespace paratune::kernels {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF64: return "fp64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kFp8E4M3:
      return "fp8";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "fp32") return DType::kF32;
  if (name == "fp64") return DType::kF64;
  if (name == "bf16") return DType::kBF16;
  if (name == "fp16") return DType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype (", name, ") must be one of fp32, fp64, bf16, fp16"));
}

}  // namespace paratune::kernels
