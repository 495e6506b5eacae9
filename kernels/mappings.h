// Megatron's conjugate communication mappings (core/tensor_parallel/mappings.py). Each is
// named for its forward and documents its backward; tensors are [rows, cols] with rows in
// [s, b] order, so a sequence-parallel shard is a contiguous block of s/t·b rows.
#ifndef PARATUNE_KERNELS_MAPPINGS_H_
#define PARATUNE_KERNELS_MAPPINGS_H_

#include "absl/status/statusor.h"
#include "kernels/parallel_context.h"
#include "kernels/tensor.h"

namespace paratune::kernels {

/// copy_to_tp_region — fwd: identity; bwd: all-reduce of the input gradient.
struct CopyToTpRegion {
  static Tensor Forward(const ParallelContext&, const Tensor& x) { return x; }
  static absl::Status Backward(const ParallelContext& ctx, const Tensor& dx);  // in place
};

/// reduce_from_tp_region — fwd: all-reduce of partial sums; bwd: identity.
struct ReduceFromTpRegion {
  static absl::Status Forward(const ParallelContext& ctx, const Tensor& x);  // in place
  static Tensor Backward(const ParallelContext&, const Tensor& dy) { return dy; }
};

/// gather_from_sp_region — fwd: all-gather [s/t·b, c] → [s·b, c];
/// bwd: reduce-scatter [s·b, c] → [s/t·b, c].
struct GatherFromSpRegion {
  static absl::StatusOr<Tensor> Forward(const ParallelContext& ctx, const Tensor& x,
                                        MemoryTag tag);
  static absl::StatusOr<Tensor> Backward(const ParallelContext& ctx, const Tensor& dy);
};

/// reduce_scatter_to_sp_region — fwd: reduce-scatter [s·b, c] → [s/t·b, c];
/// bwd: all-gather [s/t·b, c] → [s·b, c].
struct ReduceScatterToSpRegion {
  static absl::StatusOr<Tensor> Forward(const ParallelContext& ctx, const Tensor& x,
                                        MemoryTag tag);
  static absl::StatusOr<Tensor> Backward(const ParallelContext& ctx, const Tensor& dy);
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_MAPPINGS_H_
