// Times one MoE layer (kernels/moe_layer.h) forward and backward over ep·etp ranks that
// are threads of this process (Gloo groups on CPU, a device each and NCCL groups on CUDA),
// as a worker's MoE profile task runs it:
// `warmup` untimed and `iters` timed iterations, each begun together on every rank (a
// barrier); an iteration's time is its slowest rank's. Weights are MoeWeights::Random's,
// made shard by shard; inputs are uniform in [−1, 1).
#ifndef PARATUNE_KERNELS_MOE_STEP_H_
#define PARATUNE_KERNELS_MOE_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/moe_layer.h"
#include "kernels/step_runner.h"

namespace paratune::kernels {

struct MoeStepConfig {
  MoeLayerConfig layer;                 ///< Shape, routing and ep / etp.
  int64_t tokens = 0;                   ///< Tokens per EP rank (micro-batch · sequence).
  /// cpu: ep·etp thread ranks on host memory, Gloo groups; cuda: one device per rank
  /// (devices 0 … ep·etp − 1), NCCL groups.
  BackendKind backend = BackendKind::kCpu;
  DType dtype = DType::kF32;            ///< cpu: fp32 or fp64; cuda: fp32, bf16 or fp16.
  int64_t warmup = 1;                   ///< Untimed iterations.
  int64_t iters = 3;                    ///< Timed iterations.
  int64_t capacity_bytes_per_rank = 0;  ///< Tracking-allocator capacity; 0 = unlimited.
  uint64_t seed = 1;                    ///< Weights and inputs.
  int threads_per_rank = 1;             ///< Elementwise threads of each rank.
  /// OpenBLAS threads of each rank (cpu; process-wide); 0 = the cores / (ep·etp), as the
  /// layer step shares them among its TP ranks.
  int64_t blas_threads_per_rank = 0;

  /// The layer's rules, then this struct's, naming the field.
  absl::Status Validate() const;
};

struct MoeStepResult {
  /// "forward", "backward", "total" (forward + backward), and their parts
  /// "dispatch_combine_forward", "dispatch_combine_backward" (the all-to-alls with their
  /// count exchange), "experts_forward", "experts_backward" (the expert MLPs and their
  /// ETP all-reduce). Seconds over the timed iterations, slowest rank per iteration.
  std::vector<PhaseTiming> phases;
  /// Tracking-allocator peak per rank (weights, gradients, activations, workspace); rank
  /// index ep_rank·etp + etp_rank.
  std::vector<int64_t> peak_bytes_per_rank;
  /// Largest bytes of activations a rank stores between its forward and its backward.
  int64_t activation_bytes = 0;
  /// Rows each global expert computed in the last forward (over every EP rank's tokens).
  std::vector<int64_t> tokens_per_expert;
  /// The auxiliary loss of the last forward.
  double aux_loss = 0;
};

/// ResourceExhausted (OutOfMemoryError) when a rank's allocator refuses a request.
absl::StatusOr<MoeStepResult> RunMoeLayerStep(const MoeStepConfig& config);

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_MOE_STEP_H_
