#include "kernels/vocab_parallel.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/dropout.h"
#include "kernels/hash_random.h"
#include "kernels/mappings.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

absl::StatusOr<Tensor> IdsTensor(Backend& be, const std::vector<int32_t>& ids) {
  PT_ASSIGN_OR_RETURN(Tensor t, be.Empty({static_cast<int64_t>(ids.size())}, DType::kI32,
                                         MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be.CopyFromHost(t, std::vector<double>(ids.begin(), ids.end())));
  return t;
}

// The embedding dropout's seed: apart from the layers' (kernels/transformer_layer.cc
// DropoutSeed, from each layer's own seed).
uint64_t EmbeddingDropoutSeed(uint64_t seed) { return Mix64(seed + 0x2000); }

int64_t SpRows(const LayerConfig& c) {
  return (c.parallel.sequence_parallel ? c.seq_length / c.parallel.tp : c.seq_length) *
         c.parallel.micro_batch_size;
}

}  // namespace

absl::StatusOr<Parameter> VocabParallelEmbedding::MakeTable(const LayerConfig& config,
                                                            const ParallelContext& ctx) {
  const int64_t v = config.shape.vocab_size / config.parallel.tp, h = config.shape.hidden_size;
  const int64_t start = ctx.tp_rank() * v;
  std::vector<int64_t> index(v * h);
  for (int64_t i = 0; i < v * h; ++i) index[i] = start * h + i;
  return MakeParameter(*ctx.backend, "embedding.weight", {v, h}, config.dtype,
                       config.shape.vocab_size * h, index, false,
                       UniformInit(config.seed, "embedding.weight"));
}

absl::StatusOr<std::unique_ptr<VocabParallelEmbedding>> VocabParallelEmbedding::Create(
    const LayerConfig& config, const ParallelContext& ctx, int64_t position_rows) {
  PT_RETURN_IF_ERROR(config.Validate());
  PT_RETURN_IF_ERROR(CheckPositionRows(position_rows, config.seq_length));
  std::unique_ptr<VocabParallelEmbedding> e(new VocabParallelEmbedding());
  e->config_ = config;
  e->ctx_ = ctx;
  PT_ASSIGN_OR_RETURN(e->table_, MakeTable(config, ctx));
  if (position_rows > 0) {
    const int64_t h = config.shape.hidden_size;
    std::vector<int64_t> identity(position_rows * h);
    for (int64_t i = 0; i < position_rows * h; ++i) identity[i] = i;
    PT_ASSIGN_OR_RETURN(e->positions_,
                        MakeParameter(*ctx.backend, "position.weight", {position_rows, h},
                                      config.dtype, position_rows * h, identity, true,
                                      UniformInit(config.seed, "position.weight")));
    const int64_t n = config.seq_length * config.parallel.micro_batch_size;
    std::vector<int32_t> at(n);
    for (int64_t t = 0; t < n; ++t)
      at[t] = static_cast<int32_t>(t / config.parallel.micro_batch_size);
    PT_ASSIGN_OR_RETURN(e->position_ids_, IdsTensor(*ctx.backend, at));
  }
  return e;
}

absl::Status VocabParallelEmbedding::CheckPositionRows(int64_t position_rows,
                                                       int64_t seq_length) {
  if (position_rows == 0 || position_rows >= seq_length) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "position_rows (", position_rows, ") must be 0 or at least seq_length (", seq_length, ")"));
}

std::vector<Parameter*> VocabParallelEmbedding::Parameters() {
  std::vector<Parameter*> out = {&table_};
  if (positions_.value.defined()) out.push_back(&positions_);
  return out;
}

absl::StatusOr<Tensor> VocabParallelEmbedding::Forward(const std::vector<int32_t>& ids) {
  Backend& be = *ctx_.backend;
  const int64_t n = static_cast<int64_t>(ids.size()), h = config_.shape.hidden_size;
  const int64_t v = table_.value.dim(0), start = ctx_.tp_rank() * v;
  saved_ = EmbeddingSaved();
  PT_ASSIGN_OR_RETURN(saved_.ids, IdsTensor(be, ids));
  PT_ASSIGN_OR_RETURN(Tensor partial, be.Empty({n, h}, config_.dtype, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be.EmbeddingForward(config_.dtype, partial.data(),
                                         saved_.ids.data_as<int32_t>(), table_.value.data(), n,
                                         h, start, start + v));
  Tensor out;
  if (config_.parallel.sequence_parallel) {
    PT_ASSIGN_OR_RETURN(out, ReduceScatterToSpRegion::Forward(ctx_, partial,
                                                              MemoryTag::kActivations));
  } else {
    PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx_, partial));
    out = std::move(partial);
  }
  // Every TP rank holds the same rows without SP (the same mask), its own shard with SP.
  const int64_t row0 = config_.parallel.sequence_parallel ? ctx_.tp_rank() * out.dim(0) : 0;
  if (positions_.value.defined()) {
    // This rank's rows (its SP shard) of the learned positions, added in place.
    const int64_t rows = out.dim(0), table_rows = positions_.value.dim(0);
    PT_ASSIGN_OR_RETURN(Tensor p, be.Empty({rows, h}, config_.dtype, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be.EmbeddingForward(
        config_.dtype, p.data(), position_ids_.Rows(row0, row0 + rows).data_as<int32_t>(),
        positions_.value.data(), rows, h, 0, table_rows));
    PT_RETURN_IF_ERROR(be.Add(config_.dtype, out.data(), out.data(), p.data(), rows * h));
  }
  return ApplyDropout(be, out, config_.hidden_dropout, EmbeddingDropoutSeed(config_.seed), row0,
                      &saved_.dropout_mask);
}

