#include "kernels/moe_layer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/moe_permute.h"
#include "kernels/cpu/moe_router.h"
#include "kernels/hash_random.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename T>
constexpr DType DTypeOf() {
  return std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
}

// y[n, out] = x[n, in]·W[out, in]ᵀ (+= when accumulate).
template <typename T>
void LinearForward(T* y, const T* x, const T* w, int64_t n, int64_t in, int64_t out,
                   bool accumulate = false) {
  if (n == 0 || out == 0) return;
  cpu::gemm(false, true, n, out, in, 1.0f, x, in, w, in, accumulate ? 1.0f : 0.0f, y, out);
}

// dx[n, in] (= or +=) dy[n, out]·W; dW[out, in] += dy ᵀ·x.
template <typename T>
void LinearBackward(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t n, int64_t in,
                    int64_t out, bool accumulate_dx) {
  if (n == 0) return;
  cpu::gemm(false, false, n, in, out, 1.0f, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
  cpu::gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
}

absl::Status Positive(int64_t v, const char* field) {
  if (v < 1) return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be >= 1"));
  return absl::OkStatus();
}

absl::Status Divides(int64_t d, const char* dname, int64_t n, const char* nname) {
  if (n % d != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dname, " (", d, ") must divide ", nname, " (", n, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeLayerConfig::Validate() const {
  PT_RETURN_IF_ERROR(Positive(hidden, "hidden"));
  PT_RETURN_IF_ERROR(Positive(num_experts, "num_experts"));
  PT_RETURN_IF_ERROR(Positive(topk, "topk"));
  PT_RETURN_IF_ERROR(Positive(ffn_hidden, "ffn_hidden"));
  PT_RETURN_IF_ERROR(Positive(ep, "ep"));
  PT_RETURN_IF_ERROR(Positive(etp, "etp"));
  if (topk > num_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("topk (", topk, ") must be <= num_experts (", num_experts, ")"));
  }
  if (num_shared_experts < 0 || (num_shared_experts > 0 && shared_ffn_hidden < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_shared_experts (", num_shared_experts, ") must be >= 0, with shared_ffn_hidden (",
        shared_ffn_hidden, ") >= 1 when shared experts exist"));
  }
  if (aux_loss_coeff < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("aux_loss_coeff (", aux_loss_coeff, ") must be >= 0"));
  }
  if (topk_scaling <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("topk_scaling (", topk_scaling, ") must be > 0"));
  }
  if (routing == ExpertRouting::kCapacity && capacity_factor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_factor (", capacity_factor, ") must be > 0 with capacity routing"));
  }
  PT_RETURN_IF_ERROR(Divides(ep, "ep", num_experts, "num_experts"));
  PT_RETURN_IF_ERROR(Divides(etp, "etp", ffn_hidden, "ffn_hidden"));
  if (num_shared_experts > 0) {
    PT_RETURN_IF_ERROR(
        Divides(etp, "etp", shared_ffn_total(), "num_shared_experts * shared_ffn_hidden"));
  }
  return absl::OkStatus();
}

// Element i of weight tensor `tensor` (1 router, 2 fc1, 3 fc2, 4 shared_fc1, 5 shared_fc2)
// of MoeWeights::Random.
double RandomWeight(uint64_t seed, uint64_t tensor, int64_t i, double scale) {
  return scale * (2.0 * HashUniform(seed + tensor * 0x1000193ull, i) - 1.0);
}

