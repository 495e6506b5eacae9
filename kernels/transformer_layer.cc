#include "kernels/transformer_layer.h"

#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/dropout.h"
#include "kernels/hash_random.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seeds of the three dropout sites, derived from the layer seed.
uint64_t DropoutSeed(uint64_t seed, int site) { return Mix64(seed + 0x1000 + site); }

}  // namespace

std::vector<std::pair<std::string, int64_t>> SavedActivations::Breakdown() const {
  const std::pair<const char*, const Tensor*> all[] = {
      {"x", &x},           {"ln1_mean", &ln1_mean}, {"ln1_rstd", &ln1_rstd},
      {"ln1_out", &ln1_out}, {"qkv", &qkv},         {"probs", &probs},
      {"attn_mask", &attn_mask}, {"probs_drop", &probs_drop}, {"lse", &lse},
      {"ctx", &ctx},       {"drop1_mask", &drop1_mask}, {"h1", &h1},
      {"ln2_mean", &ln2_mean}, {"ln2_rstd", &ln2_rstd}, {"ln2_out", &ln2_out},
      {"fc1_out", &fc1_out}, {"act", &act},         {"drop2_mask", &drop2_mask}};
  std::vector<std::pair<std::string, int64_t>> out;
  std::set<const void*> seen;
  for (const auto& [name, t] : all) {
    if (!t->defined() || !seen.insert(t->storage_id()).second) continue;
    out.emplace_back(name, t->bytes());
  }
  for (auto& entry : moe.Breakdown()) out.push_back(std::move(entry));
  return out;
}

int64_t SavedActivations::TotalBytes() const {
  int64_t total = 0;
  for (const auto& [name, bytes] : Breakdown()) total += bytes;
  return total;
}

TransformerLayer::TransformerLayer(const LayerConfig& config, const ParallelContext& ctx)
    : config_(config), ctx_(ctx) {}

absl::StatusOr<std::unique_ptr<TransformerLayer>> TransformerLayer::Create(
    const LayerConfig& config, const ParallelContext& ctx) {
  PT_RETURN_IF_ERROR(config.Validate());
  if (ctx.tp_size() != config.parallel.tp) {
    return absl::InvalidArgumentError(absl::StrCat("communicator size (", ctx.tp_size(),
                                                   ") must equal tp (", config.parallel.tp, ")"));
  }
  if (config.is_moe()) {
    if (ctx.ep == nullptr || ctx.etp == nullptr || ctx.ep->size() != config.moe.ep ||
        ctx.etp->size() != config.moe.etp) {
      return absl::InvalidArgumentError(
          absl::StrCat("a mixture-of-experts layer needs EP and ETP communicators of sizes ep (",
                       config.moe.ep, ") and etp (", config.moe.etp, ")"));
    }
  }
  std::unique_ptr<TransformerLayer> layer(new TransformerLayer(config, ctx));
  PT_RETURN_IF_ERROR(layer->Init());
  return layer;
}

int64_t TransformerLayer::local_rows() const {
  const int64_t s = config_.parallel.sequence_parallel
                        ? config_.seq_length / config_.parallel.tp
                        : config_.seq_length;
  return s * config_.parallel.micro_batch_size;
}

