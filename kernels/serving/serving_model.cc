#include "kernels/serving/serving_model.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/mappings.h"
#include "kernels/parallel_linear.h"
#include "kernels/rank_threads.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<ServingGroups> MakeServingGroups(std::shared_ptr<GlooRendezvous> rendezvous,
                                                const std::string& prefix, int rank, int tp,
                                                int ep) {
  if (ep < 1 || tp % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ep (", ep, ") must divide tp (", tp, ")"));
  }
  ServingGroups g;
  PT_ASSIGN_OR_RETURN(g.tp, MakeGroupCommunicator(rendezvous, prefix, rank, tp));
  if (ep > 1) {
    const int er = rank % ep, tr = rank / ep;
    PT_ASSIGN_OR_RETURN(g.ep,
                        MakeGroupCommunicator(rendezvous, absl::StrCat(prefix, "/ep", tr), er, ep));
    PT_ASSIGN_OR_RETURN(
        g.etp, MakeGroupCommunicator(rendezvous, absl::StrCat(prefix, "/etp", er), tr, tp / ep));
  }
  return g;
}

absl::StatusOr<std::unique_ptr<ServingModel>> ServingModel::Create(const ServingConfig& config,
                                                                   const ParallelContext& ctx,
                                                                   uint64_t shuffle_seed) {
  PT_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<ServingModel> model(new ServingModel(config, ctx));
  // The model's communication is timed on its own clock.
  model->ctx_.comm_clock = &model->comm_clock_;
  if (config.attention_dp) {
    // Attention, dense layers and vocabulary whole on this rank: a one-rank "tp" group; the
    // experts keep the context's EP group (all tp ranks) and its one-rank ETP group.
    if (ctx.ep == nullptr || ctx.etp == nullptr || ctx.ep->size() != config.parallel.tp) {
      return absl::InvalidArgumentError(
          "attention_dp needs the context's EP group over the tp ranks (MakeServingGroups)");
    }
    model->self_ = MakeSelfCommunicator();
    model->ctx_.tp = model->self_.get();
  }
  Backend& be = *ctx.backend;
  const int64_t h = config.shape.hidden_size, t = config.attention_tp();
  const int64_t vl = config.shape.vocab_size / t, v0 = model->ctx_.tp_rank() * vl;
  if (config.first_stage()) {
    PT_ASSIGN_OR_RETURN(model->embedding_, be.Empty({vl, h}, DType::kF32, MemoryTag::kWeights));
    const UniformInit emb(config.seed, "embedding.weight");
    for (int64_t i = 0; i < vl * h; ++i) {
      model->embedding_.data_as<float>()[i] = static_cast<float>(emb(v0 * h + i));
    }
  }
  const auto [first, last] = config.StageLayers(config.stage);
  for (int64_t l = first; l < last; ++l) {
    PT_ASSIGN_OR_RETURN(std::unique_ptr<ServingLayer> layer,
                        ServingLayer::Create(config, model->ctx_, l));
    model->layers_.push_back(std::move(layer));
  }
  if (config.last_stage()) {
    PT_ASSIGN_OR_RETURN(model->final_norm_,
                        MakeNormWeight(be, config.seed, "final_norm.weight", h));
    const UniformInit out(config.seed, "output.weight");
    const double scale = 1.0 / std::sqrt(static_cast<double>(h));
    PT_ASSIGN_OR_RETURN(
        model->output_,
        WeightOnlyLinear::Create(
            be, vl, h,
            [&](int64_t r, int64_t c) { return static_cast<float>(scale * out((v0 + r) * h + c)); },
            WeightQuant::kNone, 0));
  }
  KvCacheShape kv;
  kv.num_layers = last - first;
  kv.num_blocks = config.num_kv_blocks;
  kv.block_size = config.kv_block_size;
  kv.groups = config.num_query_groups() / t;
  kv.head_dim = config.head_dim();
  kv.dtype = config.kv_dtype;
  kv.window = config.attention_window;
  for (int64_t l = first; l < last && config.attention_window > 0; ++l) {
    kv.windowed.push_back(
        LayerAttentionWindow(config.attention_window, config.window_attn_skip_freq, l) > 0);
  }
  PT_ASSIGN_OR_RETURN(model->cache_, PagedKvCache::Create(be, kv, shuffle_seed));
  return model;
}

