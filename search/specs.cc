// Validation rules and names of the job specification (see specs.h).
//
// Sizes have upper bounds so that every product the memory and time models form (parameter
// bytes, activation bytes, FLOPs) stays far inside 64-bit integers and exactly
// representable in doubles; a spec beyond them is rejected here, naming the field, rather
// than producing a negative memory figure later.
#include "search/specs.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/device_catalog.h"

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
      } else if constexpr (std::is_same_v<T, Recompute> ||
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
  const double mlp_matrices = m.activation == Activation::kSwiglu ? 3.0 : 2.0;
  const double per_layer =
      2.0 * h * h + 2.0 * h * kv + mlp_matrices * h * static_cast<double>(m.ffn_hidden_size);
  const double embeddings = (m.tie_embeddings ? 1.0 : 2.0) * static_cast<double>(m.vocab_size) * h;
  return static_cast<double>(m.num_layers) * per_layer + embeddings;
}

}  // namespace

absl::Status ModelSpec::Validate() const {
  if (auto s = CheckName("model.name", name); !s.ok()) return s;
  if (auto s = CheckRange("model.num_layers", num_layers, kMaxNumLayers); !s.ok()) return s;
  if (auto s = CheckRange("model.hidden_size", hidden_size, kMaxHiddenSize); !s.ok()) return s;
  if (num_attention_heads <= 0) {
    return absl::InvalidArgumentError(Positive("model.num_attention_heads", num_attention_heads));
  }
  if (hidden_size % num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.hidden_size (", hidden_size, ") must be divisible by model.num_attention_heads (",
        num_attention_heads, ")"));
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
  if (num_experts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_experts (", num_experts, ") must not be negative"));
  }
  if (num_experts > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.num_experts (", num_experts,
        ") must be 0 or 1: mixture-of-experts models are not supported (dense models only)"));
  }
  const double params = ApproxParameters(*this);
  if (params > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model (num_layers ", num_layers, ", hidden_size ", hidden_size, ", ffn_hidden_size ",
        ffn_hidden_size, ", vocab_size ", vocab_size, ") has about ", params,
        " parameters; at most 1e15 are supported"));
  }
  return absl::OkStatus();
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
  return absl::OkStatus();
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
      {"search.data_parallel_sharding", data_parallel_sharding.size()}};
  for (const auto& [field, entries] : lengths) {
    if (auto s = CheckListLength(field, entries); !s.ok()) return s;
  }
  const std::pair<const char*, const std::vector<int64_t>*> lists[] = {
      {"search.tp", &tp},
      {"search.pp", &pp},
      {"search.dp", &dp},
      {"search.cp", &cp},
      {"search.vp", &vp},
      {"search.micro_batch_size", &micro_batch_size}};
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

  absl::StatusOr<DeviceProfile> device = FindDevice(cluster.gpu);
  if (!device.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.gpu ('", cluster.gpu, "') is not a known device kind; known: ",
                     absl::StrJoin(DeviceNames(), ", ")));
  }
  if (auto s = CheckDeviceSupports(*device, training.precision); !s.ok()) return s;

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