template <typename T>
MoeWeights<T> MoeWeights<T>::Random(const MoeLayerConfig& c, uint64_t seed, double scale) {
  auto fill = [&](std::vector<T>& v, int64_t n, uint64_t tensor) {
    v.resize(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(RandomWeight(seed, tensor, i, scale));
  };
  const int64_t h = c.hidden, e = c.num_experts, f = c.ffn_hidden, fs = c.shared_ffn_total();
  MoeWeights w;
  fill(w.router, e * h, 1);
  fill(w.fc1, e * 2 * f * h, 2);
  fill(w.fc2, e * h * f, 3);
  fill(w.shared_fc1, 2 * fs * h, 4);
  fill(w.shared_fc2, h * fs, 5);
  return w;
}

// ---------------------------------------------------------------------------------------
// Dispatcher

AllToAllTokenDispatcher::AllToAllTokenDispatcher(Communicator* ep, int64_t num_experts,
                                                 int64_t hidden, DType dtype)
    : ep_(ep), num_experts_(num_experts), hidden_(hidden), dtype_(dtype) {}

absl::Status AllToAllTokenDispatcher::Plan(const std::vector<int64_t>& tokens_per_expert) {
  const int ep = ep_->size();
  const int64_t local = num_experts_ / ep;
  if (static_cast<int64_t>(tokens_per_expert.size()) != num_experts_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens_per_expert has ", tokens_per_expert.size(),
                     " entries; must have num_experts (", num_experts_, ")"));
  }
  // Counts travel as doubles (every communicator reduces fp64; counts stay exact < 2^53).
  std::vector<double> send(num_experts_), recv(num_experts_);
  for (int64_t e = 0; e < num_experts_; ++e) send[e] = static_cast<double>(tokens_per_expert[e]);
  PT_RETURN_IF_ERROR(ep_->AllToAll(send.data(), recv.data(), local, DType::kF64));
  send_rows_.assign(ep, 0);
  recv_rows_.assign(ep, 0);
  recv_counts_.assign(num_experts_, 0);
  local_counts_.assign(local, 0);
  received_rows_ = 0;
  for (int q = 0; q < ep; ++q) {
    for (int64_t le = 0; le < local; ++le) {
      send_rows_[q] += tokens_per_expert[q * local + le];
      const auto n = static_cast<int64_t>(recv[q * local + le]);
      recv_counts_[q * local + le] = n;
      recv_rows_[q] += n;
      local_counts_[le] += n;
      received_rows_ += n;
    }
  }
  return absl::OkStatus();
}

// Rank-major chunks (q, le) ↔ expert-major chunks (le, q), as Megatron's sort_chunks_by_idxs.
void AllToAllTokenDispatcher::Regroup(const char* src, char* dst, bool to_expert_major) const {
  const int ep = ep_->size();
  const int64_t local = num_experts_ / ep;
  const int64_t row = hidden_ * SizeOf(dtype_);
  std::vector<int64_t> rank_major(ep * local + 1, 0), expert_major(ep * local + 1, 0);
  for (int q = 0; q < ep; ++q) {
    for (int64_t le = 0; le < local; ++le) {
      rank_major[q * local + le + 1] = recv_counts_[q * local + le];
    }
  }
  std::partial_sum(rank_major.begin(), rank_major.end(), rank_major.begin());
  int64_t at = 0;
  for (int64_t le = 0; le < local; ++le) {
    for (int q = 0; q < ep; ++q) {
      const int64_t chunk = q * local + le;
      const int64_t n = recv_counts_[chunk] * row;
      const int64_t rm = rank_major[chunk] * row;
      if (to_expert_major) {
        std::memcpy(dst + at, src + rm, n);
      } else {
        std::memcpy(dst + rm, src + at, n);
      }
      at += n;
    }
  }
}

absl::Status AllToAllTokenDispatcher::Dispatch(const void* in, void* out, void* workspace) {
  std::vector<int64_t> send(send_rows_.size()), recv(recv_rows_.size());
  for (size_t q = 0; q < send.size(); ++q) {
    send[q] = send_rows_[q] * hidden_;
    recv[q] = recv_rows_[q] * hidden_;
  }
  PT_RETURN_IF_ERROR(ep_->AllToAllV(in, send, workspace, recv, dtype_));
  Regroup(static_cast<const char*>(workspace), static_cast<char*>(out), true);
  return absl::OkStatus();
}

absl::Status AllToAllTokenDispatcher::Combine(const void* in, void* out, void* workspace) {
  std::vector<int64_t> send(send_rows_.size()), recv(recv_rows_.size());
  for (size_t q = 0; q < send.size(); ++q) {
    send[q] = recv_rows_[q] * hidden_;
    recv[q] = send_rows_[q] * hidden_;
  }
  Regroup(static_cast<const char*>(in), static_cast<char*>(workspace), false);
  return ep_->AllToAllV(workspace, send, out, recv, dtype_);
}

// ---------------------------------------------------------------------------------------
// Layer

template <typename T>
MoeLayer<T>::MoeLayer(const MoeLayerConfig& config, Communicator* ep, Communicator* etp,
                      TrackingAllocator* allocator, int threads)
    : config_(config),
      ep_(ep),
      etp_(etp),
      allocator_(allocator),
      threads_(threads),
      dispatcher_(ep, config.num_experts, config.hidden, DTypeOf<T>()) {}

template <typename T>
absl::StatusOr<Tensor> MoeLayer<T>::Alloc(std::vector<int64_t> shape, MemoryTag tag) const {
  return Tensor::Empty(allocator_, std::move(shape), DTypeOf<T>(), tag);
}

