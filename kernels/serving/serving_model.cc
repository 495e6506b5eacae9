#include "kernels/serving/serving_model.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/mappings.h"
#include "kernels/parallel_linear.h"
#include "kernels/rank_threads.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

// The groups, each made by `make(name, rank, size)`.
template <typename Make>
absl::StatusOr<ServingGroups> MakeGroups(const std::string& prefix, int rank, int tp, int ep,
                                         Make make) {
  if (ep < 1 || tp % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ep (", ep, ") must divide tp (", tp, ")"));
  }
  ServingGroups g;
  PT_ASSIGN_OR_RETURN(g.tp, make(prefix, rank, tp));
  if (ep > 1) {
    const int er = rank % ep, tr = rank / ep;
    PT_ASSIGN_OR_RETURN(g.ep, make(absl::StrCat(prefix, "/ep", tr), er, ep));
    PT_ASSIGN_OR_RETURN(g.etp, make(absl::StrCat(prefix, "/etp", er), tr, tp / ep));
  }
  return g;
}

}  // namespace

absl::StatusOr<ServingGroups> MakeServingGroups(std::shared_ptr<GlooRendezvous> rendezvous,
                                                const std::string& prefix, int rank, int tp,
                                                int ep) {
  return MakeGroups(prefix, rank, tp, ep, [&](const std::string& name, int r, int size) {
    return MakeGroupCommunicator(rendezvous, name, r, size);
  });
}

