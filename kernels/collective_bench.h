// Collective sweeps, nccl-tests conventions. For each size the sweep runs `warmup` untimed
// and `iters` timed calls of one collective over a group of `group_size` ranks (threads),
// and checks the result of a final call against the exact expected values (#wrong).
//
// Sizes are the full buffer in bytes, as nccl-tests prints them: all-reduce the buffer,
// all-gather the gathered output, reduce-scatter the input, send/recv the message,
// all-to-all one rank's send buffer (size/k bytes to each rank, itself included).
// algbw = size / time; busbw = algbw × factor: all-reduce 2(k−1)/k, all-gather,
// reduce-scatter and all-to-all (k−1)/k, send/recv 1.
#ifndef PARATUNE_KERNELS_COLLECTIVE_BENCH_H_
#define PARATUNE_KERNELS_COLLECTIVE_BENCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/enums.h"
#include "kernels/dtype.h"
#include "kernels/step_runner.h"

namespace paratune::kernels {

/// nccl-tests bus-bandwidth factor for a group of k ranks.
double BusBandwidthFactor(CollectiveOp op, int64_t group_size);

struct CollectiveSweepConfig {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int64_t group_size = 2;              ///< k ranks; send/recv uses ranks 0 → 1.
  std::vector<int64_t> sizes_bytes;    ///< Each a multiple of k × element size.
  DType dtype = DType::kF32;
  int64_t warmup = 2;
  int64_t iters = 10;
  BackendKind backend = BackendKind::kCpu;

  absl::Status Validate() const;
};

struct CollectiveSample {
  int64_t size_bytes = 0;
  int64_t count = 0;        ///< Elements of size_bytes.
  double time_s = 0;        ///< Mean seconds per call (slowest rank).
  double algbw_gbps = 0;    ///< GB/s, 1e9 bytes.
  double busbw_gbps = 0;
  int64_t wrong = 0;        ///< Elements that differed from the expected result.
};

absl::StatusOr<std::vector<CollectiveSample>> RunCollectiveSweep(
    const CollectiveSweepConfig& config);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_COLLECTIVE_BENCH_H_
