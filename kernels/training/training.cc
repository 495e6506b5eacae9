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

// Megatron's contiguous buffers for the parameters one group reduces: every parameter and
// gradient becomes a view into one flat weight and one flat gradient buffer (padded to a
// multiple of the group size), so the reduce is one collective. Optimizer state: flat m, v
// (plain) or this group rank's shard of them (distributed optimizer). fp32 weights have no
// master copy: the distributed optimizer reduce-scatters the gradients in place into this
// rank's chunk of the flat gradient buffer, updates its chunk of the flat weights and
// all-gathers them in place, as Megatron-LM's contiguous buffers do. Mixed precision
// (16-bit dtype) adds an fp32 master copy of the weights the rank updates.
class GradBucket {
 public:
  absl::Status Make(Backend& be, DType dt, const std::vector<ParameterRef>& params,
                    Communicator* group, bool distributed) {
    be_ = &be;
    dt_ = dt;
    group_ = group;
    distributed_ = distributed;
    numel_ = 0;
    for (const ParameterRef& p : params) numel_ += p.value->numel();
    if (numel_ == 0) return absl::OkStatus();
    const int64_t n = group->size();
    shard_ = (numel_ + n - 1) / n;
    PT_ASSIGN_OR_RETURN(flat_param_, be.Zeros({shard_ * n}, dt, MemoryTag::kWeights));
    PT_ASSIGN_OR_RETURN(flat_grad_, be.Zeros({shard_ * n}, dt, MemoryTag::kGradients));
    int64_t off = 0;
    for (const ParameterRef& p : params) {
      const int64_t k = p.value->numel();
      PT_RETURN_IF_ERROR(be.CopyBytes(flat_param_.at(off), p.value->data(), p.value->bytes(),
                                      Backend::CopyKind::kOnBackend));
      PT_ASSIGN_OR_RETURN(*p.value, flat_param_.Rows(off, off + k).Reshape(p.value->shape()));
      PT_ASSIGN_OR_RETURN(*p.grad, flat_grad_.Rows(off, off + k).Reshape(p.grad->shape()));
      off += k;
    }
    opt_n_ = distributed ? shard_ : numel_;
    opt_first_ = distributed ? group->rank() * shard_ : 0;  // element offset
    PT_ASSIGN_OR_RETURN(opt_m_, be.Zeros({opt_n_}, DType::kF32, MemoryTag::kWeights));
    PT_ASSIGN_OR_RETURN(opt_v_, be.Zeros({opt_n_}, DType::kF32, MemoryTag::kWeights));
    if (dt != DType::kF32) {
      PT_ASSIGN_OR_RETURN(master_, be.Empty({opt_n_}, DType::kF32, MemoryTag::kWeights));
      PT_RETURN_IF_ERROR(
          be.Cast(DType::kF32, master_.data(), dt, flat_param_.at(opt_first_), opt_n_));
    }
    // The fp32 values AdamW updates: the master copy, or the weights themselves.
    updated_ = dt != DType::kF32 ? master_.data_as<float>()
                                 : static_cast<float*>(flat_param_.at(opt_first_));
    return absl::OkStatus();
  }

  int64_t numel() const { return numel_; }
  absl::Status ZeroGradients() {
    return numel_ == 0 ? absl::OkStatus() : be_->Fill(flat_grad_, 0.0);
  }
  // The group's all-reduce, or reduce-scatter into this rank's chunk.
  absl::Status Reduce() {
    if (numel_ == 0) return absl::OkStatus();
    if (distributed_) return group_->ReduceScatter(flat_grad_.data(), grads(), shard_, dt_);
    return group_->AllReduce(flat_grad_.data(), numel_, dt_);
  }
  // Scales this rank's gradients and applies AdamW (step 0-based).
  absl::Status Update(const TrainConfig& c, float scale, int64_t step) {
    if (numel_ == 0) return absl::OkStatus();
    PT_RETURN_IF_ERROR(be_->Scale(dt_, grads(), scale, opt_n_));
    PT_RETURN_IF_ERROR(be_->AdamW(dt_, updated_, grads(), opt_m_.data_as<float>(),
                                  opt_v_.data_as<float>(), opt_n_, c.lr, c.beta1, c.beta2,
                                  c.adam_eps, c.weight_decay, step + 1));
    if (dt_ != DType::kF32) {
      PT_RETURN_IF_ERROR(be_->Cast(dt_, flat_param_.at(opt_first_), DType::kF32, updated_, opt_n_));
    }
    return absl::OkStatus();
  }
  // The distributed optimizer's all-gather of the updated weights.
  absl::Status Gather() {
    if (numel_ == 0 || !distributed_) return absl::OkStatus();
    return group_->AllGather(flat_param_.at(opt_first_), flat_param_.data(), shard_, dt_);
  }

