// The verify stage's pure logic (no locks, no I/O): which ranked layouts to train end to
// end, how to split a layout's ranks over the registered workers, the VerifyTasks of one
// run, and the Verification that its results give.
//
// Placement: a layout of world size W = tp·pp·dp runs as parts of g consecutive ranks
// [i·g, (i + 1)·g), one part per worker, all at once (a gang). g is the largest divisor of
// W such that at least W / g workers each have g devices and the memory for g ranks at the
// predicted per-rank peak; g = W (one part, in-process rendezvous) whenever one worker can
// hold the whole layout. A CPU worker's ranks share its host memory; a CUDA worker's rank
// has a device of its own. The run uses one backend: CPU workers for fp32 specs when the
// spec's device kind has them, else CUDA workers (16-bit specs need CUDA). Consecutive ranks keep TP groups (tp fastest in Megatron's rank
// order) inside one worker whenever tp divides g.
#ifndef PARATUNE_SERVER_VERIFY_PLAN_H_
#define PARATUNE_SERVER_VERIFY_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "paratune/v1/results.pb.h"
#include "paratune/v1/task.pb.h"
#include "search/specs.h"

namespace paratune::server {

/// A registered, live worker as the verify stage sees it.
struct VerifyHost {
  std::string id;
  std::string backend;       ///< "cpu" | "cuda".
  int64_t devices = 0;       ///< Rank slots.
  int64_t memory_bytes = 0;  ///< Host memory (CPU ranks share it).
  int64_t device_memory_bytes = 0;  ///< Memory of each device (CUDA: one rank per device).
};

/// One part of a run: ranks [first_rank, first_rank + rank_count).
struct VerifyPart {
  int64_t first_rank = 0;
  int64_t rank_count = 0;
  bool operator==(const VerifyPart&) const = default;
};

/// Where a layout's ranks run, or why it cannot (`parts` empty, `reason` set, e.g.
/// "needs 8 ranks, workers offer 4").
struct VerifyPlacement {
  std::vector<VerifyPart> parts;
  std::string reason;
  std::string backend;  ///< "cpu" | "cuda": the workers the parts run on.
};

/// Splits `world` ranks of `bytes_per_rank` each over `hosts` (see the file comment);
/// `precision` is the spec's ("fp32" may run on CPU workers, 16-bit on CUDA ones only).
VerifyPlacement PlaceVerifyRun(int64_t world, double bytes_per_rank,
                               const std::vector<VerifyHost>& hosts,
                               const std::string& precision = "fp32");

/// Why kernels/training cannot train `config` of `spec` at all (precision, context
/// parallelism, ...), or "" when it can.
std::string VerifyUnsupportedReason(const JobSpec& spec, const v1::ParallelConfig& config);

/// Knobs of a verify run.
struct VerifyRunOptions {
  int64_t steps = 4;                      ///< Training steps (the first is not timed).
  int64_t rendezvous_timeout_ms = 60'000; ///< A gang part waits this long for its peers.
  uint64_t seed = 1234;
};

/// The VerifyTask of part `part` of `ranked`: its layout, every field, through
/// server/convert_layout.h (the worker reads it back with the same conversion); the
/// vocabulary padded to 128·tp as the layout's profile tasks; micro-batches = global batch
/// / (micro_batch_size · dp). `rendezvous_ns` is ignored (left empty) when the part holds
/// every rank. InvalidArgument naming the field for a layout that is not one (an unknown
/// recompute mode, a size below 1).
absl::StatusOr<v1::VerifyTask> MakeVerifyTask(const JobSpec& spec, const v1::RankedConfig& ranked,
                                              const VerifyPart& part,
                                              const VerifyRunOptions& options,
                                              const std::string& rendezvous_ns);

/// The Verification of `ranked` from the results of every part of its run (any order).
/// Measured time: the median step after the first; peak: the largest per-rank peak.
/// Predicted: the ranked entry's iteration_time_s and memory.peak_gib, and that peak as the
/// trainer's tracking allocator counts it (TrackedPeakBytes for the spec's device and
/// precision). InvalidArgument when the parts do not cover ranks [0, world) exactly once.
absl::StatusOr<v1::Verification> VerificationFromParts(
    const JobSpec& spec, const v1::RankedConfig& ranked, int64_t world,
    const std::vector<v1::VerifyResult>& parts);

/// A verified layout's timed steps (after the first, which allocates and warms up); its
/// measured median alone when the run recorded no more.
std::vector<double> TimedSteps(const v1::Verification& v);

/// Compares the verified layouts of `plan` (see v1::VerificationSummary); nothing when none
/// was verified. A layout's timed steps are its measured_step_seconds after the first.
std::optional<v1::VerificationSummary> SummarizeVerification(const v1::PlanResult& plan);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_VERIFY_PLAN_H_