absl::Status VocabParallelEmbedding::Backward(const Tensor& dout) {
  Backend& be = *ctx_.backend;
  PT_ASSIGN_OR_RETURN(Tensor d, DropoutGradient(be, dout, saved_.dropout_mask,
                                                 config_.hidden_dropout,
                                                 MemoryTag::kActivations));
  if (config_.parallel.sequence_parallel) {
    PT_ASSIGN_OR_RETURN(d, ReduceScatterToSpRegion::Backward(ctx_, d));
  }
  // Every row of the micro-batch, the same on every TP rank: the replicated position
  // table's gradient needs no TP reduce.
  if (positions_.value.defined()) {
    PT_RETURN_IF_ERROR(be.EmbeddingBackward(config_.dtype, positions_.grad.data(),
                                            position_ids_.data_as<int32_t>(), d.data(),
                                            d.dim(0), d.dim(1), 0, positions_.value.dim(0)));
  }
  const int64_t v = table_.value.dim(0), start = ctx_.tp_rank() * v;
  return be.EmbeddingBackward(config_.dtype, table_.grad.data(), saved_.ids.data_as<int32_t>(),
                              d.data(), d.dim(0), d.dim(1), start, start + v);
}

absl::StatusOr<std::unique_ptr<VocabParallelOutput>> VocabParallelOutput::Create(
    const LayerConfig& config, const ParallelContext& ctx, OutputWeight weight) {
  PT_RETURN_IF_ERROR(config.Validate());
  const int64_t h = config.shape.hidden_size, V = config.shape.vocab_size;
  const int64_t v = V / config.parallel.tp, start = ctx.tp_rank() * v;
  std::unique_ptr<VocabParallelOutput> o(new VocabParallelOutput());
  o->config_ = config;
  o->ctx_ = ctx;
  std::vector<int64_t> identity(h);
  for (int64_t i = 0; i < h; ++i) identity[i] = i;
  PT_ASSIGN_OR_RETURN(o->norm_w_, MakeParameter(*ctx.backend, "final_norm.weight", {h},
                                                config.dtype, h, identity, true,
                                                [](int64_t) { return 1.0; }));
  if (config.shape.normalization == Normalization::kLayerNorm) {
    PT_ASSIGN_OR_RETURN(o->norm_b_, MakeParameter(*ctx.backend, "final_norm.bias", {h},
                                                  config.dtype, h, identity, true,
                                                  [](int64_t) { return 0.0; }));
  }
  if (weight.table != nullptr && !weight.tied) {
    return absl::InvalidArgumentError("weight.table needs weight.tied");
  }
  if (weight.table != nullptr) {
    if (weight.table->value.dim(0) != v || weight.table->value.dim(1) != h) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tied table is [", weight.table->value.dim(0), ", ", weight.table->value.dim(1),
          "]; the output layer needs [", v, ", ", h, "]"));
    }
    o->logits_ = std::make_unique<ColumnParallelLinear>(
        ColumnParallelLinear::Sharing(weight.table, config.parallel.sequence_parallel));
  } else if (weight.tied) {
    PT_ASSIGN_OR_RETURN(Parameter copy, VocabParallelEmbedding::MakeTable(config, ctx));
    o->logits_ = std::make_unique<ColumnParallelLinear>(
        ColumnParallelLinear::Owning(std::move(copy), config.parallel.sequence_parallel));
  } else {
    PT_ASSIGN_OR_RETURN(ColumnParallelLinear logits,
                        ColumnParallelLinear::Create(
                            ctx, "output.weight", h, V, v,
                            [start](int64_t r) { return start + r; }, config.dtype,
                            config.parallel.sequence_parallel, config.seed));
    o->logits_ = std::make_unique<ColumnParallelLinear>(std::move(logits));
  }
  return o;
}

std::vector<Parameter*> VocabParallelOutput::Parameters() {
  std::vector<Parameter*> out = {&norm_w_};
  if (norm_b_.value.defined()) out.push_back(&norm_b_);
  if (!logits_->shares_weight()) out.push_back(&logits_->weight());
  return out;
}

