// Validation rules and names of the job specification (see specs.h).
//
// Sizes have upper bounds so that every product the memory and time models form (parameter
// bytes, activation bytes, FLOPs) stays far inside 64-bit integers and exactly
// representable in doubles; a spec beyond them is rejected here, naming the field, rather
// than producing a negative memory figure later.
#include "search/specs.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/device_catalog.h"
#include "search/framework_profile.h"

namespace paratune {
namespace {

constexpr int64_t kMaxNumLayers = int64_t{1} << 14;         // 16384
constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;        // 1048576
constexpr int64_t kMaxFfnHiddenSize = int64_t{1} << 22;     // 4194304
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;         // 16777216
constexpr int64_t kMaxSeqLength = int64_t{1} << 24;         // 16777216
constexpr int64_t kMaxGlobalBatchSize = int64_t{1} << 24;   // 16777216
constexpr int64_t kMaxNumGpus = int64_t{1} << 20;           // 1048576
constexpr int64_t kMaxGpusPerNode = 1024;
constexpr int64_t kMaxParallelSize = int64_t{1} << 20;      // any tp/pp/dp/cp/vp/mb value
constexpr int64_t kMaxTopK = 100000;
constexpr double kMaxBandwidthGbps = 1e6;                   // 1 PB/s per GPU
constexpr double kMaxMemoryGib = 1e6;
// Model parameters: 1e15 parameters are 18 PB of weights, gradients and Adam state.
constexpr double kMaxParameters = 1e15;
// Products of sizes that the models form in integers: tokens x hidden per step, and
// attention scores (heads x s^2 x batch) without flash attention.
constexpr double kMaxTokenElements = 72057594037927936.0;   // 2^56
constexpr double kMaxScoreElements = 288230376151711744.0;  // 2^58

std::string Positive(const std::string& field, int64_t v) {
  return absl::StrCat(field, " (", v, ") must be positive");
}

absl::Status CheckRange(const std::string& field, int64_t v, int64_t max) {
  if (v <= 0) return absl::InvalidArgumentError(Positive(field, v));
  if (v > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " (", v, ") must be at most ", max,
        " (larger sizes overflow 64-bit arithmetic in the memory and time models)"));
  }
  return absl::OkStatus();
}

absl::Status CheckOverride(const std::string& field, double v, double max) {
  if (!std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be finite"));
  }
  if (v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " (", v, ") must not be negative (0 = catalog value)"));
  }
  if (v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " (", v, ") must be at most ", max));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CheckNoDuplicates(const std::string& field, const std::vector<T>& values) {
  std::set<T> seen;
  for (const T& v : values) {
    if (!seen.insert(v).second) {
      if constexpr (std::is_same_v<T, bool>) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " lists ", v ? "true" : "false", " twice"));
      } else if constexpr (std::is_same_v<T, Recompute> || std::is_same_v<T, MoeTokenDispatcher> ||
                           std::is_same_v<T, DataParallelSharding>) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " lists '", ToString(v), "' twice"));
      } else {
        return absl::InvalidArgumentError(absl::StrCat(field, " lists ", v, " twice"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSizeList(const std::string& field, const std::vector<int64_t>& values,
                           int64_t max) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (auto s = CheckRange(absl::StrCat(field, "[", i, "]"), values[i], max); !s.ok()) {
      return s;
    }
  }
  return CheckNoDuplicates(field, values);
}

/// A display name: at most kMaxSpecNameBytes bytes of UTF-8, no control characters (they
/// would rewrite terminals and logs that print it).
absl::Status CheckName(const char* field, const std::string& name) {
  if (name.size() > kMaxSpecNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", name.size(),
                                                   " bytes; the limit is ", kMaxSpecNameBytes,
                                                   " bytes"));
  }
  for (size_t i = 0; i < name.size();) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " has a control character (byte ", static_cast<int>(c), " at offset ", i,
          "); names must be printable"));
    }
    // UTF-8: the sequence length from the lead byte, then continuation bytes; overlong
    // forms, surrogates and code points past U+10FFFF are refused (RFC 3629).
    size_t length = 0;  // 0: not a lead byte
    if (c < 0x80) {
      length = 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
    }
    bool valid = length > 0 && i + length <= name.size();
    for (size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(name[i + k]) & 0xc0) == 0x80;
    }
    if (valid && length >= 3) {
      const unsigned char c1 = static_cast<unsigned char>(name[i + 1]);
      valid = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) &&
              !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(field, " is not valid UTF-8 (byte ",
                                                     static_cast<int>(c), " at offset ", i, ")"));
    }
    i += length;
  }
  return absl::OkStatus();
}