 private:
  // The gradients this rank's optimizer updates: its chunk of the reduce-scattered buffer
  // (distributed optimizer) or the whole all-reduced buffer.
  void* grads() const { return flat_grad_.at(opt_first_); }

  Backend* be_ = nullptr;
  DType dt_ = DType::kF32;
  Communicator* group_ = nullptr;
  bool distributed_ = false;
  int64_t numel_ = 0, shard_ = 0, opt_n_ = 0, opt_first_ = 0;
  Tensor flat_param_, flat_grad_, opt_m_, opt_v_, master_;
  float* updated_ = nullptr;
};

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

// The routed block of an expert layer under the config's layout.
MoeLayerConfig ExpertBlock(const TrainConfig& c) {
  MoeLayerConfig m = c.moe;
  m.hidden = c.shape.hidden_size;
  m.ep = c.parallel.ep;
  m.etp = c.parallel.etp;
  return m;
}

uint64_t Slot(const TrainConfig& c, int64_t step, bool backward, int64_t chunk, int64_t mb) {
  return 1 + static_cast<uint64_t>(((step * 2 + (backward ? 1 : 0)) * c.parallel.vp + chunk) *
                                       c.num_micro_batches + mb);
}

// One rank's part of the run, in phases: Connect (the backend and the rank's groups),
// BuildModel (its model chunks), MakeFlatBuffers (Megatron's contiguous weight and gradient
// buffers and the optimizer state), then per step PostReceives, RunSchedule and
// ReduceAndUpdate, and at the end ExchangeJobFigures. Not thread-safe: one thread per rank.
class RankRun {
 public:
  RankRun(const TrainConfig& c, int64_t rank, RankResult* result)
      : c_(c), p_(c.parallel), rank_(rank), me_(CoordsOf(c, rank)), result_(result) {}

  // The backend (device `device` on CUDA) and the TP, DP, embedding, world and pipeline
  // groups of this rank.
  absl::Status Connect(int device, std::shared_ptr<GlooRendezvous> r) {
    if (c_.backend == BackendKind::kCuda) {
      PT_ASSIGN_OR_RETURN(be_, MakeCudaBackend(device, 0));
    } else {
      be_ = MakeCpuBackend(0, std::max(1, c_.threads_per_rank));
    }
    PT_ASSIGN_OR_RETURN(tp_, Group(*be_, r, absl::StrCat("tp_", me_.dp, "_", me_.pp), me_.tp,
                                   p_.tp));
    PT_ASSIGN_OR_RETURN(dp_, Group(*be_, r, absl::StrCat("dp_", me_.tp, "_", me_.pp), me_.dp,
                                   p_.dp));
    // Tied embeddings over several stages: the embedding group of the first and the last
    // stage of this (tp, dp).
    if (c_.tie_embeddings && p_.pp > 1 && (me_.pp == 0 || me_.pp == p_.pp - 1)) {
      PT_ASSIGN_OR_RETURN(embedding_group_,
                          Group(*be_, r, absl::StrCat("emb_", me_.tp, "_", me_.dp),
                                me_.pp == 0 ? 0 : 1, 2));
    }
    // The world group exchanges host figures (barriers, losses, times): Gloo on any backend.
    if (c_.world_size() == 1) {
      world_ = MakeSelfCommunicator();
    } else {
      PT_ASSIGN_OR_RETURN(world_, MakeGlooCommunicator(r, "world", static_cast<int>(rank_),
                                                       static_cast<int>(c_.world_size())));
    }
    if (c_.moe.num_experts > 0) PT_RETURN_IF_ERROR(ConnectExpertGroups(r));
    if (p_.pp > 1) {
      PT_ASSIGN_OR_RETURN(p2p_, PipeP2P::Connect(r, absl::StrCat("pp_", me_.tp, "_", me_.dp),
                                                 static_cast<int>(me_.pp),
                                                 static_cast<int>(p_.pp)));
    }
    ctx_ = ParallelContext{be_.get(), tp_.get(), &clock_,
                           ep_.get(), etp_,      std::max(1, c_.threads_per_rank)};
    next_ = static_cast<int>((me_.pp + 1) % p_.pp);
    prev_ = static_cast<int>((me_.pp + p_.pp - 1) % p_.pp);
    return absl::OkStatus();
  }

