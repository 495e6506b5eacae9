// A served model on one tensor-parallel rank: VocabParallelEmbedding, `num_layers`
// ServingLayers sharing one paged KV cache, the final RMSNorm, a vocab-parallel output
// layer and greedy sampling, on the context's backend (CPU, or CUDA with
// ServingConfig::dtype bf16/fp16/fp32). Sampling never gathers the logits: each rank takes the
// argmax of its vocabulary slice and the ranks all-gather (value, index) pairs, two
// numbers per sampled sequence (ties go to the lowest index, on every layout).
// Thread-safety: one model belongs to one rank (thread).
#ifndef PARATUNE_KERNELS_SERVING_SERVING_MODEL_H_
#define PARATUNE_KERNELS_SERVING_SERVING_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/parallel_context.h"
#include "kernels/serving/paged_kv_cache.h"
#include "kernels/serving/serving_config.h"
#include "kernels/serving/serving_layer.h"
#include "kernels/serving/serving_ops.h"
#include "kernels/serving/step_batch.h"
#include "kernels/serving/weight_only_linear.h"

namespace paratune::kernels::serving {

/// What one step returns, one entry per chunk with sample = true, in chunk order.
struct StepOutput {
  std::vector<int32_t> next_tokens;
  /// [samples, vocab] full logits (gathered over TP), only when requested.
  std::vector<float> logits;
};

/// Seconds of the parts of the steps since the last Reset.
struct ModelPhaseTimes {
  LayerPhaseTimes layers;  ///< Summed over layers.
  double tp_comm_s = 0;    ///< All-reduces and all-gathers (ParallelContext's clock).
  double logits_s = 0;     ///< Final norm, output GEMM, argmax.
  double embedding_s = 0;
  int64_t steps = 0;
};

/// One rank's communicators of a serving layout of tp ranks: the TP group and, with
/// ep > 1, its expert subgroups as TensorRT-LLM's Mapping forms them (moe_ep_rank =
/// r % ep, moe_tp_rank = r / ep): the EP group of the ranks with this rank's moe_tp_rank,
/// the ETP group of those with its moe_ep_rank. context() wires them for ServingModel.
struct ServingGroups {
  std::unique_ptr<Communicator> tp, ep, etp;
  /// On a device backend: a Gloo group over the TP ranks for host-memory values (a serving
  /// loop's agreements), as NCCL reduces device memory only; null on the CPU.
  std::unique_ptr<Communicator> control;
  /// The group for host-memory values: `control`, or the TP group itself on the CPU.
  Communicator& host() const { return control ? *control : *tp; }
  ParallelContext context(Backend* backend) const {
    ParallelContext ctx{backend, tp.get(), nullptr};
    ctx.ep = ep.get();
    ctx.etp = etp.get();
    return ctx;
  }
};
/// Rank `rank`'s groups, named under `prefix` at `rendezvous` (Gloo; host memory).
absl::StatusOr<ServingGroups> MakeServingGroups(std::shared_ptr<GlooRendezvous> rendezvous,
                                                const std::string& prefix, int rank, int tp,
                                                int ep);
/// The same for a rank on `backend`: NCCL on a CUDA backend (and the Gloo `control`
/// group), else as above.
absl::StatusOr<ServingGroups> MakeServingGroups(Backend& backend,
                                                std::shared_ptr<GlooRendezvous> rendezvous,
                                                const std::string& prefix, int rank, int tp,
                                                int ep);

class ServingModel {
 public:
  /// `shuffle_seed` != 0 hands KV blocks out in random order (tests).
  static absl::StatusOr<std::unique_ptr<ServingModel>> Create(const ServingConfig& config,
                                                              const ParallelContext& ctx,
                                                              uint64_t shuffle_seed = 0);

  /// Runs one step: tokens are the chunks' new tokens, concatenated; every chunk's start
  /// must equal its sequence's cached length. Reserves the KV blocks the chunks need
  /// (ResourceExhausted if they are not free) and advances each sequence's length. The
  /// whole model only (parallel.pp 1).
  absl::StatusOr<StepOutput> Step(const std::vector<int32_t>& tokens,
                                  const std::vector<SeqChunk>& chunks, bool return_logits);
  /// One pipeline stage's part of a step: the first stage embeds `tokens`, the others take
  /// the previous stage's output `input` [StepTokens(chunks), h]; the stage's layers run
  /// (their cache checked, reserved and advanced as Step's). Returns the hidden states.
  absl::StatusOr<Tensor> StageForward(const std::vector<int32_t>& tokens, const Tensor* input,
                                      const std::vector<SeqChunk>& chunks);
  /// The last stage's end of a step: final norm, logits and greedy tokens of the sampled
  /// chunks from the stage's output `x`.
  absl::StatusOr<StepOutput> Sample(const Tensor& x, const std::vector<SeqChunk>& chunks,
                                    bool return_logits);
  /// Frees the KV blocks of a finished sequence.
  void Release(int64_t seq) { cache_.Release(seq); }

  PagedKvCache& cache() { return cache_; }
  /// The rank's serving operations (ServingOps::BeginStep and WriteKv fill a cache).
  ServingOps& ops() { return *ops_; }
  const ServingConfig& config() const { return config_; }
  /// Bytes of this rank's weights (embedding, layers, final norm, output layer: those of
  /// its stage).
  int64_t weight_bytes() const;
  ModelPhaseTimes& times() { return times_; }
  void ResetTimes();
  /// Phase timing on (the default) or off: off, a device backend runs a step without
  /// waiting at phase boundaries or around its collectives (whole-step timing), and the
  /// phase times stay as they are.
  void SetPhaseTiming(bool on);

 private:
  ServingModel(const ServingConfig& config, const ParallelContext& ctx)
      : config_(config), ctx_(ctx) {}

  ServingConfig config_;
  ParallelContext ctx_;
  std::unique_ptr<ServingOps> ops_;
  std::unique_ptr<Communicator> self_;  ///< attention_dp: the one-rank attention group
  CommClock comm_clock_;
  std::vector<std::unique_ptr<ServingLayer>> layers_;
  PagedKvCache cache_;
  Tensor embedding_;         ///< [V/t, h], rows [rank·V/t, (rank+1)·V/t) of the table.
  Tensor final_norm_;        ///< [h]
  WeightOnlyLinear output_;  ///< [V/t, h], config.dtype.
  ModelPhaseTimes times_;
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVING_MODEL_H_