absl::StatusOr<double> VocabParallelOutput::Forward(const Tensor& y,
                                                    const std::vector<int32_t>& targets) {
  Backend& be = *ctx_.backend;
  const DType dt = config_.dtype;
  const int64_t rows = y.dim(0), h = y.dim(1);
  if (rows != SpRows(config_)) {
    return absl::InvalidArgumentError(absl::StrCat("y rows (", rows, ") must be ", SpRows(config_)));
  }
  y_ = y;
  PT_ASSIGN_OR_RETURN(ln_, be.Empty({rows, h}, dt, MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(rstd_, be.Empty({rows}, DType::kF32, MemoryTag::kActivations));
  if (norm_b_.value.defined()) {
    PT_ASSIGN_OR_RETURN(mean_, be.Empty({rows}, DType::kF32, MemoryTag::kActivations));
    PT_RETURN_IF_ERROR(be.LayerNormForward(dt, ln_.data(), mean_.data_as<float>(),
                                           rstd_.data_as<float>(), y.data(),
                                           norm_w_.value.data(), norm_b_.value.data(), rows, h,
                                           config_.norm_epsilon));
  } else {
    PT_RETURN_IF_ERROR(be.RmsNormForward(dt, ln_.data(), rstd_.data_as<float>(), y.data(),
                                         norm_w_.value.data(), rows, h, config_.norm_epsilon));
  }
  PT_ASSIGN_OR_RETURN(logits_out_, logits_->Forward(ctx_, ln_));
  const int64_t n = logits_out_.dim(0), v = logits_out_.dim(1);
  const int64_t t = ctx_.tp_size(), start = ctx_.tp_rank() * v;
  PT_ASSIGN_OR_RETURN(targets_, IdsTensor(be, targets));
  // Row max over the whole vocabulary: all-gather the local maxima.
  PT_ASSIGN_OR_RETURN(Tensor local_max, be.Empty({n}, DType::kF32, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.RowMax(dt, local_max.data_as<float>(), logits_out_.data(), n, v));
  PT_ASSIGN_OR_RETURN(Tensor all_max, be.Empty({t, n}, DType::kF32, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(ctx_.Comm(
      [&] { return ctx_.tp->AllGather(local_max.data(), all_max.data(), n, DType::kF32); }));
  PT_ASSIGN_OR_RETURN(std::vector<double> maxes, be.CopyToHost(all_max));
  std::vector<double> row_max(n);
  for (int64_t i = 0; i < n; ++i) {
    row_max[i] = maxes[i];
    for (int64_t r = 1; r < t; ++r) row_max[i] = std::max(row_max[i], maxes[r * n + i]);
  }
  PT_ASSIGN_OR_RETURN(max_, be.Empty({n}, DType::kF32, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be.CopyFromHost(max_, row_max));
  PT_ASSIGN_OR_RETURN(sumexp_, be.Empty({n}, DType::kF32, MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(Tensor target, be.Empty({n}, DType::kF32, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.CrossEntropyPartials(dt, sumexp_.data_as<float>(),
                                             target.data_as<float>(), logits_out_.data(),
                                             max_.data_as<float>(), targets_.data_as<int32_t>(),
                                             n, v, start));
  PT_RETURN_IF_ERROR(ctx_.Comm([&] { return ctx_.tp->AllReduce(sumexp_.data(), n, DType::kF32); }));
  PT_RETURN_IF_ERROR(ctx_.Comm([&] { return ctx_.tp->AllReduce(target.data(), n, DType::kF32); }));
  PT_ASSIGN_OR_RETURN(std::vector<double> se, be.CopyToHost(sumexp_));
  PT_ASSIGN_OR_RETURN(std::vector<double> tg, be.CopyToHost(target));
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) loss += std::log(se[i]) + row_max[i] - tg[i];
  return loss / static_cast<double>(n);
}

absl::StatusOr<Tensor> VocabParallelOutput::Backward() {
  Backend& be = *ctx_.backend;
  const DType dt = config_.dtype;
  const int64_t n = logits_out_.dim(0), v = logits_out_.dim(1), start = ctx_.tp_rank() * v;
  PT_ASSIGN_OR_RETURN(Tensor dlogits, be.Empty({n, v}, dt, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.CrossEntropyBackward(
      dt, dlogits.data(), logits_out_.data(), max_.data_as<float>(), sumexp_.data_as<float>(),
      targets_.data_as<int32_t>(), n, v, start, static_cast<float>(1.0 / n)));
  PT_ASSIGN_OR_RETURN(Tensor dln, logits_->Backward(ctx_, ln_, dlogits));
  const int64_t rows = y_.dim(0), h = y_.dim(1);
  PT_ASSIGN_OR_RETURN(Tensor dy, be.Empty({rows, h}, dt, MemoryTag::kWorkspace));
  if (norm_b_.value.defined()) {
    PT_RETURN_IF_ERROR(be.LayerNormBackward(dt, dy.data(), norm_w_.grad.data(),
                                            norm_b_.grad.data(), dln.data(), y_.data(),
                                            norm_w_.value.data(), mean_.data_as<float>(),
                                            rstd_.data_as<float>(), rows, h));
  } else {
    PT_RETURN_IF_ERROR(be.RmsNormBackward(dt, dy.data(), norm_w_.grad.data(), dln.data(),
                                          y_.data(), norm_w_.value.data(),
                                          rstd_.data_as<float>(), rows, h));
  }
  y_ = ln_ = logits_out_ = Tensor();
  return dy;
}

}  // namespace paratune::kernels