int64_t ServingModel::weight_bytes() const {
  int64_t total = embedding_.bytes() + final_norm_.bytes() + output_.bytes();
  for (const auto& l : layers_) total += l->weight_bytes();
  return total;
}

void ServingModel::ResetTimes() {
  times_ = ModelPhaseTimes();
  comm_clock_.Reset();
  for (auto& l : layers_) l->times().Reset();
}

absl::StatusOr<StepOutput> ServingModel::Step(const std::vector<int32_t>& tokens,
                                              const std::vector<SeqChunk>& chunks,
                                              bool return_logits) {
  if (config_.parallel.pp != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("Step runs the whole model; a stage of pp ", config_.parallel.pp,
                     " runs StageForward (and, the last, Sample)"));
  }
  PT_ASSIGN_OR_RETURN(const Tensor x, StageForward(tokens, nullptr, chunks));
  return Sample(x, chunks, return_logits);
}

absl::StatusOr<Tensor> ServingModel::StageForward(const std::vector<int32_t>& tokens,
                                                  const Tensor* input,
                                                  const std::vector<SeqChunk>& chunks) {
  Backend& be = *ctx_.backend;
  const int64_t n = StepTokens(chunks), h = config_.shape.hidden_size;
  const int64_t V = config_.shape.vocab_size, t = config_.attention_tp(), vl = V / t;
  const int64_t v0 = ctx_.tp_rank() * vl;
  if (config_.first_stage() && static_cast<int64_t>(tokens.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens (", tokens.size(), ") must equal the chunks' tokens (", n, ")"));
  }
  if (!config_.first_stage() && (input == nullptr || input->numel() != n * h)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", config_.stage, " needs the previous stage's output of ", n, " x ", h, " values"));
  }
  std::vector<int64_t> positions;
  positions.reserve(n);
  for (const SeqChunk& c : chunks) {
    if (c.num_tokens <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of sequence ", c.seq, ": num_tokens (",
                                                     c.num_tokens, ") must be positive"));
    }
    if (c.start != cache_.length(c.seq)) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of sequence ", c.seq, ": start (",
                                                     c.start, ") must equal the cached length (",
                                                     cache_.length(c.seq), ")"));
    }
    for (int64_t i = 0; i < c.num_tokens; ++i) positions.push_back(c.start + i);
  }
  for (int32_t tok : tokens) {
    if (tok < 0 || tok >= V) {
      return absl::InvalidArgumentError(
          absl::StrCat("token (", tok, ") must be in [0, vocab_size (", V, "))"));
    }
  }
  int64_t need = 0;
  for (const SeqChunk& c : chunks) need += cache_.BlocksNeeded(c.seq, c.start + c.num_tokens);
  if (need > cache_.free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: the step needs ", need, " more blocks, ", cache_.free_blocks(), " free"));
  }
  for (const SeqChunk& c : chunks)
    PT_RETURN_IF_ERROR(cache_.Reserve(c.seq, c.start + c.num_tokens));

  // VocabParallelEmbedding: local rows, zeros elsewhere, then reduce_from_tp_region.
  auto t0 = Clock::now();
  PT_ASSIGN_OR_RETURN(Tensor x, be.Empty({n, h}, DType::kF32, MemoryTag::kWorkspace));
  if (config_.first_stage()) {
    for (int64_t i = 0; i < n; ++i) {
      float* xr = x.data_as<float>() + i * h;
      const int64_t local = tokens[i] - v0;
      if (local >= 0 && local < vl) {
        std::copy(embedding_.data_as<float>() + local * h,
                  embedding_.data_as<float>() + (local + 1) * h, xr);
      } else {
        std::fill(xr, xr + h, 0.0f);
      }
    }
    times_.embedding_s += Since(t0);
    PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx_, x));
  } else {
    std::copy(input->data_as<float>(), input->data_as<float>() + n * h, x.data_as<float>());
  }
  for (auto& layer : layers_) {
    PT_ASSIGN_OR_RETURN(x, layer->Forward(x, chunks, positions, &cache_));
  }
  times_.layers = LayerPhaseTimes();
  for (auto& layer : layers_) {
    times_.layers.gemm_s += layer->times().gemm_s;
    times_.layers.attention_s += layer->times().attention_s;
    times_.layers.other_s += layer->times().other_s;
  }
  for (const SeqChunk& c : chunks)
    PT_RETURN_IF_ERROR(cache_.SetLength(c.seq, c.start + c.num_tokens));
  if (!config_.last_stage()) {
    times_.tp_comm_s = comm_clock_.seconds();
    ++times_.steps;
  }
  return x;
}

