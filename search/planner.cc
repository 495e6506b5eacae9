// The planner: enumerate every layout the search options allow, prune with the validity
// rules and the memory model, score the survivors with the time model (a closed-form
// pipeline screen for all, the simulated schedule for the best), rank.
//
// Plan runs in four phases, one function each: the grid (MeshShapes, then
// ForEachLayoutOfShape, in a fixed order), Prune (rules and memory), ScreenAndSimulate
// (closed-form screen of every survivor, the simulated schedule for the best, the closest
// misses when too few fit) and RankTop.
#include "search/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "search/device_catalog.h"
#include "search/framework_profile.h"
#include "search/memory_model.h"
#include "search/model_math.h"
#include "search/parallel_config.h"
#include "search/time_model.h"

namespace paratune {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Defaults when a dimension is left open:
constexpr int64_t kMaxMicroBatch = 16;       // Micro-batch sizes considered: divisors <= 16.
constexpr int64_t kMinContextTokens = 1024;  // CP only while each rank keeps >= 1024 tokens.
// Candidates re-scored with the simulated schedule after the closed-form screen.
constexpr int64_t kMinSimulated = 32;

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i == 0) {
      out.push_back(i);
      if (i != n / i) out.push_back(n / i);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T>
bool Allowed(const std::vector<T>& pinned, T value) {
  return pinned.empty() || std::find(pinned.begin(), pinned.end(), value) != pinned.end();
}

std::string OomReason(const MemoryBreakdown& mem) {
  if (mem.Peak() <= mem.capacity && mem.host > mem.host_capacity) {
    return absl::StrFormat(
        "out of host memory by %.1f GiB per GPU (offloaded state %.1f of %.1f GiB)",
        (mem.host - mem.host_capacity) / kGiB, mem.host / kGiB, mem.host_capacity / kGiB);
  }
  return absl::StrFormat("out of memory by %.1f GiB (peak %.1f of %.1f GiB)",
                         (mem.Peak() - mem.capacity) / kGiB, mem.Peak() / kGiB,
                         mem.capacity / kGiB);
}

// Layer and edge times depend only on these knobs.
using LayerKey = std::tuple<int64_t, bool, bool, int64_t, int64_t, int>;
// An expert layer's also on the expert layout.
using ExpertKey = std::tuple<LayerKey, int64_t, int64_t, int>;

struct Scorer {
  const JobSpec& spec;
  const DeviceProfile& device;
  absl::flat_hash_map<LayerKey, std::pair<LayerTime, EdgeTime>> cache;
  absl::flat_hash_map<ExpertKey, LayerTime> expert_cache;

  const LayerTime* ExpertTime(const ParallelConfig& c) {
    if (!IsMoe(spec.model)) return nullptr;
    const ExpertKey key{LayerKey{c.tp, c.sequence_parallel, c.tp_comm_overlap, c.cp,
                                 c.micro_batch_size, static_cast<int>(c.recompute)},
                        c.ep, c.etp, static_cast<int>(c.moe_token_dispatcher)};
    auto it = expert_cache.find(key);
    if (it == expert_cache.end()) {
      it = expert_cache.emplace(key, EstimateExpertLayerTime(spec, c, device)).first;
    }
    return &it->second;
  }

  const std::pair<LayerTime, EdgeTime>& Times(const ParallelConfig& c) {
    const LayerKey key{c.tp, c.sequence_parallel, c.tp_comm_overlap,
                       c.cp, c.micro_batch_size,  static_cast<int>(c.recompute)};
    auto it = cache.find(key);
    if (it == cache.end()) {
      const int64_t n = spec.cluster.gpus_per_node;
      it = cache
               .emplace(key,
                        std::make_pair(EstimateLayerTime(spec.model, spec.training, c, device, n),
                                       EstimateEdgeTime(spec.model, spec.training, c, device, n)))
               .first;
    }
    return it->second;
  }

  absl::StatusOr<RankedConfig> Score(const ParallelConfig& c, const MemoryBreakdown& mem,
                                     PipelineMode mode) {
    const auto& [layer, edge] = Times(c);
    const LayerTime* expert = ExpertTime(c);
    absl::StatusOr<IterationEstimate> it =
        EstimateIteration(spec, c, device, layer, edge, mode, nullptr, expert);
    if (!it.ok()) return it.status();
    RankedConfig r;
    r.config = c;
    r.memory = mem;
    r.fits = mem.Fits();
    r.iteration_time_s = it->iteration_time_s;
    r.time = it->time;
    r.notes = std::move(it->notes);
    const double n = static_cast<double>(spec.cluster.num_gpus);
    const double B = static_cast<double>(spec.training.global_batch_size);
    const double s = static_cast<double>(spec.training.seq_length);
    const double T = it->iteration_time_s;
    r.tokens_per_sec_per_gpu = B * s / (T * n);
    const double recomputed =
        c.recompute == Recompute::kFull && c.recompute_num_layers > 0
            ? std::min(1.0, static_cast<double>(c.recompute_num_layers * c.pp) /
                                static_cast<double>(spec.model.num_layers))
            : 1.0;
    r.model_tflops_per_gpu = ModelFlopsPerIteration(spec.model, B, s) / (T * n) / 1e12;
    r.hardware_tflops_per_gpu =
        HardwareFlopsPerIteration(spec.model, B, s, c.recompute, recomputed) / (T * n) / 1e12;
    r.mfu = r.model_tflops_per_gpu * 1e12 / device.PeakFlops(spec.training.precision);
    if (spec.training.total_tokens > 0) {
      r.time_to_train_days =
          static_cast<double>(spec.training.total_tokens) / (B * s) * T / 86400.0;
    }
    if (!r.fits) r.notes.insert(r.notes.begin(), OomReason(mem));
    return r;
  }
};

bool Better(const RankedConfig& a, const RankedConfig& b, Objective objective) {
  if (a.fits != b.fits) return a.fits;
  // Layouts that do not fit are shown closest miss first.
  if (objective == Objective::kMinMemory || !a.fits) {
    if (a.memory.Peak() != b.memory.Peak()) return a.memory.Peak() < b.memory.Peak();
  }
  return a.iteration_time_s < b.iteration_time_s;
}

// ---- Phase 1: the grid --------------------------------------------------------------------

// One way to split the cluster: tp · cp · pp · dp = N.
struct MeshShape {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1;
};

// The splits the search options allow, tp outermost, then cp, then pp. Open dimensions keep
// only values that can work: tp divides the heads and tiles a node, cp leaves each rank
// >= kMinContextTokens tokens (and 2·cp divides s), pp divides L or L + 2 (where the
// framework splits unevenly: pp <= L).
std::vector<MeshShape> MeshShapes(const JobSpec& spec) {
  const SearchOptions& opt = spec.search;
  const bool uneven = ProfileOf(spec.training.framework).UnevenPipelineSplit();
  const int64_t N = spec.cluster.num_gpus;
  const int64_t L = spec.model.num_layers;
  const int64_t slots = L + 2 + spec.model.mtp_layers;  // With the embedding/loss-aware split.
  const int64_t s = spec.training.seq_length;
  std::vector<MeshShape> out;
  for (int64_t tp : Divisors(N)) {
    if (!Allowed(opt.tp, tp)) continue;
    if (opt.tp.empty() && (spec.model.num_attention_heads % tp != 0 ||
                           (!opt.allow_tp_across_nodes && spec.cluster.gpus_per_node % tp != 0))) {
      continue;
    }
    for (int64_t cp : Divisors(N / tp)) {
      if (!Allowed(opt.cp, cp)) continue;
      if (opt.cp.empty() && cp > 1 && (s % (2 * cp) != 0 || s / cp < kMinContextTokens)) {
        continue;
      }
      for (int64_t pp : Divisors(N / (tp * cp))) {
        if (!Allowed(opt.pp, pp)) continue;
        // Stages split L evenly, or L + 2 (+ MTP) with the embedding and loss counted as
        // layers; or unevenly, a layer per stage at least.
        if (opt.pp.empty() && (uneven ? pp > L : L % pp != 0 && (pp == 1 || slots % pp != 0))) {
          continue;
        }
        const int64_t dp = N / (tp * cp * pp);
        if (!Allowed(opt.dp, dp)) continue;
        out.push_back({tp, cp, pp, dp});
      }
    }
  }
  return out;
}

// Virtual stages per pipeline rank: those that split L (or L + 2) evenly over pp · vp; where
// the framework splits unevenly, also v = 1 and 2 (torchtitan's default: two stages per
// rank for its interleaved schedules) where each chunk keeps a layer. Other uneven v are
// scored when search.vp lists them (DeepSeek-V3 on 1024 H100 under torchtitan: 620,382
// candidates against 1,019,262 with every v up to 8).
constexpr int64_t kMaxUnevenVirtualStages = 2;
std::vector<int64_t> VirtualStageCounts(const SearchOptions& opt, int64_t L, int64_t slots,
                                        int64_t pp, bool uneven) {
  if (!opt.vp.empty()) return opt.vp;
  std::vector<int64_t> out;
  for (int64_t v = 1; v <= L; ++v) {
    if (v > 1 && pp == 1) break;
    if (L % (pp * v) == 0 || (pp > 1 && slots % (pp * v) == 0) ||
        (uneven && v <= kMaxUnevenVirtualStages && pp * v <= L)) {
      out.push_back(v);
    }
  }
  return out;
}

// Expert layouts (MoE models): (ep, etp, dispatcher). Open ep: the divisors of num_experts
// that fold into tp·cp·dp with etp; open etp: 1, 2, 4, 8 dividing the expert FFN and
// inside the NVLink domain where the framework has expert TP; open dispatcher: the
// framework's where anything is dispatched.
struct ExpertLayout {
  int64_t ep = 1, etp = 1;
  MoeTokenDispatcher dispatcher = MoeTokenDispatcher::kAllToAll;
};

std::vector<ExpertLayout> ExpertLayouts(const JobSpec& spec, const MeshShape& shape) {
  const ModelSpec& m = spec.model;
  const SearchOptions& opt = spec.search;
  if (m.num_experts <= 1) return {ExpertLayout{}};
  const int64_t ranks = shape.tp * shape.cp * shape.dp;
  const FrameworkProfile& framework = ProfileOf(spec.training.framework);
  std::vector<int64_t> etps = opt.etp;
  if (etps.empty()) {
    for (int64_t etp : {1, 2, 4, 8}) {
      if (etp > 1 && !framework.expert_tensor_parallel) continue;
      if (m.moe_ffn_hidden_size % etp == 0 && etp <= spec.cluster.NvlinkDomain()) {
        etps.push_back(etp);
      }
    }
  }
  constexpr MoeTokenDispatcher kAll[] = {MoeTokenDispatcher::kAllToAll,
                                         MoeTokenDispatcher::kAllGather, MoeTokenDispatcher::kFlex};
  std::vector<ExpertLayout> out;
  for (int64_t etp : etps) {
    std::vector<int64_t> eps = opt.ep;
    if (eps.empty()) {
      for (int64_t ep : Divisors(m.num_experts)) {
        if (ranks % (ep * etp) == 0) eps.push_back(ep);
      }
    }
    for (int64_t ep : eps) {
      for (MoeTokenDispatcher d : kAll) {
        if (!Allowed(opt.moe_token_dispatcher, d)) continue;
        if (opt.moe_token_dispatcher.empty() && ep * etp == 1 &&
            d != MoeTokenDispatcher::kAllToAll) {
          continue;
        }
        // An open search tries the framework's dispatchers where anything is dispatched.
        if (opt.moe_token_dispatcher.empty() && ep * etp > 1 && !framework.HasDispatcher(d)) {
          continue;
        }
        out.push_back({ep, etp, d});
      }
    }
  }
  return out;
}

// Micro-batch sizes: the divisors of B / dp up to kMaxMicroBatch.
std::vector<int64_t> MicroBatchSizes(const SearchOptions& opt, int64_t B, int64_t dp) {
  std::vector<int64_t> out = opt.micro_batch_size;
  if (out.empty() && B % dp == 0) {
    for (int64_t b : Divisors(B / dp)) {
      if (b <= kMaxMicroBatch) out.push_back(b);
    }
  }
  if (out.empty()) out.push_back(1);  // Reported by validation (B % dp).
  return out;
}

// SP both ways where open (with tp > 1 only; only on in an MoE model, which requires it), or
// as pinned.
std::vector<bool> SequenceParallelChoices(const SearchOptions& opt, int64_t tp, bool moe) {
  std::vector<bool> out;
  for (bool sp : {false, true}) {
    if (!Allowed(opt.sequence_parallel, sp)) continue;
    if (opt.sequence_parallel.empty() && sp && tp == 1) continue;
    if (opt.sequence_parallel.empty() && moe && !sp && tp > 1) continue;
    out.push_back(sp);
  }
  return out;
}

// How a layout keeps its activations: a recompute mode, the layer count pinned for full
// recompute (0: every layer), and whether it offloads activations to the host.
struct ActivationChoice {
  Recompute recompute = Recompute::kNone;
  int64_t recompute_num_layers = 0;
  bool activation_offload = false;
};

// Recompute modes, each with the layer counts pinned for full recompute, and each mode but
// full recompute (which stores only the layer inputs) with activation offload as listed
// (off when search.activation_offload is empty).
std::vector<ActivationChoice> ActivationChoices(const SearchOptions& opt) {
  const std::vector<Recompute> recomputes =
      opt.recompute.empty()
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
          : opt.recompute;
  const std::vector<int64_t> recompute_layers =
      opt.recompute_num_layers.empty() ? std::vector<int64_t>{0} : opt.recompute_num_layers;
  const std::vector<bool> offloads =
      opt.activation_offload.empty() ? std::vector<bool>{false} : opt.activation_offload;
  std::vector<ActivationChoice> out;
  for (Recompute rc : recomputes) {
    for (int64_t rl : recompute_layers) {
      // A layer count only means something with full recompute.
      if (rc != Recompute::kFull && rl != 0) continue;
      for (bool offload : offloads) {
        if (offload && rc == Recompute::kFull) continue;
        out.push_back({rc, rl, offload});
      }
    }
  }
  return out;
}

// Data-parallel sharding as listed, or (open) none and the framework's usual stages
// (FrameworkProfile::open_sharding: Megatron's distributed optimizer, FSDP's full shard),
// the latter with dp · cp > 1 only. With a shard group, only the layouts whose dp · cp it
// divides shard.
std::vector<DataParallelSharding> DataParallelShardingChoices(const SearchOptions& opt,
                                                              Framework framework, int64_t dp_cp,
                                                              int64_t pp) {
  if (!opt.data_parallel_sharding.empty()) return opt.data_parallel_sharding;
  std::vector<DataParallelSharding> out = {DataParallelSharding::kNone};
  if (dp_cp > 1 && (opt.shard_group_size == 0 || dp_cp % opt.shard_group_size == 0)) {
    const FrameworkProfile& p = ProfileOf(framework);
    for (DataParallelSharding s : p.open_sharding) {
      if (p.KeepsFsdpSharding(s, pp)) out.push_back(s);
    }
  }
  return out;
}

// Calls `visit` with every layout of one split: vp, micro-batch, SP, recompute (with its
// layer count), the data-parallel sharding and the expert layout, varied in that order (the
// expert layout fastest).
template <typename Visit>
void ForEachLayoutOfShape(const JobSpec& spec, const MeshShape& shape, Visit visit) {
  const SearchOptions& opt = spec.search;
  const int64_t L = spec.model.num_layers;
  const FrameworkProfile& framework = ProfileOf(spec.training.framework);
  const std::vector<int64_t> vps = VirtualStageCounts(opt, L, L + 2 + spec.model.mtp_layers,
                                                      shape.pp, framework.UnevenPipelineSplit());
  const std::vector<ExpertLayout> experts = ExpertLayouts(spec, shape);
  const std::vector<int64_t> mbs = MicroBatchSizes(opt, spec.training.global_batch_size, shape.dp);
  const std::vector<bool> sps = SequenceParallelChoices(opt, shape.tp, IsMoe(spec.model));
  const std::vector<ActivationChoice> activation_choices = ActivationChoices(opt);
  const std::vector<DataParallelSharding> shardings =
      DataParallelShardingChoices(opt, spec.training.framework, shape.dp * shape.cp, shape.pp);
  ParallelConfig c;
  c.tp = shape.tp;
  c.pp = shape.pp;
  c.dp = shape.dp;
  c.cp = shape.cp;
  // The overlaps default to the framework's (FrameworkProfile; Megatron-Core: what the
  // exported arguments run, tp_comm_overlap off, the others on); a flag with nothing to
  // overlap in a layout takes its first allowed value.
  const auto overlaps = [](const std::vector<bool>& allowed, bool framework_default,
                           bool matters) -> std::vector<bool> {
    if (allowed.empty()) return {framework_default};
    if (!matters) return {allowed[0]};
    return allowed;
  };
  const std::vector<Offload> offloads =
      opt.offload.empty() ? std::vector<Offload>{Offload::kNone} : opt.offload;
  for (int64_t vp : vps) {
    c.vp = vp;
    c.split_counts_embedding_and_loss = SplitCountsEmbeddingAndLoss(spec, shape.pp, vp);
    for (int64_t mb : mbs) {
      c.micro_batch_size = mb;
      for (bool sp : sps) {
        c.sequence_parallel = sp;
        // Transformer Engine's TP overlap pipelines the SP collectives: without SP a layout
        // has none (and TP 1 nothing to overlap).
        const bool only_overlapped =
            !opt.tp_comm_overlap.empty() &&
            std::find(opt.tp_comm_overlap.begin(), opt.tp_comm_overlap.end(), false) ==
                opt.tp_comm_overlap.end();
        if (!sp && shape.tp > 1 && only_overlapped) continue;
        const std::vector<bool> tp_overlaps =
            sp ? overlaps(opt.tp_comm_overlap,
                          framework.tp_comm_overlap.exists && framework.tp_comm_overlap.default_on,
                          true)
               : std::vector<bool>{false};
        const std::vector<bool> p2p_overlaps =
            overlaps(opt.overlap_p2p_comm,
                     framework.overlap_p2p_comm.exists && framework.overlap_p2p_comm.default_on,
                     shape.pp > 1 && vp > 1);
        for (const ActivationChoice& a : activation_choices) {
          c.recompute = a.recompute;
          c.recompute_num_layers = a.recompute == Recompute::kFull ? a.recompute_num_layers : 0;
          c.activation_offload = a.activation_offload;
          for (DataParallelSharding sharding : shardings) {
            c.data_parallel_sharding = sharding;
            c.shard_group_size = sharding == DataParallelSharding::kNone ? 0 : opt.shard_group_size;
            const std::vector<bool> grad_reduce_overlaps =
                overlaps(opt.overlap_grad_reduce,
                         DefaultOverlapGradReduce(spec.training.framework, sharding, shape.pp),
                         shape.dp * shape.cp > 1);
            const std::vector<bool> param_gather_overlaps = overlaps(
                opt.overlap_param_gather,
                DefaultOverlapParamGather(spec.training.framework, sharding),
                shape.dp * shape.cp > 1 && (sharding == DataParallelSharding::kOptimizer ||
                                            sharding == DataParallelSharding::kOptimizerGrads));
            for (Offload offload : offloads) {
            // Parameter offload streams the shards of a fully sharded layout only.
            if (offload == Offload::kOptimizerAndParams &&
                sharding != DataParallelSharding::kFull) {
              continue;
            }
            c.offload = offload;
            for (const ExpertLayout& x : experts) {
              c.ep = x.ep;
              c.etp = x.etp;
              c.moe_token_dispatcher = x.dispatcher;
              for (bool tp_overlap : tp_overlaps) {
                c.tp_comm_overlap = tp_overlap;
                for (bool grad_overlap : grad_reduce_overlaps) {
                  c.overlap_grad_reduce = grad_overlap;
                  for (bool p2p_overlap : p2p_overlaps) {
                    c.overlap_p2p_comm = p2p_overlap;
                    for (bool gather_overlap : param_gather_overlaps) {
                      c.overlap_param_gather = gather_overlap;
                      visit(c);
                    }
                  }
                }
              }
            }
            }
          }
        }
      }
    }
  }
}

// ---- Phase 2: prune -----------------------------------------------------------------------

struct Feasible {
  ParallelConfig config;
  MemoryBreakdown memory;
  double screen = 0;  ///< The closed-form score that orders the simulation.
};

// A valid layout that runs out of memory, and its place in the enumeration (ties in peak
// memory keep that order).
struct Miss {
  ParallelConfig config;
  MemoryBreakdown memory;
  int64_t index = 0;
};
bool CloserMiss(const Miss& a, const Miss& b) {
  const double pa = a.memory.Peak(), pb = b.memory.Peak();
  return pa != pb ? pa < pb : a.index < b.index;
}

struct Pruned {
  std::vector<Feasible> feasible;
  /// The top_k valid layouts closest to fitting (least peak memory), as a max-heap by
  /// CloserMiss: the ranking falls back on them when fewer than top_k fit.
  std::vector<Miss> closest_misses;
};

// Counts every layout in `result` and rejects, with the reason, those that break a rule or
// run out of memory.
Pruned Prune(const JobSpec& spec, const DeviceProfile& device, PlanResult& result) {
  const FrameworkMemory framework = FrameworkMemoryFor(device, spec.training);
  const size_t keep_misses = static_cast<size_t>(std::max<int64_t>(spec.search.top_k, 1));
  Pruned out;
  // Memory does not depend on the token dispatcher, which varies fastest: the previous
  // layout's estimate is reused when only the dispatcher differs.
  ParallelConfig memo_config;
  MemoryBreakdown memo;
  bool memo_valid = false;
  for (const MeshShape& shape : MeshShapes(spec)) {
    ForEachLayoutOfShape(spec, shape, [&](const ParallelConfig& c) {
      ++result.candidates_considered;
      if (absl::Status s = ValidateParallelConfig(c, spec); !s.ok()) {
        result.rejected.push_back({c, std::string(s.message())});
        return;
      }
      ParallelConfig key = c;
      key.moe_token_dispatcher = MoeTokenDispatcher::kAllToAll;
      if (!memo_valid || !(key == memo_config)) {
        memo = EstimateMemory(spec, c, device.memory_bytes, framework);
        memo_config = key;
        memo_valid = true;
      }
      const MemoryBreakdown mem = memo;
      if (!mem.Fits()) {
        result.rejected.push_back({c, OomReason(mem)});
        std::vector<Miss>& heap = out.closest_misses;
        Miss miss{c, mem, result.candidates_considered};
        if (heap.size() < keep_misses) {
          heap.push_back(std::move(miss));
          std::push_heap(heap.begin(), heap.end(), CloserMiss);
        } else if (CloserMiss(miss, heap.front())) {
          std::pop_heap(heap.begin(), heap.end(), CloserMiss);
          heap.back() = std::move(miss);
          std::push_heap(heap.begin(), heap.end(), CloserMiss);
        }
        return;
      }
      out.feasible.push_back({c, mem, 0});
    });
  }
  return out;
}

// ---- Phase 3: screen and simulate ---------------------------------------------------------

// Screens every feasible layout with the closed-form pipeline and re-scores the best
// max(4·top_k, kMinSimulated) with the simulated schedule; when fewer than top_k fit, adds
// the closest misses (least memory first), also simulated.
absl::StatusOr<std::vector<RankedConfig>> ScreenAndSimulate(const SearchOptions& opt,
                                                            Scorer& scorer, Pruned& pruned) {
  std::vector<Feasible>& feasible = pruned.feasible;
  for (Feasible& f : feasible) {
    absl::StatusOr<RankedConfig> r = scorer.Score(f.config, f.memory, PipelineMode::kClosedForm);
    if (!r.ok()) return r.status();
    f.screen = opt.objective == Objective::kMinMemory ? f.memory.Peak() : r->iteration_time_s;
  }
  std::sort(feasible.begin(), feasible.end(),
            [](const Feasible& a, const Feasible& b) { return a.screen < b.screen; });
  const int64_t top_k = std::max<int64_t>(opt.top_k, 1);
  const size_t simulate =
      std::min(feasible.size(), static_cast<size_t>(std::max(4 * top_k, kMinSimulated)));
  std::vector<RankedConfig> ranked;
  for (size_t i = 0; i < simulate; ++i) {
    absl::StatusOr<RankedConfig> r =
        scorer.Score(feasible[i].config, feasible[i].memory, PipelineMode::kSimulated);
    if (!r.ok()) return r.status();
    ranked.push_back(std::move(*r));
  }
  std::vector<Miss>& misses = pruned.closest_misses;
  if (static_cast<int64_t>(ranked.size()) < top_k && !misses.empty()) {
    std::sort_heap(misses.begin(), misses.end(), CloserMiss);
    for (size_t i = 0; i < misses.size() && static_cast<int64_t>(ranked.size()) < top_k; ++i) {
      absl::StatusOr<RankedConfig> r =
          scorer.Score(misses[i].config, misses[i].memory, PipelineMode::kSimulated);
      if (!r.ok()) return r.status();
      ranked.push_back(std::move(*r));
    }
  }
  return ranked;
}

// ---- Phase 4: rank ------------------------------------------------------------------------

// Orders by the objective (fitting layouts first), keeps top_k and numbers them from 1.
std::vector<RankedConfig> RankTop(std::vector<RankedConfig> ranked, const SearchOptions& opt) {
  const int64_t top_k = std::max<int64_t>(opt.top_k, 1);
  std::stable_sort(ranked.begin(), ranked.end(), [&](const RankedConfig& a, const RankedConfig& b) {
    return Better(a, b, opt.objective);
  });
  if (static_cast<int64_t>(ranked.size()) > top_k) ranked.resize(static_cast<size_t>(top_k));
  for (size_t i = 0; i < ranked.size(); ++i) ranked[i].rank = static_cast<int64_t>(i) + 1;
  return ranked;
}

}  // namespace

