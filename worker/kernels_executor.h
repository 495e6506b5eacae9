// The real executor: runs ProfileTasks on kernels/ (the step runner for layer profiles,
// the collective bench for sweeps, the trainer for verify and optimizer tasks, the MoE
// step runner for MoE layer tasks) and maps
// their results and errors onto TaskResult. Each task kind is one entry of a table in
// kernels_executor.cc (validate, run, result), so a new kind is a new entry.
#ifndef PARATUNE_WORKER_KERNELS_EXECUTOR_H_
#define PARATUNE_WORKER_KERNELS_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "kernels/training/training.h"
#include "paratune/v1/task.pb.h"
#include "worker/device_discovery.h"
#include "worker/task_executor.h"

namespace paratune::worker {

struct KernelsExecutorOptions {
  /// Tracking-allocator capacity of one rank; 0 = derived from the inventory (GPU: the
  /// device's memory; CPU: host memory divided by the task's ranks, threads sharing it).
  int64_t capacity_bytes_per_rank = 0;
  /// Timed iterations when a task leaves `iters` at 0.
  int64_t default_layer_iters = 5;
  int64_t default_collective_iters = 10;
  /// The coordinator's rendezvous store under a namespace, for the parts of a verify gang
  /// (a VerifyTask with rank_count < world_size); Get must throw after `timeout_ms`. Null:
  /// such parts answer UNSUPPORTED.
  std::function<std::shared_ptr<kernels::GlooRendezvous>(const std::string& ns,
                                                         int64_t timeout_ms)>
      rendezvous = nullptr;
};

/// Runs tasks on the backend and devices of `inventory`. Mapping of outcomes:
///   OK           the measurement (phases and peaks, one CommSample per size, the
///                losses, step times and per-rank peaks of a verify run, or an optimizer
///                task's step time, one copy per rank of this worker at once);
///   OOM          the allocator refused a request (oom_bytes_requested = its size);
///   UNSUPPORTED  more ranks than devices, context parallelism (cp > 1: not in kernels/),
///                fp8, a GPU-only dtype (bf16/fp16) on CPU, a backend not built, a
///                verify layout kernels/training rejects, a gang part without a
///                rendezvous, or a verify, optimizer or MoE layer task on a CUDA worker
///                (training and the MoE layer are CPU-only);
///   FAILED       an invalid task (the rule it breaks) or any other error, e.g. a gang
///                part whose peers did not join within rendezvous_timeout_ms;
///   CANCELLED    `cancel` set: checked before the run and after it (RunLayerStep has no
///                cancellation hook), and between the sizes of a collective sweep.
/// Layer vocabularies are padded to a multiple of 128·tp, as Megatron-LM does.
/// The trainer's config of a verify task: the layout through server/convert_layout.h's
/// ParallelConfigFromProto (every field, the conversion the coordinator wrote it with), the
/// model's shape, the batch and the run's knobs. dtype and backend are the worker's to set;
/// the result is not validated (TrainConfig::Validate). InvalidArgument naming the field for
/// an unknown recompute mode, activation or normalization.
absl::StatusOr<kernels::training::TrainConfig> TrainConfigFromVerifyTask(
    const v1::VerifyTask& task);

std::shared_ptr<TaskExecutor> CreateKernelsExecutor(const DeviceInventory& inventory,
                                                    KernelsExecutorOptions options = {});

}  // namespace paratune::worker

#endif  // PARATUNE_WORKER_KERNELS_EXECUTOR_H_
