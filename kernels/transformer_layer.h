// One Megatron GPT transformer layer on one tensor-parallel rank (pre-norm):
//
//   h1 = x  + dropout(RowParallel(attention(ColumnParallel_qkv(norm1(x)))))
//   y  = h1 + dropout(RowParallel_fc2(act(ColumnParallel_fc1(norm2(h1)))))
//
// x and y are [s·b, h] rows in [s, b] order ([s/t·b, h] with sequence parallelism). The
// layer stores for backward exactly the tensors Korthikanti et al. count (see
// SavedActivations), and recompute decides which: none keeps all; selective drops the
// attention core (softmax output, its dropout mask and output, or flash's log-sum-exp) and
// recomputes it in backward; full keeps only x and reruns the forward in backward.
// A mixture-of-experts layer (config.moe.num_experts > 0) runs kernels/moe_layer.h's block
// in place of the MLP: y = h1 + dropout(MoE(norm2(h1))), on the rank's s/t·b rows (etp 1)
// or on the TP group's gathered s·b rows, keeping its own rows of the output (etp = tp).
// Thread-safety: one layer belongs to one rank (thread). One micro-batch in flight.
#ifndef PARATUNE_KERNELS_TRANSFORMER_LAYER_H_
#define PARATUNE_KERNELS_TRANSFORMER_LAYER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/layer_config.h"
#include "kernels/parallel_context.h"
#include "kernels/parallel_linear.h"

namespace paratune::kernels {

/// Tensors kept between forward and backward (undefined when not kept).
struct SavedActivations {
  Tensor x;           ///< norm1 input (layer input)                 [N_sp, h]
  Tensor ln1_mean;    ///< norm1 statistics, fp32                    [N_sp]
  Tensor ln1_rstd;
  Tensor ln1_out;     ///< QKV linear input                          [N_sp, h]
  Tensor qkv;         ///< Q, K, V (inputs of QKᵀ and of P·V)        [N, (a+2g)/t·d]
  Tensor probs;       ///< naive: softmax output                     [b, a/t, s, s]
  Tensor attn_mask;   ///< naive: attention dropout mask (u8)        [b, a/t, s, s]
  Tensor probs_drop;  ///< naive: attention dropout output           [b, a/t, s, s]
  Tensor lse;         ///< flash: softmax log-sum-exp, fp32          [b, a/t, s]
  Tensor ctx;         ///< output projection input                   [N, a/t·d]
  Tensor drop1_mask;  ///< attention-block dropout mask (u8)         [N_sp, h]
  Tensor h1;          ///< norm2 input                               [N_sp, h]
  Tensor ln2_mean;
  Tensor ln2_rstd;
  Tensor ln2_out;     ///< FC1 input                                 [N_sp, h]
  Tensor fc1_out;     ///< activation input                          [N, f/t or 2f/t]
  Tensor act;         ///< FC2 input                                 [N, f/t]
  Tensor drop2_mask;  ///< MLP-block dropout mask (u8)               [N_sp, h]
  MoeSaved moe;       ///< MoE layer: the block's routing and activations

  /// (name, bytes) of every kept tensor, storage shared between entries counted once.
  std::vector<std::pair<std::string, int64_t>> Breakdown() const;
  int64_t TotalBytes() const;
};

/// Seconds of the last forward / backward, split as the step runner reports them.
struct LayerTimes {
  double recompute_s = 0;  ///< Forward work redone inside Backward.
};

class TransformerLayer {
 public:
  /// Builds rank ctx.tp_rank()'s shard; weights are a function of config.seed and the
  /// unsharded index, so every TP layout holds the same logical weights.
  static absl::StatusOr<std::unique_ptr<TransformerLayer>> Create(const LayerConfig& config,
                                                                  const ParallelContext& ctx);

  /// x: [N_sp, h]. Keeps what backward needs according to config.parallel.recompute.
  absl::StatusOr<Tensor> Forward(const Tensor& x);
  /// dy: [N_sp, h] → dx; parameter gradients accumulate (+=). Frees the saved tensors.
  absl::StatusOr<Tensor> Backward(const Tensor& dy);
  /// With sequence parallelism, all-reduces the norm-weight gradients over TP (each rank
  /// saw only its s/t rows). Call once after the micro-batches of a step.
  absl::Status FinishGradients();
  absl::Status ZeroGradients();

  /// The dense parameters (every parameter of a dense layer; a MoE layer's norms and
  /// attention).
  std::vector<Parameter*> Parameters();
  /// A MoE layer's router and shared experts (routed_experts false: reduced over DP as the
  /// dense ones) or routed experts (true: reduced over the expert-data-parallel group);
  /// empty for a dense layer.
  std::vector<ParameterRef> MoeParameterRefs(bool routed_experts);
  const SavedActivations& saved() const { return saved_; }
  const LayerTimes& times() const { return times_; }
  const LayerConfig& config() const { return config_; }
  /// Rows of x on this rank (s·b, or s/t·b with SP) and the dropout row offset.
  int64_t local_rows() const;

 private:
  TransformerLayer(const LayerConfig& config, const ParallelContext& ctx);
  absl::Status Init();
  /// The forward; stores into *s according to `mode`.
  absl::StatusOr<Tensor> ForwardImpl(const Tensor& x, Recompute mode, SavedActivations* s);
  absl::StatusOr<Tensor> Norm(int which, const Tensor& x, Tensor* mean, Tensor* rstd);
  absl::StatusOr<Tensor> NormBackward(int which, const Tensor& dy, const Tensor& x,
                                      const Tensor& mean, const Tensor& rstd);
  /// Attention core: qkv → ctx. Fills probs/mask/probs_drop or lse when `keep`.
  absl::StatusOr<Tensor> AttentionForward(const Tensor& qkv, bool keep, SavedActivations* s);
  absl::StatusOr<Tensor> AttentionBackward(const Tensor& dctx, SavedActivations* s);
  absl::StatusOr<Tensor> Dropout(const Tensor& x, float p, uint64_t seed, Tensor* mask);
  /// The MoE block on x [N_sp, h] (gathered over ETP when etp > 1); stores into s->moe
  /// when `keep`.
  absl::StatusOr<Tensor> MoeForward(const Tensor& x, bool keep, SavedActivations* s);
  absl::StatusOr<Tensor> MoeBackward(const Tensor& dy, SavedActivations* s);
  /// [N_sp, h] rows of every ETP rank, concatenated in rank order; and this rank's rows.
  absl::StatusOr<Tensor> GatherExpertRows(const Tensor& x);
  absl::StatusOr<Tensor> OwnExpertRows(const Tensor& full, int64_t rows);
  struct AttentionArgs MakeAttentionArgs(const Tensor& qkv, const Tensor& ctx) const;

  LayerConfig config_;
  ParallelContext ctx_;
  int64_t heads_local_ = 0, groups_local_ = 0, ffn_local_ = 0, qkv_width_ = 0;
  Parameter norm1_w_, norm1_b_, norm2_w_, norm2_b_;
  std::unique_ptr<ColumnParallelLinear> qkv_;
  std::unique_ptr<RowParallelLinear> proj_;
  std::unique_ptr<ColumnParallelLinear> fc1_;
  std::unique_ptr<RowParallelLinear> fc2_;
  std::unique_ptr<MoeLayer> moe_;
  SavedActivations saved_;
  LayerTimes times_;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_TRANSFORMER_LAYER_H_
