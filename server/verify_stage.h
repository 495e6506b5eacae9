// The verify stage of a job: with search.verify_top_k > 0, the top k fitting layouts of the
// ranking are trained end to end (VerifyTasks, kernels/training) on the workers registered
// at that moment, one task per worker-sized group of ranks (server/verify_plan.h); the
// parts of one layout form a gang that meets through the coordinator's rendezvous store. A
// part that fails (its peers did not come, a lost worker, an expired lease) restarts the
// whole gang under a fresh rendezvous namespace, until a part has had max_attempts leases.
// Each verified entry gets its Verification (measured next to predicted); the others a
// status saying why not. An inference job's layouts (verify_stage_inference.cc) run as one
// ServingVerifyTask each: the serving loop on the ranks of one CPU worker (or CUDA worker,
// ServingVerifyRunsOnCuda), over the spec's trace; its entry gets an InferenceVerification
// (measured TTFT, TPOT, e2e and output tokens/s next to the entry's predicted figures).
//
// Thread-compatible: the JobLifecycle calls it under its lock (it then takes the
// LeaseBroker's and the WorkerRegistry's).
#ifndef PARATUNE_SERVER_VERIFY_STAGE_H_
#define PARATUNE_SERVER_VERIFY_STAGE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/clock.h"
#include "server/job_entry.h"
#include "server/lease_broker.h"
#include "server/store.h"
#include "server/verify_plan.h"
#include "server/worker_registry.h"

namespace paratune::server {

/// Whether a CUDA worker's serving loop runs `task`: aggregated instances with pp 1
/// (pipelined and disaggregated runs stay on CPU workers, as kernels/serving refuses them on
/// a device). The lease broker offers the task to CUDA workers only then.
bool ServingVerifyRunsOnCuda(const v1::ServingVerifyTask& task);

class VerifyStage {
 public:
  /// The collaborators must outlive the stage.
  VerifyStage(Store* store, LeaseBroker* broker, const WorkerRegistry* workers, const Clock* clock,
              VerifyRunOptions options)
      : store_(store), broker_(broker), workers_(workers), clock_(clock), options_(options) {}

  /// For a job whose ranking (record.results) is set: queues the verify parts of its top
  /// search.verify_top_k fitting layouts and answers VERIFYING; SUCCEEDED when there is
  /// nothing to verify (each skipped layout's status says why); FAILED when the parts
  /// cannot be stored.
  Transition Start(JobEntry& job);
  /// Every part of the run of layout `layout_rank` leaves the queue (leased parts: their
  /// workers are told to stop). `give_up`, or a part that already had max_attempts leases:
  /// the parts fail with `why`; else they are queued again under a fresh rendezvous
  /// namespace.
  absl::Status ResetGang(JobEntry& job, int64_t layout_rank, const std::string& why, bool give_up);
  /// After a coordinator restart: every unfinished run starts again (leases died with the
  /// old process).
  absl::Status Recover(JobEntry& job);
  /// Records a worker's result for the verify part `task`.
  absl::Status ApplyReport(JobEntry& job, TaskRecord& task, const std::string& worker_id,
                           const v1::TaskResult& result);
  /// With every part finished: fills the Verifications and answers SUCCEEDED (FAILED when
  /// the ranking is missing). Nullopt while parts are pending or the job is not VERIFYING.
  std::optional<Transition> Check(JobEntry& job) const;

 private:
  // The inference forms of Start, ApplyReport and Check (verify_stage_inference.cc).
  Transition StartInference(JobEntry& job);
  absl::Status ApplyInferenceReport(TaskRecord& task, const std::string& worker_id,
                                    const v1::TaskResult& result);
  std::optional<Transition> CheckInference(JobEntry& job) const;
  // Stores the job's new verify tasks, queues them and moves the job on to VERIFYING
  // (SUCCEEDED when there are none, FAILED when the store refuses them).
  Transition QueueTasks(JobEntry& job, std::vector<TaskRecord> tasks);

  Store* const store_;
  LeaseBroker* const broker_;
  const WorkerRegistry* const workers_;
  const Clock* const clock_;
  const VerifyRunOptions options_;
};

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_VERIFY_STAGE_H_