absl::Status CheckListLength(const char* field, size_t entries) {
  if (entries > kMaxSearchListEntries) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", entries,
                                                   " entries; the limit is ",
                                                   kMaxSearchListEntries));
  }
  return absl::OkStatus();
}

/// Approximate parameter count (embeddings + layers), in double so it cannot overflow.
double ApproxParameters(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double kv = h * static_cast<double>(m.num_query_groups) /
                    static_cast<double>(m.num_attention_heads);
  const double mlp_matrices = IsGated(m.activation) ? 3.0 : 2.0;
  // Every layer counted as an expert layer too (an upper bound), in doubles.
  const double experts =
      static_cast<double>(m.num_experts) * static_cast<double>(m.moe_ffn_hidden_size) +
      static_cast<double>(m.num_shared_experts) *
          static_cast<double>(m.shared_expert_ffn_hidden_size);
  const double head_dim =
      static_cast<double>(std::max({m.kv_channels, m.qk_head_dim + m.qk_rope_head_dim, m.v_head_dim,
                                    m.hidden_size / std::max<int64_t>(m.num_attention_heads, 1)}));
  const double attention = 4.0 * h * static_cast<double>(m.num_attention_heads) * head_dim +
                           h * static_cast<double>(m.q_lora_rank + m.kv_lora_rank);
  const double per_layer = attention + 2.0 * h * kv +
                           mlp_matrices * h * (static_cast<double>(m.ffn_hidden_size) + experts);
  const double embeddings = (m.tie_embeddings ? 1.0 : 2.0) * static_cast<double>(m.vocab_size) * h;
  return static_cast<double>(m.num_layers) * per_layer + embeddings;
}

/// A size that may be 0 (not used) but not negative or beyond `max`.
absl::Status CheckOptionalSize(const std::string& field, int64_t v, int64_t max) {
  if (v == 0) return absl::OkStatus();
  if (v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must not be negative"));
  }
  return CheckRange(field, v, max);
}

constexpr int64_t kMaxExperts = 1 << 16;

