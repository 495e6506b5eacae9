#include "kernels/parallel_linear.h"

#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/hash_random.h"
#include "kernels/mappings.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {

double InitUniform(uint64_t seed, const std::string& name, int64_t index) {
  const uint64_t key = Mix64(seed ^ std::hash<std::string>{}(name));
  return 2.0 * HashUniform(key, static_cast<uint64_t>(index)) - 1.0;
}

absl::StatusOr<Parameter> MakeParameter(Backend& backend, std::string name,
                                        std::vector<int64_t> shape, DType dtype,
                                        int64_t global_numel,
                                        std::vector<int64_t> global_index, bool replicated,
                                        const std::function<double(int64_t)>& init) {
  Parameter p;
  p.name = std::move(name);
  PT_ASSIGN_OR_RETURN(p.value, backend.Empty(shape, dtype, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(p.grad, backend.Zeros(shape, dtype, MemoryTag::kGradients));
  std::vector<double> host(global_index.size());
  for (size_t i = 0; i < host.size(); ++i) host[i] = init(global_index[i]);
  PT_RETURN_IF_ERROR(backend.CopyFromHost(p.value, host));
  p.global_numel = global_numel;
  p.global_index = std::move(global_index);
  p.replicated = replicated;
  return p;
}

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Create(
    const ParallelContext& ctx, std::string name, int64_t in, int64_t out_global,
    int64_t out_local, const std::function<int64_t(int64_t)>& global_rows, DType dtype,
    bool sequence_parallel, uint64_t seed) {
  std::vector<int64_t> index(out_local * in);
  for (int64_t r = 0; r < out_local; ++r) {
    const int64_t g = global_rows(r);
    for (int64_t c = 0; c < in; ++c) index[r * in + c] = g * in + c;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(in));
  ColumnParallelLinear layer;
  PT_ASSIGN_OR_RETURN(
      layer.weight_,
      MakeParameter(*ctx.backend, name, {out_local, in}, dtype, out_global * in, index, false,
                    [&](int64_t g) { return scale * InitUniform(seed, name, g); }));
  layer.sequence_parallel_ = sequence_parallel;
  return layer;
}

absl::StatusOr<Tensor> ColumnParallelLinear::Forward(const ParallelContext& ctx,
                                                     const Tensor& input) const {
  Tensor total;
  if (sequence_parallel_) {
    PT_ASSIGN_OR_RETURN(total, GatherFromSpRegion::Forward(ctx, input, MemoryTag::kWorkspace));
  } else {
    total = CopyToTpRegion::Forward(ctx, input);
  }
  const int64_t rows = total.dim(0), in = total.dim(1), out = weight_.value.dim(0);
  PT_ASSIGN_OR_RETURN(Tensor y,
                      ctx.backend->Empty({rows, out}, input.dtype(), MemoryTag::kActivations));
  GemmArgs g;
  g.trans_b = true;
  g.m = rows, g.n = out, g.k = in;
  g.a = total.data(), g.lda = in;
  g.b = weight_.value.data(), g.ldb = in;
  g.c = y.data(), g.ldc = out;
  PT_RETURN_IF_ERROR(ctx.backend->Gemm(input.dtype(), g));
  return y;
}

absl::StatusOr<Tensor> ColumnParallelLinear::Backward(const ParallelContext& ctx,
                                                      const Tensor& input, const Tensor& dout) {
  Tensor total;
  if (sequence_parallel_) {
    // The SP shard was stored; gather it again (Megatron does the same in backward).
    PT_ASSIGN_OR_RETURN(total, GatherFromSpRegion::Forward(ctx, input, MemoryTag::kWorkspace));
  } else {
    total = input;
  }
  const int64_t rows = total.dim(0), in = total.dim(1), out = weight_.value.dim(0);
  const DType dt = input.dtype();
  PT_ASSIGN_OR_RETURN(Tensor dtotal, ctx.backend->Empty({rows, in}, dt, MemoryTag::kWorkspace));
  GemmArgs gx;  // dX = dY·W
  gx.m = rows, gx.n = in, gx.k = out;
  gx.a = dout.data(), gx.lda = out;
  gx.b = weight_.value.data(), gx.ldb = in;
  gx.c = dtotal.data(), gx.ldc = in;
  PT_RETURN_IF_ERROR(ctx.backend->Gemm(dt, gx));
  GemmArgs gw;  // dW += dYᵀ·X (+= so that gradients accumulate across micro-batches)
  gw.trans_a = true;
  gw.m = out, gw.n = in, gw.k = rows;
  gw.a = dout.data(), gw.lda = out;
  gw.b = total.data(), gw.ldb = in;
  gw.beta = 1.0f;
  gw.c = weight_.grad.data(), gw.ldc = in;
  PT_RETURN_IF_ERROR(ctx.backend->Gemm(dt, gw));
  if (sequence_parallel_) return GatherFromSpRegion::Backward(ctx, dtotal);
  PT_RETURN_IF_ERROR(CopyToTpRegion::Backward(ctx, dtotal));
  return dtotal;
}

absl::StatusOr<RowParallelLinear> RowParallelLinear::Create(
    const ParallelContext& ctx, std::string name, int64_t in_global, int64_t in_local,
    int64_t out, const std::function<int64_t(int64_t)>& global_cols, DType dtype,
    bool sequence_parallel, uint64_t seed) {
  std::vector<int64_t> index(out * in_local);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in_local; ++c) index[r * in_local + c] = r * in_global + global_cols(c);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(in_global));
  RowParallelLinear layer;
  PT_ASSIGN_OR_RETURN(
      layer.weight_,
      MakeParameter(*ctx.backend, name, {out, in_local}, dtype, out * in_global, index, false,
                    [&](int64_t g) { return scale * InitUniform(seed, name, g); }));
  layer.sequence_parallel_ = sequence_parallel;
  return layer;
}