  // Megatron-Core's parallel folding: the stage's tp·dp ranks, numbered i = tp rank + tp ·
  // dp rank as in the dense layout, regroup for the expert layers as etp (fastest) × ep × edp. ETP is
  // the TP group itself (etp = tp) or one rank (etp = 1; TrainConfig::Validate).
  absl::Status ConnectExpertGroups(std::shared_ptr<GlooRendezvous> r) {
    const int64_t i = me_.tp + p_.tp * me_.dp, etp = p_.etp, ep = p_.ep;
    const int64_t etp_rank = i % etp, ep_rank = (i / etp) % ep, edp_rank = i / (etp * ep);
    PT_ASSIGN_OR_RETURN(
        ep_,
        Group(*be_, r, absl::StrCat("ep_", etp_rank, "_", edp_rank, "_", me_.pp), ep_rank, ep));
    PT_ASSIGN_OR_RETURN(
        edp_, Group(*be_, r, absl::StrCat("edp_", etp_rank, "_", ep_rank, "_", me_.pp), edp_rank,
                    p_.edp()));
    if (etp == 1) {
      PT_ASSIGN_OR_RETURN(etp_self_, Group(*be_, r, "", 0, 1));
      etp_ = etp_self_.get();
    } else {
      etp_ = tp_.get();
    }
    return absl::OkStatus();
  }

  // The rank's model chunks: chunk k of pipeline rank p is virtual stage k·pp + p, holding
  // the layers ParallelConfig::LayersInChunk gives it (uneven splits and the
  // embedding/loss-aware one included).
  absl::Status BuildModel() {
    stages_ = p_.pp * p_.vp;
    const auto layers_of = [&](int64_t vstage) {
      return p_.LayersInChunk(c_.num_layers, vstage % p_.pp, vstage / p_.pp);
    };
    LayerConfig base;
    base.shape = c_.shape;
    base.parallel = p_;
    base.seq_length = c_.seq_length;
    base.dtype = c_.dtype;
    base.flash_attention = c_.flash_attention;
    base.hidden_dropout = base.attention_dropout = c_.dropout ? 0.1f : 0.0f;
    base.seed = c_.seed;
    chunks_.resize(p_.vp);
    for (int64_t k = 0; k < p_.vp; ++k) {
      Chunk& ch = chunks_[k];
      ch.vstage = k * p_.pp + me_.pp;
      if (ch.vstage == 0) {
        PT_ASSIGN_OR_RETURN(ch.embedding,
                            VocabParallelEmbedding::Create(base, ctx_, c_.position_rows));
        for (Parameter* p : ch.embedding->Parameters()) params_.push_back({&p->value, &p->grad});
      }
      int64_t first = 0;
      for (int64_t v = 0; v < ch.vstage; ++v) first += layers_of(v);
      for (int64_t l = 0; l < layers_of(ch.vstage); ++l) {
        const int64_t global = first + l;
        LayerConfig lc = base;
        lc.seed = Mix64(c_.seed + 1000003ull * static_cast<uint64_t>(global + 1));
        if (c_.IsExpertLayer(global)) lc.moe = ExpertBlock(c_);
        lc.attention_window = c_.AttentionWindowOf(global);
        PT_ASSIGN_OR_RETURN(auto layer, TransformerLayer::Create(lc, ctx_));
        for (Parameter* p : layer->Parameters()) params_.push_back({&p->value, &p->grad});
        for (const ParameterRef& p : layer->MoeParameterRefs(false)) params_.push_back(p);
        for (const ParameterRef& p : layer->MoeParameterRefs(true)) expert_params_.push_back(p);
        ch.layers.push_back(std::move(layer));
      }
      if (ch.vstage == stages_ - 1) {
        OutputWeight weight;
        weight.tied = c_.tie_embeddings;
        if (c_.tie_embeddings && ch.embedding) weight.table = &ch.embedding->weight();  // pp 1
        PT_ASSIGN_OR_RETURN(ch.output, VocabParallelOutput::Create(base, ctx_, weight));
        for (Parameter* p : ch.output->Parameters()) params_.push_back({&p->value, &p->grad});
      }
    }
    int64_t dense = 0, experts = 0;
    for (const ParameterRef& p : params_) dense += p.value->numel();
    for (const ParameterRef& p : expert_params_) experts += p.value->numel();
    result_->parameter_count = dense + experts;
    result_->expert_parameter_count = experts;
    return absl::OkStatus();
  }

