// Profile planning (DESIGN.md step 3): the surviving top candidates of an analytical plan
// become a de-duplicated set of measurement tasks. One transformer-layer measurement at a
// given (shape, tp, sp, cp, micro-batch, seq, recompute, dtype, flash, dropout) serves
// every candidate that runs layers at that shape, whatever its pp, vp or dp; one
// all-reduce sweep per data-parallel group size serves every layout with that dp.
#ifndef PARATUNE_SEARCH_PROFILE_PLAN_H_
#define PARATUNE_SEARCH_PROFILE_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "search/plan_result.h"
#include "search/specs.h"

namespace paratune {

/// One transformer layer at one parallel shape, timed over `iters` steps after `warmup`.
struct LayerProfileSpec {
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;
  int64_t ffn_hidden_size = 0;
  int64_t vocab_size = 0;
  Activation activation = Activation::kGelu;
  Normalization normalization = Normalization::kLayerNorm;
  int64_t tp = 1;                  ///< Ranks the layer is split over (ColumnParallel/RowParallel).
  bool sequence_parallel = false;
  int64_t cp = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_length = 0;          ///< Full sequence; CP splits it.
  Recompute recompute = Recompute::kNone;  ///< kFull: every layer of the task recomputed.
  Precision dtype = Precision::kBf16;
  bool flash_attention = true;
  bool dropout = false;
  int64_t warmup = 2;
  int64_t iters = 5;

  /// Canonical text of the work: equal specs have equal keys, different ones differ.
  std::string Key() const;
};

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kSendRecv };
const char* ToString(CollectiveOp op);

/// An nccl-tests-style sweep of one collective over `group_size` ranks.
struct CollectiveSweepSpec {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int64_t group_size = 2;
  std::vector<int64_t> sizes_bytes;  ///< Ascending.
  Precision dtype = Precision::kFp32;
  int64_t warmup = 2;
  int64_t iters = 5;

  std::string Key() const;
};

/// A profiling task for one device kind (the cache key is (device_kind, key)).
struct ProfileTaskSpec {
  enum class Kind { kLayer, kCollective };
  Kind kind = Kind::kLayer;
  std::string device_kind;
  std::string key;                ///< layer.Key() or collective.Key().
  LayerProfileSpec layer;         ///< kLayer.
  CollectiveSweepSpec collective; ///< kCollective.
};

struct ProfilePlanOptions {
  /// Profile at most this many of the best fitting candidates (0 = all ranked that fit).
  int64_t max_candidates = 0;
  int64_t warmup = 2;  ///< Untimed steps per task.
  int64_t iters = 5;   ///< Timed steps per task (the median is used).
};

struct ProfilePlan {
  std::vector<ProfileTaskSpec> tasks;  ///< De-duplicated, in first-use order.
  /// Indices into PlanResult::ranked of the candidates the tasks serve.
  std::vector<int64_t> candidates;
};

/// The layer tasks one layout needs: one at its recompute mode, two (full and none) when
/// only recompute_num_layers of a stage's layers are fully recomputed.
std::vector<LayerProfileSpec> LayerTasksFor(const JobSpec& spec, const ParallelConfig& config,
                                            const ProfilePlanOptions& options);

/// The data-parallel gradient all-reduce sweep a layout needs (gradients reduced in fp32,
/// Megatron's default), or nothing when dp is 1. Sizes: 1, 4, 16 MiB on the CPU device
/// kind, 1, 16, 256 MiB on GPUs (where bus bandwidth keeps rising past 16 MiB).
std::optional<CollectiveSweepSpec> DpSweepFor(const JobSpec& spec, const ParallelConfig& config,
                                              const ProfilePlanOptions& options);

/// De-duplicated tasks (layers, then collective sweeps) for the best fitting candidates of
/// `plan`. InvalidArgument when the options are out of range.
absl::StatusOr<ProfilePlan> PlanProfiles(const JobSpec& spec, const PlanResult& plan,
                                         const ProfilePlanOptions& options);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_PROFILE_PLAN_H_
