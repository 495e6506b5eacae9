#include "kernels/moe_step.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/rank_threads.h"
#include "kernels/hash_random.h"
#include "kernels/status_macros.h"
#include "kernels/tensor.h"

namespace paratune::kernels {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


constexpr int kPhases = 6;  // forward, backward, dispatch/combine fwd, bwd, experts fwd, bwd
constexpr const char* kPhaseNames[kPhases] = {
    "forward",         "backward",        "dispatch_combine_forward", "dispatch_combine_backward",
    "experts_forward", "experts_backward"};

struct RankOutput {
  std::vector<std::array<double, kPhases>> iters;
  int64_t peak_bytes = 0;
  int64_t activation_bytes = 0;
  std::vector<int64_t> tokens_per_expert;
  double aux_loss = 0;
};

absl::Status RunRank(const MoeStepConfig& config, Backend& be, Communicator& world,
                     Communicator& ep, Communicator& etp, RankOutput& out) {
  PT_ASSIGN_OR_RETURN(
      std::unique_ptr<MoeLayer> layer,
      MoeLayer::CreateRandom(config.layer, config.seed, 0.02, &ep, &etp, &be, config.dtype));
  const int64_t n = config.tokens * config.layer.hidden;
  PT_ASSIGN_OR_RETURN(Tensor x, be.Empty({n}, config.dtype, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor y, be.Empty({n}, config.dtype, MemoryTag::kWorkspace));
  PT_ASSIGN_OR_RETURN(Tensor d, be.Empty({n}, config.dtype, MemoryTag::kWorkspace));
  // Tokens differ across EP ranks and agree across an ETP group.
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = 2.0 * HashUniform(config.seed + 7 + ep.rank(), i) - 1.0;
  PT_RETURN_IF_ERROR(be.CopyFromHost(x, values));
  const int activations = static_cast<int>(MemoryTag::kActivations);
  TrackingAllocator& allocator = be.allocator();
  for (int64_t it = 0; it < config.warmup + config.iters; ++it) {
    PT_RETURN_IF_ERROR(be.Synchronize());
    PT_RETURN_IF_ERROR(world.Barrier());
    const double t0 = Now();
    const int64_t stored_before = allocator.Stats().current_by_tag[activations];
    PT_RETURN_IF_ERROR(layer->Forward(x.data(), config.tokens, y.data()));
    PT_RETURN_IF_ERROR(be.Synchronize());
    const double t1 = Now();
    out.activation_bytes = std::max(out.activation_bytes,
                                    allocator.Stats().current_by_tag[activations] - stored_before);
    // The output as its own gradient: any dy exercises the same work.
    PT_RETURN_IF_ERROR(layer->Backward(y.data(), d.data()));
    PT_RETURN_IF_ERROR(be.Synchronize());
    const double t2 = Now();
    if (it >= config.warmup) {
      out.iters.push_back({t1 - t0, t2 - t1, layer->forward_times().dispatch_combine_s,
                           layer->backward_times().dispatch_combine_s,
                           layer->forward_times().experts_s, layer->backward_times().experts_s});
    }
  }
  out.peak_bytes = allocator.Stats().peak_bytes;
  out.tokens_per_expert = layer->tokens_per_expert();
  out.aux_loss = layer->aux_loss();
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeStepConfig::Validate() const {
  PT_RETURN_IF_ERROR(layer.Validate());
  if (tokens < 1)
    return absl::InvalidArgumentError(absl::StrCat("tokens (", tokens, ") must be >= 1"));
  const bool cpu = backend == BackendKind::kCpu;
  if (cpu ? (dtype != DType::kF32 && dtype != DType::kF64)
          : (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype (", DTypeName(dtype), ") must be ",
                     cpu ? "fp32 or fp64 for the MoE layer on cpu"
                         : "fp32, bf16 or fp16 for the MoE layer on cuda"));
  }
  if (warmup < 0)
    return absl::InvalidArgumentError(absl::StrCat("warmup (", warmup, ") must be >= 0"));
  if (iters < 1)
    return absl::InvalidArgumentError(absl::StrCat("iters (", iters, ") must be >= 1"));
  if (threads_per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads_per_rank (", threads_per_rank, ") must be >= 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MoeStepResult> RunMoeLayerStep(const MoeStepConfig& config) {
  PT_RETURN_IF_ERROR(config.Validate());
  const int ep = static_cast<int>(config.layer.ep), etp = static_cast<int>(config.layer.etp);
  const int world = ep * etp;
  const bool cuda = config.backend == BackendKind::kCuda;
  if (cuda) {
    PT_RETURN_IF_ERROR(CheckCudaDevicesForRanks(world));
  } else {
    // The cores shared among the ranks, as RunLayerStep shares them among its TP ranks:
    // OpenBLAS's default (every core per call) called from ep·etp rank threads at once
    // oversubscribes the cores and serialises the ranks' GEMMs.
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    SetBlasThreads(config.blas_threads_per_rank > 0 ? static_cast<int>(config.blas_threads_per_rank)
                                                    : std::max(1, cores / world));
  }
  std::shared_ptr<GlooRendezvous> rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> run_id{0};
  const std::string prefix = absl::StrCat("moe", run_id.fetch_add(1), "/");
  std::vector<RankOutput> outputs(world);
  // Rank er * etp + tr: etp fastest.
  PT_RETURN_IF_ERROR(RunRankThreads(world, [&](int rank) -> absl::Status {
    const int er = rank / etp, tr = rank % etp;
    // One device per rank on CUDA (NCCL groups); host memory and Gloo on CPU.
    std::unique_ptr<Backend> be;
    if (cuda) {
      PT_ASSIGN_OR_RETURN(be, MakeCudaBackend(rank, config.capacity_bytes_per_rank));
    } else {
      be = MakeCpuBackend(config.capacity_bytes_per_rank, config.threads_per_rank);
    }
    // The barrier between iterations exchanges nothing: Gloo on either backend.
    PT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> all,
                        MakeGroupCommunicator(rendezvous, prefix + "world", rank, world));
    PT_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> ep_group,
        MakeGroupCommunicator(*be, cuda, rendezvous, absl::StrCat(prefix, "ep", tr), er, ep));
    PT_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> etp_group,
        MakeGroupCommunicator(*be, cuda, rendezvous, absl::StrCat(prefix, "etp", er), tr, etp));
    return RunRank(config, *be, *all, *ep_group, *etp_group, outputs[rank]);
  }));
  MoeStepResult result;
  std::array<std::vector<double>, kPhases> per_phase;
  std::vector<double> total;
  for (int64_t it = 0; it < config.iters; ++it) {
    std::array<double, kPhases> slowest{};
    for (const RankOutput& o : outputs) {
      for (int p = 0; p < kPhases; ++p) slowest[p] = std::max(slowest[p], o.iters[it][p]);
    }
    for (int p = 0; p < kPhases; ++p) per_phase[p].push_back(slowest[p]);
    double slowest_total = 0;
    for (const RankOutput& o : outputs) {
      slowest_total = std::max(slowest_total, o.iters[it][0] + o.iters[it][1]);
    }
    total.push_back(slowest_total);
  }
  result.phases.push_back(PhaseTiming::Of(kPhaseNames[0], per_phase[0]));
  result.phases.push_back(PhaseTiming::Of(kPhaseNames[1], per_phase[1]));
  result.phases.push_back(PhaseTiming::Of("total", total));
  for (int p = 2; p < kPhases; ++p)
    result.phases.push_back(PhaseTiming::Of(kPhaseNames[p], per_phase[p]));
  result.tokens_per_expert.assign(config.layer.num_experts, 0);
  for (int er = 0; er < ep; ++er) {
    const RankOutput& o = outputs[er * etp];
    for (size_t e = 0; e < o.tokens_per_expert.size(); ++e) {
      result.tokens_per_expert[e] += o.tokens_per_expert[e];
    }
  }
  for (const RankOutput& o : outputs) {
    result.peak_bytes_per_rank.push_back(o.peak_bytes);
    result.activation_bytes = std::max(result.activation_bytes, o.activation_bytes);
  }
  result.aux_loss = outputs[0].aux_loss;
  return result;
}

}  // namespace paratune::kernels