/// The mixture-of-experts fields (num_experts > 1 or any of them given), the head
/// dimension and the attention type with its MLA ranks.
// Group-limited routing: both fields or neither; the groups split the experts and the
// chosen groups hold at least moe_router_topk of them.
absl::Status ValidateRouterGroups(const ModelSpec& m) {
  const int64_t groups = m.moe_router_num_groups, chosen = m.moe_router_group_topk;
  if (groups == 0 && chosen == 0) return absl::OkStatus();
  if (groups == 0 || chosen == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.moe_router_num_groups (", groups, ") and model.moe_router_group_topk (",
                     chosen, ") are set together (group-limited routing) or both left 0"));
  }
  if (m.num_experts % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.moe_router_num_groups (", groups,
                                                   ") must divide model.num_experts (",
                                                   m.num_experts, ")"));
  }
  if (chosen > groups) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.moe_router_group_topk (", chosen,
                     ") must be at most model.moe_router_num_groups (", groups, ")"));
  }
  const int64_t reachable = chosen * (m.num_experts / groups);
  if (m.moe_router_topk > reachable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.moe_router_topk (", m.moe_router_topk, ") must be at most the ", reachable,
        " experts of the model.moe_router_group_topk (", chosen, ") groups a token may use"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMoeAndAttention(const ModelSpec& m) {
  if (auto s = CheckOptionalSize("model.kv_channels", m.kv_channels, kMaxHiddenSize); !s.ok()) {
    return s;
  }
  if (m.num_experts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_experts (", m.num_experts, ") must not be negative"));
  }
  if (m.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_experts (", m.num_experts, ") must be at most ", kMaxExperts));
  }
  const std::pair<const char*, int64_t> sizes[] = {
      {"model.moe_ffn_hidden_size", m.moe_ffn_hidden_size},
      {"model.shared_expert_ffn_hidden_size", m.shared_expert_ffn_hidden_size},
      {"model.q_lora_rank", m.q_lora_rank},
      {"model.kv_lora_rank", m.kv_lora_rank},
      {"model.qk_head_dim", m.qk_head_dim},
      {"model.qk_rope_head_dim", m.qk_rope_head_dim},
      {"model.v_head_dim", m.v_head_dim}};
  for (const auto& [field, v] : sizes) {
    if (auto s = CheckOptionalSize(field, v, kMaxFfnHiddenSize); !s.ok()) return s;
  }
  const std::pair<const char*, int64_t> counts[] = {
      {"model.moe_router_topk", m.moe_router_topk},
      {"model.num_shared_experts", m.num_shared_experts},
      {"model.first_k_dense_layers", m.first_k_dense_layers},
      {"model.mtp_layers", m.mtp_layers},
      {"model.moe_router_num_groups", m.moe_router_num_groups},
      {"model.moe_router_group_topk", m.moe_router_group_topk}};
  for (const auto& [field, v] : counts) {
    if (auto s = CheckOptionalSize(field, v, kMaxExperts); !s.ok()) return s;
  }
  if (auto s = CheckRange("model.moe_layer_freq", m.moe_layer_freq, kMaxNumLayers); !s.ok()) {
    return s;
  }
  if (m.num_experts > 1) {
    if (m.moe_router_topk < 1 || m.moe_router_topk > m.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.moe_router_topk (", m.moe_router_topk, ") must be in [1, model.num_experts (",
          m.num_experts, ")] for a mixture-of-experts model"));
    }
    if (m.moe_ffn_hidden_size == 0) {
      return absl::InvalidArgumentError(
          "model.moe_ffn_hidden_size is required for a mixture-of-experts model "
          "(model.num_experts > 1): the FFN width of one routed expert");
    }
    if (m.first_k_dense_layers >= m.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.first_k_dense_layers (", m.first_k_dense_layers,
                       ") must be less than model.num_layers (", m.num_layers,
                       ") for a mixture-of-experts "
                       "model"));
    }
    if (auto s = ValidateRouterGroups(m); !s.ok()) return s;
  } else {
    const std::pair<const char*, int64_t> moe_only[] = {
        {"model.moe_router_topk", m.moe_router_topk},
        {"model.moe_ffn_hidden_size", m.moe_ffn_hidden_size},
        {"model.num_shared_experts", m.num_shared_experts},
        {"model.shared_expert_ffn_hidden_size", m.shared_expert_ffn_hidden_size},
        {"model.first_k_dense_layers", m.first_k_dense_layers},
        {"model.moe_router_num_groups", m.moe_router_num_groups},
        {"model.moe_router_group_topk", m.moe_router_group_topk}};
    for (const auto& [field, v] : moe_only) {
      if (v != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, " (", v, ") applies only to mixture-of-experts models (model.num_experts (",
            m.num_experts, ") must be > 1)"));
      }
    }
    if (m.moe_layer_freq != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.moe_layer_freq (", m.moe_layer_freq,
          ") applies only to mixture-of-experts models (model.num_experts must be > 1)"));
    }
  }
  if (m.num_shared_experts == 0 && m.shared_expert_ffn_hidden_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.shared_expert_ffn_hidden_size (",
                                                   m.shared_expert_ffn_hidden_size,
                                                   ") needs model.num_shared_experts > 0"));
  }
  switch (m.attention) {
    case AttentionType::kMha:  // g == a or not is num_query_groups' business.
    case AttentionType::kGqa:
      break;
    case AttentionType::kMla: {
      const std::pair<const char*, int64_t> ranks[] = {
          {"model.kv_lora_rank", m.kv_lora_rank},
          {"model.qk_head_dim", m.qk_head_dim},
          {"model.qk_rope_head_dim", m.qk_rope_head_dim},
          {"model.v_head_dim", m.v_head_dim}};
      for (const auto& [field, v] : ranks) {
        if (v <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, " (", v, ") must be positive with model.attention mla"));
        }
      }
      break;
    }
  }
  if (m.attention != AttentionType::kMla) {
    const std::pair<const char*, int64_t> mla_only[] = {
        {"model.q_lora_rank", m.q_lora_rank},
        {"model.kv_lora_rank", m.kv_lora_rank},
        {"model.qk_head_dim", m.qk_head_dim},
        {"model.qk_rope_head_dim", m.qk_rope_head_dim},
        {"model.v_head_dim", m.v_head_dim}};
    for (const auto& [field, v] : mla_only) {
      if (v != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, " (", v, ") applies only with model.attention mla (model.attention is ",
            ToString(m.attention), ")"));
      }
    }
  }
  return absl::OkStatus();
}

// A field of Megatron-Core's numerics (grad_reduce_in_fp32, fp8_param_gather,
// optimizer_state_dtype) named under a framework without them; `lacks` says why.
absl::Status NeedsMegatronNumerics(const char* field, Framework framework, const char* lacks) {
  if (ProfileOf(framework).megatron_numerics) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("training.", field, " needs training.framework megatron-core or nemo (",
                   ToString(framework), " ", lacks, ")"));
}

// A Megatron-Core numerics field named for FP32 training, which `keeps` its own.
absl::Status NeedsSixteenBitTraining(const char* field, Precision precision, const char* what,
                                     const char* keeps) {
  if (precision != Precision::kFp32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("training.", field, " applies to ", what,
                                                 " training (training.precision fp32 keeps ", keeps,
                                                 ")"));
}

}  // namespace

