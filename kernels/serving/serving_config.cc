#include "kernels/serving/serving_config.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace paratune::kernels::serving {

const char* ToString(WeightQuant q) {
  switch (q) {
    case WeightQuant::kNone:
      return "none";
    case WeightQuant::kInt8:
      return "int8";
    case WeightQuant::kInt4:
      return "int4";
  }
  return "none";
}

absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view s) {
  for (WeightQuant q : {WeightQuant::kNone, WeightQuant::kInt8, WeightQuant::kInt4}) {
    if (s == ToString(q)) return q;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown weight quantization '", s, "' (expected none, int8, int4)"));
}

LayerConfig ServingConfig::AsLayerConfig(int64_t seq_length, int64_t index) const {
  LayerConfig layer;
  layer.attention_window = LayerAttentionWindow(attention_window, window_attn_skip_freq, index);
  layer.shape = shape;
  layer.parallel = parallel;
  layer.seq_length = seq_length;
  layer.dtype = DType::kF32;
  layer.flash_attention = true;
  layer.seed = seed;
  layer.norm_epsilon = norm_epsilon;
  return layer;
}

MoeLayerConfig ServingConfig::ExpertBlock() const {
  MoeLayerConfig block = moe.value_or(MoeLayerConfig());
  block.hidden = shape.hidden_size;
  block.ep = parallel.ep;
  block.etp = parallel.ep > 0 && parallel.tp % parallel.ep == 0 ? parallel.tp / parallel.ep : 1;
  // With attention data parallelism each rank holds its own tokens: dispatched all-to-all.
  block.tokens_replicated = !attention_dp;
  block.forward_only = true;
  // Weight-only quantized experts run outside MoeLayer (ServingLayer::QuantizeExperts).
  block.external_expert_mlps = weight_quant != WeightQuant::kNone;
  block.routing = ExpertRouting::kDropless;  // the engines route by the real top-k
  block.capacity_factor = 0;
  block.aux_loss_coeff = 0;
  return block;
}

absl::Status ServingConfig::Validate() const {
  if (absl::Status s = AsLayerConfig(1).Validate(); !s.ok()) return s;
  if (shape.normalization != Normalization::kRmsNorm) {
    return absl::UnimplementedError(
        "normalization (layernorm) is not implemented by the "
        "serving kernels (expected rmsnorm)");
  }
  if (shape.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size (", shape.vocab_size, ") must be positive"));
  }
  if (parallel.dp != 1 || parallel.sequence_parallel) {
    return absl::UnimplementedError(
        "the serving kernels run tensor and pipeline parallelism only (dp must be 1, no "
        "sequence parallelism)");
  }
  if (absl::Status s = CheckAttentionWindow(attention_window, window_attn_skip_freq); !s.ok()) {
    return s;
  }
  for (auto [field, v] : {std::pair<absl::string_view, int64_t>{"num_layers", num_layers},
                          {"kv_block_size", kv_block_size},
                          {"num_kv_blocks", num_kv_blocks},
                          {"threads", threads}}) {
    if (v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be positive"));
    }
  }
  if (parallel.pp < 1 || parallel.pp > num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp (", parallel.pp, ") must be in [1, num_layers (", num_layers, ")]"));
  }
  if (stage < 0 || stage >= parallel.pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage (", stage, ") must be in [0, pp (", parallel.pp, "))"));
  }
  if (parallel.pp > 1 && attention_dp) {
    return absl::InvalidArgumentError("attention_dp does not run with pp > 1");
  }
  if (position_embedding == PositionEmbedding::kRope && head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim (", head_dim(), ") must be even with rope"));
  }
  if (kv_dtype != DType::kF32 && kv_dtype != DType::kBF16 && kv_dtype != DType::kFp8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_dtype (", DTypeName(kv_dtype), ") must be fp32, bf16 or fp8"));
  }
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype (", DTypeName(dtype), ") must be fp32, bf16 or fp16"));
  }
  if (weight_quant != WeightQuant::kNone && dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("weight_quant (", ToString(weight_quant),
                                                   ") needs dtype fp32 (", DTypeName(dtype), ")"));
  }
  if (parallel.ep < 1 || parallel.tp % parallel.ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep (", parallel.ep, ") must divide tp (", parallel.tp, ")"));
  }
  if (parallel.ep > 1 && !moe.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep (", parallel.ep, ") must be 1 without experts"));
  }
  if (attention_dp && (!moe.has_value() || parallel.ep != parallel.tp)) {
    return absl::InvalidArgumentError(absl::StrCat("attention_dp needs experts and ep (",
                                                   parallel.ep, ") = tp (", parallel.tp, ")"));
  }
  if (moe.has_value()) {
    if (absl::Status s = ExpertBlock().Validate(); !s.ok()) return s;
    if (first_k_dense_layers < 0 || moe_layer_freq <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("first_k_dense_layers (", first_k_dense_layers,
                                                     ") must be >= 0 and moe_layer_freq (",
                                                     moe_layer_freq, ") positive"));
    }
  }
  if (weight_quant == WeightQuant::kInt4) {
    const int64_t tp = attention_tp();
    std::vector<int64_t> ks = {shape.hidden_size, shape.num_attention_heads * head_dim() / tp,
                               ffn_hidden_size() / tp};
    if (moe.has_value()) {  // the experts' fc2 inputs: their slices of the FFN
      const MoeLayerConfig block = ExpertBlock();
      ks.push_back(block.ffn_hidden / block.etp);
      if (block.num_shared_experts > 0)
        ks.push_back(block.shared_ffn_total() / block.shared_split());
    }
    for (int64_t k : ks) {
      if (int4_group_size <= 0 || int4_group_size % 2 != 0 || k % int4_group_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("int4_group_size (", int4_group_size,
                         ") must be even and divide every linear input width (", k, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace paratune::kernels::serving
