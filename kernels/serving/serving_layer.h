// One forward-only transformer layer for serving on one tensor-parallel rank (pre-norm,
// Megatron column/row parallel linears, GQA, RoPE, RMSNorm, SwiGLU or GeLU):
//
//   h1 = x  + RowParallel_proj(PagedAttention(RoPE(ColumnParallel_qkv(rmsnorm1(x)))))
//   y  = h1 + RowParallel_fc2(act(ColumnParallel_fc1(rmsnorm2(h1))))
//
// or, in an expert layer (ServingConfig::moe), y = h1 + MoE(rmsnorm2(h1)): the router's
// top-k, each expert's SwiGLU split over the tp ranks, the outputs all-reduced
// (kernels/moe_layer.h with ep 1 and etp = tp);
// over the concatenated tokens of a step's chunks; K and V of the new tokens are written
// to the paged cache before attention reads it. Everything runs through the rank's
// Backend and ServingOps, in ServingConfig::dtype (fp32 on the CPU; bf16, fp16 or fp32 on
// CUDA); RoPE, the cache write and attention run in fp32 (a 16-bit QKV is converted
// before them, the attention output back after). The two row-parallel outputs are
// all-reduced (reduce_from_tp_region); nothing else communicates. Weights are the
// training layer's (kernels/transformer_layer.h): same names, seeds and unsharded
// indices, so every TP layout holds the same logical model.
// Thread-safety: one layer belongs to one rank (thread).
#ifndef PARATUNE_KERNELS_SERVING_SERVING_LAYER_H_
#define PARATUNE_KERNELS_SERVING_SERVING_LAYER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "kernels/moe_layer.h"
#include "kernels/parallel_context.h"
#include "kernels/serving/paged_kv_cache.h"
#include "kernels/serving/serving_config.h"
#include "kernels/serving/serving_ops.h"
#include "kernels/serving/step_batch.h"
#include "kernels/serving/weight_only_linear.h"

namespace paratune::kernels::serving {

/// Seconds spent in the parts of the last Forward calls (accumulating until Reset).
struct LayerPhaseTimes {
  double gemm_s = 0;       ///< QKV, projection, FC1, FC2.
  double attention_s = 0;  ///< RoPE, KV-cache writes, paged attention.
  double other_s = 0;      ///< Norms, activation, residuals.
  void Reset() { *this = LayerPhaseTimes(); }
};

class ServingLayer {
 public:
  /// Layer `index` of the model (one of config.stage's): its weights use seed
  /// config.seed + index. `ops` (of ctx's backend) must outlive the layer.
  static absl::StatusOr<std::unique_ptr<ServingLayer>> Create(const ServingConfig& config,
                                                              const ParallelContext& ctx,
                                                              int64_t index, ServingOps* ops);

  /// x: [tokens, h] in config.dtype (tokens = StepTokens(chunks)), after
  /// ops->BeginStep(*cache, chunks). The cache must hold blocks for every chunk's
  /// positions. Returns y [tokens, h].
  absl::StatusOr<Tensor> Forward(const Tensor& x, const std::vector<SeqChunk>& chunks,
                                 PagedKvCache* cache);

  /// Bytes of this rank's weights (after quantization).
  int64_t weight_bytes() const;
  LayerPhaseTimes& times() { return times_; }
  /// Switches phase timing (ServingConfig::phase_timing) and the clock of its TP
  /// communication (null: untimed).
  void SetPhaseTiming(bool on, CommClock* comm_clock) {
    config_.phase_timing = on;
    ctx_.comm_clock = comm_clock;
  }

 private:
  ServingLayer(const ServingConfig& config, const ParallelContext& ctx, int64_t index,
               ServingOps* ops)
      : config_(config),
        ctx_(ctx),
        ops_(ops),
        index_(index),
        cache_layer_(index - config.StageLayers(config.stage).first) {}
  absl::Status Init();
  absl::StatusOr<Tensor> RmsNorm(const Tensor& x, const Tensor& gamma);

  absl::Status InitExperts();
  /// The experts' MLPs weight-only quantized (weight_quant), in place of MoeLayer's fp32.
  absl::Status QuantizeExperts(int64_t ep_rank, int64_t etp_rank, double scale);

  ServingConfig config_;
  ParallelContext ctx_;
  ServingOps* ops_ = nullptr;
  int64_t index_ = 0;
  int64_t cache_layer_ = 0;  ///< Its layer in the stage's KV cache.
  /// An expert layer's routed (and shared) experts in place of fc1/fc2: over the
  /// context's EP and ETP groups when ep > 1, else over the tp ranks as the ETP group
  /// (ep_self_: the one-rank EP group).
  std::unique_ptr<Communicator> ep_self_;
  std::unique_ptr<MoeLayer> moe_;
  int64_t heads_local_ = 0, groups_local_ = 0, ffn_local_ = 0, qkv_width_ = 0;
  Tensor norm1_w_, norm2_w_;
  WeightOnlyLinear qkv_, proj_, fc1_, fc2_;
  /// With weight_quant: the local experts' fc1 / fc2 (index le) and the shared experts'
  /// (last entry, when there are shared experts), weight-only quantized; MoeLayer runs them.
  std::vector<WeightOnlyLinear> expert_fc1_, expert_fc2_;
  LayerPhaseTimes times_;
};

/// The values of an RMSNorm weight of the training layer: 1 + 0.1·u(i), in `dtype`.
absl::StatusOr<Tensor> MakeNormWeight(Backend& backend, uint64_t seed, const char* name, int64_t h,
                                      DType dtype = DType::kF32);

/// Times the phases of a step when ServingConfig::phase_timing is on (else Start and Stop
/// do nothing): Start and Stop read the clock, on a device backend after waiting for the
/// queued work.
class PhaseClock {
 public:
  PhaseClock(Backend& backend, bool phase_timing)
      : backend_(backend),
        on_(phase_timing),
        sync_(phase_timing && backend.kind() != BackendKind::kCpu) {}
  absl::Status Start();
  /// Adds the seconds since Start to *seconds.
  absl::Status Stop(double* seconds);

 private:
  Backend& backend_;
  bool on_ = true;
  bool sync_ = false;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_SERVING_LAYER_H_
