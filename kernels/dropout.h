// Megatron's hidden dropout on [rows, cols] activations, shared by the layers' two output
// projections and the embedding's output: the mask is a function of (seed, global element
// index), so a sequence-parallel shard starting at global row `row0` drops the same
// elements as the unsharded run.
#ifndef PARATUNE_KERNELS_DROPOUT_H_
#define PARATUNE_KERNELS_DROPOUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace paratune::kernels {

/// y = x·keep/(1 − p) with the keep mask in *mask (u8, activations); x itself (and *mask
/// untouched) when p is 0.
absl::StatusOr<Tensor> ApplyDropout(Backend& be, const Tensor& x, float p, uint64_t seed,
                                    int64_t row0, Tensor* mask);

/// The gradient through ApplyDropout: dy·keep/(1 − p) into a new tensor tagged `tag`; dy
/// itself when `mask` is undefined (no dropout was applied).
absl::StatusOr<Tensor> DropoutGradient(Backend& be, const Tensor& dy, const Tensor& mask,
                                       float p, MemoryTag tag);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_DROPOUT_H_