namespace {

// The leaner numerics Megatron-Core and NeMo offer beside the layout, where the spec leaves
// them to the framework: BF16 gradients (grad_reduce_in_fp32 false) and, in FP8, FP8
// parameters, as NVIDIA's performance recipes run; failing those, also BF16 Adam moments
// (optimizer_state_dtype, the precision-aware optimizer). When the winner recomputes and its
// layout without recompute fits only with them, its notes say so and by how much it would
// be faster.
void NoteLeanerNumerics(const JobSpec& spec, RankedConfig& winner) {
  const TrainingSpec& t = spec.training;
  if (!ProfileOf(t.framework).megatron_numerics || t.precision == Precision::kFp32 ||
      winner.config.recompute == Recompute::kNone) {
    return;
  }
  JobSpec lean = spec;
  std::vector<std::string> changes;
  if (!t.grad_reduce_in_fp32.has_value() && t.GradientBytes() > 2.0) {
    lean.training.grad_reduce_in_fp32 = false;
    changes.push_back("training.grad_reduce_in_fp32: false");
  }
  if ((t.precision == Precision::kFp8 || t.precision == Precision::kMxfp8) &&
      !t.fp8_param_gather.has_value() && !t.Fp8ParamGather()) {
    lean.training.fp8_param_gather = true;
    changes.push_back("training.fp8_param_gather: true");
  }
  ParallelConfig config = winner.config;
  config.recompute = Recompute::kNone;
  config.recompute_num_layers = 0;
  const auto faster = [&](const JobSpec& s) -> std::optional<RankedConfig> {
    absl::StatusOr<RankedConfig> without = Estimate(s, config);
    if (!without.ok() || !without->fits || without->iteration_time_s >= winner.iteration_time_s) {
      return std::nullopt;
    }
    return *without;
  };
  const auto note = [&](const RankedConfig& without, const char* as) {
    winner.notes.push_back(absl::StrFormat(
        "with %s (%s) this layout fits without recompute (peak %.1f GiB) and is %.1f%% faster",
        absl::StrJoin(changes, " and "), as, without.memory.Peak() / (1024.0 * 1024.0 * 1024.0),
        100.0 * (winner.iteration_time_s / without.iteration_time_s - 1.0)));
  };
  if (!changes.empty()) {
    if (std::optional<RankedConfig> without = faster(lean)) {
      note(*without, "as NVIDIA's performance recipes run");
      return;
    }
  }
  if (t.optimizer_state_dtype.has_value()) return;
  lean.training.optimizer_state_dtype = Precision::kBf16;
  changes.push_back("training.optimizer_state_dtype: bf16");
  if (std::optional<RankedConfig> without = faster(lean)) {
    note(*without, "Megatron-Core's precision-aware optimizer for the Adam moments");
  }
}

}  // namespace

