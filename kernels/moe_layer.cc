#include "kernels/moe_layer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/moe_permute.h"
#include "kernels/cpu/moe_router.h"
#include "kernels/hash_random.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

// Element `elements` of an array of `dtype` at `p` (the caller's rows, not a Tensor).
void* Offset(const void* p, int64_t elements, DType dtype) {
  return static_cast<char*>(const_cast<void*>(p)) + elements * SizeOf(dtype);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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
    PT_RETURN_IF_ERROR(Divides(shared_split(), tokens_replicated ? "ep * etp" : "etp",
                               shared_ffn_total(), "num_shared_experts * shared_ffn_hidden"));
  }
  if ((tokens_replicated || external_expert_mlps) && !forward_only) {
    return absl::InvalidArgumentError(
        "tokens_replicated and external_expert_mlps (serving) need forward_only");
  }
  if (tokens_replicated && (aux_loss_coeff > 0 || routing == ExpertRouting::kBalanced)) {
    return absl::InvalidArgumentError(
        "tokens_replicated (serving) routes by the real top-k without an auxiliary loss "
        "(routing must not be balanced, aux_loss_coeff must be 0)");
  }
  return absl::OkStatus();
}

FfnShard MoeLayerConfig::FfnShardOf(int64_t expert, int64_t ep_rank, int64_t etp_rank) const {
  if (expert >= 0) return {expert, ffn_hidden, ffn_hidden / etp, etp_rank};
  // With replicated tokens the shared experts are split over ep x etp ranks.
  return {0, shared_ffn_total(), shared_ffn_total() / shared_split(),
          tokens_replicated ? ep_rank * etp + etp_rank : etp_rank};
}

double MoeRandomWeight(uint64_t seed, int tensor, int64_t i, double scale) {
  return scale * (2.0 * HashUniform(seed + static_cast<uint64_t>(tensor) * 0x1000193ull, i) - 1.0);
}

template <typename T>
MoeWeights<T> MoeWeights<T>::Random(const MoeLayerConfig& c, uint64_t seed, double scale) {
  auto fill = [&](std::vector<T>& v, int64_t n, uint64_t tensor) {
    v.resize(n);
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<T>(MoeRandomWeight(seed, static_cast<int>(tensor), i, scale));
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
                                                 int64_t hidden, DType dtype, Backend* backend,
                                                 bool replicated)
    : ep_(ep),
      backend_(backend),
      replicated_(replicated),
      num_experts_(num_experts),
      hidden_(hidden),
      dtype_(dtype) {}

absl::Status AllToAllTokenDispatcher::CopyRows(void* dst, const void* src, int64_t rows) const {
  const int64_t n = rows * hidden_ * SizeOf(dtype_);
  if (n == 0) return absl::OkStatus();
  if (backend_ != nullptr) return backend_->CopyBytes(dst, src, n, Backend::CopyKind::kOnBackend);
  std::memcpy(dst, src, n);
  return absl::OkStatus();
}

absl::Status AllToAllTokenDispatcher::Plan(const std::vector<int64_t>& tokens_per_expert) {
  const int ep = ep_->size();
  const int64_t local = num_experts_ / ep;
  if (static_cast<int64_t>(tokens_per_expert.size()) != num_experts_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens_per_expert has ", tokens_per_expert.size(),
                     " entries; must have num_experts (", num_experts_, ")"));
  }
  if (replicated_) {
    // Rows are sorted by global expert: this rank's experts hold one contiguous run.
    const int64_t first = ep_->rank() * local;
    first_row_ =
        std::accumulate(tokens_per_expert.begin(), tokens_per_expert.begin() + first, int64_t{0});
    local_counts_.assign(tokens_per_expert.begin() + first,
                         tokens_per_expert.begin() + first + local);
    received_rows_ = std::accumulate(local_counts_.begin(), local_counts_.end(), int64_t{0});
    return absl::OkStatus();
  }
  // Counts travel as doubles (every communicator reduces fp64; counts stay exact < 2^53).
  std::vector<double> send(num_experts_), recv(num_experts_);
  for (int64_t e = 0; e < num_experts_; ++e) send[e] = static_cast<double>(tokens_per_expert[e]);
  if (backend_ == nullptr || backend_->kind() == BackendKind::kCpu) {
    PT_RETURN_IF_ERROR(ep_->AllToAll(send.data(), recv.data(), local, DType::kF64));
  } else {
    // A device communicator (NCCL) exchanges device memory.
    if (!scratch_.defined() || scratch_.numel() < 2 * num_experts_) {
      return absl::FailedPreconditionError("the dispatcher needs its device scratch");
    }
    const Tensor& buf = scratch_;
    const int64_t bytes = num_experts_ * 8;
    PT_RETURN_IF_ERROR(
        backend_->CopyBytes(buf.data(), send.data(), bytes, Backend::CopyKind::kHostToBackend));
    PT_RETURN_IF_ERROR(ep_->AllToAll(buf.data(), buf.at(num_experts_), local, DType::kF64));
    PT_RETURN_IF_ERROR(backend_->CopyBytes(recv.data(), buf.at(num_experts_), bytes,
                                           Backend::CopyKind::kBackendToHost));
  }
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
absl::Status AllToAllTokenDispatcher::Regroup(const char* src, char* dst,
                                              bool to_expert_major) const {
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
      char* to = to_expert_major ? dst + at : dst + rm;
      const char* from = to_expert_major ? src + rm : src + at;
      if (n > 0 && backend_ != nullptr) {
        PT_RETURN_IF_ERROR(backend_->CopyBytes(to, from, n, Backend::CopyKind::kOnBackend));
      } else if (n > 0) {
        std::memcpy(to, from, n);
      }
      at += n;
    }
  }
  return absl::OkStatus();
}