absl::StatusOr<StepOutput> ServingModel::Sample(const Tensor& x,
                                                const std::vector<SeqChunk>& chunks,
                                                bool return_logits) {
  if (!config_.last_stage()) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", config_.stage, " of pp ", config_.parallel.pp,
                     " has no output layer: the last stage samples"));
  }
  const int64_t h = config_.shape.hidden_size;
  const int64_t V = config_.shape.vocab_size, t = config_.attention_tp(), vl = V / t;
  const int64_t v0 = ctx_.tp_rank() * vl;
  // Final norm and logits of the last token of each sampled chunk only.
  const auto t0 = Clock::now();
  std::vector<int64_t> rows;
  int64_t row = 0;
  for (const SeqChunk& c : chunks) {
    row += c.num_tokens;
    if (c.sample) rows.push_back(row - 1);
  }
  const int64_t S = static_cast<int64_t>(rows.size());
  StepOutput out;
  if (S == 0) {
    times_.logits_s += Since(t0);
    times_.tp_comm_s = comm_clock_.seconds();
    ++times_.steps;
    return out;
  }
  std::vector<float> last(S * h), normed(S * h), rstd(S), logits(S * vl);
  for (int64_t s = 0; s < S; ++s) {
    std::copy(x.data_as<float>() + rows[s] * h, x.data_as<float>() + (rows[s] + 1) * h,
              last.begin() + s * h);
  }
  cpu::rmsnorm_forward<float>(normed.data(), rstd.data(), last.data(), final_norm_.data_as<float>(),
                              S, h, config_.norm_epsilon, config_.threads);
  output_.Forward(normed.data(), S, logits.data(), config_.threads);
  // Local argmax (first maximum), then all-gather (value, global index) pairs in fp64.
  std::vector<double> local(2 * S), all(2 * S * t);
  for (int64_t s = 0; s < S; ++s) {
    const float* lr = logits.data() + s * vl;
    int64_t best = 0;
    for (int64_t j = 1; j < vl; ++j) {
      if (lr[j] > lr[best]) best = j;
    }
    local[2 * s] = lr[best];
    local[2 * s + 1] = static_cast<double>(v0 + best);
  }
  times_.logits_s += Since(t0);
  PT_RETURN_IF_ERROR(
      ctx_.Comm([&] { return ctx_.tp->AllGather(local.data(), all.data(), 2 * S, DType::kF64); }));
  out.next_tokens.resize(S);
  for (int64_t s = 0; s < S; ++s) {
    double best_v = all[2 * s], best_i = all[2 * s + 1];
    for (int64_t r = 1; r < t; ++r) {
      const double v = all[r * 2 * S + 2 * s];
      if (v > best_v) best_v = v, best_i = all[r * 2 * S + 2 * s + 1];
    }
    out.next_tokens[s] = static_cast<int32_t>(best_i);
  }
  if (return_logits) {
    std::vector<float> gathered(S * V);
    PT_RETURN_IF_ERROR(ctx_.Comm(
        [&] { return ctx_.tp->AllGather(logits.data(), gathered.data(), S * vl, DType::kF32); }));
    out.logits.resize(S * V);
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t s = 0; s < S; ++s) {
        std::copy(gathered.begin() + r * S * vl + s * vl,
                  gathered.begin() + r * S * vl + (s + 1) * vl,
                  out.logits.begin() + s * V + r * vl);
      }
    }
  }
  times_.tp_comm_s = comm_clock_.seconds();
  ++times_.steps;
  return out;
}

}  // namespace paratune::kernels::serving
