#include "kernels/serving/serving_layer.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/activations.h"
#include "kernels/mappings.h"
#include "kernels/parallel_linear.h"
#include "kernels/serving/paged_attention.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

// Weight element (r, c) of a [rows, in] shard: scale·u(global_index(r, c)), the
// training linears' initialisation.
std::function<float(int64_t, int64_t)> ShardValues(
    uint64_t seed, const char* name, double scale,
    std::function<int64_t(int64_t, int64_t)> global_index) {
  return [u = UniformInit(seed, name), scale, gi = std::move(global_index)](int64_t r, int64_t c) {
    return static_cast<float>(scale * u(gi(r, c)));
  };
}

}  // namespace

absl::Status PhaseClock::Start() {
  if (sync_) PT_RETURN_IF_ERROR(backend_.Synchronize());
  t0_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

absl::Status PhaseClock::Stop(double* seconds) {
  if (!on_) return absl::OkStatus();
  if (sync_) PT_RETURN_IF_ERROR(backend_.Synchronize());
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MakeNormWeight(Backend& backend, uint64_t seed, const char* name, int64_t h,
                                      DType dtype) {
  PT_ASSIGN_OR_RETURN(Tensor w, backend.Empty({h}, dtype, MemoryTag::kWeights));
  const UniformInit u(seed, name);
  PT_RETURN_IF_ERROR(FillRows(
      backend, w, 1, h, [&](int64_t, int64_t i) { return static_cast<float>(1.0 + 0.1 * u(i)); }));
  return w;
}

absl::StatusOr<std::unique_ptr<ServingLayer>> ServingLayer::Create(const ServingConfig& config,
                                                                   const ParallelContext& ctx,
                                                                   int64_t index, ServingOps* ops) {
  PT_RETURN_IF_ERROR(config.Validate());
  if (ctx.tp_size() != config.attention_tp()) {
    return absl::InvalidArgumentError(absl::StrCat("communicator size (", ctx.tp_size(),
                                                   ") must equal the attention's tp (",
                                                   config.attention_tp(), ")"));
  }
  if (ops == nullptr) return absl::InvalidArgumentError("a serving layer needs its ServingOps");
  std::unique_ptr<ServingLayer> layer(new ServingLayer(config, ctx, index, ops));
  PT_RETURN_IF_ERROR(layer->Init());
  return layer;
}

absl::Status ServingLayer::InitExperts() {
  Communicator* ep = ctx_.ep;
  Communicator* etp = ctx_.etp;
  if (config_.parallel.ep == 1 && !config_.attention_dp) {
    ep_self_ = MakeSelfCommunicator(*ctx_.backend);
    ep = ep_self_.get();
    etp = ctx_.tp;
  } else if (ep == nullptr || etp == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep (", config_.parallel.ep,
                     ") > 1 needs the context's EP and ETP groups (MakeServingGroups)"));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.shape.hidden_size));
  PT_ASSIGN_OR_RETURN(moe_, MoeLayer::CreateRandom(config_.ExpertBlock(),
                                                   config_.seed + static_cast<uint64_t>(index_),
                                                   scale, ep, etp, ctx_.backend, config_.dtype));
  if (config_.weight_quant == WeightQuant::kNone) return absl::OkStatus();
  return QuantizeExperts(ep->rank(), etp->rank(), scale);
}