absl::Status AllToAllTokenDispatcher::Dispatch(const void* in, void* out, void* workspace) {
  if (replicated_) {
    return CopyRows(out, static_cast<const char*>(in) + first_row_ * hidden_ * SizeOf(dtype_),
                    received_rows_);
  }
  std::vector<int64_t> send(send_rows_.size()), recv(recv_rows_.size());
  for (size_t q = 0; q < send.size(); ++q) {
    send[q] = send_rows_[q] * hidden_;
    recv[q] = recv_rows_[q] * hidden_;
  }
  PT_RETURN_IF_ERROR(ep_->AllToAllV(in, send, workspace, recv, dtype_));
  return Regroup(static_cast<const char*>(workspace), static_cast<char*>(out), true);
}

absl::Status AllToAllTokenDispatcher::Combine(const void* in, void* out, void* workspace) {
  if (replicated_) {
    return CopyRows(static_cast<char*>(out) + first_row_ * hidden_ * SizeOf(dtype_), in,
                    received_rows_);
  }
  std::vector<int64_t> send(send_rows_.size()), recv(recv_rows_.size());
  for (size_t q = 0; q < send.size(); ++q) {
    send[q] = recv_rows_[q] * hidden_;
    recv[q] = send_rows_[q] * hidden_;
  }
  PT_RETURN_IF_ERROR(Regroup(static_cast<const char*>(in), static_cast<char*>(workspace), false));
  return ep_->AllToAllV(workspace, send, out, recv, dtype_);
}

// ---------------------------------------------------------------------------------------
// Layer

MoeLayer::MoeLayer(const MoeLayerConfig& config, Communicator* ep, Communicator* etp,
                   Backend* backend, DType dtype)
    : config_(config),
      ep_(ep),
      etp_(etp),
      be_(backend),
      dtype_(dtype),
      rdt_(dtype == DType::kF64 ? DType::kF64 : DType::kF32),
      dispatcher_(ep, config.num_experts, config.hidden, dtype, backend, config.tokens_replicated) {
}

absl::StatusOr<Tensor> MoeLayer::Alloc(std::vector<int64_t> shape, MemoryTag tag) const {
  return be_->Empty(std::move(shape), dtype_, tag);
}

absl::StatusOr<Tensor> MoeLayer::AllocRouter(std::vector<int64_t> shape, MemoryTag tag) const {
  return be_->Empty(std::move(shape), rdt_, tag);
}