template <typename T>
absl::StatusOr<std::unique_ptr<MoeLayer<T>>> MoeLayer<T>::Create(
    const MoeLayerConfig& config, const MoeWeights<T>& full, Communicator* ep, Communicator* etp,
    TrackingAllocator* allocator, int threads) {
  PT_RETURN_IF_ERROR(config.Validate());
  const int64_t h = config.hidden, e = config.num_experts, f = config.ffn_hidden;
  const int64_t fs = config.shared_ffn_total();
  if (static_cast<int64_t>(full.router.size()) != e * h ||
      static_cast<int64_t>(full.fc1.size()) != e * 2 * f * h ||
      static_cast<int64_t>(full.fc2.size()) != e * h * f ||
      static_cast<int64_t>(full.shared_fc1.size()) != 2 * fs * h ||
      static_cast<int64_t>(full.shared_fc2.size()) != h * fs) {
    return absl::InvalidArgumentError("weights must have the shapes of MoeWeights for config");
  }
  const std::vector<T>* tensors[] = {&full.router, &full.fc1, &full.fc2, &full.shared_fc1,
                                     &full.shared_fc2};
  return CreateFrom(
      config,
      [&tensors](int tensor, int64_t offset, int64_t n, T* out) {
        const T* src = tensors[tensor - 1]->data() + offset;
        std::copy(src, src + n, out);
      },
      ep, etp, allocator, threads);
}

template <typename T>
absl::StatusOr<std::unique_ptr<MoeLayer<T>>> MoeLayer<T>::CreateRandom(
    const MoeLayerConfig& config, uint64_t seed, double scale, Communicator* ep, Communicator* etp,
    TrackingAllocator* allocator, int threads) {
  PT_RETURN_IF_ERROR(config.Validate());
  return CreateFrom(
      config,
      [seed, scale](int tensor, int64_t offset, int64_t n, T* out) {
        for (int64_t i = 0; i < n; ++i) {
          out[i] = static_cast<T>(RandomWeight(seed, tensor, offset + i, scale));
        }
      },
      ep, etp, allocator, threads);
}

