#include "kernels/training/training.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "kernels/backend.h"
#include "kernels/hash_random.h"
#include "kernels/status_macros.h"
#include "kernels/transformer_layer.h"
#include "kernels/vocab_parallel.h"

namespace paratune::kernels::training {
namespace {

constexpr std::chrono::seconds kTimeout(300);

// Point-to-point over one pipeline group: receives posted ahead, sends waited at once.
class PipeP2P {
 public:
  static absl::StatusOr<std::unique_ptr<PipeP2P>> Connect(std::shared_ptr<GlooRendezvous> r,
                                                          const std::string& prefix, int rank,
                                                          int size) {
    PT_ASSIGN_OR_RETURN(std::shared_ptr<gloo::rendezvous::Context> ctx,
                        ConnectGlooContext(std::move(r), prefix, rank, size));
    auto p = std::unique_ptr<PipeP2P>(new PipeP2P());
    p->ctx_ = std::move(ctx);
    return p;
  }

  absl::Status PostRecv(uint64_t slot, int peer, int64_t bytes) {
    try {
      Pending& p = recvs_[slot];
      p.buf.resize(bytes);
      p.ub = ctx_->createUnboundBuffer(p.buf.data(), bytes);
      p.ub->recv(peer, slot);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("p2p recv: ", e.what()));
    }
  }
  /// Waits for `slot` and copies it into a tracked tensor of `shape` and `dtype`.
  absl::StatusOr<Tensor> Take(uint64_t slot, Backend& be, std::vector<int64_t> shape,
                              DType dtype) {
    auto it = recvs_.find(slot);
    if (it == recvs_.end()) return absl::InternalError(absl::StrCat("no receive posted for slot ", slot));
    try {
      it->second.ub->waitRecv(kTimeout);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("p2p recv: ", e.what()));
    }
    PT_ASSIGN_OR_RETURN(Tensor t, be.Empty(std::move(shape), dtype, MemoryTag::kActivations));
    if (t.bytes() != static_cast<int64_t>(it->second.buf.size())) {
      return absl::InternalError("p2p message size mismatch");
    }
    PT_RETURN_IF_ERROR(be.CopyBytes(t.data(), it->second.buf.data(), t.bytes(),
                                    Backend::CopyKind::kHostToBackend));
    recvs_.erase(it);
    return t;
  }
  /// Sends `t` (a device tensor goes through a host staging buffer first).
  absl::Status Send(Backend& be, const Tensor& t, int peer, uint64_t slot) {
    void* data = t.data();
    if (be.kind() != BackendKind::kCpu) {
      staging_.resize(t.bytes());
      PT_RETURN_IF_ERROR(be.CopyBytes(staging_.data(), t.data(), t.bytes(),
                                      Backend::CopyKind::kBackendToHost));
      data = staging_.data();
    }
    try {
      auto ub = ctx_->createUnboundBuffer(data, t.bytes());
      ub->send(peer, slot);
      ub->waitSend(kTimeout);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("p2p send: ", e.what()));
    }
  }

 private:
  struct Pending {
    std::vector<char> buf;
    std::unique_ptr<gloo::transport::UnboundBuffer> ub;
  };
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::map<uint64_t, Pending> recvs_;
  std::vector<char> staging_;
};

// A TP or DP group on the rank's backend: NCCL on CUDA, Gloo on CPU.
absl::StatusOr<std::unique_ptr<Communicator>> Group(Backend& be, std::shared_ptr<GlooRendezvous> r,
                                                    const std::string& prefix, int64_t rank,
                                                    int64_t size) {
  if (size == 1) return MakeSelfCommunicator(be);
  if (be.kind() == BackendKind::kCuda) {
    return MakeNcclCommunicator(be, std::move(r), prefix, static_cast<int>(rank),
                                static_cast<int>(size));
  }
  return MakeGlooCommunicator(std::move(r), prefix, static_cast<int>(rank),
                              static_cast<int>(size));
}

// The model chunk of one virtual pipeline stage on one rank.
struct Chunk {
  int64_t vstage = 0;
  std::vector<std::unique_ptr<TransformerLayer>> layers;
  std::unique_ptr<VocabParallelEmbedding> embedding;  // first virtual stage
  std::unique_ptr<VocabParallelOutput> output;        // last virtual stage
};