absl::Status ServingLayer::QuantizeExperts(int64_t ep_rank, int64_t etp_rank, double scale) {
  const MoeLayerConfig block = config_.ExpertBlock();
  const int64_t h = block.hidden;
  const uint64_t seed = config_.seed + static_cast<uint64_t>(index_);
  Backend& be = *ctx_.backend;
  // The rank's shard of expert `e` (the shared experts when e < 0) of MoeWeights::Random:
  // fc1 [2·width, h], fc2 [h, width].
  const auto make = [&](int64_t e) -> absl::Status {
    const FfnShard s = block.FfnShardOf(e, ep_rank, etp_rank);
    const int fc1_tensor = e < 0 ? 4 : 2, fc2_tensor = e < 0 ? 5 : 3;
    const auto value = [&](int tensor, int64_t at) {
      return static_cast<float>(MoeRandomWeight(seed, tensor, at, scale));
    };
    PT_ASSIGN_OR_RETURN(WeightOnlyLinear fc1, WeightOnlyLinear::Create(
                                                  be, 2 * s.width, h,
                                                  [&](int64_t r, int64_t c) {
                                                    return value(fc1_tensor, s.Fc1Row(r, h) + c);
                                                  },
                                                  config_.weight_quant, config_.int4_group_size));
    PT_ASSIGN_OR_RETURN(WeightOnlyLinear fc2, WeightOnlyLinear::Create(
                                                  be, h, s.width,
                                                  [&](int64_t r, int64_t c) {
                                                    return value(fc2_tensor, s.Fc2Row(r, h) + c);
                                                  },
                                                  config_.weight_quant, config_.int4_group_size));
    expert_fc1_.push_back(std::move(fc1));
    expert_fc2_.push_back(std::move(fc2));
    return absl::OkStatus();
  };
  for (int64_t le = 0; le < block.local_experts(); ++le) {
    PT_RETURN_IF_ERROR(make(ep_rank * block.local_experts() + le));
  }
  if (block.num_shared_experts > 0) PT_RETURN_IF_ERROR(make(-1));
  return moe_->SetExpertMlps([this](int64_t e, const float* in, int64_t rows,
                                    float* out) -> absl::Status {
    const size_t i = e < 0 ? expert_fc1_.size() - 1 : static_cast<size_t>(e);
    const WeightOnlyLinear& fc1 = expert_fc1_[i];
    const int64_t width = fc1.out() / 2;
    Backend& be = *ctx_.backend;
    PT_ASSIGN_OR_RETURN(Tensor mid,
                        be.Empty({rows, 2 * width}, DType::kF32, MemoryTag::kWorkspace));
    fc1.Forward(in, rows, mid.data_as<float>(), config_.threads);
    PT_ASSIGN_OR_RETURN(Tensor act, be.Empty({rows, width}, DType::kF32, MemoryTag::kWorkspace));
    cpu::swiglu_forward<float>(act.data_as<float>(), mid.data_as<float>(), rows, width,
                               config_.threads);
    expert_fc2_[i].Forward(act.data_as<float>(), rows, out, config_.threads);
    return absl::OkStatus();
  });
}

absl::Status ServingLayer::Init() {
  const int64_t h = config_.shape.hidden_size, a = config_.shape.num_attention_heads;
  const int64_t g = config_.num_query_groups(), d = config_.head_dim();
  const int64_t f = config_.ffn_hidden_size(), t = config_.attention_tp(), r = ctx_.tp_rank();
  const uint64_t seed = config_.seed + static_cast<uint64_t>(index_);
  const WeightQuant quant = config_.weight_quant;
  const int64_t group = config_.int4_group_size;
  Backend& be = *ctx_.backend;
  heads_local_ = a / t;
  groups_local_ = g / t;
  ffn_local_ = f / t;
  qkv_width_ = (heads_local_ + 2 * groups_local_) * d;
  const int64_t hl = heads_local_, gl = groups_local_, fl = ffn_local_;
  const DType dt = config_.dtype;
  PT_ASSIGN_OR_RETURN(norm1_w_, MakeNormWeight(be, seed, "norm1.weight", h, dt));
  PT_ASSIGN_OR_RETURN(norm2_w_, MakeNormWeight(be, seed, "norm2.weight", h, dt));
  // QKV rows on rank r: its query heads, then its key groups, then its value groups.
  auto qkv_row = [=](int64_t lr) -> int64_t {
    if (lr < hl * d) return r * hl * d + lr;
    if (lr < (hl + gl) * d) return a * d + r * gl * d + (lr - hl * d);
    return (a + g) * d + r * gl * d + (lr - (hl + gl) * d);
  };
  const double h_scale = 1.0 / std::sqrt(static_cast<double>(h));
  PT_ASSIGN_OR_RETURN(qkv_, WeightOnlyLinear::Create(be, qkv_width_, h,
                                                     ShardValues(seed, "qkv.weight", h_scale,
                                                                 [=](int64_t lr, int64_t c) {
                                                                   return qkv_row(lr) * h + c;
                                                                 }),
                                                     quant, group, dt));
  PT_ASSIGN_OR_RETURN(
      proj_, WeightOnlyLinear::Create(
                 be, h, hl * d,
                 ShardValues(seed, "proj.weight", 1.0 / std::sqrt(static_cast<double>(a * d)),
                             [=](int64_t row, int64_t c) { return row * a * d + r * hl * d + c; }),
                 quant, group, dt));
  if (config_.IsExpertLayer(index_)) return InitExperts();
  const bool gated = IsGated(config_.shape.activation);
  // A gated MLP's (SwiGLU, GeGLU) FC1 holds [gate | up]; rank r takes its slice of each.
  auto fc1_row = [=](int64_t lr) -> int64_t {
    return lr < fl ? r * fl + lr : f + r * fl + (lr - fl);
  };
  PT_ASSIGN_OR_RETURN(fc1_, WeightOnlyLinear::Create(be, gated ? 2 * fl : fl, h,
                                                     ShardValues(seed, "fc1.weight", h_scale,
                                                                 [=](int64_t lr, int64_t c) {
                                                                   return fc1_row(lr) * h + c;
                                                                 }),
                                                     quant, group, dt));
  PT_ASSIGN_OR_RETURN(fc2_,
                      WeightOnlyLinear::Create(
                          be, h, fl,
                          ShardValues(seed, "fc2.weight", 1.0 / std::sqrt(static_cast<double>(f)),
                                      [=](int64_t row, int64_t c) { return row * f + r * fl + c; }),
                          quant, group, dt));
  return absl::OkStatus();
}