absl::Status ModelSpec::Validate() const {
  if (auto s = CheckName("model.name", name); !s.ok()) return s;
  if (auto s = CheckRange("model.num_layers", num_layers, kMaxNumLayers); !s.ok()) return s;
  if (auto s = CheckRange("model.hidden_size", hidden_size, kMaxHiddenSize); !s.ok()) return s;
  if (num_attention_heads <= 0) {
    return absl::InvalidArgumentError(Positive("model.num_attention_heads", num_attention_heads));
  }
  // The head dimension is hidden / heads unless kv_channels gives it (GLM-4.5: 96 heads of
  // 128 on a 5120-wide residual, as Megatron's --kv-channels allows).
  if (kv_channels <= 0 && hidden_size % num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.hidden_size (", hidden_size, ") must be divisible by model.num_attention_heads (",
        num_attention_heads, ") unless model.kv_channels gives the head dimension"));
  }
  if (num_query_groups <= 0) {
    return absl::InvalidArgumentError(Positive("model.num_query_groups", num_query_groups));
  }
  if (num_attention_heads % num_query_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.num_attention_heads (", num_attention_heads,
        ") must be divisible by model.num_query_groups (", num_query_groups, ")"));
  }
  if (auto s = CheckRange("model.ffn_hidden_size", ffn_hidden_size, kMaxFfnHiddenSize);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckRange("model.vocab_size", vocab_size, kMaxVocabSize); !s.ok()) return s;
  if (max_position_embeddings < 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.max_position_embeddings (",
                                                   max_position_embeddings,
                                                   ") must not be negative"));
  }
  if (max_position_embeddings > kMaxSeqLength) {
    return absl::InvalidArgumentError(absl::StrCat("model.max_position_embeddings (",
                                                   max_position_embeddings,
                                                   ") must be at most ", kMaxSeqLength));
  }
  if (sliding_window < 0 || sliding_window > kMaxSeqLength) {
    return absl::InvalidArgumentError(absl::StrCat("model.sliding_window (", sliding_window,
                                                   ") must be in [0, ", kMaxSeqLength,
                                                   "] (0: no sliding window)"));
  }
  if (window_attn_skip_freq < 0 || window_attn_skip_freq > kMaxNumLayers) {
    return absl::InvalidArgumentError(absl::StrCat("model.window_attn_skip_freq (",
                                                   window_attn_skip_freq, ") must be in [0, ",
                                                   kMaxNumLayers, "] (0: every layer windowed)"));
  }
  if (window_attn_skip_freq > 0 && sliding_window == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.window_attn_skip_freq (", window_attn_skip_freq,
                     ") needs model.sliding_window: it says which layers skip the window"));
  }
  if (auto s = ValidateMoeAndAttention(*this); !s.ok()) return s;
  const double params = ApproxParameters(*this);
  if (params > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model (num_layers ", num_layers, ", hidden_size ", hidden_size, ", ffn_hidden_size ",
        ffn_hidden_size, ", vocab_size ", vocab_size, ") has about ", params,
        " parameters; at most 1e15 are supported"));
  }
  return absl::OkStatus();
}

bool IsOptimizerStateDtype(Precision dtype) {
  return dtype == Precision::kFp32 || dtype == Precision::kBf16 || dtype == Precision::kFp16 ||
         dtype == Precision::kFp8;
}

double TrainingSpec::GradientBytes() const {
  if (precision == Precision::kFp32) return 4.0;
  if (grad_reduce_in_fp32.has_value()) return *grad_reduce_in_fp32 ? 4.0 : 2.0;
  return GradientReduceBytes(framework, precision);
}

bool TrainingSpec::Fp8ParamGather() const {
  if (fp8_param_gather.has_value()) return *fp8_param_gather;
  return precision == Precision::kFp8 && ProfileOf(framework).fp8_param_gather_by_default;
}