  // The contiguous buffers (GradBucket): the dense weights, reduced over DP, and the
  // routed experts, reduced over the expert-data-parallel group.
  absl::Status MakeFlatBuffers() {
    const bool distributed = p_.distributed_optimizer();
    PT_RETURN_IF_ERROR(dense_.Make(*be_, c_.dtype, params_, dp_.get(), distributed));
    if (!expert_params_.empty()) {
      PT_RETURN_IF_ERROR(experts_.Make(*be_, c_.dtype, expert_params_, edp_.get(), distributed));
    }
    rows_ = (p_.sequence_parallel ? c_.seq_length / p_.tp : c_.seq_length) *
            p_.micro_batch_size;
    schedule_ = PipelineSchedule(c_, me_.pp);
    return absl::OkStatus();
  }

  // One training step; `loss` is this rank's mean loss over its micro-batches (0 off the
  // last stage) and `seconds` its wall time.
  absl::Status Step(int64_t step, double* loss, double* seconds) {
    PT_RETURN_IF_ERROR(world_->Barrier());
    const auto t0 = std::chrono::steady_clock::now();
    PT_RETURN_IF_ERROR(dense_.ZeroGradients());
    PT_RETURN_IF_ERROR(experts_.ZeroGradients());
    PT_RETURN_IF_ERROR(PostReceives(step));
    double loss_sum = 0, wait_s = 0;
    PT_RETURN_IF_ERROR(RunSchedule(step, &loss_sum, &wait_s));
    std::chrono::steady_clock::time_point end;
    PT_RETURN_IF_ERROR(ReduceAndUpdate(step, &end));
    result_->p2p_wait_seconds.push_back(wait_s);
    *seconds = std::chrono::duration<double>(end - t0).count();
    *loss = loss_sum / static_cast<double>(c_.num_micro_batches);
    return absl::OkStatus();
  }