absl::Status TransformerLayer::Init() {
  const int64_t h = config_.shape.hidden_size, a = config_.shape.num_attention_heads;
  const int64_t g = config_.num_query_groups(), d = config_.head_dim();
  const int64_t f = config_.ffn_hidden_size(), t = config_.parallel.tp, r = ctx_.tp_rank();
  const DType dt = config_.dtype;
  const bool sp = config_.parallel.sequence_parallel;
  heads_local_ = a / t;
  groups_local_ = g / t;
  ffn_local_ = f / t;
  qkv_width_ = (heads_local_ + 2 * groups_local_) * d;
  const int64_t hl = heads_local_, gl = groups_local_, fl = ffn_local_;

  std::vector<int64_t> identity(h);
  for (int64_t i = 0; i < h; ++i) identity[i] = i;
  const uint64_t seed = config_.seed;
  auto gamma = [seed](const std::string& name) {
    return [u = UniformInit(seed, name)](int64_t i) { return 1.0 + 0.1 * u(i); };
  };
  auto beta = [seed](const std::string& name) {
    return [u = UniformInit(seed, name)](int64_t i) { return 0.1 * u(i); };
  };
  PT_ASSIGN_OR_RETURN(norm1_w_, MakeParameter(*ctx_.backend, "norm1.weight", {h}, dt, h,
                                              identity, true, gamma("norm1.weight")));
  PT_ASSIGN_OR_RETURN(norm2_w_, MakeParameter(*ctx_.backend, "norm2.weight", {h}, dt, h,
                                              identity, true, gamma("norm2.weight")));
  if (config_.shape.normalization == Normalization::kLayerNorm) {
    PT_ASSIGN_OR_RETURN(norm1_b_, MakeParameter(*ctx_.backend, "norm1.bias", {h}, dt, h,
                                                identity, true, beta("norm1.bias")));
    PT_ASSIGN_OR_RETURN(norm2_b_, MakeParameter(*ctx_.backend, "norm2.bias", {h}, dt, h,
                                                identity, true, beta("norm2.bias")));
  }
  // QKV rows on rank r: its query heads, then its key groups, then its value groups.
  auto qkv_rows = [=](int64_t lr) -> int64_t {
    if (lr < hl * d) return r * hl * d + lr;
    if (lr < (hl + gl) * d) return a * d + r * gl * d + (lr - hl * d);
    return (a + g) * d + r * gl * d + (lr - (hl + gl) * d);
  };
  PT_ASSIGN_OR_RETURN(ColumnParallelLinear qkv,
                      ColumnParallelLinear::Create(ctx_, "qkv.weight", h, (a + 2 * g) * d,
                                                   qkv_width_, qkv_rows, dt, sp, seed));
  qkv_ = std::make_unique<ColumnParallelLinear>(std::move(qkv));
  PT_ASSIGN_OR_RETURN(RowParallelLinear proj,
                      RowParallelLinear::Create(
                          ctx_, "proj.weight", a * d, hl * d, h,
                          [=](int64_t c) { return r * hl * d + c; }, dt, sp, seed));
  proj_ = std::make_unique<RowParallelLinear>(std::move(proj));
  if (config_.is_moe()) {
    // Every shard is a function of (seed, tensor, unsharded index), as for the dense weights.
    PT_ASSIGN_OR_RETURN(moe_, MoeLayer::CreateRandom(config_.moe, Mix64(seed + 0x6d6f65ull),
                                                     1.0 / std::sqrt(static_cast<double>(h)),
                                                     ctx_.ep, ctx_.etp, ctx_.backend, dt));
    return absl::OkStatus();
  }
  if (!config_.mlp) return absl::OkStatus();
  const bool gated = IsGated(config_.shape.activation);
  // A gated MLP's (SwiGLU, GeGLU) FC1 holds [gate | up]; rank r takes its slice of each.
  auto fc1_rows = [=](int64_t lr) -> int64_t {
    if (lr < fl) return r * fl + lr;
    return f + r * fl + (lr - fl);
  };
  PT_ASSIGN_OR_RETURN(ColumnParallelLinear fc1,
                      ColumnParallelLinear::Create(ctx_, "fc1.weight", h, gated ? 2 * f : f,
                                                   gated ? 2 * fl : fl, fc1_rows, dt, sp, seed));
  fc1_ = std::make_unique<ColumnParallelLinear>(std::move(fc1));
  PT_ASSIGN_OR_RETURN(RowParallelLinear fc2,
                      RowParallelLinear::Create(
                          ctx_, "fc2.weight", f, fl, h, [=](int64_t c) { return r * fl + c; },
                          dt, sp, seed));
  fc2_ = std::make_unique<RowParallelLinear>(std::move(fc2));
  return absl::OkStatus();
}