absl::Status TrainingSpec::Validate() const {
  if (auto s = CheckRange("training.seq_length", seq_length, kMaxSeqLength); !s.ok()) return s;
  if (auto s = CheckRange("training.global_batch_size", global_batch_size, kMaxGlobalBatchSize);
      !s.ok()) {
    return s;
  }
  if (total_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.total_tokens (", total_tokens, ") must not be negative (0 = not given)"));
  }
  if (!std::isfinite(moe_capacity_factor) || moe_capacity_factor < 0 ||
      moe_capacity_factor > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("training.moe_capacity_factor (",
                                                   moe_capacity_factor,
                                                   ") must be in [0, 1000] (0 = not given)"));
  }
  if (moe_routing == MoeRouting::kCapacity && moe_capacity_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.moe_capacity_factor (", moe_capacity_factor,
                     ") must be at least 1 with training.moe_routing capacity"));
  }
  if (moe_routing != MoeRouting::kCapacity && moe_capacity_factor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.moe_capacity_factor (", moe_capacity_factor,
                     ") applies only with training.moe_routing capacity (training.moe_routing is ",
                     ToString(moe_routing), ")"));
  }
  if (grad_reduce_in_fp32.has_value()) {
    if (auto s = NeedsMegatronNumerics("grad_reduce_in_fp32", framework,
                                       "sets its gradient dtype itself");
        !s.ok()) {
      return s;
    }
    if (auto s = NeedsSixteenBitTraining("grad_reduce_in_fp32", precision, "16-bit and FP8",
                                         "FP32 gradients");
        !s.ok()) {
      return s;
    }
  }
  if (fp8_param_gather.value_or(false)) {
    if (precision != Precision::kFp8 && precision != Precision::kMxfp8) {
      return absl::InvalidArgumentError(
          absl::StrCat("training.fp8_param_gather needs training.precision fp8 or mxfp8 (got ",
                       ToString(precision), ")"));
    }
    if (auto s = NeedsMegatronNumerics("fp8_param_gather", framework, "has no FP8 parameters");
        !s.ok()) {
      return s;
    }
  }
  if (optimizer_state_dtype.has_value()) {
    if (!IsOptimizerStateDtype(*optimizer_state_dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("training.optimizer_state_dtype must be fp32, bf16, fp16 or fp8 (got ",
                       ToString(*optimizer_state_dtype), ")"));
    }
    if (auto s = NeedsMegatronNumerics("optimizer_state_dtype", framework,
                                       "has no precision-aware optimizer");
        !s.ok()) {
      return s;
    }
    if (auto s = NeedsSixteenBitTraining("optimizer_state_dtype", precision,
                                         "16-bit and low-precision", "its FP32 optimizer");
        !s.ok()) {
      return s;
    }
  }
  if (recompute_modules.empty()) {
    return absl::InvalidArgumentError(
        "training.recompute_modules must name at least one module; to recompute nothing, set "
        "search.recompute: [none]");
  }
  for (size_t i = 0; i < recompute_modules.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (recompute_modules[j] == recompute_modules[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("training.recompute_modules[", i, "] (", ToString(recompute_modules[i]),
                         ") repeats training.recompute_modules[", j, "]: each module once"));
      }
    }
  }
  if (offload_modules.empty()) {
    return absl::InvalidArgumentError(
        "training.offload_modules must name at least one module; to offload nothing, set "
        "search.activation_offload: [false]");
  }
  for (size_t i = 0; i < offload_modules.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (offload_modules[j] == offload_modules[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("training.offload_modules[", i, "] (", ToString(offload_modules[i]),
                         ") repeats training.offload_modules[", j, "]: each module once"));
      }
    }
  }
  return absl::OkStatus();
}

AttentionKernel TrainingSpec::AttentionKernelOf() const {
  if (IsFlash(attention_kernel) == flash_attention) return attention_kernel;
  return flash_attention ? AttentionKernel::kFlash2 : AttentionKernel::kFused;
}

bool TrainingSpec::Offloads(OffloadModule module) const {
  return std::find(offload_modules.begin(), offload_modules.end(), module) !=
         offload_modules.end();
}

bool TrainingSpec::Recomputes(RecomputeModule module) const {
  return std::find(recompute_modules.begin(), recompute_modules.end(), module) !=
         recompute_modules.end();
}

int64_t ClusterSpec::NvlinkDomain() const {
  if (nvlink_domain > 0) return nvlink_domain;
  if (absl::StatusOr<DeviceProfile> d = FindDevice(gpu); d.ok() && d->nvlink_domain > 0) {
    return d->nvlink_domain;
  }
  return gpus_per_node;
}

