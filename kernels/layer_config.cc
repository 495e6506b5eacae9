#include "kernels/layer_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace paratune::kernels {

absl::Status CheckAttentionWindow(int64_t window, int64_t skip_freq) {
  if (window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention_window (", window, ") must not be negative"));
  }
  if (skip_freq < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("window_attn_skip_freq (", skip_freq, ") must not be negative"));
  }
  return absl::OkStatus();
}

absl::Status LayerConfig::Validate() const {
  const int64_t tp = parallel.tp;
  auto positive = [](absl::string_view field, int64_t v) -> absl::Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be positive"));
    return absl::OkStatus();
  };
  for (auto [field, v] : {std::pair<absl::string_view, int64_t>{"hidden_size", shape.hidden_size},
                          {"num_attention_heads", shape.num_attention_heads},
                          {"tp", tp},
                          {"micro_batch_size", parallel.micro_batch_size},
                          {"seq_length", seq_length}}) {
    if (absl::Status s = positive(field, v); !s.ok()) return s;
  }
  const int64_t a = shape.num_attention_heads, g = num_query_groups();
  if (shape.kv_channels < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_channels (", shape.kv_channels, ") must not be negative"));
  }
  if (absl::Status s = CheckAttentionWindow(attention_window, 0); !s.ok()) return s;
  if (shape.kv_channels == 0 && shape.hidden_size % a != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads (", a,
                                                   ") must divide hidden_size (",
                                                   shape.hidden_size, ")"));
  }
  if (g <= 0 || a % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_query_groups (", g, ") must divide num_attention_heads (", a, ")"));
  }
  if (a % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp (", tp, ") must divide num_attention_heads (", a, ")"));
  }
  if (g % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp (", tp, ") must divide num_query_groups (", g, ")"));
  }
  if (ffn_hidden_size() % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tp (", tp, ") must divide ffn_hidden_size (",
                                                   ffn_hidden_size(), ")"));
  }
  if (shape.vocab_size < 0 || shape.vocab_size % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size (", shape.vocab_size, ") must be >= 0 and divisible by tp (", tp, ")"));
  }
  if (parallel.cp != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "context parallelism (cp ", parallel.cp, ") is not implemented by the kernels"));
  }
  if (parallel.sequence_parallel && seq_length % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp (", tp, ") must divide seq_length (", seq_length, ") with sequence_parallel"));
  }
  if (hidden_dropout < 0 || hidden_dropout >= 1 || attention_dropout < 0 ||
      attention_dropout >= 1) {
    return absl::InvalidArgumentError("hidden_dropout and attention_dropout must be in [0, 1)");
  }
  if (dtype == DType::kU8 || dtype == DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype (", DTypeName(dtype), ") must be a floating-point type"));
  }
  if (is_moe()) {
    if (!mlp) {
      return absl::InvalidArgumentError(
          "mlp must be true in a mixture-of-experts layer (the experts are its MLP block)");
    }
    if (absl::Status s = moe.Validate(); !s.ok()) return s;
    if (moe.hidden != shape.hidden_size || moe.ep != parallel.ep || moe.etp != parallel.etp) {
      return absl::InvalidArgumentError(
          absl::StrCat("the MoE block's hidden (", moe.hidden, "), ep (", moe.ep, ") and etp (",
                       moe.etp, ") must equal hidden_size (", shape.hidden_size, "), ep (",
                       parallel.ep, ") and etp (", parallel.etp, ")"));
    }
    if (moe.etp != 1 && moe.etp != tp) {
      return absl::UnimplementedError(absl::StrCat("etp (", moe.etp, ") must be 1 or tp (", tp,
                                                   ") in a mixture-of-experts layer"));
    }
    if (tp > 1 && !parallel.sequence_parallel) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence_parallel is required with tp (", tp,
                       ") > 1 in a mixture-of-experts layer (as Megatron-LM requires)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace paratune::kernels