template <typename T>
absl::StatusOr<std::unique_ptr<MoeLayer<T>>> MoeLayer<T>::CreateFrom(
    const MoeLayerConfig& config, const WeightSource& source, Communicator* ep, Communicator* etp,
    TrackingAllocator* allocator, int threads) {
  if (ep == nullptr || etp == nullptr || allocator == nullptr) {
    return absl::InvalidArgumentError("ep, etp and allocator must not be null");
  }
  if (ep->size() != config.ep || etp->size() != config.etp) {
    return absl::InvalidArgumentError(
        absl::StrCat("the EP group (", ep->size(), " ranks) and ETP group (", etp->size(),
                     " ranks) must have ep (", config.ep, ") and etp (", config.etp, ") ranks"));
  }
  if (!allocator->raw()->host_accessible()) {
    return absl::InvalidArgumentError("the MoE layer runs on host memory (a CPU backend)");
  }
  const int64_t h = config.hidden, e = config.num_experts, f = config.ffn_hidden;
  const int64_t fs = config.shared_ffn_total(), le = config.local_experts();
  const int64_t fl = f / config.etp, fsl = fs / config.etp;
  std::unique_ptr<MoeLayer> layer(new MoeLayer(config, ep, etp, allocator, threads));
  Params& w = layer->w_;
  Params& g = layer->g_;
  PT_ASSIGN_OR_RETURN(w.router, layer->Alloc({e, h}, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(w.fc1, layer->Alloc({le, 2 * fl, h}, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(w.fc2, layer->Alloc({le, h, fl}, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(w.shared_fc1, layer->Alloc({2 * fsl, h}, MemoryTag::kWeights));
  PT_ASSIGN_OR_RETURN(w.shared_fc2, layer->Alloc({h, fsl}, MemoryTag::kWeights));
  const std::pair<const Tensor*, Tensor*> weight_and_grad[] = {{&w.router, &g.router},
                                                               {&w.fc1, &g.fc1},
                                                               {&w.fc2, &g.fc2},
                                                               {&w.shared_fc1, &g.shared_fc1},
                                                               {&w.shared_fc2, &g.shared_fc2}};
  for (const std::pair<const Tensor*, Tensor*>& wg : weight_and_grad) {
    Tensor* grad = wg.second;
    PT_ASSIGN_OR_RETURN(*grad, layer->Alloc(wg.first->shape(), MemoryTag::kGradients));
    std::fill(grad->data_as<T>(), grad->data_as<T>() + grad->numel(), T(0));
  }
  source(1, 0, e * h, w.router.data_as<T>());
  // Column-parallel fc1: this ETP rank's slice of the gate rows and of the up rows;
  // row-parallel fc2: its slice of the columns.
  const int64_t j = etp->rank(), first = ep->rank() * le;
  auto shard = [&](int fc1, int fc2, int64_t ffn, int64_t ffn_local, int64_t expert, T* fc1_out,
                   T* fc2_out) {
    for (int64_t half = 0; half < 2; ++half) {
      source(fc1, (expert * 2 * ffn + half * ffn + j * ffn_local) * h, ffn_local * h,
             fc1_out + half * ffn_local * h);
    }
    for (int64_t r = 0; r < h; ++r) {
      source(fc2, (expert * h + r) * ffn + j * ffn_local, ffn_local, fc2_out + r * ffn_local);
    }
  };
  for (int64_t x = 0; x < le; ++x) {
    shard(2, 3, f, fl, first + x, w.fc1.data_as<T>() + x * 2 * fl * h,
          w.fc2.data_as<T>() + x * h * fl);
  }
  if (fs > 0) {
    shard(4, 5, fs, fsl, 0, w.shared_fc1.data_as<T>(), w.shared_fc2.data_as<T>());
  }
  return layer;
}

template <typename T>
absl::Status MoeLayer<T>::SharedForward(const T* x, int64_t tokens, T* y) {
  const int64_t h = config_.hidden, fsl = config_.shared_ffn_total() / config_.etp;
  LinearForward(shared_fc1_.data_as<T>(), x, w_.shared_fc1.data_as<T>(), tokens, h, 2 * fsl);
  cpu::swiglu_forward(shared_act_.data_as<T>(), shared_fc1_.data_as<T>(), tokens, fsl, threads_);
  // += onto the routed output: reduce_from_tp_region of the sum (fwd: all-reduce).
  LinearForward(y, shared_act_.data_as<T>(), w_.shared_fc2.data_as<T>(), tokens, fsl, h,
                /*accumulate=*/true);
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeLayer<T>::SharedBackward(const T* dy, T* dx) {
  const int64_t h = config_.hidden, fsl = config_.shared_ffn_total() / config_.etp;
  PT_ASSIGN_OR_RETURN(Tensor dact, Alloc({tokens_, fsl}, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor dfc1, Alloc({tokens_, 2 * fsl}, MemoryTag::kWorkspace));
  LinearBackward(dact.data_as<T>(), g_.shared_fc2.data_as<T>(), dy, shared_act_.data_as<T>(),
                 w_.shared_fc2.data_as<T>(), tokens_, fsl, h, false);
  cpu::swiglu_backward(dfc1.data_as<T>(), dact.data_as<T>(), shared_fc1_.data_as<T>(), tokens_, fsl,
                       threads_);
  // dx += here; the ETP all-reduce of dx (copy_to_tp_region's backward) is done once by
  // Backward for the routed and shared parts together.
  LinearBackward(dx, g_.shared_fc1.data_as<T>(), dfc1.data_as<T>(), x_.data_as<T>(),
                 w_.shared_fc1.data_as<T>(), tokens_, h, 2 * fsl, true);
  shared_fc1_ = Tensor();
  shared_act_ = Tensor();
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeLayer<T>::ExpertsForward(const T* in, T* out) {
  const int64_t h = config_.hidden, fl = config_.ffn_hidden / config_.etp;
  const int64_t rows = dispatcher_.received_rows();
  int64_t at = 0;
  for (int64_t le = 0; le < config_.local_experts(); ++le) {
    const int64_t n = dispatcher_.local_tokens_per_expert()[le];
    LinearForward(expert_fc1_.data_as<T>() + at * 2 * fl, in + at * h,
                  w_.fc1.data_as<T>() + le * 2 * fl * h, n, h, 2 * fl);
    cpu::swiglu_forward(expert_act_.data_as<T>() + at * fl, expert_fc1_.data_as<T>() + at * 2 * fl,
                        n, fl, threads_);
    LinearForward(out + at * h, expert_act_.data_as<T>() + at * fl,
                  w_.fc2.data_as<T>() + le * h * fl, n, fl, h);
    at += n;
  }
  // reduce_from_tp_region (fwd: all-reduce over ETP, bwd: identity).
  if (config_.etp > 1 && rows > 0) {
    PT_RETURN_IF_ERROR(etp_->AllReduce(out, rows * h, DTypeOf<T>()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeLayer<T>::ExpertsBackward(const T* dout, T* din, T* dact_buf, T* dfc1_buf) {
  const int64_t h = config_.hidden, fl = config_.ffn_hidden / config_.etp;
  int64_t at = 0;
  for (int64_t le = 0; le < config_.local_experts(); ++le) {
    const int64_t n = dispatcher_.local_tokens_per_expert()[le];
    LinearBackward(dact_buf + at * fl, g_.fc2.data_as<T>() + le * h * fl, dout + at * h,
                   expert_act_.data_as<T>() + at * fl, w_.fc2.data_as<T>() + le * h * fl, n, fl, h,
                   false);
    cpu::swiglu_backward(dfc1_buf + at * 2 * fl, dact_buf + at * fl,
                         expert_fc1_.data_as<T>() + at * 2 * fl, n, fl, threads_);
    LinearBackward(din + at * h, g_.fc1.data_as<T>() + le * 2 * fl * h, dfc1_buf + at * 2 * fl,
                   expert_in_.data_as<T>() + at * h, w_.fc1.data_as<T>() + le * 2 * fl * h, n, h,
                   2 * fl, false);
    at += n;
  }
  // din is this ETP rank's part (its shard of fc1); Backward all-reduces the layer's dx
  // over ETP once, after the combine and unpermute, which are linear.
  expert_fc1_ = Tensor();
  expert_act_ = Tensor();
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeLayer<T>::AgreeOnAllocation(const absl::Status& mine) {
  double failed = mine.ok() ? 0.0 : 1.0;
  // Summed over the EP group, then over the ETP group: over the whole grid.
  PT_RETURN_IF_ERROR(ep_->AllReduce(&failed, 1, DType::kF64));
  PT_RETURN_IF_ERROR(etp_->AllReduce(&failed, 1, DType::kF64));
  if (!mine.ok()) return mine;
  if (failed > 0) {
    return absl::AbortedError("another rank of the MoE layer could not allocate its buffers");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeLayer<T>::Forward(const T* x, int64_t tokens, T* y) {
  if (tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tokens (", tokens, ") must be >= 1"));
  }
  const int64_t h = config_.hidden, e = config_.num_experts, k = config_.topk;
  const bool sigmoid = config_.score == MoeScoreFunction::kSigmoid;
  tokens_ = tokens;
  PT_ASSIGN_OR_RETURN(x_, Alloc({tokens, h}, MemoryTag::kActivations));
  std::copy(x, x + tokens * h, x_.data_as<T>());

  // Router: logits → scores → selected experts → probabilities (fp32/fp64 as the layer).
  PT_ASSIGN_OR_RETURN(scores_, Alloc({tokens, e}, MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(Tensor logits, Alloc({tokens, e}, MemoryTag::kWorkspace));
  LinearForward(logits.data_as<T>(), x, w_.router.data_as<T>(), tokens, h, e);
  cpu::moe_router_scores(scores_.data_as<T>(), logits.data_as<T>(), tokens, e, sigmoid);
  logits = Tensor();
  PT_ASSIGN_OR_RETURN(selected_,
                      Tensor::Empty(allocator_, {tokens, k}, DType::kI32, MemoryTag::kActivations));
  cpu::moe_router_select(selected_.data_as<int32_t>(), scores_.data_as<T>(), tokens, e, k,
                         config_.routing == ExpertRouting::kBalanced, ep_->rank() * tokens);
  PT_ASSIGN_OR_RETURN(probs_, Alloc({tokens, k}, MemoryTag::kActivations));
  cpu::moe_router_probs(probs_.data_as<T>(), scores_.data_as<T>(), selected_.data_as<int32_t>(),
                        tokens, e, k, config_.normalize_topk, static_cast<T>(config_.topk_scaling));

  // Permutation: assignments sorted by expert, tokens in order within an expert.
  tokens_per_expert_.assign(e, 0);
  PT_ASSIGN_OR_RETURN(
      perm_, Tensor::Empty(allocator_, {tokens * k}, DType::kI32, MemoryTag::kActivations));
  if (config_.routing == ExpertRouting::kCapacity) {
    const auto capacity = static_cast<int64_t>(std::ceil(
        static_cast<double>(tokens * k) / static_cast<double>(e) * config_.capacity_factor));
    std::vector<int32_t> routed(tokens * k);
    cpu::moe_capacity_routes(routed.data(), probs_.data_as<T>(), selected_.data_as<int32_t>(),
                             tokens, e, k, capacity);
    routed_rows_ = cpu::moe_permutation(perm_.data_as<int32_t>(), tokens_per_expert_.data(),
                                        routed.data(), tokens * k, e);
  } else {
    routed_rows_ = cpu::moe_permutation(perm_.data_as<int32_t>(), tokens_per_expert_.data(),
                                        selected_.data_as<int32_t>(), tokens * k, e);
  }
  const int64_t routed_rows = routed_rows_;

  // Auxiliary loss over every token of the EP group.
  aux_loss_ = 0;
  if (config_.aux_loss_coeff > 0) {
    PT_ASSIGN_OR_RETURN(Tensor p_aux, Alloc({tokens, e}, MemoryTag::kWorkspace));
    cpu::moe_aux_probs(p_aux.data_as<T>(), scores_.data_as<T>(), tokens, e, sigmoid);
    std::vector<double> sums(2 * e, 0.0);  // [counts | probability sums]
    for (int64_t i = 0; i < e; ++i) sums[i] = static_cast<double>(tokens_per_expert_[i]);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < e; ++i) sums[e + i] += p_aux.data_as<T>()[t * e + i];
    }
    PT_RETURN_IF_ERROR(ep_->AllReduce(sums.data(), 2 * e, DType::kF64));
    global_counts_.assign(sums.begin(), sums.begin() + e);
    aux_loss_ = cpu::moe_aux_loss(global_counts_, std::vector<double>(sums.begin() + e, sums.end()),
                                  tokens * ep_->size(), k, config_.aux_loss_coeff);
  }

  // Plan, permute, dispatch, experts, combine.
  double t0 = Now();
  PT_RETURN_IF_ERROR(dispatcher_.Plan(tokens_per_expert_));
  forward_times_.dispatch_combine_s = Now() - t0;
  // Until here every rank has allocated tensors of the same sizes (the same token count),
  // so an allocation fails on all ranks or on none. From here the routing sizes them:
  // the rest of the forward's are made together and agreed on.
  const int64_t rows = dispatcher_.received_rows();
  const int64_t fl = config_.ffn_hidden / config_.etp;
  const int64_t fsl = config_.shared_ffn_total() / config_.etp;
  Tensor permuted, workspace, expert_out, shared_out;
  PT_RETURN_IF_ERROR(AgreeOnAllocation([&]() -> absl::Status {
    PT_ASSIGN_OR_RETURN(permuted, Alloc({routed_rows, h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(expert_in_, Alloc({rows, h}, MemoryTag::kActivations));
    PT_ASSIGN_OR_RETURN(workspace, Alloc({std::max(rows, routed_rows), h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(expert_out, Alloc({rows, h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(expert_fc1_, Alloc({rows, 2 * fl}, MemoryTag::kActivations));
    PT_ASSIGN_OR_RETURN(expert_act_, Alloc({rows, fl}, MemoryTag::kActivations));
    PT_ASSIGN_OR_RETURN(combined_, Alloc({routed_rows, h}, MemoryTag::kActivations));
    if (config_.num_shared_experts > 0) {
      PT_ASSIGN_OR_RETURN(shared_out, Alloc({tokens, h}, MemoryTag::kWorkspace));
      PT_ASSIGN_OR_RETURN(shared_fc1_, Alloc({tokens, 2 * fsl}, MemoryTag::kActivations));
      PT_ASSIGN_OR_RETURN(shared_act_, Alloc({tokens, fsl}, MemoryTag::kActivations));
    }
    return absl::OkStatus();
  }()));
  cpu::moe_permute(permuted.data_as<T>(), x, perm_.data_as<int32_t>(), routed_rows, k, h);
  t0 = Now();
  PT_RETURN_IF_ERROR(dispatcher_.Dispatch(permuted.data(), expert_in_.data(), workspace.data()));
  double t1 = Now();
  forward_times_.dispatch_combine_s += t1 - t0;
  permuted = Tensor();
  PT_RETURN_IF_ERROR(ExpertsForward(expert_in_.data_as<T>(), expert_out.data_as<T>()));
  t0 = Now();
  forward_times_.experts_s = t0 - t1;
  PT_RETURN_IF_ERROR(dispatcher_.Combine(expert_out.data(), combined_.data(), workspace.data()));
  forward_times_.dispatch_combine_s += Now() - t0;
  workspace = expert_out = Tensor();

  // Unpermute: y[t] = Σ_j prob[t, j] · expert output of (t, j).
  cpu::moe_unpermute(y, combined_.data_as<T>(), probs_.data_as<T>(), perm_.data_as<int32_t>(),
                     tokens, k, h, routed_rows);
  if (config_.num_shared_experts > 0) {
    std::fill(shared_out.data_as<T>(), shared_out.data_as<T>() + tokens * h, T(0));
    PT_RETURN_IF_ERROR(SharedForward(x, tokens, shared_out.data_as<T>()));
    // reduce_from_tp_region (fwd: all-reduce over ETP) on the shared experts' output.
    if (config_.etp > 1) {
      PT_RETURN_IF_ERROR(etp_->AllReduce(shared_out.data(), tokens * h, DTypeOf<T>()));
    }
    for (int64_t i = 0; i < tokens * h; ++i) y[i] += shared_out.data_as<T>()[i];
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status MoeLayer<T>::Backward(const T* dy, T* dx) {
  if (!x_.defined()) return absl::FailedPreconditionError("Backward needs a Forward first");
  const int64_t tokens = tokens_, h = config_.hidden, e = config_.num_experts;
  const int64_t k = config_.topk;
  const bool sigmoid = config_.score == MoeScoreFunction::kSigmoid;
  const int32_t* perm = perm_.data_as<int32_t>();

  // The stored activations are sized by the routing, so the buffers of the routed part
  // are made together and agreed on; once they and those activations are freed (after the
  // combine), every rank holds tensors of the same sizes again.
  const int64_t routed_rows = routed_rows_;
  const int64_t rows = dispatcher_.received_rows();
  const int64_t fl = config_.ffn_hidden / config_.etp;
  Tensor dcombined, dprobs, workspace, dexpert_out, dexpert_in, dact, dfc1;
  PT_RETURN_IF_ERROR(AgreeOnAllocation([&]() -> absl::Status {
    PT_ASSIGN_OR_RETURN(dcombined, Alloc({routed_rows, h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(dprobs, Alloc({tokens, k}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(workspace, Alloc({std::max(rows, routed_rows), h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(dexpert_out, Alloc({rows, h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(dexpert_in, Alloc({rows, h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(dact, Alloc({rows, fl}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(dfc1, Alloc({rows, 2 * fl}, MemoryTag::kWorkspace));
    return absl::OkStatus();
  }()));
  // Unpermute backward: d(expert output of row i) = prob · dy[t]; dprob = dy[t] · output.
  // A dropped assignment's probability has no gradient: its expert output is not in y.
  std::fill(dprobs.data_as<T>(), dprobs.data_as<T>() + tokens * k, T(0));
  for (int64_t i = 0; i < routed_rows; ++i) {
    const T* dyt = dy + (perm[i] / k) * h;
    const T* o = combined_.data_as<T>() + i * h;
    T* d = dcombined.data_as<T>() + i * h;
    const T p = probs_.data_as<T>()[perm[i]];
    T dot = 0;
    for (int64_t c = 0; c < h; ++c) {
      d[c] = p * dyt[c];
      dot += dyt[c] * o[c];
    }
    dprobs.data_as<T>()[perm[i]] = dot;
  }
  combined_ = Tensor();

  // The route backwards: the output gradients travel as the tokens did (dispatch), the
  // input gradients return as the outputs did (combine).
  double t0 = Now();
  PT_RETURN_IF_ERROR(dispatcher_.Dispatch(dcombined.data(), dexpert_out.data(), workspace.data()));
  double t1 = Now();
  backward_times_.dispatch_combine_s = t1 - t0;
  PT_RETURN_IF_ERROR(ExpertsBackward(dexpert_out.data_as<T>(), dexpert_in.data_as<T>(),
                                     dact.data_as<T>(), dfc1.data_as<T>()));
  dexpert_out = dact = dfc1 = Tensor();
  expert_in_ = Tensor();
  t0 = Now();
  backward_times_.experts_s = t0 - t1;
  PT_RETURN_IF_ERROR(dispatcher_.Combine(dexpert_in.data(), dcombined.data(), workspace.data()));
  backward_times_.dispatch_combine_s += Now() - t0;

  // Permute backward: dx[t] = Σ_j d(permuted row of (t, j)).
  cpu::moe_unpermute(dx, dcombined.data_as<T>(), static_cast<const T*>(nullptr), perm, tokens, k, h,
                     routed_rows);
  dcombined = workspace = dexpert_in = Tensor();
  if (config_.num_shared_experts > 0) PT_RETURN_IF_ERROR(SharedBackward(dy, dx));
  // copy_to_tp_region's backward for the experts' and shared experts' inputs: each ETP
  // rank holds its shard's part of dx. The router's part is whole on every rank, so it is
  // added after.
  if (config_.etp > 1) PT_RETURN_IF_ERROR(etp_->AllReduce(dx, tokens * h, DTypeOf<T>()));

  // Router backward: probabilities, auxiliary loss, scores, logits.
  PT_ASSIGN_OR_RETURN(Tensor dscores, Alloc({tokens, e}, MemoryTag::kWorkspace));
  cpu::moe_router_probs_backward(dscores.data_as<T>(), dprobs.data_as<T>(), scores_.data_as<T>(),
                                 selected_.data_as<int32_t>(), tokens, e, k, config_.normalize_topk,
                                 static_cast<T>(config_.topk_scaling));
  if (config_.aux_loss_coeff > 0) {
    // ∂L/∂p_aux[t, e] = coeff · E · count_e / (k · T²), T the EP group's tokens.
    const double total = static_cast<double>(tokens * ep_->size());
    const double c =
        config_.aux_loss_coeff * static_cast<double>(e) / (static_cast<double>(k) * total * total);
    PT_ASSIGN_OR_RETURN(Tensor dp_aux, Alloc({tokens, e}, MemoryTag::kWorkspace));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < e; ++i) {
        dp_aux.data_as<T>()[t * e + i] = static_cast<T>(c * global_counts_[i]);
      }
    }
    cpu::moe_aux_probs_backward(dscores.data_as<T>(), dp_aux.data_as<T>(), scores_.data_as<T>(),
                                tokens, e, sigmoid);
  }
  PT_ASSIGN_OR_RETURN(Tensor dlogits, Alloc({tokens, e}, MemoryTag::kWorkspace));
  cpu::moe_router_scores_backward(dlogits.data_as<T>(), dscores.data_as<T>(), scores_.data_as<T>(),
                                  tokens, e, sigmoid);
  LinearBackward(dx, g_.router.data_as<T>(), dlogits.data_as<T>(), x_.data_as<T>(),
                 w_.router.data_as<T>(), tokens, h, e, true);
  x_ = scores_ = selected_ = probs_ = perm_ = Tensor();
  return absl::OkStatus();
}

template <typename T>
MoeSaved MoeLayer<T>::TakeSaved() {
  MoeSaved s;
  s.tokens = tokens_;
  s.routed_rows = routed_rows_;
  s.tokens_per_expert = tokens_per_expert_;
  s.global_counts = std::move(global_counts_);
  s.route = dispatcher_;
  s.x = std::move(x_);
  s.scores = std::move(scores_);
  s.selected = std::move(selected_);
  s.probs = std::move(probs_);
  s.perm = std::move(perm_);
  s.expert_in = std::move(expert_in_);
  s.expert_fc1 = std::move(expert_fc1_);
  s.expert_act = std::move(expert_act_);
  s.combined = std::move(combined_);
  s.shared_fc1 = std::move(shared_fc1_);
  s.shared_act = std::move(shared_act_);
  x_ = scores_ = selected_ = probs_ = perm_ = expert_in_ = expert_fc1_ = expert_act_ =
      combined_ = shared_fc1_ = shared_act_ = Tensor();
  global_counts_.clear();
  return s;
}

template <typename T>
void MoeLayer<T>::RestoreSaved(MoeSaved s) {
  tokens_ = s.tokens;
  routed_rows_ = s.routed_rows;
  tokens_per_expert_ = std::move(s.tokens_per_expert);
  global_counts_ = std::move(s.global_counts);
  if (s.route.has_value()) dispatcher_ = std::move(*s.route);
  x_ = std::move(s.x);
  scores_ = std::move(s.scores);
  selected_ = std::move(s.selected);
  probs_ = std::move(s.probs);
  perm_ = std::move(s.perm);
  expert_in_ = std::move(s.expert_in);
  expert_fc1_ = std::move(s.expert_fc1);
  expert_act_ = std::move(s.expert_act);
  combined_ = std::move(s.combined);
  shared_fc1_ = std::move(s.shared_fc1);
  shared_act_ = std::move(s.shared_act);
}

template <typename T>
std::vector<ParameterRef> MoeLayer<T>::ParameterRefs(bool routed_experts) {
  if (routed_experts) return {{&w_.fc1, &g_.fc1}, {&w_.fc2, &g_.fc2}};
  std::vector<ParameterRef> out = {{&w_.router, &g_.router}};
  if (config_.num_shared_experts > 0) {
    out.push_back({&w_.shared_fc1, &g_.shared_fc1});
    out.push_back({&w_.shared_fc2, &g_.shared_fc2});
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> MoeSaved::Breakdown() const {
  std::vector<std::pair<std::string, int64_t>> out;
  const std::pair<const char*, const Tensor*> named[] = {
      {"moe.x", &x},           {"moe.scores", &scores},         {"moe.selected", &selected},
      {"moe.probs", &probs},   {"moe.perm", &perm},             {"moe.expert_in", &expert_in},
      {"moe.expert_fc1", &expert_fc1}, {"moe.expert_act", &expert_act},
      {"moe.combined", &combined},     {"moe.shared_fc1", &shared_fc1},
      {"moe.shared_act", &shared_act}};
  for (const auto& [name, t] : named) {
    if (t->defined()) out.emplace_back(name, t->bytes());
  }
  return out;
}

template class MoeLayer<float>;
template class MoeLayer<double>;
template struct MoeWeights<float>;
template struct MoeWeights<double>;

}  // namespace paratune::kernels