absl::Status ClusterSpec::Validate() const {
  if (gpu.empty()) {
    return absl::InvalidArgumentError(
        "cluster.gpu is required (a device kind such as a100-80gb or h100-sxm-80gb)");
  }
  if (auto s = CheckRange("cluster.num_gpus", num_gpus, kMaxNumGpus); !s.ok()) return s;
  if (auto s = CheckRange("cluster.gpus_per_node", gpus_per_node, kMaxGpusPerNode); !s.ok()) {
    return s;
  }
  if (num_gpus > gpus_per_node && num_gpus % gpus_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster.num_gpus (", num_gpus, ") must be a multiple of cluster.gpus_per_node (",
        gpus_per_node, ") when it spans more than one node"));
  }
  if (nvlink_domain < 0 || nvlink_domain > kMaxNumGpus) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.nvlink_domain (", nvlink_domain,
                                                   ") must be in [0, ", kMaxNumGpus,
                                                   "] (0 = cluster.gpus_per_node)"));
  }
  if (nvlink_domain > 0 && nvlink_domain % gpus_per_node != 0 &&
      gpus_per_node % nvlink_domain != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.nvlink_domain (", nvlink_domain,
                                                   ") must be a multiple or a divisor of "
                                                   "cluster.gpus_per_node (",
                                                   gpus_per_node, ")"));
  }
  if (auto s = CheckOverride("cluster.nvlink_bandwidth_gbps", nvlink_bandwidth_gbps,
                             kMaxBandwidthGbps);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckOverride("cluster.network_bandwidth_gbps", network_bandwidth_gbps,
                             kMaxBandwidthGbps);
      !s.ok()) {
    return s;
  }
  for (const auto& [field, value, limit] :
       {std::tuple<const char*, double, double>{"cluster.host_memory_gib", host_memory_gib,
                                                kMaxMemoryGib * 1024},
        {"cluster.host_link_bandwidth_gbps", host_link_bandwidth_gbps, kMaxBandwidthGbps},
        {"cluster.host_memory_bandwidth_gbps", host_memory_bandwidth_gbps, kMaxBandwidthGbps}}) {
    if (auto s = CheckOverride(field, value, limit); !s.ok()) return s;
  }
  return CheckOverride("cluster.memory_gib", memory_gib, kMaxMemoryGib);
}