absl::StatusOr<PlanResult> Plan(const JobSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  absl::StatusOr<DeviceProfile> device = DeviceForCluster(spec.cluster);
  if (!device.ok()) return device.status();

  PlanResult result;
  Pruned pruned = Prune(spec, *device, result);
  result.feasible = static_cast<int64_t>(pruned.feasible.size());
  Scorer scorer{spec, *device, {}, {}};
  absl::StatusOr<std::vector<RankedConfig>> scored = ScreenAndSimulate(spec.search, scorer, pruned);
  if (!scored.ok()) return scored.status();
  result.ranked = RankTop(*std::move(scored), spec.search);
  if (!result.ranked.empty() && result.ranked.front().fits) {
    NoteLeanerNumerics(spec, result.ranked.front());
  }
  result.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

absl::StatusOr<RankedConfig> Estimate(const JobSpec& spec, const ParallelConfig& config) {
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  if (absl::Status s = ValidateParallelConfig(config, spec); !s.ok()) return s;
  absl::StatusOr<DeviceProfile> device = DeviceForCluster(spec.cluster);
  if (!device.ok()) return device.status();
  Scorer scorer{spec, *device, {}, {}};
  const MemoryBreakdown mem = EstimateMemory(spec, config, device->memory_bytes,
                                             FrameworkMemoryFor(*device, spec.training));
  absl::StatusOr<RankedConfig> r = scorer.Score(config, mem, PipelineMode::kSimulated);
  if (r.ok()) r->rank = 1;
  return r;
}

}  // namespace paratune