  // Job-wide figures: every rank's (loss, time) per step; the loss is the mean over DP of
  // the last stage's, the time the slowest rank's.
  absl::Status ExchangeJobFigures(const std::vector<double>& losses,
                                  const std::vector<double>& times,
                                  std::vector<double>* losses_out,
                                  std::vector<double>* times_out) {
    result_->step_seconds = times;
    result_->peak_bytes = be_->allocator().Stats().peak_bytes;
    const bool reports_loss = me_.pp == p_.pp - 1 && me_.tp == 0;
    std::vector<double> mine(2 * c_.steps);
    for (int64_t s = 0; s < c_.steps; ++s) {
      mine[2 * s] = reports_loss ? losses[s] : 0.0;
      mine[2 * s + 1] = times[s];
    }
    std::vector<double> all(mine.size() * c_.world_size());
    PT_RETURN_IF_ERROR(world_->AllGather(mine.data(), all.data(), mine.size(), DType::kF64));
    losses_out->assign(c_.steps, 0.0);
    times_out->assign(c_.steps, 0.0);
    for (int64_t q = 0; q < c_.world_size(); ++q) {
      for (int64_t s = 0; s < c_.steps; ++s) {
        (*losses_out)[s] += all[q * mine.size() + 2 * s] / static_cast<double>(p_.dp);
        (*times_out)[s] = std::max((*times_out)[s], all[q * mine.size() + 2 * s + 1]);
      }
    }
    return absl::OkStatus();
  }

 private:
  // Every receive of the step, posted ahead so that no schedule order can deadlock.
  absl::Status PostReceives(int64_t step) {
    if (!p2p_) return absl::OkStatus();
    const int64_t bytes = rows_ * c_.shape.hidden_size * SizeOf(c_.dtype);
    for (int64_t k = 0; k < p_.vp; ++k) {
      const int64_t vs = chunks_[k].vstage;
      for (int64_t mb = 0; mb < c_.num_micro_batches; ++mb) {
        if (vs > 0) PT_RETURN_IF_ERROR(p2p_->PostRecv(Slot(c_, step, false, k, mb), prev_, bytes));
        if (vs < stages_ - 1) {
          PT_RETURN_IF_ERROR(p2p_->PostRecv(Slot(c_, step, true, k, mb), next_, bytes));
        }
      }
    }
    return absl::OkStatus();
  }

  // Takes a stage's message, adding the time spent waiting for it to `wait_s`.
  absl::StatusOr<Tensor> Take(uint64_t slot, double* wait_s) {
    const auto w0 = std::chrono::steady_clock::now();
    absl::StatusOr<Tensor> t = p2p_->Take(slot, *be_, {rows_, c_.shape.hidden_size}, c_.dtype);
    *wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    return t;
  }