absl::StatusOr<ServingGroups> MakeServingGroups(Backend& backend,
                                                std::shared_ptr<GlooRendezvous> rendezvous,
                                                const std::string& prefix, int rank, int tp,
                                                int ep) {
  const bool cuda = backend.kind() == BackendKind::kCuda;
  PT_ASSIGN_OR_RETURN(
      ServingGroups g,
      MakeGroups(prefix, rank, tp, ep, [&](const std::string& name, int r, int size) {
        return MakeGroupCommunicator(backend, cuda, rendezvous, name, r, size);
      }));
  if (cuda) {
    PT_ASSIGN_OR_RETURN(g.control,
                        MakeGroupCommunicator(rendezvous, absl::StrCat(prefix, "/host"), rank, tp));
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
    model->self_ = MakeSelfCommunicator(*ctx.backend);
    model->ctx_.tp = model->self_.get();
  }
  Backend& be = *ctx.backend;
  if (be.kind() == BackendKind::kCpu && config.dtype != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("dtype ", DTypeName(config.dtype),
                                                 " runs on the CUDA backend; the CPU's is fp32"));
  }
  PT_ASSIGN_OR_RETURN(model->ops_, MakeServingOps(be, config.threads));
  const DType dt = config.dtype;
  const int64_t h = config.shape.hidden_size, t = config.attention_tp();
  const int64_t vl = config.shape.vocab_size / t, v0 = model->ctx_.tp_rank() * vl;
  if (config.first_stage()) {
    PT_ASSIGN_OR_RETURN(model->embedding_, be.Empty({vl, h}, dt, MemoryTag::kWeights));
    const UniformInit emb(config.seed, "embedding.weight");
    PT_RETURN_IF_ERROR(FillRows(be, model->embedding_, vl, h, [&](int64_t r, int64_t c) {
      return static_cast<float>(emb((v0 + r) * h + c));
    }));
  }
  const auto [first, last] = config.StageLayers(config.stage);
  for (int64_t l = first; l < last; ++l) {
    PT_ASSIGN_OR_RETURN(std::unique_ptr<ServingLayer> layer,
                        ServingLayer::Create(config, model->ctx_, l, model->ops_.get()));
    model->layers_.push_back(std::move(layer));
  }
  if (config.last_stage()) {
    PT_ASSIGN_OR_RETURN(model->final_norm_,
                        MakeNormWeight(be, config.seed, "final_norm.weight", h, dt));
    const UniformInit out(config.seed, "output.weight");
    const double scale = 1.0 / std::sqrt(static_cast<double>(h));
    PT_ASSIGN_OR_RETURN(
        model->output_,
        WeightOnlyLinear::Create(
            be, vl, h,
            [&](int64_t r, int64_t c) { return static_cast<float>(scale * out((v0 + r) * h + c)); },
            WeightQuant::kNone, 0, dt));
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

void ServingModel::SetPhaseTiming(bool on) {
  config_.phase_timing = on;
  ctx_.comm_clock = on ? &comm_clock_ : nullptr;
  for (auto& l : layers_) l->SetPhaseTiming(on, ctx_.comm_clock);
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
  PT_RETURN_IF_ERROR(ops_->BeginStep(cache_, chunks));

  // VocabParallelEmbedding: local rows, zeros elsewhere, then reduce_from_tp_region.
  const DType dt = config_.dtype;
  PhaseClock clock(be, config_.phase_timing);
  PT_ASSIGN_OR_RETURN(Tensor x, be.Empty({n, h}, dt, MemoryTag::kWorkspace));
  if (config_.first_stage()) {
    PT_RETURN_IF_ERROR(clock.Start());
    PT_ASSIGN_OR_RETURN(Tensor ids, be.Empty({n}, DType::kI32, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(
        be.CopyBytes(ids.data(), tokens.data(), n * 4, Backend::CopyKind::kHostToBackend));
    PT_RETURN_IF_ERROR(be.EmbeddingForward(dt, x.data(), ids.data_as<int32_t>(), embedding_.data(),
                                           n, h, v0, v0 + vl));
    PT_RETURN_IF_ERROR(clock.Stop(&times_.embedding_s));
    PT_RETURN_IF_ERROR(ReduceFromTpRegion::Forward(ctx_, x));
  } else {
    if (input->dtype() != dt) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", config_.stage, " input dtype ",
                                                     DTypeName(input->dtype()), " must be ",
                                                     DTypeName(dt)));
    }
    PT_RETURN_IF_ERROR(be.Copy(x, *input));
  }
  for (auto& layer : layers_) {
    PT_ASSIGN_OR_RETURN(x, layer->Forward(x, chunks, &cache_));
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
  std::vector<int64_t> rows;
  int64_t row = 0;
  for (const SeqChunk& c : chunks) {
    row += c.num_tokens;
    if (c.sample) rows.push_back(row - 1);
  }
  const int64_t S = static_cast<int64_t>(rows.size());
  StepOutput out;
  if (S == 0) {
    times_.tp_comm_s = comm_clock_.seconds();
    ++times_.steps;
    return out;
  }
  Backend& be = *ctx_.backend;
  const DType dt = config_.dtype;
  const int64_t es = SizeOf(dt);
  PhaseClock clock(be, config_.phase_timing);
  PT_RETURN_IF_ERROR(clock.Start());
  // The sampled rows, copied in runs of consecutive rows.
  PT_ASSIGN_OR_RETURN(Tensor last, be.Empty({S, h}, dt, MemoryTag::kWorkspace));
  for (int64_t s = 0; s < S;) {
    int64_t run = 1;
    while (s + run < S && rows[s + run] == rows[s] + run) ++run;
    PT_RETURN_IF_ERROR(be.CopyBytes(static_cast<char*>(last.data()) + s * h * es,
                                    static_cast<const char*>(x.data()) + rows[s] * h * es,
                                    run * h * es, Backend::CopyKind::kOnBackend));
    s += run;
  }
  PT_ASSIGN_OR_RETURN(Tensor normed, be.Empty({S, h}, dt, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor rstd, be.Empty({S}, DType::kF32, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.RmsNormForward(dt, normed.data(), rstd.data_as<float>(), last.data(),
                                       final_norm_.data(), S, h, config_.norm_epsilon));
  PT_ASSIGN_OR_RETURN(Tensor logits, be.Empty({S, vl}, dt, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(output_.Forward(normed.data(), S, logits.data(), config_.threads));
  // Local argmax (first maximum), then all-gather (value, global index) pairs in fp64.
  std::vector<double> best_value;
  std::vector<int64_t> best_index;
  PT_RETURN_IF_ERROR(ops_->ArgMax(dt, logits.data(), S, vl, &best_value, &best_index));
  std::vector<double> local(2 * S);
  for (int64_t s = 0; s < S; ++s) {
    local[2 * s] = best_value[s];
    local[2 * s + 1] = static_cast<double>(v0 + best_index[s]);
  }
  PT_RETURN_IF_ERROR(clock.Stop(&times_.logits_s));
  PT_ASSIGN_OR_RETURN(Tensor pairs, be.Empty({2 * S}, DType::kF64, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor all_pairs, be.Empty({2 * S * t}, DType::kF64, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be.CopyFromHost(pairs, local));
  PT_RETURN_IF_ERROR(ctx_.Comm(
      [&] { return ctx_.tp->AllGather(pairs.data(), all_pairs.data(), 2 * S, DType::kF64); }));
  PT_ASSIGN_OR_RETURN(const std::vector<double> all, be.CopyToHost(all_pairs));
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
    PT_ASSIGN_OR_RETURN(Tensor gathered, be.Empty({t * S * vl}, dt, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(
        ctx_.Comm([&] { return ctx_.tp->AllGather(logits.data(), gathered.data(), S * vl, dt); }));
    PT_ASSIGN_OR_RETURN(const std::vector<double> g, be.CopyToHost(gathered));
    out.logits.resize(S * V);
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t j = 0; j < vl; ++j) {
          out.logits[s * V + r * vl + j] = static_cast<float>(g[(r * S + s) * vl + j]);
        }
      }
    }
  }
  times_.tp_comm_s = comm_clock_.seconds();
  ++times_.steps;
  return out;
}

}  // namespace paratune::kernels::serving