std::vector<Parameter*> TransformerLayer::Parameters() {
  std::vector<Parameter*> out = {&norm1_w_};
  if (norm1_b_.value.defined()) out.push_back(&norm1_b_);
  out.push_back(&qkv_->weight());
  out.push_back(&proj_->weight());
  out.push_back(&norm2_w_);
  if (norm2_b_.value.defined()) out.push_back(&norm2_b_);
  if (!fc1_) return out;
  out.push_back(&fc1_->weight());
  out.push_back(&fc2_->weight());
  return out;
}

std::vector<ParameterRef> TransformerLayer::MoeParameterRefs(bool routed_experts) {
  if (!moe_) return {};
  return moe_->ParameterRefs(routed_experts);
}

absl::Status TransformerLayer::ZeroGradients() {
  for (Parameter* p : Parameters()) PT_RETURN_IF_ERROR(ctx_.backend->Fill(p->grad, 0.0));
  for (bool routed : {false, true}) {
    for (const ParameterRef& r : MoeParameterRefs(routed)) {
      PT_RETURN_IF_ERROR(ctx_.backend->Fill(*r.grad, 0.0));
    }
  }
  return absl::OkStatus();
}

absl::Status TransformerLayer::FinishGradients() {
  if (!config_.parallel.sequence_parallel || config_.parallel.tp == 1) return absl::OkStatus();
  auto all_reduce = [&](Tensor& grad) {
    return ctx_.Comm([&] { return ctx_.tp->AllReduce(grad.data(), grad.numel(), grad.dtype()); });
  };
  for (Parameter* p : Parameters()) {
    if (p->replicated) PT_RETURN_IF_ERROR(all_reduce(p->grad));
  }
  // With etp = 1 each TP rank routed its own s/t rows through the router and the shared
  // experts, so their gradients are partial sums as the SP norms' are. With etp = tp every
  // TP rank computed them over the gathered rows: whole already.
  if (config_.moe.etp == 1) {
    for (const ParameterRef& r : MoeParameterRefs(false)) PT_RETURN_IF_ERROR(all_reduce(*r.grad));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> TransformerLayer::Norm(int which, const Tensor& x, Tensor* mean,
                                              Tensor* rstd) {
  Backend& be = *ctx_.backend;
  const int64_t rows = x.dim(0), h = x.dim(1);
  const Parameter& w = which == 1 ? norm1_w_ : norm2_w_;
  const Parameter& b = which == 1 ? norm1_b_ : norm2_b_;
  PT_ASSIGN_OR_RETURN(Tensor y, be.Empty({rows, h}, x.dtype(), MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(*rstd, be.Empty({rows}, DType::kF32, MemoryTag::kActivations));
  if (config_.shape.normalization == Normalization::kLayerNorm) {
    PT_ASSIGN_OR_RETURN(*mean, be.Empty({rows}, DType::kF32, MemoryTag::kActivations));
    PT_RETURN_IF_ERROR(be.LayerNormForward(x.dtype(), y.data(), mean->data_as<float>(),
                                           rstd->data_as<float>(), x.data(), w.value.data(),
                                           b.value.data(), rows, h, config_.norm_epsilon));
  } else {
    PT_RETURN_IF_ERROR(be.RmsNormForward(x.dtype(), y.data(), rstd->data_as<float>(), x.data(),
                                         w.value.data(), rows, h, config_.norm_epsilon));
  }
  return y;
}

absl::StatusOr<Tensor> TransformerLayer::NormBackward(int which, const Tensor& dy,
                                                      const Tensor& x, const Tensor& mean,
                                                      const Tensor& rstd) {
  Backend& be = *ctx_.backend;
  const int64_t rows = x.dim(0), h = x.dim(1);
  Parameter& w = which == 1 ? norm1_w_ : norm2_w_;
  Parameter& b = which == 1 ? norm1_b_ : norm2_b_;
  PT_ASSIGN_OR_RETURN(Tensor dx, be.Empty({rows, h}, x.dtype(), MemoryTag::kWorkspace));
  if (config_.shape.normalization == Normalization::kLayerNorm) {
    PT_RETURN_IF_ERROR(be.LayerNormBackward(x.dtype(), dx.data(), w.grad.data(), b.grad.data(),
                                            dy.data(), x.data(), w.value.data(),
                                            mean.data_as<float>(), rstd.data_as<float>(), rows,
                                            h));
  } else {
    PT_RETURN_IF_ERROR(be.RmsNormBackward(x.dtype(), dx.data(), w.grad.data(), dy.data(),
                                          x.data(), w.value.data(), rstd.data_as<float>(), rows,
                                          h));
  }
  return dx;
}

absl::StatusOr<Tensor> TransformerLayer::Dropout(const Tensor& x, float p, uint64_t seed,
                                                 Tensor* mask) {
  // Global index of the first row: SP shards hold rows rank·N_sp onwards.
  const int64_t row0 = config_.parallel.sequence_parallel ? ctx_.tp_rank() * local_rows() : 0;
  return ApplyDropout(*ctx_.backend, x, p, seed, row0, mask);
}

AttentionArgs TransformerLayer::MakeAttentionArgs(const Tensor& qkv, const Tensor& ctx) const {
  const int64_t d = config_.head_dim();
  AttentionArgs args;
  args.batch = config_.parallel.micro_batch_size;
  args.seq = config_.seq_length;
  args.heads = heads_local_;
  args.groups = groups_local_;
  args.head_dim = d;
  args.q = qkv.data();
  args.k = qkv.at(heads_local_ * d);
  args.v = qkv.at((heads_local_ + groups_local_) * d);
  args.ld_qkv = qkv_width_;
  args.o = ctx.data();
  args.ld_o = heads_local_ * d;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  args.dropout = config_.attention_dropout;
  args.seed = DropoutSeed(config_.seed, 0);
  args.global_heads = config_.shape.num_attention_heads;
  args.head_offset = ctx_.tp_rank() * heads_local_;
  args.window = config_.attention_window;
  return args;
}

absl::StatusOr<Tensor> TransformerLayer::AttentionForward(const Tensor& qkv, bool keep,
                                                          SavedActivations* s) {
  Backend& be = *ctx_.backend;
  const DType dt = qkv.dtype();
  const int64_t b = config_.parallel.micro_batch_size, sq = config_.seq_length,
                d = config_.head_dim();
  const int64_t hl = heads_local_, gl = groups_local_, pg = hl / gl, W = qkv_width_;
  PT_ASSIGN_OR_RETURN(Tensor ctx, be.Empty({sq * b, hl * d}, dt, MemoryTag::kActivations));
  AttentionArgs args = MakeAttentionArgs(qkv, ctx);
  if (config_.flash_attention) {
    PT_ASSIGN_OR_RETURN(Tensor lse, be.Empty({b, hl, sq}, DType::kF32, MemoryTag::kActivations));
    PT_RETURN_IF_ERROR(be.FlashAttentionForward(dt, args, lse.data_as<float>()));
    if (keep) s->lse = lse;
    return ctx;
  }
  PT_ASSIGN_OR_RETURN(Tensor probs, be.Empty({b, hl, sq, sq}, dt, MemoryTag::kActivations));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t gg = 0; gg < gl; ++gg) {
      GemmArgs g;  // scores = Q·Kᵀ for the heads of group gg (they share K)
      g.trans_b = true;
      g.m = sq, g.n = sq, g.k = d;
      g.a = qkv.at(bi * W + gg * pg * d), g.lda = b * W;
      g.b = qkv.at(bi * W + (hl + gg) * d), g.ldb = b * W;
      g.c = probs.at((bi * hl + gg * pg) * sq * sq), g.ldc = sq;
      g.batch = pg, g.stride_a = d, g.stride_b = 0, g.stride_c = sq * sq;
      PT_RETURN_IF_ERROR(be.Gemm(dt, g));
    }
  }
  PT_RETURN_IF_ERROR(
      be.CausalSoftmaxForward(dt, probs.data(), b * hl, sq, args.scale, args.window));
  Tensor probs_drop = probs, mask;
  if (config_.attention_dropout > 0) {
    PT_ASSIGN_OR_RETURN(mask, be.Empty({b, hl, sq, sq}, DType::kU8, MemoryTag::kActivations));
    PT_ASSIGN_OR_RETURN(probs_drop, be.Empty({b, hl, sq, sq}, dt, MemoryTag::kActivations));
    PT_RETURN_IF_ERROR(be.AttentionDropoutForward(dt, probs_drop.data(),
                                                  mask.data_as<uint8_t>(), probs.data(), args));
  }
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t gg = 0; gg < gl; ++gg) {
      GemmArgs g;  // ctx = P·V
      g.m = sq, g.n = d, g.k = sq;
      g.a = probs_drop.at((bi * hl + gg * pg) * sq * sq), g.lda = sq;
      g.b = qkv.at(bi * W + (hl + gl + gg) * d), g.ldb = b * W;
      g.c = ctx.at(bi * hl * d + gg * pg * d), g.ldc = b * hl * d;
      g.batch = pg, g.stride_a = sq * sq, g.stride_b = 0, g.stride_c = d;
      PT_RETURN_IF_ERROR(be.Gemm(dt, g));
    }
  }
  if (keep) {
    s->probs = probs;
    if (mask.defined()) {
      s->attn_mask = mask;
      s->probs_drop = probs_drop;
    }
  }
  return ctx;
}