  // The pipeline schedule's forward and backward ops, then the gradients finished (the SP
  // norms' all-reduce over TP).
  absl::Status RunSchedule(int64_t step, double* loss_sum, double* wait_s) {
    std::vector<std::vector<InFlight>> flight(p_.vp,
                                              std::vector<InFlight>(c_.num_micro_batches));
    for (const ScheduleOp& op : schedule_) {
      InFlight& f = flight[op.chunk][op.micro_batch];
      if (op.forward) {
        PT_RETURN_IF_ERROR(Forward(step, op, f, loss_sum, wait_s));
      } else {
        PT_RETURN_IF_ERROR(Backward(step, op, f, wait_s));
      }
    }
    for (Chunk& ch : chunks_) {
      for (auto& l : ch.layers) PT_RETURN_IF_ERROR(l->FinishGradients());
      if (ch.output && p_.sequence_parallel && p_.tp > 1) {
        for (Parameter* p : ch.output->Parameters()) {
          if (p->replicated) {
            PT_RETURN_IF_ERROR(tp_->AllReduce(p->grad.data(), p->grad.numel(), c_.dtype));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  // Forward of (chunk, micro-batch): the embedding or the previous stage's activation in,
  // the loss and its gradient (last stage) or the next stage's activation out.
  absl::Status Forward(int64_t step, const ScheduleOp& op, InFlight& f, double* loss_sum,
                       double* wait_s) {
    Chunk& ch = chunks_[op.chunk];
    const int64_t g = me_.dp * c_.num_micro_batches + op.micro_batch;  // global micro-batch
    Tensor x;
    if (ch.vstage == 0) {
      const std::vector<int32_t> ids = SyntheticTokens(c_, step, g, false);
      PT_ASSIGN_OR_RETURN(x, ch.embedding->Forward(ids));
      f.embedding = ch.embedding->TakeSaved();
    } else {
      PT_ASSIGN_OR_RETURN(x, Take(Slot(c_, step, false, op.chunk, op.micro_batch), wait_s));
    }
    f.saved.resize(ch.layers.size());
    for (size_t l = 0; l < ch.layers.size(); ++l) {
      PT_ASSIGN_OR_RETURN(x, ch.layers[l]->Forward(x));
      f.saved[l] = std::move(MutableSaved(*ch.layers[l]));
      MutableSaved(*ch.layers[l]) = SavedActivations();
    }
    if (ch.output) {
      // The loss and its gradient at once: the output block holds one micro-batch.
      PT_ASSIGN_OR_RETURN(double loss, ch.output->Forward(x, SyntheticTokens(c_, step, g, true)));
      *loss_sum += loss;
      PT_ASSIGN_OR_RETURN(f.dy, ch.output->Backward());
      return absl::OkStatus();
    }
    return p2p_->Send(*be_, x, next_,
                      Slot(c_, step, false, op.chunk + (next_ == 0 ? 1 : 0), op.micro_batch));
  }

  // Backward of (chunk, micro-batch): the loss gradient or the next stage's in, the
  // embedding's backward or the previous stage's gradient out.
  absl::Status Backward(int64_t step, const ScheduleOp& op, InFlight& f, double* wait_s) {
    Chunk& ch = chunks_[op.chunk];
    Tensor dy;
    if (ch.output) {
      dy = std::move(f.dy);
    } else {
      PT_ASSIGN_OR_RETURN(dy, Take(Slot(c_, step, true, op.chunk, op.micro_batch), wait_s));
    }
    for (size_t l = ch.layers.size(); l-- > 0;) {
      MutableSaved(*ch.layers[l]) = std::move(f.saved[l]);
      PT_ASSIGN_OR_RETURN(dy, ch.layers[l]->Backward(dy));
    }
    if (ch.embedding) {
      ch.embedding->RestoreSaved(std::move(f.embedding));
      PT_RETURN_IF_ERROR(ch.embedding->Backward(dy));
    } else {
      PT_RETURN_IF_ERROR(p2p_->Send(
          *be_, dy, prev_,
          Slot(c_, step, true, op.chunk - (prev_ == p_.pp - 1 ? 1 : 0), op.micro_batch)));
    }
    f = InFlight();
    return absl::OkStatus();
  }

  // The tied-embedding and DP gradient collectives, the mean over the global batch and
  // AdamW (then the all-gather of the distributed optimizer), timed in laps that each wait
  // for the backend's queued work; `end` is the clock after the last lap.
  absl::Status ReduceAndUpdate(int64_t step, std::chrono::steady_clock::time_point* end) {
    const DType dt = c_.dtype;
    const float scale = 1.0f / static_cast<float>(c_.num_micro_batches * p_.dp);
    PT_RETURN_IF_ERROR(be_->Synchronize());
    auto mark = std::chrono::steady_clock::now();
    auto lap = [&]() -> absl::StatusOr<double> {
      PT_RETURN_IF_ERROR(be_->Synchronize());
      const auto now = std::chrono::steady_clock::now();
      const double s = std::chrono::duration<double>(now - mark).count();
      mark = now;
      return s;
    };
    if (embedding_group_) {
      // The table's gradient plus its copy's, on both stages, before the DP reduce (which
      // then sums both over DP: the same total as Megatron's order, and correct for the
      // distributed optimizer's shards too).
      Parameter& w = me_.pp == 0 ? chunks_.front().embedding->weight()
                                 : chunks_.back().output->weight();
      PT_RETURN_IF_ERROR(embedding_group_->AllReduce(w.grad.data(), w.grad.numel(), dt));
    }
    PT_RETURN_IF_ERROR(dense_.Reduce());
    PT_RETURN_IF_ERROR(experts_.Reduce());
    PT_ASSIGN_OR_RETURN(double dp_s, lap());
    // Both buckets take the mean over the global batch: an expert's gradient sums the
    // tokens of every rank whose tokens reached it, as a dense weight's sums over DP.
    PT_RETURN_IF_ERROR(dense_.Update(c_, scale, step));
    PT_RETURN_IF_ERROR(experts_.Update(c_, scale, step));
    PT_ASSIGN_OR_RETURN(const double opt_s, lap());
    if (p_.distributed_optimizer()) {
      PT_RETURN_IF_ERROR(dense_.Gather());
      PT_RETURN_IF_ERROR(experts_.Gather());
      PT_ASSIGN_OR_RETURN(const double gather_s, lap());
      dp_s += gather_s;
    }
    result_->dp_seconds.push_back(dp_s);
    result_->optimizer_seconds.push_back(opt_s);
    *end = mark;
    return absl::OkStatus();
  }

  const TrainConfig& c_;
  const ParallelConfig& p_;
  const int64_t rank_;
  const RankCoords me_;
  RankResult* const result_;
  // Declared in dependency order: tensors and layers go before the groups and the backend
  // they use.
  std::unique_ptr<Backend> be_;
  CommClock clock_;
  std::unique_ptr<Communicator> tp_, dp_, embedding_group_, world_;
  std::unique_ptr<Communicator> ep_, edp_, etp_self_;  // expert groups (MoE only)
  Communicator* etp_ = nullptr;                        // tp_ or etp_self_
  std::unique_ptr<PipeP2P> p2p_;
  ParallelContext ctx_;
  int next_ = 0, prev_ = 0;  // Pipeline neighbours.
  int64_t stages_ = 1;       // pp·vp virtual stages.
  std::vector<Chunk> chunks_;
  std::vector<ParameterRef> params_, expert_params_;  // dense (incl. router), routed experts
  int64_t rows_ = 0;
  GradBucket dense_, experts_;
  std::vector<ScheduleOp> schedule_;
};

absl::Status RunRank(const TrainConfig& c, int64_t rank, int device,
                     std::shared_ptr<GlooRendezvous> r, RankResult* result,
                     std::vector<double>* losses_out, std::vector<double>* times_out) {
  RankRun run(c, rank, result);
  PT_RETURN_IF_ERROR(run.Connect(device, std::move(r)));
  PT_RETURN_IF_ERROR(run.BuildModel());
  PT_RETURN_IF_ERROR(run.MakeFlatBuffers());
  std::vector<double> losses(c.steps, 0.0), times(c.steps, 0.0);
  for (int64_t step = 0; step < c.steps; ++step) {
    PT_RETURN_IF_ERROR(run.Step(step, &losses[step], &times[step]));
  }
  return run.ExchangeJobFigures(losses, times, losses_out, times_out);
}

}  // namespace

absl::Status TrainConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat(name, " (", v, ") must be >= 1"));
    return absl::OkStatus();
  };
  const ParallelConfig& p = parallel;
  PT_RETURN_IF_ERROR(positive("num_layers", num_layers));
  PT_RETURN_IF_ERROR(positive("seq_length", seq_length));
  PT_RETURN_IF_ERROR(positive("micro_batch_size", p.micro_batch_size));
  PT_RETURN_IF_ERROR(positive("num_micro_batches", num_micro_batches));
  PT_RETURN_IF_ERROR(positive("tp", p.tp));
  PT_RETURN_IF_ERROR(positive("pp", p.pp));
  PT_RETURN_IF_ERROR(positive("dp", p.dp));
  PT_RETURN_IF_ERROR(positive("vp", p.vp));
  PT_RETURN_IF_ERROR(positive("steps", steps));
  PT_RETURN_IF_ERROR(positive("vocab_size", shape.vocab_size));
  PT_RETURN_IF_ERROR(VocabParallelEmbedding::CheckPositionRows(position_rows, seq_length));
  if (p.cp != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "context parallelism (cp ", p.cp, ") is not implemented by kernels/training"));
  }
  if (p.recompute_num_layers != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "recompute_num_layers (", p.recompute_num_layers,
        ") must be 0: kernels/training recomputes every layer or none"));
  }
  if (p.data_parallel_sharding == DataParallelSharding::kOptimizerGrads ||
      p.data_parallel_sharding == DataParallelSharding::kFull || p.shard_group_size != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "data_parallel_sharding ", paratune::ToString(p.data_parallel_sharding),
        " with shard_group_size ", p.shard_group_size,
        " is not implemented by kernels/training (none, or optimizer over the whole DP group)"));
  }
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype (", DTypeName(dtype), ") must be fp32, bf16 or fp16"));
  }
  if (dtype != DType::kF32 && backend != BackendKind::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype (", DTypeName(dtype), ") needs the cuda backend; the cpu backend trains in fp32"));
  }
  const int64_t slots = num_layers + (p.split_counts_embedding_and_loss ? 2 : 0);
  if (p.pp * p.vp > slots) {
    return absl::InvalidArgumentError(absl::StrCat("pp·vp (", p.pp * p.vp, ") must be at most ",
                                                   p.split_counts_embedding_and_loss
                                                       ? "num_layers + 2 (the embedding's and "
                                                         "the loss's slots), "
                                                       : "num_layers, ",
                                                   slots));
  }
  if (p.vp > 1 && p.pp < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("vp (", p.vp, ") > 1 needs pp >= 2 (pp is ", p.pp, ")"));
  }
  if (p.vp > 1 && num_micro_batches % p.pp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp (", p.pp, ") must divide num_micro_batches (", num_micro_batches,
                     ") with the interleaved schedule"));
  }
  if (shape.vocab_size % p.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tp (", p.tp, ") must divide vocab_size (",
                                                   shape.vocab_size, ")"));
  }
  LayerConfig lc;
  lc.shape = shape;
  lc.parallel = p;
  lc.seq_length = seq_length;
  lc.flash_attention = flash_attention;
  lc.dtype = dtype;
  PT_RETURN_IF_ERROR(lc.Validate());
  PT_RETURN_IF_ERROR(CheckAttentionWindow(attention_window, window_attn_skip_freq));
  if (moe.num_experts <= 0) {
    if (p.ep != 1 || p.etp != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ep (", p.ep, ") and etp (", p.etp, ") must be 1 without experts (moe.num_experts 0)"));
    }
    return absl::OkStatus();
  }
  PT_RETURN_IF_ERROR(positive("moe_layer_freq", moe_layer_freq));
  if (first_k_dense_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_k_dense_layers (", first_k_dense_layers, ") must be >= 0"));
  }
  if (backend != BackendKind::kCpu &&
      (moe.aux_loss_coeff > 0 || moe.routing == ExpertRouting::kCapacity)) {
    return absl::UnimplementedError(
        "the auxiliary loss and capacity routing train on the cpu backend only "
        "(kernels/moe_layer.h)");
  }
  if (p.edp() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep·etp (", p.ep * p.etp, ") must divide tp·dp (", p.tp * p.dp, ")"));
  }
  lc.moe = ExpertBlock(*this);
  return lc.Validate();
}

bool TrainConfig::IsExpertLayer(int64_t layer) const {
  return moe.num_experts > 0 && IsExpertLayerAt(layer, first_k_dense_layers, moe_layer_freq);
}

int64_t TrainConfig::AttentionWindowOf(int64_t layer) const {
  return LayerAttentionWindow(attention_window, window_attn_skip_freq, layer);
}

RankCoords CoordsOf(const TrainConfig& c, int64_t rank) {
  RankCoords x;
  x.tp = rank % c.parallel.tp;
  x.dp = (rank / c.parallel.tp) % c.parallel.dp;
  x.pp = rank / (c.parallel.tp * c.parallel.dp);
  return x;
}

int64_t RankOf(const TrainConfig& c, const RankCoords& x) {
  return x.tp + c.parallel.tp * (x.dp + c.parallel.dp * x.pp);
}

std::vector<ScheduleOp> PipelineSchedule(const TrainConfig& c, int64_t p) {
  const int64_t M = c.num_micro_batches, pp = c.parallel.pp, vp = c.parallel.vp, total = M * vp;
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
  const int64_t s = c.seq_length, b = c.parallel.micro_batch_size, V = c.shape.vocab_size;
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