int64_t ServingLayer::weight_bytes() const {
  int64_t bytes = norm1_w_.bytes() + norm2_w_.bytes() + qkv_.bytes() + proj_.bytes();
  if (moe_ == nullptr) return bytes + fc1_.bytes() + fc2_.bytes();
  const MoeParams& w = moe_->weights();
  for (const Tensor* t : {&w.router, &w.fc1, &w.fc2, &w.shared_fc1, &w.shared_fc2}) {
    if (t->defined()) bytes += t->bytes();
  }
  for (const std::vector<WeightOnlyLinear>* v : {&expert_fc1_, &expert_fc2_}) {
    for (const WeightOnlyLinear& l : *v) bytes += l.bytes();
  }
  return bytes;
}

absl::StatusOr<Tensor> ServingLayer::RmsNorm(const Tensor& x, const Tensor& gamma) {
  Backend& be = *ctx_.backend;
  const int64_t rows = x.dim(0), h = x.dim(1);
  PT_ASSIGN_OR_RETURN(Tensor y, be.Empty({rows, h}, config_.dtype, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor rstd, be.Empty({rows}, DType::kF32, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.RmsNormForward(config_.dtype, y.data(), rstd.data_as<float>(), x.data(),
                                       gamma.data(), rows, h, config_.norm_epsilon));
  return y;
}

absl::StatusOr<Tensor> ServingLayer::Forward(const Tensor& x, const std::vector<SeqChunk>& chunks,
                                             PagedKvCache* cache) {
  Backend& be = *ctx_.backend;
  ServingOps& ops = *ops_;
  const DType dt = config_.dtype;
  const int64_t n = x.dim(0), h = config_.shape.hidden_size, d = config_.head_dim();
  const int64_t hl = heads_local_, gl = groups_local_, fl = ffn_local_, W = qkv_width_;
  const int threads = config_.threads;
  if (n != StepTokens(chunks) || x.dtype() != dt) {
    return absl::InvalidArgumentError(absl::StrCat("x (", n, " rows of ", DTypeName(x.dtype()),
                                                   ") must hold the chunks' tokens (",
                                                   StepTokens(chunks), ") in ", DTypeName(dt)));
  }
  PhaseClock clock(be, config_.phase_timing);
  PT_RETURN_IF_ERROR(clock.Start());
  PT_ASSIGN_OR_RETURN(Tensor ln1, RmsNorm(x, norm1_w_));
  PT_RETURN_IF_ERROR(clock.Stop(&times_.other_s));

  PT_RETURN_IF_ERROR(clock.Start());
  PT_ASSIGN_OR_RETURN(Tensor qkv, be.Empty({n, W}, dt, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(qkv_.Forward(ln1.data(), n, qkv.data(), threads));
  PT_RETURN_IF_ERROR(clock.Stop(&times_.gemm_s));

  // RoPE, the cache write and attention in fp32.
  PT_RETURN_IF_ERROR(clock.Start());
  Tensor qkv32 = qkv;
  if (dt != DType::kF32) {
    PT_ASSIGN_OR_RETURN(qkv32, be.Empty({n, W}, DType::kF32, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be.Cast(DType::kF32, qkv32.data(), dt, qkv.data(), n * W));
  }
  float* q = qkv32.data_as<float>();
  if (config_.position_embedding == PositionEmbedding::kRope) {
    PT_RETURN_IF_ERROR(ops.Rope(q, W, hl, d, config_.rope_theta));
    PT_RETURN_IF_ERROR(ops.Rope(q + hl * d, W, gl, d, config_.rope_theta));
  }
  PT_RETURN_IF_ERROR(ops.WriteKv(*cache, cache_layer_, q + hl * d, q + (hl + gl) * d, W));
  PT_ASSIGN_OR_RETURN(Tensor ctx32, be.Empty({n, hl * d}, DType::kF32, MemoryTag::kWorkspace));
  PagedAttentionArgs args;
  args.q = q, args.ld_q = W;
  args.o = ctx32.data_as<float>(), args.ld_o = hl * d;
  args.heads = hl, args.groups = gl, args.head_dim = d;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  args.window =
      LayerAttentionWindow(config_.attention_window, config_.window_attn_skip_freq, index_);
  args.k = q + hl * d, args.v = q + (hl + gl) * d, args.flash_dtype = dt;
  PT_RETURN_IF_ERROR(ops.PagedAttention(args, *cache, cache_layer_));
  Tensor ctx = ctx32;
  if (dt != DType::kF32) {
    PT_ASSIGN_OR_RETURN(ctx, be.Empty({n, hl * d}, dt, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be.Cast(dt, ctx.data(), DType::kF32, ctx32.data(), n * hl * d));
  }
  PT_RETURN_IF_ERROR(clock.Stop(&times_.attention_s));

  PT_RETURN_IF_ERROR(clock.Start());
  PT_ASSIGN_OR_RETURN(Tensor attn_out, be.Empty({n, h}, dt, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(proj_.Forward(ctx.data(), n, attn_out.data(), threads));
  PT_RETURN_IF_ERROR(clock.Stop(&times_.gemm_s));
  // reduce_from_tp_region (fwd: all-reduce) of the row-parallel partial sums.
  PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx_, attn_out));

  PT_RETURN_IF_ERROR(clock.Start());
  // h1 = x + attention output, in place.
  PT_RETURN_IF_ERROR(be.Add(dt, attn_out.data(), attn_out.data(), x.data(), n * h));
  const Tensor& h1 = attn_out;
  PT_ASSIGN_OR_RETURN(Tensor ln2, RmsNorm(h1, norm2_w_));
  PT_RETURN_IF_ERROR(clock.Stop(&times_.other_s));

  PT_ASSIGN_OR_RETURN(Tensor y, be.Empty({n, h}, dt, MemoryTag::kWorkspace));
  if (moe_ != nullptr) {
    // The experts (their tp all-reduce included) count as gemm time; nothing is kept for
    // a backward.
    PT_RETURN_IF_ERROR(clock.Start());
    PT_RETURN_IF_ERROR(moe_->Forward(ln2.data(), n, y.data()));
    moe_->TakeSaved();
    // The experts' partial sums over the tp ranks (ep x etp of them), reduced once.
    PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx_, y));
    PT_RETURN_IF_ERROR(clock.Stop(&times_.gemm_s));
  } else {
    const Activation activation = config_.shape.activation;
    PT_RETURN_IF_ERROR(clock.Start());
    PT_ASSIGN_OR_RETURN(Tensor fc1_out, be.Empty({n, IsGated(activation) ? 2 * fl : fl}, dt,
                                                 MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(fc1_.Forward(ln2.data(), n, fc1_out.data(), threads));
    PT_RETURN_IF_ERROR(clock.Stop(&times_.gemm_s));

    PT_RETURN_IF_ERROR(clock.Start());
    PT_ASSIGN_OR_RETURN(Tensor act, be.Empty({n, fl}, dt, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be.MlpActivationForward(dt, activation, act.data(), fc1_out.data(), n, fl));
    PT_RETURN_IF_ERROR(clock.Stop(&times_.other_s));

    PT_RETURN_IF_ERROR(clock.Start());
    PT_RETURN_IF_ERROR(fc2_.Forward(act.data(), n, y.data(), threads));
    PT_RETURN_IF_ERROR(clock.Stop(&times_.gemm_s));
    PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx_, y));
  }
  PT_RETURN_IF_ERROR(clock.Start());
  PT_RETURN_IF_ERROR(be.Add(dt, y.data(), y.data(), h1.data(), n * h));
  PT_RETURN_IF_ERROR(clock.Stop(&times_.other_s));
  return y;
}

}  // namespace paratune::kernels::serving