absl::StatusOr<Tensor> TransformerLayer::AttentionBackward(const Tensor& dctx,
                                                           SavedActivations* s) {
  Backend& be = *ctx_.backend;
  const Tensor& qkv = s->qkv;
  const DType dt = qkv.dtype();
  const int64_t b = config_.parallel.micro_batch_size, sq = config_.seq_length,
                d = config_.head_dim();
  const int64_t hl = heads_local_, gl = groups_local_, pg = hl / gl, W = qkv_width_;
  const bool have_core = config_.flash_attention ? s->lse.defined() : s->probs.defined();
  SavedActivations core;  // selective recompute: the attention core, rebuilt from Q, K, V
  if (!have_core) {
    PT_RETURN_IF_ERROR(be.Synchronize());
    const auto t0 = std::chrono::steady_clock::now();
    PT_RETURN_IF_ERROR(AttentionForward(qkv, /*keep=*/true, &core).status());
    PT_RETURN_IF_ERROR(be.Synchronize());
    times_.recompute_s += Seconds(t0);
  } else {
    core.probs = s->probs;
    core.attn_mask = s->attn_mask;
    core.probs_drop = s->probs_drop;
    core.lse = s->lse;
  }
  PT_ASSIGN_OR_RETURN(Tensor dqkv, be.Empty({sq * b, W}, dt, MemoryTag::kWorkspace));
  AttentionArgs args = MakeAttentionArgs(qkv, s->ctx);
  if (config_.flash_attention) {
    PT_RETURN_IF_ERROR(be.FlashAttentionBackward(dt, args, core.lse.data_as<float>(),
                                                 dctx.data(), dqkv.data(), dqkv.at(hl * d),
                                                 dqkv.at((hl + gl) * d)));
    return dqkv;
  }
  const Tensor& probs_drop = core.probs_drop.defined() ? core.probs_drop : core.probs;
  PT_ASSIGN_OR_RETURN(Tensor dp, be.Empty({b, hl, sq, sq}, dt, MemoryTag::kWorkspace));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t gg = 0; gg < gl; ++gg) {
      GemmArgs g;  // dP = dctx·Vᵀ
      g.trans_b = true;
      g.m = sq, g.n = sq, g.k = d;
      g.a = dctx.at(bi * hl * d + gg * pg * d), g.lda = b * hl * d;
      g.b = qkv.at(bi * W + (hl + gl + gg) * d), g.ldb = b * W;
      g.c = dp.at((bi * hl + gg * pg) * sq * sq), g.ldc = sq;
      g.batch = pg, g.stride_a = d, g.stride_b = 0, g.stride_c = sq * sq;
      PT_RETURN_IF_ERROR(be.Gemm(dt, g));
      for (int64_t j = 0; j < pg; ++j) {
        const int64_t hh = gg * pg + j;
        GemmArgs gv;  // dV(group) = Σ_heads Pᵀ·dctx
        gv.trans_a = true;
        gv.m = sq, gv.n = d, gv.k = sq;
        gv.a = probs_drop.at((bi * hl + hh) * sq * sq), gv.lda = sq;
        gv.b = dctx.at(bi * hl * d + hh * d), gv.ldb = b * hl * d;
        gv.beta = j == 0 ? 0.0f : 1.0f;
        gv.c = dqkv.at(bi * W + (hl + gl + gg) * d), gv.ldc = b * W;
        PT_RETURN_IF_ERROR(be.Gemm(dt, gv));
      }
    }
  }
  if (core.attn_mask.defined()) {
    PT_RETURN_IF_ERROR(be.DropoutBackward(dt, dp.data(), dp.data(),
                                          core.attn_mask.data_as<uint8_t>(), dp.numel(),
                                          config_.attention_dropout));
  }
  PT_RETURN_IF_ERROR(
      be.CausalSoftmaxBackward(dt, dp.data(), core.probs.data(), dp.data(), b * hl, sq, args.scale));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t gg = 0; gg < gl; ++gg) {
      GemmArgs g;  // dQ = dS·K
      g.m = sq, g.n = d, g.k = sq;
      g.a = dp.at((bi * hl + gg * pg) * sq * sq), g.lda = sq;
      g.b = qkv.at(bi * W + (hl + gg) * d), g.ldb = b * W;
      g.c = dqkv.at(bi * W + gg * pg * d), g.ldc = b * W;
      g.batch = pg, g.stride_a = sq * sq, g.stride_b = 0, g.stride_c = d;
      PT_RETURN_IF_ERROR(be.Gemm(dt, g));
      for (int64_t j = 0; j < pg; ++j) {
        const int64_t hh = gg * pg + j;
        GemmArgs gk;  // dK(group) = Σ_heads dSᵀ·Q
        gk.trans_a = true;
        gk.m = sq, gk.n = d, gk.k = sq;
        gk.a = dp.at((bi * hl + hh) * sq * sq), gk.lda = sq;
        gk.b = qkv.at(bi * W + hh * d), gk.ldb = b * W;
        gk.beta = j == 0 ? 0.0f : 1.0f;
        gk.c = dqkv.at(bi * W + (hl + gg) * d), gk.ldc = b * W;
        PT_RETURN_IF_ERROR(be.Gemm(dt, gk));
      }
    }
  }
  return dqkv;
}