absl::StatusOr<Tensor> RowParallelLinear::Forward(const ParallelContext& ctx,
                                                  const Tensor& input) const {
  const int64_t rows = input.dim(0), in = input.dim(1), out = weight_.value.dim(0);
  const MemoryTag partial_tag =
      sequence_parallel_ ? MemoryTag::kWorkspace : MemoryTag::kActivations;
  PT_ASSIGN_OR_RETURN(Tensor y, ctx.backend->Empty({rows, out}, input.dtype(), partial_tag));
  GemmArgs g;
  g.trans_b = true;
  g.m = rows, g.n = out, g.k = in;
  g.a = input.data(), g.lda = in;
  g.b = weight_.value.data(), g.ldb = in;
  g.c = y.data(), g.ldc = out;
  PT_RETURN_IF_ERROR(ctx.backend->Gemm(input.dtype(), g));
  if (sequence_parallel_) return ReduceScatterToSpRegion::Forward(ctx, y, MemoryTag::kActivations);
  PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx, y));
  return y;
}

absl::StatusOr<Tensor> RowParallelLinear::Backward(const ParallelContext& ctx,
                                                   const Tensor& input, const Tensor& dout) {
  Tensor dfull;
  if (sequence_parallel_) {
    PT_ASSIGN_OR_RETURN(dfull, ReduceScatterToSpRegion::Backward(ctx, dout));
  } else {
    dfull = ReduceFromTpRegion::Backward(ctx, dout);
  }
  const int64_t rows = input.dim(0), in = input.dim(1), out = weight_.value.dim(0);
  const DType dt = input.dtype();
  PT_ASSIGN_OR_RETURN(Tensor dx, ctx.backend->Empty({rows, in}, dt, MemoryTag::kWorkspace));
  GemmArgs gx;  // dX = dY·W
  gx.m = rows, gx.n = in, gx.k = out;
  gx.a = dfull.data(), gx.lda = out;
  gx.b = weight_.value.data(), gx.ldb = in;
  gx.c = dx.data(), gx.ldc = in;
  PT_RETURN_IF_ERROR(ctx.backend->Gemm(dt, gx));
  GemmArgs gw;  // dW += dYᵀ·X
  gw.trans_a = true;
  gw.m = out, gw.n = in, gw.k = rows;
  gw.a = dfull.data(), gw.lda = out;
  gw.b = input.data(), gw.ldb = in;
  gw.beta = 1.0f;
  gw.c = weight_.grad.data(), gw.ldc = in;
  PT_RETURN_IF_ERROR(ctx.backend->Gemm(dt, gw));
  return dx;
}

}  // namespace paratune::kernels