// Kept per (chunk, micro-batch) between its forward and backward.
struct InFlight {
  std::vector<SavedActivations> saved;  // per layer
  EmbeddingSaved embedding;             // first stage: token ids, dropout mask
  Tensor dy;                            // last stage: loss gradient of the chunk output
};

SavedActivations& MutableSaved(TransformerLayer& l) {
  // The layer keeps one micro-batch's tensors; pipelining keeps several in flight, so the
  // schedule moves them out after each forward and back in before the matching backward.
  return const_cast<SavedActivations&>(l.saved());
}

uint64_t Slot(const TrainConfig& c, int64_t step, bool backward, int64_t chunk, int64_t mb) {
  return 1 + static_cast<uint64_t>(((step * 2 + (backward ? 1 : 0)) * c.vp + chunk) *
                                       c.num_micro_batches + mb);
}

absl::Status RunRank(const TrainConfig& c, int64_t rank, int device,
                     std::shared_ptr<GlooRendezvous> r, RankResult* result,
                     std::vector<double>* losses_out, std::vector<double>* times_out) {
  const RankCoords me = CoordsOf(c, rank);
  std::unique_ptr<Backend> be;
  if (c.backend == BackendKind::kCuda) {
    PT_ASSIGN_OR_RETURN(be, MakeCudaBackend(device, 0));
  } else {
    be = MakeCpuBackend(0, std::max(1, c.threads_per_rank));
  }
  CommClock clock;
  PT_ASSIGN_OR_RETURN(auto tp, Group(*be, r, absl::StrCat("tp_", me.dp, "_", me.pp), me.tp, c.tp));
  PT_ASSIGN_OR_RETURN(auto dp, Group(*be, r, absl::StrCat("dp_", me.tp, "_", me.pp), me.dp, c.dp));
  // Tied embeddings over several stages: the embedding group of the first and the last
  // stage of this (tp, dp).
  std::unique_ptr<Communicator> embedding_group;
  if (c.tie_embeddings && c.pp > 1 && (me.pp == 0 || me.pp == c.pp - 1)) {
    PT_ASSIGN_OR_RETURN(embedding_group, Group(*be, r, absl::StrCat("emb_", me.tp, "_", me.dp),
                                               me.pp == 0 ? 0 : 1, 2));
  }
  // The world group exchanges host figures (barriers, losses, times): Gloo on any backend.
  std::unique_ptr<Communicator> world;
  if (c.world_size() == 1) {
    world = MakeSelfCommunicator();
  } else {
    PT_ASSIGN_OR_RETURN(world, MakeGlooCommunicator(r, "world", static_cast<int>(rank),
                                                    static_cast<int>(c.world_size())));
  }
  std::unique_ptr<PipeP2P> p2p;
  if (c.pp > 1) {
    PT_ASSIGN_OR_RETURN(p2p, PipeP2P::Connect(r, absl::StrCat("pp_", me.tp, "_", me.dp),
                                              static_cast<int>(me.pp), static_cast<int>(c.pp)));
  }
  ParallelContext ctx{be.get(), tp.get(), &clock};

  // The model: chunk k of pipeline rank p is virtual stage k·pp + p.
  const int64_t stages = c.pp * c.vp, per_chunk = c.num_layers / stages;
  LayerConfig base;
  base.shape = c.shape;
  base.tp = c.tp;
  base.sequence_parallel = c.sequence_parallel;
  base.micro_batch_size = c.micro_batch_size;
  base.seq_length = c.seq_length;
  base.recompute = c.recompute;
  base.dtype = c.dtype;
  base.flash_attention = c.flash_attention;
  base.hidden_dropout = base.attention_dropout = c.dropout ? 0.1f : 0.0f;
  base.seed = c.seed;
  std::vector<Chunk> chunks(c.vp);
  std::vector<Parameter*> params;
  for (int64_t k = 0; k < c.vp; ++k) {
    Chunk& ch = chunks[k];
    ch.vstage = k * c.pp + me.pp;
    if (ch.vstage == 0) {
      PT_ASSIGN_OR_RETURN(ch.embedding, VocabParallelEmbedding::Create(base, ctx, c.position_rows));
      for (Parameter* p : ch.embedding->Parameters()) params.push_back(p);
    }
    for (int64_t l = 0; l < per_chunk; ++l) {
      LayerConfig lc = base;
      lc.seed = Mix64(c.seed + 1000003ull * static_cast<uint64_t>(ch.vstage * per_chunk + l + 1));
      PT_ASSIGN_OR_RETURN(auto layer, TransformerLayer::Create(lc, ctx));
      for (Parameter* p : layer->Parameters()) params.push_back(p);
      ch.layers.push_back(std::move(layer));
    }
    if (ch.vstage == stages - 1) {
      OutputWeight weight;
      weight.tied = c.tie_embeddings;
      if (c.tie_embeddings && ch.embedding) weight.table = &ch.embedding->weight();  // pp 1
      PT_ASSIGN_OR_RETURN(ch.output, VocabParallelOutput::Create(base, ctx, weight));
      for (Parameter* p : ch.output->Parameters()) params.push_back(p);
    }
  }
  int64_t numel = 0;
  for (Parameter* p : params) numel += p->value.numel();
  result->parameter_count = numel;

  // Megatron's contiguous buffers: every parameter and gradient becomes a view into one
  // flat weight and one flat gradient buffer (padded to a multiple of dp), so the DP reduce
  // is one collective. Optimizer state: flat m, v (plain) or this DP rank's shard of them
  // (distributed optimizer). The weights are fp32, so there is no master copy: the
  // distributed optimizer reduce-scatters the gradients in place into this rank's chunk of
  // the flat gradient buffer, updates this rank's chunk of the flat weights, and
  // all-gathers them in place, as Megatron-LM's contiguous buffers do.
  // Mixed precision (16-bit dtype) adds an fp32 master copy of the weights the rank updates.
  const int64_t shard = (numel + c.dp - 1) / c.dp, padded = shard * c.dp;
  const DType dt = c.dtype;
  const bool mixed = dt != DType::kF32;
  Tensor flat_grad, flat_param, opt_m, opt_v, master;
  PT_ASSIGN_OR_RETURN(flat_param, be->Zeros({padded}, dt, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(flat_grad, be->Zeros({padded}, dt, MemoryTag::kGradients));
  {
    int64_t off = 0;
    for (Parameter* p : params) {
      const int64_t n = p->value.numel();
      PT_RETURN_IF_ERROR(be->CopyBytes(flat_param.at(off), p->value.data(), p->value.bytes(),
                                       Backend::CopyKind::kOnBackend));
      PT_ASSIGN_OR_RETURN(p->value, flat_param.Rows(off, off + n).Reshape(p->value.shape()));
      PT_ASSIGN_OR_RETURN(p->grad, flat_grad.Rows(off, off + n).Reshape(p->grad.shape()));
      off += n;
    }
  }
  const int64_t opt_n = c.distributed_optimizer ? shard : numel;
  const int64_t opt_first = c.distributed_optimizer ? me.dp * shard : 0;  // element offset
  PT_ASSIGN_OR_RETURN(opt_m, be->Zeros({opt_n}, DType::kF32, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(opt_v, be->Zeros({opt_n}, DType::kF32, MemoryTag::kWeights));
  if (mixed) {
    PT_ASSIGN_OR_RETURN(master, be->Empty({opt_n}, DType::kF32, MemoryTag::kWeights));
    PT_RETURN_IF_ERROR(be->Cast(DType::kF32, master.data(), dt, flat_param.at(opt_first), opt_n));
  }
  // The fp32 values AdamW updates: the master copy, or the weights themselves.
  float* const updated = mixed ? master.data_as<float>()
                               : static_cast<float*>(flat_param.at(opt_first));

  const int64_t M = c.num_micro_batches, h = c.shape.hidden_size;
  const int64_t rows = (c.sequence_parallel ? c.seq_length / c.tp : c.seq_length) * c.micro_batch_size;
  const std::vector<ScheduleOp> schedule = PipelineSchedule(c, me.pp);
  const int next = static_cast<int>((me.pp + 1) % c.pp), prev = static_cast<int>((me.pp + c.pp - 1) % c.pp);
  std::vector<double> losses(c.steps, 0.0), times(c.steps, 0.0);

  for (int64_t step = 0; step < c.steps; ++step) {
    PT_RETURN_IF_ERROR(world->Barrier());
    const auto t0 = std::chrono::steady_clock::now();
    PT_RETURN_IF_ERROR(be->Fill(flat_grad, 0.0));
    if (p2p) {
      for (int64_t k = 0; k < c.vp; ++k) {
        const int64_t vs = chunks[k].vstage;
        for (int64_t mb = 0; mb < M; ++mb) {
          const int64_t bytes = rows * h * SizeOf(dt);
          if (vs > 0) PT_RETURN_IF_ERROR(p2p->PostRecv(Slot(c, step, false, k, mb), prev, bytes));
          if (vs < stages - 1) PT_RETURN_IF_ERROR(p2p->PostRecv(Slot(c, step, true, k, mb), next, bytes));
        }
      }
    }
    std::vector<std::vector<InFlight>> flight(c.vp, std::vector<InFlight>(M));
    double loss_sum = 0, wait_s = 0;
    // Takes a stage's message, adding the time spent waiting for it to wait_s.
    auto take = [&](uint64_t slot) -> absl::StatusOr<Tensor> {
      const auto w0 = std::chrono::steady_clock::now();
      absl::StatusOr<Tensor> t = p2p->Take(slot, *be, {rows, h}, dt);
      wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      return t;
    };
    for (const ScheduleOp& op : schedule) {
      Chunk& ch = chunks[op.chunk];
      InFlight& f = flight[op.chunk][op.micro_batch];
      const int64_t g = me.dp * M + op.micro_batch;  // global micro-batch
      if (op.forward) {
        Tensor x;
        if (ch.vstage == 0) {
          const std::vector<int32_t> ids = SyntheticTokens(c, step, g, false);
          PT_ASSIGN_OR_RETURN(x, ch.embedding->Forward(ids));
          f.embedding = ch.embedding->TakeSaved();
        } else {
          PT_ASSIGN_OR_RETURN(x, take(Slot(c, step, false, op.chunk, op.micro_batch)));
        }
        f.saved.resize(ch.layers.size());
        for (size_t l = 0; l < ch.layers.size(); ++l) {
          PT_ASSIGN_OR_RETURN(x, ch.layers[l]->Forward(x));
          f.saved[l] = std::move(MutableSaved(*ch.layers[l]));
          MutableSaved(*ch.layers[l]) = SavedActivations();
        }
        if (ch.output) {
          // The loss and its gradient at once: the output block holds one micro-batch.
          PT_ASSIGN_OR_RETURN(double loss, ch.output->Forward(x, SyntheticTokens(c, step, g, true)));
          loss_sum += loss;
          PT_ASSIGN_OR_RETURN(f.dy, ch.output->Backward());
        } else {
          PT_RETURN_IF_ERROR(p2p->Send(*be, x, next, Slot(c, step, false, op.chunk + (next == 0 ? 1 : 0),
                                                     op.micro_batch)));
        }
      } else {
        Tensor dy;
        if (ch.output) {
          dy = std::move(f.dy);
        } else {
          PT_ASSIGN_OR_RETURN(dy, take(Slot(c, step, true, op.chunk, op.micro_batch)));
        }
        for (size_t l = ch.layers.size(); l-- > 0;) {
          MutableSaved(*ch.layers[l]) = std::move(f.saved[l]);
          PT_ASSIGN_OR_RETURN(dy, ch.layers[l]->Backward(dy));
        }
        if (ch.embedding) {
          ch.embedding->RestoreSaved(std::move(f.embedding));
          PT_RETURN_IF_ERROR(ch.embedding->Backward(dy));
        } else {
          PT_RETURN_IF_ERROR(p2p->Send(*be, dy, prev, Slot(c, step, true, op.chunk - (prev == c.pp - 1 ? 1 : 0),
                                                      op.micro_batch)));
        }
        f = InFlight();
      }
    }
    // Gradients: SP norm all-reduce over TP, then the mean over the global batch.
    for (Chunk& ch : chunks) {
      for (auto& l : ch.layers) PT_RETURN_IF_ERROR(l->FinishGradients());
      if (ch.output && c.sequence_parallel && c.tp > 1) {
        for (Parameter* p : ch.output->Parameters()) {
          if (p->replicated) PT_RETURN_IF_ERROR(tp->AllReduce(p->grad.data(), p->grad.numel(), dt));
        }
      }
    }
    const float scale = 1.0f / static_cast<float>(M * c.dp);
    // Phase times: each lap waits for the backend's queued work, then reads the clock.
    PT_RETURN_IF_ERROR(be->Synchronize());
    auto mark = std::chrono::steady_clock::now();
    auto lap = [&]() -> absl::StatusOr<double> {
      PT_RETURN_IF_ERROR(be->Synchronize());
      const auto now = std::chrono::steady_clock::now();
      const double s = std::chrono::duration<double>(now - mark).count();
      mark = now;
      return s;
    };
    // The gradients this rank's optimizer updates: its chunk of the reduce-scattered buffer
    // (distributed optimizer) or the whole all-reduced buffer.
    void* const grads = flat_grad.at(opt_first);
    if (embedding_group) {
      // The table's gradient plus its copy's, on both stages, before the DP reduce (which
      // then sums both over DP: the same total as Megatron's order, and correct for the
      // distributed optimizer's shards too).
      Parameter& w = me.pp == 0 ? chunks.front().embedding->weight() : chunks.back().output->weight();
      PT_RETURN_IF_ERROR(embedding_group->AllReduce(w.grad.data(), w.grad.numel(), dt));
    }
    if (c.distributed_optimizer) {
      PT_RETURN_IF_ERROR(dp->ReduceScatter(flat_grad.data(), grads, shard, dt));
    } else {
      PT_RETURN_IF_ERROR(dp->AllReduce(flat_grad.data(), numel, dt));
    }
    PT_ASSIGN_OR_RETURN(double dp_s, lap());
    PT_RETURN_IF_ERROR(be->Scale(dt, grads, scale, opt_n));
    PT_RETURN_IF_ERROR(be->AdamW(dt, updated, grads, opt_m.data_as<float>(), opt_v.data_as<float>(),
                                 opt_n, c.lr, c.beta1, c.beta2, c.adam_eps, c.weight_decay, step + 1));
    if (mixed) PT_RETURN_IF_ERROR(be->Cast(dt, flat_param.at(opt_first), DType::kF32, updated, opt_n));
    PT_ASSIGN_OR_RETURN(const double opt_s, lap());
    if (c.distributed_optimizer) {
      PT_RETURN_IF_ERROR(dp->AllGather(flat_param.at(opt_first), flat_param.data(), shard, dt));
      PT_ASSIGN_OR_RETURN(const double gather_s, lap());
      dp_s += gather_s;
    }
    result->dp_seconds.push_back(dp_s);
    result->optimizer_seconds.push_back(opt_s);
    result->p2p_wait_seconds.push_back(wait_s);
    times[step] = std::chrono::duration<double>(mark - t0).count();  // mark: after the last lap
    losses[step] = loss_sum / static_cast<double>(M);
  }
  result->step_seconds = times;
  result->peak_bytes = be->allocator().Stats().peak_bytes;

  // Job-wide figures: every rank's (loss, time) per step.
  const bool reports_loss = me.pp == c.pp - 1 && me.tp == 0;
  std::vector<double> mine(2 * c.steps);
  for (int64_t s = 0; s < c.steps; ++s) {
    mine[2 * s] = reports_loss ? losses[s] : 0.0;
    mine[2 * s + 1] = times[s];
  }
  std::vector<double> all(mine.size() * c.world_size());
  PT_RETURN_IF_ERROR(world->AllGather(mine.data(), all.data(), mine.size(), DType::kF64));
  losses_out->assign(c.steps, 0.0);
  times_out->assign(c.steps, 0.0);
  for (int64_t q = 0; q < c.world_size(); ++q) {
    for (int64_t s = 0; s < c.steps; ++s) {
      (*losses_out)[s] += all[q * mine.size() + 2 * s] / static_cast<double>(c.dp);
      (*times_out)[s] = std::max((*times_out)[s], all[q * mine.size() + 2 * s + 1]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat(name, " (", v, ") must be >= 1"));
    return absl::OkStatus();
  };
  PT_RETURN_IF_ERROR(positive("num_layers", num_layers));
  PT_RETURN_IF_ERROR(positive("seq_length", seq_length));
  PT_RETURN_IF_ERROR(positive("micro_batch_size", micro_batch_size));
  PT_RETURN_IF_ERROR(positive("num_micro_batches", num_micro_batches));
  PT_RETURN_IF_ERROR(positive("tp", tp));
  PT_RETURN_IF_ERROR(positive("pp", pp));
  PT_RETURN_IF_ERROR(positive("dp", dp));
  PT_RETURN_IF_ERROR(positive("vp", vp));
  PT_RETURN_IF_ERROR(positive("steps", steps));
  PT_RETURN_IF_ERROR(positive("vocab_size", shape.vocab_size));
  PT_RETURN_IF_ERROR(VocabParallelEmbedding::CheckPositionRows(position_rows, seq_length));
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype (", DTypeName(dtype), ") must be fp32, bf16 or fp16"));
  }
  if (dtype != DType::kF32 && backend != BackendKind::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype (", DTypeName(dtype), ") needs the cuda backend; the cpu backend trains in fp32"));
  }
  if (num_layers % (pp * vp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("pp·vp (", pp * vp, ") must divide num_layers (",
                                                   num_layers, ")"));
  }
  if (vp > 1 && pp < 2) {
    return absl::InvalidArgumentError(absl::StrCat("vp (", vp, ") > 1 needs pp >= 2 (pp is ", pp, ")"));
  }
  if (vp > 1 && num_micro_batches % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("pp (", pp, ") must divide num_micro_batches (",
                                                   num_micro_batches, ") with the interleaved schedule"));
  }
  if (shape.vocab_size % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tp (", tp, ") must divide vocab_size (",
                                                   shape.vocab_size, ")"));
  }
  LayerConfig lc;
  lc.shape = shape;
  lc.tp = tp;
  lc.sequence_parallel = sequence_parallel;
  lc.micro_batch_size = micro_batch_size;
  lc.seq_length = seq_length;
  lc.recompute = recompute;
  lc.flash_attention = flash_attention;
  lc.dtype = dtype;
  return lc.Validate();
}

RankCoords CoordsOf(const TrainConfig& c, int64_t rank) {
  RankCoords x;
  x.tp = rank % c.tp;
  x.dp = (rank / c.tp) % c.dp;
  x.pp = rank / (c.tp * c.dp);
  return x;
}

int64_t RankOf(const TrainConfig& c, const RankCoords& x) {
  return x.tp + c.tp * (x.dp + c.dp * x.pp);
}

std::vector<ScheduleOp> PipelineSchedule(const TrainConfig& c, int64_t p) {
  const int64_t M = c.num_micro_batches, pp = c.pp, vp = c.vp, total = M * vp;
  auto fwd = [&](int64_t k) {
    if (vp == 1) return ScheduleOp{true, 0, k};
    return ScheduleOp{true, (k / pp) % vp, (k / (pp * vp)) * pp + k % pp};
  };
  auto bwd = [&](int64_t k) {
    if (vp == 1) return ScheduleOp{false, 0, k};
    return ScheduleOp{false, vp - 1 - (k / pp) % vp, (k / (pp * vp)) * pp + k % pp};
  };
  const int64_t warmup = std::min(total, vp == 1 ? pp - p - 1 : (pp - p - 1) * 2 + (vp - 1) * pp);
  std::vector<ScheduleOp> ops;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    ops.push_back(fwd(k + warmup));
    ops.push_back(bwd(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

std::vector<int32_t> SyntheticTokens(const TrainConfig& c, int64_t step, int64_t g, bool targets) {
  // A learnable stream: each token follows its predecessor as next = (5·prev + 3) mod V with
  // probability 3/4, else it is uniform. The best loss is about 0.25·ln V + 0.56.
  const int64_t s = c.seq_length, b = c.micro_batch_size, V = c.shape.vocab_size;
  std::vector<int32_t> out(s * b);
  for (int64_t bi = 0; bi < b; ++bi) {
    const uint64_t sample = Mix64(Mix64(c.seed + 0x5eed) + static_cast<uint64_t>(step)) +
                            static_cast<uint64_t>(g * b + bi);
    int64_t tok = static_cast<int64_t>(Mix64(sample) % static_cast<uint64_t>(V));
    for (int64_t pos = 0; pos <= s; ++pos) {
      if (pos > 0) {
        const uint64_t r = Mix64(Mix64(sample) + static_cast<uint64_t>(pos));
        tok = (r & 3) != 0 ? (5 * tok + 3) % V : static_cast<int64_t>((r >> 2) % static_cast<uint64_t>(V));
      }
      const int64_t at = pos - (targets ? 1 : 0);
      if (at >= 0 && at < s) out[at * b + bi] = static_cast<int32_t>(tok);
    }
  }
  return out;
}

double TrainResult::median_step_seconds() const {
  std::vector<double> t(step_seconds.begin() + (step_seconds.size() > 1 ? 1 : 0), step_seconds.end());
  if (t.empty()) return 0;
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

absl::StatusOr<TrainResult> RunTraining(const TrainConfig& config, int64_t first_rank,
                                        int64_t count, std::shared_ptr<GlooRendezvous> rendezvous) {
  PT_RETURN_IF_ERROR(config.Validate());
  if (first_rank < 0 || count < 1 || first_rank + count > config.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("ranks [", first_rank, ", ", first_rank + count,
                                                   ") must lie in [0, world size (",
                                                   config.world_size(), "))"));
  }
  if (config.backend == BackendKind::kCuda) {
    PT_RETURN_IF_ERROR(CheckCudaDevicesForRanks(count));
  } else {
    SetBlasThreads(std::max(1, config.threads_per_rank));
  }
  TrainResult out;
  out.ranks.resize(count);
  std::vector<absl::Status> status(count);
  std::vector<std::vector<double>> losses(count), times(count);
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < count; ++i) {
    out.ranks[i].rank = first_rank + i;
    threads.emplace_back([&, i] {
      status[i] = RunRank(config, first_rank + i, static_cast<int>(i), rendezvous, &out.ranks[i],
                          &losses[i], &times[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t i = 0; i < count; ++i) {
    if (!status[i].ok()) {
      return absl::Status(status[i].code(),
                          absl::StrCat("rank ", first_rank + i, ": ", status[i].message()));
    }
  }
  out.losses = losses[0];
  out.step_seconds = times[0];
  return out;
}

absl::StatusOr<TrainResult> RunTrainingInProcess(const TrainConfig& config) {
  return RunTraining(config, 0, config.world_size(), MakeInProcessRendezvous());
}

absl::StatusOr<double> TimeOptimizerStep(int64_t params, int64_t warmup, int64_t iters,
                                         int64_t capacity_bytes) {
  if (params < 1 || warmup < 0 || iters < 1) {
    return absl::InvalidArgumentError(absl::StrCat("params (", params, ") and iters (", iters,
                                                   ") must be >= 1, warmup (", warmup,
                                                   ") >= 0"));
  }
  const TrainConfig c;  // The optimizer's hyper-parameters.
  std::unique_ptr<Backend> be = MakeCpuBackend(capacity_bytes, 1);
  PT_ASSIGN_OR_RETURN(Tensor p, be->Zeros({params}, DType::kF32, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(Tensor g, be->Zeros({params}, DType::kF32, MemoryTag::kGradients));
  PT_ASSIGN_OR_RETURN(Tensor m, be->Zeros({params}, DType::kF32, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(Tensor v, be->Zeros({params}, DType::kF32, MemoryTag::kWeights));
  double best = 0;
  for (int64_t step = 1; step <= warmup + iters; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    PT_RETURN_IF_ERROR(be->Fill(g, 0.0));
    float* gp = g.data_as<float>();
    for (int64_t j = 0; j < params; ++j) gp[j] = gp[j] * 0.125f + 1e-3f;
    PT_RETURN_IF_ERROR(be->AdamW(DType::kF32, p.data_as<float>(), gp, m.data_as<float>(),
                                 v.data_as<float>(), params, c.lr, c.beta1, c.beta2, c.adam_eps,
                                 c.weight_decay, step));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > warmup && (best == 0 || s < best)) best = s;
  }
  return best;
}

}  // namespace paratune::kernels::training
