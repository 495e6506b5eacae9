// Megatron's tensor-parallel linear layers (core/tensor_parallel/layers.py), without bias
// (as Llama-style models; add_bias_linear=False). Weights are [out, in] and y = x·Wᵀ.
// A parameter knows where each local element sits in the unsharded (TP = 1) tensor, so
// TP = t runs can be initialised identically to TP = 1 and compared element by element.
#ifndef PARATUNE_KERNELS_PARALLEL_LINEAR_H_
#define PARATUNE_KERNELS_PARALLEL_LINEAR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/parallel_context.h"
#include "kernels/tensor.h"

namespace paratune::kernels {

/// A trainable tensor on one rank and its gradient (same shape, += accumulation).
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  int64_t global_numel = 0;             ///< Elements of the unsharded parameter.
  std::vector<int64_t> global_index;    ///< Local flat index → unsharded flat index.
  bool replicated = false;              ///< Same on every TP rank (norm weights).
};

/// Allocates value and grad of `shape` and fills the value as init(global_index).
absl::StatusOr<Parameter> MakeParameter(Backend& backend, std::string name,
                                        std::vector<int64_t> shape, DType dtype,
                                        int64_t global_numel,
                                        std::vector<int64_t> global_index, bool replicated,
                                        const std::function<double(int64_t)>& init);

/// Weight split along its output dimension: rank r holds output rows given by
/// `global_rows(local_row)`. Input: [rows_local, in] (an SP shard with sequence
/// parallelism, gathered by gather_from_sp_region; else copy_to_tp_region). Output:
/// [rows, out_local], not gathered (Megatron's gather_output=False).
class ColumnParallelLinear {
 public:
  static absl::StatusOr<ColumnParallelLinear> Create(
      const ParallelContext& ctx, std::string name, int64_t in, int64_t out_global,
      int64_t out_local, const std::function<int64_t(int64_t)>& global_rows, DType dtype,
      bool sequence_parallel, uint64_t seed);
  /// A layer computing with `weight`, made by the caller (e.g. initialised as another
  /// parameter), which it owns.
  static ColumnParallelLinear Owning(Parameter weight, bool sequence_parallel);
  /// A layer computing with `*shared`, owned elsewhere and outliving the layer: its
  /// gradient accumulates there too (tied embeddings: the output layer uses the input
  /// embedding's table).
  static ColumnParallelLinear Sharing(Parameter* shared, bool sequence_parallel);

  /// `input` is what backward needs (the caller stores it; with SP it is the shard).
  absl::StatusOr<Tensor> Forward(const ParallelContext& ctx, const Tensor& input) const;
  /// Accumulates the weight gradient; returns the input gradient [rows_local, in].
  absl::StatusOr<Tensor> Backward(const ParallelContext& ctx, const Tensor& input,
                                  const Tensor& dout);
  Parameter& weight() { return shared_ != nullptr ? *shared_ : weight_; }
  const Parameter& weight() const { return shared_ != nullptr ? *shared_ : weight_; }
  bool shares_weight() const { return shared_ != nullptr; }

 private:
  Parameter weight_;
  Parameter* shared_ = nullptr;
  bool sequence_parallel_ = false;
};

/// Weight split along its input dimension: rank r holds input columns given by
/// `global_cols(local_col)`. Input: [rows, in_local] (already split). Output:
/// [rows_local, out], reduced by reduce_from_tp_region (all-reduce) or, with SP,
/// reduce_scatter_to_sp_region.
class RowParallelLinear {
 public:
  static absl::StatusOr<RowParallelLinear> Create(
      const ParallelContext& ctx, std::string name, int64_t in_global, int64_t in_local,
      int64_t out, const std::function<int64_t(int64_t)>& global_cols, DType dtype,
      bool sequence_parallel, uint64_t seed);

  absl::StatusOr<Tensor> Forward(const ParallelContext& ctx, const Tensor& input) const;
  absl::StatusOr<Tensor> Backward(const ParallelContext& ctx, const Tensor& input,
                                  const Tensor& dout);
  Parameter& weight() { return weight_; }

 private:
  Parameter weight_;
  bool sequence_parallel_ = false;
};

/// Deterministic init values in [-1, 1) of parameter `name`: the name is hashed once, so a
/// parameter of many elements does not hash it per element.
class UniformInit {
 public:
  UniformInit(uint64_t seed, const std::string& name);
  /// The value of element `index`.
  double operator()(int64_t index) const;

 private:
  uint64_t key_;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_PARALLEL_LINEAR_H_
