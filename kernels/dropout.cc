#include "kernels/dropout.h"

#include "kernels/status_macros.h"

namespace paratune::kernels {

absl::StatusOr<Tensor> ApplyDropout(Backend& be, const Tensor& x, float p, uint64_t seed,
                                    int64_t row0, Tensor* mask) {
  if (p == 0.0f) return x;
  PT_ASSIGN_OR_RETURN(*mask, be.Empty(x.shape(), DType::kU8, MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(Tensor y, be.Empty(x.shape(), x.dtype(), MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be.DropoutForward(x.dtype(), y.data(), mask->data_as<uint8_t>(), x.data(),
                                       x.numel(), p, seed,
                                       static_cast<uint64_t>(row0 * x.dim(1))));
  return y;
}

absl::StatusOr<Tensor> DropoutGradient(Backend& be, const Tensor& dy, const Tensor& mask,
                                       float p, MemoryTag tag) {
  if (!mask.defined()) return dy;
  PT_ASSIGN_OR_RETURN(Tensor dx, be.Empty(dy.shape(), dy.dtype(), tag));
  PT_RETURN_IF_ERROR(be.DropoutBackward(dy.dtype(), dx.data(), dy.data(),
                                        mask.data_as<uint8_t>(), dy.numel(), p));
  return dx;
}

}  // namespace paratune::kernels