namespace {

GemmArgs LinearArgs(void* y, const void* x, const void* w, int64_t n, int64_t in, int64_t out,
                    bool accumulate) {
  GemmArgs g;
  g.trans_b = true;
  g.m = n, g.n = out, g.k = in;
  g.a = x, g.lda = in;
  g.b = w, g.ldb = in;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.c = y, g.ldc = out;
  return g;
}

void LinearBackwardArgs(void* dx, void* dw, const void* dy, const void* x, const void* w, int64_t n,
                        int64_t in, int64_t out, bool accumulate_dx, std::vector<GemmArgs>* gemms) {
  if (n == 0) return;
  GemmArgs gx;  // dX = dY·W
  gx.m = n, gx.n = in, gx.k = out;
  gx.a = dy, gx.lda = out;
  gx.b = w, gx.ldb = in;
  gx.beta = accumulate_dx ? 1.0f : 0.0f;
  gx.c = dx, gx.ldc = in;
  gemms->push_back(gx);
  GemmArgs gw;  // dW += dYᵀ·X
  gw.trans_a = true;
  gw.m = out, gw.n = in, gw.k = n;
  gw.a = dy, gw.lda = out;
  gw.b = x, gw.ldb = in;
  gw.beta = 1.0f;
  gw.c = dw, gw.ldc = in;
  gemms->push_back(gw);
}

// The experts' GEMMs: one grouped call (MoeLayerConfig::grouped_gemm) or one call each.
absl::Status RunExpertGemms(Backend& be, DType dtype, bool grouped,
                            const std::vector<GemmArgs>& gemms) {
  if (grouped) return be.GroupedGemm(dtype, gemms);
  for (const GemmArgs& g : gemms) PT_RETURN_IF_ERROR(be.Gemm(dtype, g));
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeLayer::Linear(void* y, const void* x, const void* w, int64_t n, int64_t in,
                              int64_t out, bool accumulate) {
  if (n == 0 || out == 0) return absl::OkStatus();
  return be_->Gemm(dtype_, LinearArgs(y, x, w, n, in, out, accumulate));
}

absl::Status MoeLayer::LinearBackward(void* dx, void* dw, const void* dy, const void* x,
                                      const void* w, int64_t n, int64_t in, int64_t out,
                                      bool accumulate_dx) {
  std::vector<GemmArgs> gemms;
  LinearBackwardArgs(dx, dw, dy, x, w, n, in, out, accumulate_dx, &gemms);
  for (const GemmArgs& g : gemms) PT_RETURN_IF_ERROR(be_->Gemm(dtype_, g));
  return absl::OkStatus();
}

absl::Status MoeLayer::HostAllReduce(Communicator* group, std::vector<double>& values) {
  const auto n = static_cast<int64_t>(values.size());
  if (be_->kind() == BackendKind::kCpu) return group->AllReduce(values.data(), n, DType::kF64);
  if (n > scratch_.numel()) return absl::InternalError("host collective larger than the scratch");
  const Tensor& buf = scratch_;
  PT_RETURN_IF_ERROR(
      be_->CopyBytes(buf.data(), values.data(), n * 8, Backend::CopyKind::kHostToBackend));
  PT_RETURN_IF_ERROR(group->AllReduce(buf.data(), n, DType::kF64));
  return be_->CopyBytes(values.data(), buf.data(), n * 8, Backend::CopyKind::kBackendToHost);
}

absl::StatusOr<Tensor> MoeLayer::RowProbs() const {
  if (rdt_ == dtype_) return probs_;
  PT_ASSIGN_OR_RETURN(Tensor p, Alloc(probs_.shape(), MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be_->Cast(dtype_, p.data(), rdt_, probs_.data(), probs_.numel()));
  return p;
}

template <typename T>
absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::Create(const MoeLayerConfig& config,
                                                           const MoeWeights<T>& full,
                                                           Communicator* ep, Communicator* etp,
                                                           Backend* backend, DType dtype) {
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
      [&tensors](int tensor, int64_t offset, int64_t n, double* out) {
        const T* src = tensors[tensor - 1]->data() + offset;
        std::copy(src, src + n, out);
      },
      ep, etp, backend, dtype);
}

template absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::Create<float>(
    const MoeLayerConfig&, const MoeWeights<float>&, Communicator*, Communicator*, Backend*, DType);
template absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::Create<double>(
    const MoeLayerConfig&, const MoeWeights<double>&, Communicator*, Communicator*, Backend*,
    DType);

absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::CreateRandom(const MoeLayerConfig& config,
                                                                 uint64_t seed, double scale,
                                                                 Communicator* ep,
                                                                 Communicator* etp,
                                                                 Backend* backend, DType dtype) {
  PT_RETURN_IF_ERROR(config.Validate());
  return CreateFrom(
      config,
      [seed, scale](int tensor, int64_t offset, int64_t n, double* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = MoeRandomWeight(seed, tensor, offset + i, scale);
      },
      ep, etp, backend, dtype);
}

absl::StatusOr<std::unique_ptr<MoeLayer>> MoeLayer::CreateFrom(const MoeLayerConfig& config,
                                                               const WeightSource& source,
                                                               Communicator* ep, Communicator* etp,
                                                               Backend* backend, DType dtype) {
  if (ep == nullptr || etp == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("ep, etp and backend must not be null");
  }
  if (ep->size() != config.ep || etp->size() != config.etp) {
    return absl::InvalidArgumentError(
        absl::StrCat("the EP group (", ep->size(), " ranks) and ETP group (", etp->size(),
                     " ranks) must have ep (", config.ep, ") and etp (", config.etp, ") ranks"));
  }
  const bool cpu = backend->kind() == BackendKind::kCpu;
  if (cpu ? (dtype != DType::kF32 && dtype != DType::kF64)
          : (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype (", DTypeName(dtype), ") must be ",
        cpu ? "fp32 or fp64 on the cpu backend" : "fp32, bf16 or fp16 on the cuda backend"));
  }
  if (!cpu && config.aux_loss_coeff > 0) {
    return absl::UnimplementedError(absl::StrCat("aux_loss_coeff (", config.aux_loss_coeff,
                                                 ") > 0 runs on the cpu backend only"));
  }
  if (!cpu && config.routing == ExpertRouting::kCapacity) {
    return absl::UnimplementedError(
        "capacity routing (dropped assignments) runs on the cpu backend only");
  }
  const int64_t h = config.hidden, e = config.num_experts, f = config.ffn_hidden;
  const int64_t fs = config.shared_ffn_total(), le = config.local_experts();
  const int64_t fl = f / config.etp, fsl = fs / config.shared_split();
  std::unique_ptr<MoeLayer> layer(new MoeLayer(config, ep, etp, backend, dtype));
  Params& w = layer->w_;
  Params& g = layer->g_;
  const bool experts = !config.external_expert_mlps;
  PT_ASSIGN_OR_RETURN(w.router, layer->Alloc({e, h}, MemoryTag::kWeights));
  if (experts) {
    PT_ASSIGN_OR_RETURN(w.fc1, layer->Alloc({le, 2 * fl, h}, MemoryTag::kWeights));
    PT_ASSIGN_OR_RETURN(w.fc2, layer->Alloc({le, h, fl}, MemoryTag::kWeights));
    PT_ASSIGN_OR_RETURN(w.shared_fc1, layer->Alloc({2 * fsl, h}, MemoryTag::kWeights));
    PT_ASSIGN_OR_RETURN(w.shared_fc2, layer->Alloc({h, fsl}, MemoryTag::kWeights));
  }
  const std::pair<const Tensor*, Tensor*> weight_and_grad[] = {{&w.router, &g.router},
                                                               {&w.fc1, &g.fc1},
                                                               {&w.fc2, &g.fc2},
                                                               {&w.shared_fc1, &g.shared_fc1},
                                                               {&w.shared_fc2, &g.shared_fc2}};
  for (const std::pair<const Tensor*, Tensor*>& wg : weight_and_grad) {
    if (config.forward_only || !wg.first->defined()) continue;
    PT_ASSIGN_OR_RETURN(*wg.second,
                        backend->Zeros(wg.first->shape(), dtype, MemoryTag::kGradients));
  }
  if (!cpu) {
    // Host collectives (the dispatch plan's counts, the allocation agreement) go through
    // device memory for NCCL; made here so that an out-of-memory rank still takes part.
    PT_ASSIGN_OR_RETURN(layer->scratch_,
                        backend->Empty({2 * e}, DType::kF64, MemoryTag::kWorkspace));
    layer->dispatcher_.set_device_scratch(layer->scratch_);
  }
  // The shards are made on the host and copied in (converted to dtype).
  std::vector<double> host(e * h);
  source(1, 0, e * h, host.data());
  PT_RETURN_IF_ERROR(backend->CopyFromHost(w.router, host));
  if (!experts) return layer;
  // Column-parallel fc1: this rank's slice of the gate rows and of the up rows (each half
  // contiguous); row-parallel fc2: its slice of the columns.
  auto shard = [&](int fc1, int fc2, const FfnShard& s, double* fc1_out, double* fc2_out) {
    for (int64_t half = 0; half < 2; ++half) {
      source(fc1, s.Fc1Row(half * s.width, h), s.width * h, fc1_out + half * s.width * h);
    }
    for (int64_t r = 0; r < h; ++r) source(fc2, s.Fc2Row(r, h), s.width, fc2_out + r * s.width);
  };
  std::vector<double> fc1(le * 2 * fl * h), fc2(le * h * fl);
  for (int64_t x = 0; x < le; ++x) {
    shard(2, 3, config.FfnShardOf(ep->rank() * le + x, ep->rank(), etp->rank()),
          fc1.data() + x * 2 * fl * h, fc2.data() + x * h * fl);
  }
  PT_RETURN_IF_ERROR(backend->CopyFromHost(w.fc1, fc1));
  PT_RETURN_IF_ERROR(backend->CopyFromHost(w.fc2, fc2));
  if (fs > 0) {
    std::vector<double> sfc1(2 * fsl * h), sfc2(h * fsl);
    shard(4, 5, config.FfnShardOf(-1, ep->rank(), etp->rank()), sfc1.data(), sfc2.data());
    PT_RETURN_IF_ERROR(backend->CopyFromHost(w.shared_fc1, sfc1));
    PT_RETURN_IF_ERROR(backend->CopyFromHost(w.shared_fc2, sfc2));
  }
  return layer;
}

absl::Status MoeLayer::SetExpertMlps(ExpertMlp mlp) {
  if (!config_.external_expert_mlps || be_->kind() != BackendKind::kCpu || dtype_ != DType::kF32) {
    return absl::FailedPreconditionError(
        "expert MLPs are set only in an fp32 cpu layer with external_expert_mlps");
  }
  expert_mlp_ = std::move(mlp);
  return absl::OkStatus();
}

absl::Status MoeLayer::SharedForward(const void* x, int64_t tokens, void* y) {
  if (expert_mlp_) {
    return expert_mlp_(-1, static_cast<const float*>(x), tokens, static_cast<float*>(y));
  }
  const int64_t h = config_.hidden, fsl = config_.shared_ffn_total() / config_.shared_split();
  PT_RETURN_IF_ERROR(
      Linear(shared_fc1_.data(), x, w_.shared_fc1.data(), tokens, h, 2 * fsl, false));
  PT_RETURN_IF_ERROR(
      be_->SwigluForward(dtype_, shared_act_.data(), shared_fc1_.data(), tokens, fsl));
  return Linear(y, shared_act_.data(), w_.shared_fc2.data(), tokens, fsl, h, false);
}

absl::Status MoeLayer::SharedBackward(const void* dy, void* dx) {
  const int64_t h = config_.hidden, fsl = config_.shared_ffn_total() / config_.etp;
  PT_ASSIGN_OR_RETURN(Tensor dact, Alloc({tokens_, fsl}, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor dfc1, Alloc({tokens_, 2 * fsl}, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(LinearBackward(dact.data(), g_.shared_fc2.data(), dy, shared_act_.data(),
                                    w_.shared_fc2.data(), tokens_, fsl, h, false));
  PT_RETURN_IF_ERROR(
      be_->SwigluBackward(dtype_, dfc1.data(), dact.data(), shared_fc1_.data(), tokens_, fsl));
  // dx += here; the ETP all-reduce of dx (copy_to_tp_region's backward) is done once by
  // Backward for the routed and shared parts together.
  PT_RETURN_IF_ERROR(LinearBackward(dx, g_.shared_fc1.data(), dfc1.data(), x_.data(),
                                    w_.shared_fc1.data(), tokens_, h, 2 * fsl, true));
  shared_fc1_ = Tensor();
  shared_act_ = Tensor();
  return absl::OkStatus();
}

absl::Status MoeLayer::ExpertsForward(const void* in, void* out) {
  const int64_t h = config_.hidden, fl = config_.ffn_hidden / config_.etp;
  const int64_t rows = dispatcher_.received_rows();
  if (expert_mlp_) {
    int64_t at = 0;
    for (int64_t le = 0; le < config_.local_experts(); ++le) {
      const int64_t n = dispatcher_.local_tokens_per_expert()[le];
      if (n > 0) {
        PT_RETURN_IF_ERROR(expert_mlp_(le, static_cast<const float*>(in) + at * h, n,
                                       static_cast<float*>(out) + at * h));
      }
      at += n;
    }
    return absl::OkStatus();
  }
  auto at_row = [this](const void* p, int64_t elements) { return Offset(p, elements, dtype_); };
  // FC1 of every expert, one SwiGLU over all their rows (row-wise), FC2 of every expert.
  std::vector<GemmArgs> fc1, fc2;
  int64_t at = 0;
  for (int64_t le = 0; le < config_.local_experts(); ++le) {
    const int64_t n = dispatcher_.local_tokens_per_expert()[le];
    if (n > 0) {
      fc1.push_back(LinearArgs(expert_fc1_.at(at * 2 * fl), at_row(in, at * h),
                               w_.fc1.at(le * 2 * fl * h), n, h, 2 * fl, false));
      fc2.push_back(LinearArgs(at_row(out, at * h), expert_act_.at(at * fl), w_.fc2.at(le * h * fl),
                               n, fl, h, false));
    }
    at += n;
  }
  PT_RETURN_IF_ERROR(RunExpertGemms(*be_, dtype_, config_.grouped_gemm, fc1));
  if (rows > 0) {
    PT_RETURN_IF_ERROR(
        be_->SwigluForward(dtype_, expert_act_.data(), expert_fc1_.data(), rows, fl));
  }
  PT_RETURN_IF_ERROR(RunExpertGemms(*be_, dtype_, config_.grouped_gemm, fc2));
  // reduce_from_tp_region (fwd: all-reduce over ETP, bwd: identity); with replicated
  // tokens the caller reduces the layer's output instead.
  if (config_.etp > 1 && rows > 0 && !config_.tokens_replicated) {
    PT_RETURN_IF_ERROR(etp_->AllReduce(out, rows * h, dtype_));
  }
  return absl::OkStatus();
}

absl::Status MoeLayer::ExpertsBackward(const void* dout, void* din, void* dact_buf,
                                       void* dfc1_buf) {
  const int64_t h = config_.hidden, fl = config_.ffn_hidden / config_.etp;
  auto at_row = [this](const void* p, int64_t elements) { return Offset(p, elements, dtype_); };
  const int64_t rows = dispatcher_.received_rows();
  // FC2's data and weight gradients of every expert, one SwiGLU backward over all rows,
  // then FC1's.
  std::vector<GemmArgs> fc2, fc1;
  int64_t at = 0;
  for (int64_t le = 0; le < config_.local_experts(); ++le) {
    const int64_t n = dispatcher_.local_tokens_per_expert()[le];
    LinearBackwardArgs(at_row(dact_buf, at * fl), g_.fc2.at(le * h * fl), at_row(dout, at * h),
                       expert_act_.at(at * fl), w_.fc2.at(le * h * fl), n, fl, h, false, &fc2);
    LinearBackwardArgs(at_row(din, at * h), g_.fc1.at(le * 2 * fl * h),
                       at_row(dfc1_buf, at * 2 * fl), expert_in_.at(at * h),
                       w_.fc1.at(le * 2 * fl * h), n, h, 2 * fl, false, &fc1);
    at += n;
  }
  PT_RETURN_IF_ERROR(RunExpertGemms(*be_, dtype_, config_.grouped_gemm, fc2));
  if (rows > 0) {
    PT_RETURN_IF_ERROR(
        be_->SwigluBackward(dtype_, dfc1_buf, dact_buf, expert_fc1_.data(), rows, fl));
  }
  PT_RETURN_IF_ERROR(RunExpertGemms(*be_, dtype_, config_.grouped_gemm, fc1));
  // din is this ETP rank's part (its shard of fc1); Backward all-reduces the layer's dx
  // over ETP once, after the combine and unpermute, which are linear.
  expert_fc1_ = Tensor();
  expert_act_ = Tensor();
  return absl::OkStatus();
}

absl::Status MoeLayer::AgreeOnAllocation(const absl::Status& mine) {
  std::vector<double> failed = {mine.ok() ? 0.0 : 1.0};
  // Summed over the EP group, then over the ETP group: over the whole grid. On a device
  // backend the staging buffer is 8 bytes; an allocator that cannot give it has failed.
  PT_RETURN_IF_ERROR(HostAllReduce(ep_, failed));
  PT_RETURN_IF_ERROR(HostAllReduce(etp_, failed));
  if (!mine.ok()) return mine;
  if (failed[0] > 0) {
    return absl::AbortedError("another rank of the MoE layer could not allocate its buffers");
  }
  return absl::OkStatus();
}

absl::Status MoeLayer::Permutation(int64_t tokens) {
  const int64_t e = config_.num_experts, k = config_.topk;
  const bool cpu = be_->kind() == BackendKind::kCpu;
  std::vector<int32_t> selected_host;
  const int32_t* selected = selected_.data_as<int32_t>();
  if (!cpu) {
    selected_host.resize(tokens * k);
    PT_RETURN_IF_ERROR(be_->CopyBytes(selected_host.data(), selected_.data(), tokens * k * 4,
                                      Backend::CopyKind::kBackendToHost));
    selected = selected_host.data();
  }
  tokens_per_expert_.assign(e, 0);
  std::vector<int32_t> perm_host(cpu ? 0 : tokens * k);
  int32_t* perm = cpu ? perm_.data_as<int32_t>() : perm_host.data();
  if (config_.routing == ExpertRouting::kCapacity) {  // cpu backend (CreateFrom)
    const auto capacity = static_cast<int64_t>(std::ceil(
        static_cast<double>(tokens * k) / static_cast<double>(e) * config_.capacity_factor));
    std::vector<int32_t> routed(tokens * k);
    if (rdt_ == DType::kF64) {
      cpu::moe_capacity_routes(routed.data(), probs_.data_as<double>(), selected, tokens, e, k,
                               capacity);
    } else {
      cpu::moe_capacity_routes(routed.data(), probs_.data_as<float>(), selected, tokens, e, k,
                               capacity);
    }
    routed_rows_ =
        cpu::moe_permutation(perm, tokens_per_expert_.data(), routed.data(), tokens * k, e);
  } else {
    routed_rows_ = cpu::moe_permutation(perm, tokens_per_expert_.data(), selected, tokens * k, e);
  }
  if (!cpu) {
    PT_RETURN_IF_ERROR(be_->CopyBytes(perm_.data(), perm_host.data(), tokens * k * 4,
                                      Backend::CopyKind::kHostToBackend));
  }
  return absl::OkStatus();
}

namespace {

// Σ_t p_aux[t, e] per expert (cpu memory).
template <typename R>
std::vector<double> AuxProbabilitySums(const Tensor& scores, int64_t tokens, int64_t e,
                                       bool sigmoid) {
  std::vector<R> p_aux(tokens * e);
  cpu::moe_aux_probs(p_aux.data(), scores.data_as<R>(), tokens, e, sigmoid);
  std::vector<double> sums(e, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < e; ++i) sums[i] += p_aux[t * e + i];
  }
  return sums;
}

// ∂L/∂p_aux[t, e] = coeff · E · count_e / (k · T²) for every token (cpu memory).
template <typename R>
std::vector<R> AuxGradient(const std::vector<double>& counts, int64_t tokens, double c) {
  const auto e = static_cast<int64_t>(counts.size());
  std::vector<R> d(tokens * e);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < e; ++i) d[t * e + i] = static_cast<R>(c * counts[i]);
  }
  return d;
}

}  // namespace

absl::Status MoeLayer::AuxLoss(int64_t tokens) {
  const int64_t e = config_.num_experts, k = config_.topk;
  const bool sigmoid = config_.score == MoeScoreFunction::kSigmoid;
  const std::vector<double> p_sums = rdt_ == DType::kF64
                                         ? AuxProbabilitySums<double>(scores_, tokens, e, sigmoid)
                                         : AuxProbabilitySums<float>(scores_, tokens, e, sigmoid);
  std::vector<double> sums(2 * e, 0.0);  // [counts | probability sums]
  for (int64_t i = 0; i < e; ++i) {
    sums[i] = static_cast<double>(tokens_per_expert_[i]);
    sums[e + i] = p_sums[i];
  }
  PT_RETURN_IF_ERROR(HostAllReduce(ep_, sums));
  global_counts_.assign(sums.begin(), sums.begin() + e);
  aux_loss_ = cpu::moe_aux_loss(global_counts_, std::vector<double>(sums.begin() + e, sums.end()),
                                tokens * ep_->size(), k, config_.aux_loss_coeff);
  return absl::OkStatus();
}

absl::Status MoeLayer::Forward(const void* x, int64_t tokens, void* y) {
  if (tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tokens (", tokens, ") must be >= 1"));
  }
  if (config_.external_expert_mlps && !expert_mlp_) {
    return absl::FailedPreconditionError("external_expert_mlps: SetExpertMlps comes first");
  }
  const int64_t h = config_.hidden, e = config_.num_experts, k = config_.topk;
  const bool sigmoid = config_.score == MoeScoreFunction::kSigmoid;
  tokens_ = tokens;
  PT_ASSIGN_OR_RETURN(x_, Alloc({tokens, h}, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be_->CopyBytes(x_.data(), x, x_.bytes(), Backend::CopyKind::kOnBackend));

  // Router: logits → scores → selected experts → probabilities (in the router's dtype).
  PT_ASSIGN_OR_RETURN(scores_, AllocRouter({tokens, e}, MemoryTag::kActivations));
  {
    PT_ASSIGN_OR_RETURN(Tensor logits, Alloc({tokens, e}, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(Linear(logits.data(), x, w_.router.data(), tokens, h, e, false));
    Tensor router_logits = logits;
    if (rdt_ != dtype_) {
      PT_ASSIGN_OR_RETURN(router_logits, AllocRouter({tokens, e}, MemoryTag::kWorkspace));
      PT_RETURN_IF_ERROR(be_->Cast(rdt_, router_logits.data(), dtype_, logits.data(), tokens * e));
    }
    PT_RETURN_IF_ERROR(
        be_->MoeRouterScores(rdt_, scores_.data(), router_logits.data(), tokens, e, sigmoid));
  }
  PT_ASSIGN_OR_RETURN(selected_, be_->Empty({tokens, k}, DType::kI32, MemoryTag::kActivations));
  PT_ASSIGN_OR_RETURN(probs_, AllocRouter({tokens, k}, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(be_->MoeRouterTopK(
      rdt_, selected_.data_as<int32_t>(), probs_.data(), scores_.data(), tokens, e, k,
      config_.normalize_topk, config_.topk_scaling, config_.routing == ExpertRouting::kBalanced,
      config_.tokens_replicated ? 0 : ep_->rank() * tokens));

  // Permutation: assignments sorted by expert, tokens in order within an expert.
  PT_ASSIGN_OR_RETURN(perm_, be_->Empty({tokens * k}, DType::kI32, MemoryTag::kActivations));
  PT_RETURN_IF_ERROR(Permutation(tokens));
  const int64_t routed_rows = routed_rows_;

  // Auxiliary loss over every token of the EP group.
  aux_loss_ = 0;
  if (config_.aux_loss_coeff > 0) PT_RETURN_IF_ERROR(AuxLoss(tokens));

  // Plan, permute, dispatch, experts, combine.
  double t0 = Now();
  PT_RETURN_IF_ERROR(dispatcher_.Plan(tokens_per_expert_));
  forward_times_.dispatch_combine_s = Now() - t0;
  // Until here every rank has allocated tensors of the same sizes (the same token count),
  // so an allocation fails on all ranks or on none. From here the routing sizes them:
  // the rest of the forward's are made together and agreed on.
  const int64_t rows = dispatcher_.received_rows();
  const int64_t fl = config_.ffn_hidden / config_.etp;
  const int64_t fsl = config_.shared_ffn_total() / config_.shared_split();
  Tensor permuted, workspace, expert_out, shared_out;
  PT_RETURN_IF_ERROR(AgreeOnAllocation([&]() -> absl::Status {
    PT_ASSIGN_OR_RETURN(permuted, Alloc({routed_rows, h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(expert_in_, Alloc({rows, h}, MemoryTag::kActivations));
    PT_ASSIGN_OR_RETURN(workspace, Alloc({std::max(rows, routed_rows), h}, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(expert_out, Alloc({rows, h}, MemoryTag::kWorkspace));
    if (!expert_mlp_) {  // replaced MLPs keep their own intermediates
      PT_ASSIGN_OR_RETURN(expert_fc1_, Alloc({rows, 2 * fl}, MemoryTag::kActivations));
      PT_ASSIGN_OR_RETURN(expert_act_, Alloc({rows, fl}, MemoryTag::kActivations));
    }
    PT_ASSIGN_OR_RETURN(combined_, Alloc({routed_rows, h}, MemoryTag::kActivations));
    if (config_.num_shared_experts > 0) {
      PT_ASSIGN_OR_RETURN(shared_out, Alloc({tokens, h}, MemoryTag::kWorkspace));
      if (!expert_mlp_) {
        PT_ASSIGN_OR_RETURN(shared_fc1_, Alloc({tokens, 2 * fsl}, MemoryTag::kActivations));
        PT_ASSIGN_OR_RETURN(shared_act_, Alloc({tokens, fsl}, MemoryTag::kActivations));
      }
    }
    return absl::OkStatus();
  }()));
  PT_RETURN_IF_ERROR(
      be_->MoePermute(dtype_, permuted.data(), x, perm_.data_as<int32_t>(), routed_rows, k, h));
  PT_RETURN_IF_ERROR(be_->Synchronize());
  t0 = Now();
  PT_RETURN_IF_ERROR(dispatcher_.Dispatch(permuted.data(), expert_in_.data(), workspace.data()));
  PT_RETURN_IF_ERROR(be_->Synchronize());
  double t1 = Now();
  forward_times_.dispatch_combine_s += t1 - t0;
  permuted = Tensor();
  // Replicated tokens: the other ranks' experts' rows stay zero in this rank's sum.
  if (config_.tokens_replicated) PT_RETURN_IF_ERROR(be_->Fill(combined_, 0.0));
  PT_RETURN_IF_ERROR(ExpertsForward(expert_in_.data(), expert_out.data()));
  PT_RETURN_IF_ERROR(be_->Synchronize());
  t0 = Now();
  forward_times_.experts_s = t0 - t1;
  PT_RETURN_IF_ERROR(dispatcher_.Combine(expert_out.data(), combined_.data(), workspace.data()));
  PT_RETURN_IF_ERROR(be_->Synchronize());
  forward_times_.dispatch_combine_s += Now() - t0;
  workspace = expert_out = Tensor();

  // Unpermute: y[t] = Σ_j prob[t, j] · expert output of (t, j).
  {
    PT_ASSIGN_OR_RETURN(Tensor probs, RowProbs());
    PT_RETURN_IF_ERROR(be_->MoeUnpermute(dtype_, y, combined_.data(), probs.data(),
                                         perm_.data_as<int32_t>(), tokens, k, h, routed_rows));
  }
  if (config_.num_shared_experts > 0) {
    PT_RETURN_IF_ERROR(SharedForward(x, tokens, shared_out.data()));
    // reduce_from_tp_region (fwd: all-reduce over ETP) on the shared experts' output.
    if (config_.etp > 1 && !config_.tokens_replicated) {
      PT_RETURN_IF_ERROR(etp_->AllReduce(shared_out.data(), tokens * h, dtype_));
    }
    PT_RETURN_IF_ERROR(be_->Add(dtype_, y, y, shared_out.data(), tokens * h));
  }
  return absl::OkStatus();
}

absl::Status MoeLayer::Backward(const void* dy, void* dx) {
  if (!x_.defined()) return absl::FailedPreconditionError("Backward needs a Forward first");
  if (config_.forward_only) {
    return absl::UnimplementedError("a forward_only layer (serving) has no Backward");
  }
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
  {
    PT_ASSIGN_OR_RETURN(Tensor probs, RowProbs());
    PT_RETURN_IF_ERROR(be_->MoeUnpermuteBackward(dtype_, dcombined.data(), dprobs.data(), dy,
                                                 combined_.data(), probs.data(), perm, tokens, k, h,
                                                 routed_rows));
  }
  combined_ = Tensor();

  // The route backwards: the output gradients travel as the tokens did (dispatch), the
  // input gradients return as the outputs did (combine).
  PT_RETURN_IF_ERROR(be_->Synchronize());
  double t0 = Now();
  PT_RETURN_IF_ERROR(dispatcher_.Dispatch(dcombined.data(), dexpert_out.data(), workspace.data()));
  PT_RETURN_IF_ERROR(be_->Synchronize());
  double t1 = Now();
  backward_times_.dispatch_combine_s = t1 - t0;
  PT_RETURN_IF_ERROR(
      ExpertsBackward(dexpert_out.data(), dexpert_in.data(), dact.data(), dfc1.data()));
  dexpert_out = dact = dfc1 = Tensor();
  expert_in_ = Tensor();
  PT_RETURN_IF_ERROR(be_->Synchronize());
  t0 = Now();
  backward_times_.experts_s = t0 - t1;
  PT_RETURN_IF_ERROR(dispatcher_.Combine(dexpert_in.data(), dcombined.data(), workspace.data()));
  PT_RETURN_IF_ERROR(be_->Synchronize());
  backward_times_.dispatch_combine_s += Now() - t0;

  // Permute backward: dx[t] = Σ_j d(permuted row of (t, j)).
  PT_RETURN_IF_ERROR(
      be_->MoeUnpermute(dtype_, dx, dcombined.data(), nullptr, perm, tokens, k, h, routed_rows));
  dcombined = workspace = dexpert_in = Tensor();
  if (config_.num_shared_experts > 0) PT_RETURN_IF_ERROR(SharedBackward(dy, dx));
  // copy_to_tp_region's backward for the experts' and shared experts' inputs: each ETP
  // rank holds its shard's part of dx. The router's part is whole on every rank, so it is
  // added after.
  if (config_.etp > 1) PT_RETURN_IF_ERROR(etp_->AllReduce(dx, tokens * h, dtype_));

  // Router backward: probabilities, auxiliary loss, scores, logits.
  Tensor router_dprobs = dprobs;
  if (rdt_ != dtype_) {
    PT_ASSIGN_OR_RETURN(router_dprobs, AllocRouter({tokens, k}, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be_->Cast(rdt_, router_dprobs.data(), dtype_, dprobs.data(), tokens * k));
  }
  // ∂L/∂p_aux[t, e] = coeff · E · count_e / (k · T²), T the EP group's tokens (cpu).
  std::vector<double> dp_aux64;
  std::vector<float> dp_aux32;
  const void* dp_aux = nullptr;
  if (config_.aux_loss_coeff > 0) {
    const double total = static_cast<double>(tokens * ep_->size());
    const double c =
        config_.aux_loss_coeff * static_cast<double>(e) / (static_cast<double>(k) * total * total);
    if (rdt_ == DType::kF64) {
      dp_aux64 = AuxGradient<double>(global_counts_, tokens, c);
      dp_aux = dp_aux64.data();
    } else {
      dp_aux32 = AuxGradient<float>(global_counts_, tokens, c);
      dp_aux = dp_aux32.data();
    }
  }
  PT_ASSIGN_OR_RETURN(Tensor dlogits, AllocRouter({tokens, e}, MemoryTag::kWorkspace));
  PT_RETURN_IF_ERROR(be_->MoeRouterBackward(
      rdt_, dlogits.data(), router_dprobs.data(), scores_.data(), selected_.data_as<int32_t>(),
      tokens, e, k, sigmoid, config_.normalize_topk, config_.topk_scaling, dp_aux));
  if (rdt_ != dtype_) {
    PT_ASSIGN_OR_RETURN(Tensor cast, Alloc({tokens, e}, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be_->Cast(dtype_, cast.data(), rdt_, dlogits.data(), tokens * e));
    dlogits = cast;
  }
  PT_RETURN_IF_ERROR(LinearBackward(dx, g_.router.data(), dlogits.data(), x_.data(),
                                    w_.router.data(), tokens, h, e, true));
  x_ = scores_ = selected_ = probs_ = perm_ = Tensor();
  return absl::OkStatus();
}

MoeSaved MoeLayer::TakeSaved() {
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
  x_ = scores_ = selected_ = probs_ = perm_ = expert_in_ = expert_fc1_ = expert_act_ = combined_ =
      shared_fc1_ = shared_act_ = Tensor();
  global_counts_.clear();
  return s;
}

void MoeLayer::RestoreSaved(MoeSaved s) {
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

std::vector<ParameterRef> MoeLayer::ParameterRefs(bool routed_experts) {
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
  const std::pair<const char*, const Tensor*> named[] = {{"moe.x", &x},
                                                         {"moe.scores", &scores},
                                                         {"moe.selected", &selected},
                                                         {"moe.probs", &probs},
                                                         {"moe.perm", &perm},
                                                         {"moe.expert_in", &expert_in},
                                                         {"moe.expert_fc1", &expert_fc1},
                                                         {"moe.expert_act", &expert_act},
                                                         {"moe.combined", &combined},
                                                         {"moe.shared_fc1", &shared_fc1},
                                                         {"moe.shared_act", &shared_act}};
  for (const auto& [name, t] : named) {
    if (t->defined()) out.emplace_back(name, t->bytes());
  }
  return out;
}

template struct MoeWeights<float>;
template struct MoeWeights<double>;

}  // namespace paratune::kernels
