#include "kernels/mappings.h"

namespace paratune::kernels {
namespace {

absl::StatusOr<Tensor> Gather(const ParallelContext& ctx, const Tensor& x, MemoryTag tag) {
  const int64_t t = ctx.tp_size();
  std::vector<int64_t> shape = x.shape();
  shape[0] *= t;
  absl::StatusOr<Tensor> out = ctx.backend->Empty(shape, x.dtype(), tag);
  if (!out.ok()) return out.status();
  absl::Status s = ctx.Comm([&] { return ctx.tp->AllGather(x.data(), out->data(), x.numel(), x.dtype()); });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Tensor> Scatter(const ParallelContext& ctx, const Tensor& x, MemoryTag tag) {
  const int64_t t = ctx.tp_size();
  std::vector<int64_t> shape = x.shape();
  shape[0] /= t;
  absl::StatusOr<Tensor> out = ctx.backend->Empty(shape, x.dtype(), tag);
  if (!out.ok()) return out.status();
  absl::Status s = ctx.Comm(
      [&] { return ctx.tp->ReduceScatter(x.data(), out->data(), out->numel(), x.dtype()); });
  if (!s.ok()) return s;
  return out;
}

}  // namespace

absl::Status CopyToTpRegion::Backward(const ParallelContext& ctx, const Tensor& dx) {
  if (ctx.tp_size() == 1) return absl::OkStatus();
  return ctx.Comm([&] { return ctx.tp->AllReduce(dx.data(), dx.numel(), dx.dtype()); });
}

absl::Status ReduceFromTpRegion::Forward(const ParallelContext& ctx, const Tensor& x) {
  if (ctx.tp_size() == 1) return absl::OkStatus();
  return ctx.Comm([&] { return ctx.tp->AllReduce(x.data(), x.numel(), x.dtype()); });
}

absl::StatusOr<Tensor> GatherFromSpRegion::Forward(const ParallelContext& ctx, const Tensor& x,
                                                   MemoryTag tag) {
  return Gather(ctx, x, tag);
}

absl::StatusOr<Tensor> GatherFromSpRegion::Backward(const ParallelContext& ctx,
                                                    const Tensor& dy) {
  return Scatter(ctx, dy, MemoryTag::kWorkspace);
}

absl::StatusOr<Tensor> ReduceScatterToSpRegion::Forward(const ParallelContext& ctx,
                                                        const Tensor& x, MemoryTag tag) {
  return Scatter(ctx, x, tag);
}

absl::StatusOr<Tensor> ReduceScatterToSpRegion::Backward(const ParallelContext& ctx,
                                                         const Tensor& dy) {
  return Gather(ctx, dy, MemoryTag::kWorkspace);
}

}  // namespace paratune::kernels