absl::StatusOr<Tensor> TransformerLayer::ForwardImpl(const Tensor& x, Recompute mode,
                                                     SavedActivations* s) {
  Backend& be = *ctx_.backend;
  const DType dt = x.dtype();
  const bool keep = mode != Recompute::kFull;
  const bool keep_core = mode == Recompute::kNone;
  const int64_t n_sp = x.dim(0), h = x.dim(1);
  s->x = x;
  Tensor mean1, rstd1;
  PT_ASSIGN_OR_RETURN(Tensor ln1, Norm(1, x, &mean1, &rstd1));
  PT_ASSIGN_OR_RETURN(Tensor qkv, qkv_->Forward(ctx_, ln1));
  PT_ASSIGN_OR_RETURN(Tensor ctx, AttentionForward(qkv, keep_core, s));
  PT_ASSIGN_OR_RETURN(Tensor proj, proj_->Forward(ctx_, ctx));
  Tensor mask1;
  PT_ASSIGN_OR_RETURN(Tensor drop1,
                      Dropout(proj, config_.hidden_dropout, DropoutSeed(config_.seed, 1), &mask1));
  PT_ASSIGN_OR_RETURN(Tensor h1, be.Empty({n_sp, h}, dt, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be.Add(dt, h1.data(), x.data(), drop1.data(), h1.numel()));
  Tensor mean2, rstd2;
  PT_ASSIGN_OR_RETURN(Tensor ln2, Norm(2, h1, &mean2, &rstd2));
  // The MLP block: the experts (a MoE layer), FC1 → activation → FC2, or the identity.
  Tensor mlp, fc1, act;
  if (moe_) {
    PT_ASSIGN_OR_RETURN(mlp, MoeForward(ln2, keep, s));
  } else if (!fc1_) {
    mlp = ln2;
  } else {
    PT_ASSIGN_OR_RETURN(fc1, fc1_->Forward(ctx_, ln2));
    const int64_t rows = fc1.dim(0);
    PT_ASSIGN_OR_RETURN(act, be.Empty({rows, ffn_local_}, dt, MemoryTag::kActivations));
    PT_RETURN_IF_ERROR(be.MlpActivationForward(dt, config_.shape.activation, act.data(), fc1.data(),
                                               rows, ffn_local_));
    PT_ASSIGN_OR_RETURN(mlp, fc2_->Forward(ctx_, act));
  }
  Tensor mask2;
  PT_ASSIGN_OR_RETURN(Tensor drop2,
                      Dropout(mlp, config_.hidden_dropout, DropoutSeed(config_.seed, 2), &mask2));
  PT_ASSIGN_OR_RETURN(Tensor y, be.Empty({n_sp, h}, dt, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be.Add(dt, y.data(), h1.data(), drop2.data(), y.numel()));
  if (keep) {
    s->ln1_mean = mean1;
    s->ln1_rstd = rstd1;
    s->ln1_out = ln1;
    s->qkv = qkv;
    s->ctx = ctx;
    s->drop1_mask = mask1;
    s->h1 = h1;
    s->ln2_mean = mean2;
    s->ln2_rstd = rstd2;
    s->ln2_out = ln2;
    s->fc1_out = fc1;  // undefined in a MoE layer (the block keeps its own)
    s->act = act;
    s->drop2_mask = mask2;
  }
  return y;
}

absl::StatusOr<Tensor> TransformerLayer::GatherExpertRows(const Tensor& x) {
  if (config_.moe.etp == 1) return x;
  const int64_t rows = x.dim(0), h = x.dim(1);
  PT_ASSIGN_OR_RETURN(Tensor full, ctx_.backend->Empty({rows * config_.moe.etp, h}, x.dtype(),
                                                       MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(
      ctx_.Comm([&] { return ctx_.etp->AllGather(x.data(), full.data(), x.numel(), x.dtype()); }));
  return full;
}

absl::StatusOr<Tensor> TransformerLayer::OwnExpertRows(const Tensor& full, int64_t rows) {
  if (config_.moe.etp == 1) return full;
  PT_ASSIGN_OR_RETURN(
      Tensor out, ctx_.backend->Empty({rows, full.dim(1)}, full.dtype(), MemoryTag::kActivations));
  const Tensor mine = full.Rows(ctx_.etp->rank() * rows, (ctx_.etp->rank() + 1) * rows);
  PT_RETURN_IF_ERROR(
      ctx_.backend->CopyBytes(out.data(), mine.data(), out.bytes(), Backend::CopyKind::kOnBackend));
  return out;
}

absl::StatusOr<Tensor> TransformerLayer::MoeForward(const Tensor& x, bool keep,
                                                    SavedActivations* s) {
  const int64_t rows = x.dim(0);
  PT_ASSIGN_OR_RETURN(Tensor in, GatherExpertRows(x));
  PT_ASSIGN_OR_RETURN(Tensor out,
                      ctx_.backend->Empty(in.shape(), in.dtype(), MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(moe_->Forward(in.data(), in.dim(0), out.data()));
  // Kept for this micro-batch's backward, or dropped (full recompute reruns it).
  MoeSaved saved = moe_->TakeSaved();
  if (keep) s->moe = std::move(saved);
  return OwnExpertRows(out, rows);
}

absl::StatusOr<Tensor> TransformerLayer::MoeBackward(const Tensor& dy, SavedActivations* s) {
  if (!s->moe.defined()) return absl::InternalError("MoE backward without its forward's state");
  const int64_t rows = dy.dim(0);
  PT_ASSIGN_OR_RETURN(Tensor dy_all, GatherExpertRows(dy));
  PT_ASSIGN_OR_RETURN(Tensor dx_all,
                      ctx_.backend->Empty(dy_all.shape(), dy_all.dtype(), MemoryTag::kWorkspace));
  moe_->RestoreSaved(std::move(s->moe));
  s->moe = MoeSaved();
  PT_RETURN_IF_ERROR(moe_->Backward(dy_all.data(), dx_all.data()));
  return OwnExpertRows(dx_all, rows);
}

absl::StatusOr<Tensor> TransformerLayer::Forward(const Tensor& x) {
  if (x.dtype() != config_.dtype || x.shape().size() != 2 || x.dim(0) != local_rows() ||
      x.dim(1) != config_.shape.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer input must be [", local_rows(), ", ", config_.shape.hidden_size, "] of ",
        DTypeName(config_.dtype)));
  }
  saved_ = SavedActivations();
  return ForwardImpl(x, config_.parallel.recompute, &saved_);
}

absl::StatusOr<Tensor> TransformerLayer::Backward(const Tensor& dy) {
  if (!saved_.x.defined()) {
    return absl::FailedPreconditionError("Backward called without a preceding Forward");
  }
  Backend& be = *ctx_.backend;
  const DType dt = dy.dtype();
  times_ = LayerTimes();
  SavedActivations full;  // full recompute: the whole forward again, keeping everything
  SavedActivations* s = &saved_;
  if (config_.parallel.recompute == Recompute::kFull) {
    PT_RETURN_IF_ERROR(be.Synchronize());
    const auto t0 = std::chrono::steady_clock::now();
    // The recomputed output is dropped at once: only the kept tensors matter.
    PT_RETURN_IF_ERROR(ForwardImpl(saved_.x, Recompute::kNone, &full).status());
    PT_RETURN_IF_ERROR(be.Synchronize());
    times_.recompute_s += Seconds(t0);
    s = &full;
  }
  const int64_t n_sp = dy.dim(0), h = dy.dim(1);
  auto dropout_backward = [&](const Tensor& d, const Tensor& mask) {
    return DropoutGradient(be, d, mask, config_.hidden_dropout, MemoryTag::kWorkspace);
  };
  // MLP block.
  PT_ASSIGN_OR_RETURN(Tensor d2, dropout_backward(dy, s->drop2_mask));
  // dact and dfc1 live to the end of the backward, as the memory model's working set has
  // them.
  Tensor dln2, dact, dfc1;
  if (moe_) {
    PT_ASSIGN_OR_RETURN(dln2, MoeBackward(d2, s));
  } else if (!fc1_) {
    dln2 = d2;
  } else {
    PT_ASSIGN_OR_RETURN(dact, fc2_->Backward(ctx_, s->act, d2));
    PT_ASSIGN_OR_RETURN(dfc1, be.Empty(s->fc1_out.shape(), dt, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be.MlpActivationBackward(dt, config_.shape.activation, dfc1.data(),
                                                dact.data(), s->fc1_out.data(), dact.dim(0),
                                                ffn_local_));
    PT_ASSIGN_OR_RETURN(dln2, fc1_->Backward(ctx_, s->ln2_out, dfc1));
  }
  PT_ASSIGN_OR_RETURN(Tensor dh1n, NormBackward(2, dln2, s->h1, s->ln2_mean, s->ln2_rstd));
  PT_ASSIGN_OR_RETURN(Tensor dh1, be.Empty({n_sp, h}, dt, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.Add(dt, dh1.data(), dy.data(), dh1n.data(), dh1.numel()));
  // Attention block.
  PT_ASSIGN_OR_RETURN(Tensor d1, dropout_backward(dh1, s->drop1_mask));
  PT_ASSIGN_OR_RETURN(Tensor dctx, proj_->Backward(ctx_, s->ctx, d1));
  PT_ASSIGN_OR_RETURN(Tensor dqkv, AttentionBackward(dctx, s));
  PT_ASSIGN_OR_RETURN(Tensor dln1, qkv_->Backward(ctx_, s->ln1_out, dqkv));
  PT_ASSIGN_OR_RETURN(Tensor dxn, NormBackward(1, dln1, s->x, s->ln1_mean, s->ln1_rstd));
  PT_ASSIGN_OR_RETURN(Tensor dx, be.Empty({n_sp, h}, dt, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.Add(dt, dx.data(), dh1.data(), dxn.data(), dx.numel()));
  saved_ = SavedActivations();
  return dx;
}

}  // namespace paratune::kernels