absl::Status SearchOptions::Validate() const {
  // First the lengths: the cross-section rule of JobSpec::Validate walks tp x pp x cp x dp.
  const std::pair<const char*, size_t> lengths[] = {
      {"search.tp", tp.size()},
      {"search.pp", pp.size()},
      {"search.dp", dp.size()},
      {"search.cp", cp.size()},
      {"search.vp", vp.size()},
      {"search.micro_batch_size", micro_batch_size.size()},
      {"search.sequence_parallel", sequence_parallel.size()},
      {"search.recompute", recompute.size()},
      {"search.recompute_num_layers", recompute_num_layers.size()},
      {"search.ep", ep.size()},
      {"search.etp", etp.size()},
      {"search.moe_token_dispatcher", moe_token_dispatcher.size()},
      {"search.data_parallel_sharding", data_parallel_sharding.size()},
      {"search.tp_comm_overlap", tp_comm_overlap.size()},
      {"search.overlap_grad_reduce", overlap_grad_reduce.size()},
      {"search.overlap_p2p_comm", overlap_p2p_comm.size()},
      {"search.overlap_param_gather", overlap_param_gather.size()},
      {"search.offload", offload.size()},
      {"search.activation_offload", activation_offload.size()}};
  for (const auto& [field, entries] : lengths) {
    if (auto s = CheckListLength(field, entries); !s.ok()) return s;
  }
  const std::pair<const char*, const std::vector<int64_t>*> lists[] = {
      {"search.tp", &tp}, {"search.pp", &pp},  {"search.dp", &dp},
      {"search.cp", &cp}, {"search.vp", &vp},  {"search.micro_batch_size", &micro_batch_size},
      {"search.ep", &ep}, {"search.etp", &etp}};
  for (const auto& [field, values] : lists) {
    if (auto s = CheckSizeList(field, *values, kMaxParallelSize); !s.ok()) return s;
  }
  if (auto s = CheckSizeList("search.recompute_num_layers", recompute_num_layers, kMaxNumLayers);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckNoDuplicates("search.sequence_parallel", sequence_parallel); !s.ok()) {
    return s;
  }
  for (const auto& [field, values] : {std::pair<const char*, const std::vector<bool>*>{
                                          "search.tp_comm_overlap", &tp_comm_overlap},
                                      {"search.overlap_grad_reduce", &overlap_grad_reduce},
                                      {"search.overlap_p2p_comm", &overlap_p2p_comm},
                                      {"search.overlap_param_gather", &overlap_param_gather},
                                       {"search.activation_offload", &activation_offload}}) {
    if (auto s = CheckNoDuplicates(field, *values); !s.ok()) return s;
  }
  if (auto s = CheckNoDuplicates("search.offload", offload); !s.ok()) return s;
  if (auto s = CheckNoDuplicates("search.data_parallel_sharding", data_parallel_sharding);
      !s.ok()) {
    return s;
  }
  if (shard_group_size < 0 || shard_group_size > kMaxParallelSize) {
    return absl::InvalidArgumentError(absl::StrCat("search.shard_group_size (", shard_group_size,
                                                   ") must be in [0, ", kMaxParallelSize,
                                                   "] (0 = the whole dp*cp group)"));
  }
  if (auto s = CheckNoDuplicates("search.recompute", recompute); !s.ok()) return s;
  if (auto s = CheckNoDuplicates("search.moe_token_dispatcher", moe_token_dispatcher); !s.ok()) {
    return s;
  }
  if (!recompute_num_layers.empty() && !recompute.empty()) {
    bool full = false;
    for (Recompute r : recompute) full = full || r == Recompute::kFull;
    if (!full) {
      return absl::InvalidArgumentError(
          "search.recompute_num_layers applies only to full recompute, but search.recompute "
          "does not list 'full'");
    }
  }
  if (auto s = CheckRange("search.top_k", top_k, kMaxTopK); !s.ok()) return s;
  if (verify_top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("search.verify_top_k (", verify_top_k, ") must not be negative"));
  }
  if (verify_top_k > top_k) {
    return absl::InvalidArgumentError(absl::StrCat("search.verify_top_k (", verify_top_k,
                                                   ") must be at most search.top_k (", top_k,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::Status JobSpec::Validate() const {
  if (auto s = CheckName("name", name); !s.ok()) return s;
  if (auto s = model.Validate(); !s.ok()) return s;
  if (auto s = training.Validate(); !s.ok()) return s;
  if (auto s = cluster.Validate(); !s.ok()) return s;
  if (auto s = search.Validate(); !s.ok()) return s;
  if (auto s = CheckSearchForFramework(search, training.framework); !s.ok()) return s;

  absl::StatusOr<DeviceProfile> device = FindDevice(cluster.gpu);
  if (!device.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.gpu ('", cluster.gpu, "') is not a known device kind; known: ",
                     absl::StrJoin(DeviceNames(), ", ")));
  }
  if (auto s = CheckDeviceSupports(*device, training.precision); !s.ok()) return s;
  const bool offloads = std::any_of(search.offload.begin(), search.offload.end(),
                                    [](Offload o) { return o != Offload::kNone; });
  if (offloads && ((device->host_link_bandwidth <= 0 && cluster.host_link_bandwidth_gbps <= 0) ||
                   (device->host_memory_bandwidth <= 0 && cluster.host_memory_bandwidth_gbps <= 0) ||
                   (device->host_memory_per_gpu <= 0 && cluster.host_memory_gib <= 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.offload needs a host behind each GPU: cluster.gpu ", cluster.gpu,
        " has none in the catalog; give cluster.host_memory_gib, "
        "cluster.host_link_bandwidth_gbps and cluster.host_memory_bandwidth_gbps"));
  }
  if (search.mode == SearchMode::kProfile && offloads) {
    return absl::InvalidArgumentError(
        "search.offload is not supported with search.mode profile (the workers do not run "
        "the host's optimizer step): use search.mode model");
  }
  const bool offloads_activations =
      std::find(search.activation_offload.begin(), search.activation_offload.end(), true) !=
      search.activation_offload.end();
  if (offloads_activations) {
    if (device->host_link_bandwidth <= 0 && cluster.host_link_bandwidth_gbps <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "search.activation_offload needs a GPU-host link: cluster.gpu ", cluster.gpu,
          " has none in the catalog; give cluster.host_link_bandwidth_gbps and "
          "cluster.host_memory_gib"));
    }
    if (device->host_memory_per_gpu <= 0 && cluster.host_memory_gib <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "search.activation_offload needs host memory behind each GPU: cluster.gpu ",
          cluster.gpu, " has none in the catalog; give cluster.host_memory_gib"));
    }
    if (search.mode == SearchMode::kProfile) {
      return absl::InvalidArgumentError(
          "search.activation_offload is not supported with search.mode profile (the workers "
          "do not offload activations): use search.mode model");
    }
    if (search.recompute == std::vector<Recompute>{Recompute::kFull}) {
      return absl::InvalidArgumentError(
          "search.activation_offload [true] with search.recompute [full]: full recompute "
          "stores only each layer's input; offload needs recompute none or selective");
    }
  }
  if (training.AttentionKernelOf() == AttentionKernel::kFlash3 && device->arch != "sm90") {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.attention_kernel flash3 runs on Hopper (sm90) only; cluster.gpu ",
        cluster.gpu, " is ", device->arch, ": use flash2"));
  }
  for (size_t i = 0; i < training.recompute_modules.size(); ++i) {
    const RecomputeModule r = training.recompute_modules[i];
    const bool expert_module = r == RecomputeModule::kMoe || r == RecomputeModule::kMoeAct ||
                               r == RecomputeModule::kSharedExperts;
    const char* missing = nullptr;
    if (expert_module && model.num_experts <= 1) missing = "the model has no expert layers";
    if (r == RecomputeModule::kSharedExperts && model.num_experts > 1 &&
        model.num_shared_experts == 0) {
      missing = "the model has no shared experts";
    }
    if (r == RecomputeModule::kMlaUpProj && model.attention != AttentionType::kMla) {
      missing = "the model's attention is not mla";
    }
    if (missing != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("training.recompute_modules[", i, "] (",
                                                     ToString(r), ") has nothing to recompute: ",
                                                     missing));
    }
  }

  const double tokens_x_hidden = static_cast<double>(training.seq_length) *
                                 static_cast<double>(training.global_batch_size) *
                                 static_cast<double>(model.hidden_size);
  if (tokens_x_hidden > kMaxTokenElements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.seq_length (", training.seq_length, ") x training.global_batch_size (",
        training.global_batch_size, ") x model.hidden_size (", model.hidden_size,
        ") must be at most 2^56 (larger products overflow 64-bit arithmetic)"));
  }
  const double scores = static_cast<double>(training.seq_length) *
                        static_cast<double>(training.seq_length) *
                        static_cast<double>(model.num_attention_heads) *
                        static_cast<double>(training.global_batch_size);
  if (scores > kMaxScoreElements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.seq_length (", training.seq_length, ")^2 x model.num_attention_heads (",
        model.num_attention_heads, ") x training.global_batch_size (",
        training.global_batch_size,
        ") must be at most 2^58 (larger products overflow 64-bit arithmetic)"));
  }

  // Pinned degrees must multiply to the cluster size; with lists, at least one
  // combination must.
  if (!search.tp.empty() && !search.pp.empty() && !search.cp.empty() && !search.dp.empty()) {
    bool any = false;
    for (int64_t t : search.tp) {
      for (int64_t p : search.pp) {
        for (int64_t c : search.cp) {
          for (int64_t d : search.dp) {
            // Each factor is at most 2^20, so compare in double to avoid overflow.
            any = any || static_cast<double>(t) * static_cast<double>(p) *
                                 static_cast<double>(c) * static_cast<double>(d) ==
                             static_cast<double>(cluster.num_gpus);
          }
        }
      }
    }
    if (!any) {
      if (search.tp.size() == 1 && search.pp.size() == 1 && search.cp.size() == 1 &&
          search.dp.size() == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "search.tp x search.pp x search.cp x search.dp (", search.tp[0], " x ",
            search.pp[0], " x ", search.cp[0], " x ", search.dp[0], " = ",
            search.tp[0] * search.pp[0] * search.cp[0] * search.dp[0],
            ") must equal cluster.num_gpus (", cluster.num_gpus, ")"));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "no combination of search.tp, search.pp, search.cp and search.dp multiplies to "
          "cluster.num_gpus (",
          cluster.num_gpus, ")"));
    }
  }
  for (int64_t t : search.tp) {
    if (t > cluster.num_gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "search.tp value ", t, " must be at most cluster.num_gpus (", cluster.num_gpus, ")"));
    }
  }
  for (int64_t p : search.pp) {
    if (p > model.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("search.pp value ", p,
                                                     " must be at most model.num_layers (",
                                                     model.num_layers, ")"));
    }
  }
  if (search.mode == SearchMode::kProfile &&
      (!training.fused_norm || (training.AttentionKernelOf() != AttentionKernel::kFlash2 &&
                                training.AttentionKernelOf() != AttentionKernel::kFused))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.attention_kernel ", ToString(training.AttentionKernelOf()), " with fused_norm ",
        training.fused_norm ? "true" : "false",
        " is not supported with search.mode profile (the workers run their own flash or fused "
        "attention and fused norms): use search.mode model"));
  }
  if (search.mode == SearchMode::kProfile &&
      training.recompute_modules != std::vector<RecomputeModule>{RecomputeModule::kCoreAttn}) {
    return absl::InvalidArgumentError(
        "training.recompute_modules other than [core_attn] are not supported with search.mode "
        "profile (the workers' layer tasks recompute the attention core): use search.mode model");
  }
  if (model.num_experts <= 1) {
    for (const auto& [field, values] :
         {std::pair<const char*, const std::vector<int64_t>*>{"search.ep", &search.ep},
          {"search.etp", &search.etp}}) {
      for (int64_t v : *values) {
        if (v != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              field, " value ", v, " must be 1: the model has no experts (model.num_experts ",
              model.num_experts, ")"));
        }
      }
    }
  } else {
    for (int64_t ep : search.ep) {
      if (model.num_experts % ep != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "search.ep value ", ep, " must divide model.num_experts (", model.num_experts, ")"));
      }
    }
  }
  for (int64_t b : search.micro_batch_size) {
    if (b > training.global_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "search.micro_batch_size value ", b, " must be at most training.global_batch_size (",
          training.global_batch_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace paratune
