#include "server/verify_plan.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "search/memory_model.h"
#include "search/model_math.h"
#include "search/parallel_config.h"
#include "search/profile_plan.h"
#include "server/convert.h"

namespace paratune::server {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Ranks `h` can hold: its devices, fewer when its memory runs out first.
int64_t RanksWithinMemory(const VerifyHost& h, double bytes_per_rank) {
  if (bytes_per_rank <= 0) return h.devices;
  if (h.backend != "cpu") {
    return static_cast<double>(h.device_memory_bytes) >= bytes_per_rank ? h.devices : 0;
  }
  const double fit = std::floor(static_cast<double>(h.memory_bytes) / bytes_per_rank);
  return std::min<int64_t>(h.devices, static_cast<int64_t>(std::max(0.0, fit)));
}

}  // namespace

VerifyPlacement PlaceVerifyRun(int64_t world, double bytes_per_rank,
                               const std::vector<VerifyHost>& all_hosts,
                               const std::string& precision) {
  VerifyPlacement out;
  if (world < 1) {
    out.reason = absl::StrCat("world size (", world, ") must be >= 1");
    return out;
  }
  // One backend per run: CPU workers for an fp32 spec if there are any, else CUDA ones.
  int64_t cpu = 0, cuda = 0;
  for (const VerifyHost& h : all_hosts) (h.backend == "cpu" ? cpu : cuda) += 1;
  const bool sixteen_bit = precision != "fp32";
  const std::string backend = cpu > 0 && !sixteen_bit ? "cpu" : "cuda";
  out.backend = backend;
  std::vector<VerifyHost> hosts;
  for (const VerifyHost& h : all_hosts) {
    if ((h.backend == "cpu") == (backend == "cpu")) hosts.push_back(h);
  }
  if (hosts.empty() && cpu > 0) {
    out.reason = absl::StrCat("kernels/training trains ", precision,
                              " on CUDA workers only; the ", cpu,
                              " registered worker(s) are CPU workers");
    return out;
  }
  int64_t devices = 0, within_memory = 0, largest = 0;
  for (const VerifyHost& h : hosts) {
    devices += h.devices;
    within_memory += RanksWithinMemory(h, bytes_per_rank);
    largest = std::max(largest, RanksWithinMemory(h, bytes_per_rank));
  }
  for (int64_t g = std::min(world, largest); g >= 1; --g) {
    if (world % g != 0) continue;
    const int64_t need = world / g;
    int64_t able = 0;
    for (const VerifyHost& h : hosts) able += RanksWithinMemory(h, bytes_per_rank) >= g;
    if (able < need) continue;
    for (int64_t i = 0; i < need; ++i) out.parts.push_back({i * g, g});
    return out;
  }
  if (devices < world) {
    out.reason = absl::StrCat("needs ", world, " ranks, workers offer ", devices);
  } else if (within_memory < world) {
    out.reason = absl::StrFormat(
        "needs %d ranks of %.2f GiB (predicted peak), workers have memory for %d of their %d",
        world, bytes_per_rank / kGiB, within_memory, devices);
  } else {
    std::vector<std::string> sizes;
    for (const VerifyHost& h : hosts) sizes.push_back(absl::StrCat(RanksWithinMemory(h, bytes_per_rank)));
    out.reason = absl::StrCat("needs ", world,
                              " ranks in equal groups of consecutive ranks, one group per worker; "
                              "workers offer ",
                              absl::StrJoin(sizes, " + "));
  }
  return out;
}

std::string VerifyUnsupportedReason(const JobSpec& spec, const v1::ParallelConfig& config) {
  if (IsLowPrecisionGemm(spec.training.precision)) {
    return absl::StrCat("kernels/training trains fp32, bf16 or fp16; the spec's precision is ",
                        ToString(spec.training.precision));
  }
  if (config.cp() > 1) {
    return absl::StrCat("context parallelism (cp ", config.cp(),
                        ") is not implemented by kernels/training");
  }
  if (IsMoe(spec.model)) {
    const ModelSpec& m = spec.model;
    const int64_t tp = std::max<int64_t>(1, config.tp());
    const int64_t etp = std::max<int64_t>(1, config.etp());
    if (spec.training.precision != Precision::kFp32 &&
        spec.training.moe_routing == MoeRouting::kCapacity) {
      return absl::StrCat(
          "kernels/training drops capacity-routed assignments on CPU workers "
          "(fp32) only; the spec's precision is ",
          ToString(spec.training.precision));
    }
    if (m.attention == AttentionType::kMla) {
      return "kernels/training runs multi-head or grouped-query attention; the model's "
             "attention is mla";
    }
    if (m.mtp_layers > 0) {
      return absl::StrCat("kernels/training has no multi-token-prediction layers (mtp_layers ",
                          m.mtp_layers, ")");
    }
    if (etp != 1 && etp != tp) {
      return absl::StrCat("kernels/training splits experts over etp 1 or tp (", tp,
                          "); the layout's etp is ", etp);
    }
    if (!config.moe_token_dispatcher().empty() &&
        config.moe_token_dispatcher() != ToString(MoeTokenDispatcher::kAllToAll)) {
      return absl::StrCat(
          "kernels/training dispatches tokens by all-to-all; the layout's "
          "dispatcher is ",
          config.moe_token_dispatcher());
    }
  }
  const int64_t mb_dp = std::max<int64_t>(1, config.micro_batch_size()) *
                        std::max<int64_t>(1, config.dp());
  if (spec.training.global_batch_size % mb_dp != 0) {
    return absl::StrCat("micro_batch_size·dp (", mb_dp, ") does not divide the global batch (",
                        spec.training.global_batch_size, ")");
  }
  return "";
}

absl::StatusOr<v1::VerifyTask> MakeVerifyTask(const JobSpec& spec, const v1::RankedConfig& ranked,
                                              const VerifyPart& part,
                                              const VerifyRunOptions& options,
                                              const std::string& rendezvous_ns) {
  absl::StatusOr<ParallelConfig> layout = ParallelConfigFromProto(ranked.config());
  if (!layout.ok()) return layout.status();
  const ParallelConfig& c = *layout;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"tp", c.tp},
                                    {"pp", c.pp},
                                    {"dp", c.dp},
                                    {"cp", c.cp},
                                    {"vp", c.vp},
                                    {"micro_batch_size", c.micro_batch_size}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(name, " (", value, ") must be >= 1"));
    }
  }
  const ModelSpec& m = spec.model;
  v1::VerifyTask t;
  *t.mutable_parallel() = ToProto(c);
  t.set_num_micro_batches(NumMicroBatches(c, spec.training));
  t.set_seq_length(spec.training.seq_length);
  v1::LayerShape* shape = t.mutable_shape();
  shape->set_hidden_size(m.hidden_size);
  shape->set_num_attention_heads(m.num_attention_heads);
  shape->set_kv_channels(m.kv_channels);
  shape->set_num_query_groups(m.num_query_groups > 0 ? m.num_query_groups
                                                     : m.num_attention_heads);
  shape->set_ffn_hidden_size(m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * m.hidden_size);
  // Megatron-LM pads the vocabulary to a multiple of 128·tp (as the profile tasks do).
  const int64_t pad = 128 * c.tp;
  shape->set_vocab_size((m.vocab_size + pad - 1) / pad * pad);
  shape->set_activation(ToString(m.activation));
  shape->set_normalization(ToString(m.normalization));
  t.set_num_layers(m.num_layers);
  t.set_steps(options.steps);
  t.set_seed(options.seed);
  t.set_first_rank(part.first_rank);
  t.set_rank_count(part.rank_count);
  t.set_world_size(c.world_size());
  if (part.rank_count < c.world_size()) t.set_rendezvous_namespace(rendezvous_ns);
  t.set_rendezvous_timeout_ms(options.rendezvous_timeout_ms);
  t.set_layout_rank(ranked.rank());
  t.set_flash_attention(spec.training.flash_attention);
  t.set_attention_window(m.sliding_window);
  t.set_window_attn_skip_freq(m.window_attn_skip_freq);
  t.set_dropout(spec.training.dropout);
  t.set_tie_embeddings(m.tie_embeddings);
  // The rows the model counts (EmbeddingParams). A spec read by JobSpecFromJson has them
  // resolved to at least seq_length; the trainer rejects a table shorter than that.
  if (m.position_embedding == PositionEmbedding::kLearned) {
    t.set_position_rows(m.max_position_embeddings);
  }
  t.set_dtype(ToString(spec.training.precision));
  if (IsMoe(m)) {
    // The block the profile stage's MoE layer task measures (its run fields unused here).
    std::string why;
    const std::optional<MoeProfileSpec> moe = MoeTaskFor(spec, c, {}, &why);
    if (!moe.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("the layout's expert layers: ", why));
    }
    *t.mutable_moe() = ToProto(*moe);
    t.set_first_k_dense_layers(m.first_k_dense_layers);
    t.set_moe_layer_freq(m.moe_layer_freq);
  }
  return t;
}

absl::StatusOr<v1::Verification> VerificationFromParts(
    const JobSpec& spec, const v1::RankedConfig& ranked, int64_t world,
    const std::vector<v1::VerifyResult>& parts) {
  std::vector<int64_t> peaks(static_cast<size_t>(std::max<int64_t>(0, world)), -1);
  const v1::VerifyResult* first = nullptr;
  for (const v1::VerifyResult& p : parts) {
    for (int i = 0; i < p.peak_bytes_per_rank_size(); ++i) {
      const int64_t rank = p.first_rank() + i;
      if (rank < 0 || rank >= world || peaks[rank] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "verify results: rank ", rank, " is outside [0, ", world, ") or reported twice"));
      }
      peaks[rank] = p.peak_bytes_per_rank(i);
    }
    if (first == nullptr || p.first_rank() < first->first_rank()) first = &p;
  }
  for (int64_t r = 0; r < world; ++r) {
    if (peaks[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("verify results: rank ", r, " is missing"));
    }
  }
  if (first == nullptr) return absl::InvalidArgumentError("verify results: no parts");
  v1::Verification v;
  v.set_measured_iteration_time_s(first->median_iteration_s());
  v.set_predicted_iteration_time_s(ranked.iteration_time_s());
  int64_t max_peak = 0;
  for (int64_t b : peaks) {
    max_peak = std::max(max_peak, b);
    v.add_measured_peak_gib_per_rank(static_cast<double>(b) / kGiB);
  }
  v.set_measured_peak_gib(static_cast<double>(max_peak) / kGiB);
  v.set_predicted_peak_gib(ranked.memory().peak_gib());
  absl::StatusOr<DeviceProfile> device = DeviceForCluster(spec.cluster);
  if (!device.ok()) return device.status();
  v.set_predicted_tracked_peak_gib(TrackedPeakBytes(MemoryFromProto(ranked.memory()),
                                                    FrameworkMemoryFor(*device, spec.training),
                                                    spec.training.precision) /
                                   kGiB);
  for (double l : first->losses()) v.add_measured_losses(l);
  for (double s : first->step_seconds()) v.add_measured_step_seconds(s);
  v.set_status("verified");
  return v;
}

std::vector<double> TimedSteps(const v1::Verification& v) {
  const auto& s = v.measured_step_seconds();
  if (s.size() >= 2) return std::vector<double>(s.begin() + 1, s.end());
  return {v.measured_iteration_time_s()};
}

std::optional<v1::VerificationSummary> SummarizeVerification(const v1::PlanResult& plan) {
  std::vector<const v1::RankedConfig*> verified;
  for (const v1::RankedConfig& r : plan.ranked()) {
    if (r.verification().status() == "verified") verified.push_back(&r);
  }
  if (verified.empty()) return std::nullopt;
  // The predicted order is the ranking's.
  std::sort(verified.begin(), verified.end(),
            [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
  const auto measured = [](const v1::RankedConfig* r) {
    return r->verification().measured_iteration_time_s();
  };
  const v1::RankedConfig* predicted = verified.front();
  const v1::RankedConfig* best = predicted;  // on equal times, the better-ranked
  for (const v1::RankedConfig* r : verified) {
    if (measured(r) < measured(best)) best = r;
  }
  v1::VerificationSummary s;
  s.set_verified(static_cast<int64_t>(verified.size()));
  s.set_predicted_best_rank(predicted->rank());
  s.set_measured_best_rank(best->rank());
  s.set_regret_pct(best == predicted ? 0.0 : 100.0 * (measured(predicted) / measured(best) - 1.0));
  int64_t pairs = 0, in_order = 0;
  for (size_t i = 0; i < verified.size(); ++i) {
    for (size_t j = i + 1; j < verified.size(); ++j) {
      ++pairs;
      in_order += measured(verified[i]) <= measured(verified[j]);
    }
  }
  s.set_pairs(pairs);
  s.set_pairs_in_order(in_order);
  if (best != predicted) {
    const std::vector<double> fast = TimedSteps(best->verification());
    const std::vector<double> slow = TimedSteps(predicted->verification());
    s.set_separated(*std::max_element(fast.begin(), fast.end()) <
                    *std::min_element(slow.begin(), slow.end()));
  }
  const std::string order =
      absl::StrFormat("%d of %d pairs in the predicted order", in_order, pairs);
  if (verified.size() == 1) {
    s.set_verdict(absl::StrFormat("one layout verified (rank %d): nothing to compare it with",
                                  predicted->rank()));
  } else if (best == predicted) {
    s.set_verdict(absl::StrFormat("confirmed: rank %d measured fastest of the %d verified "
                                  "layouts; %s",
                                  predicted->rank(), verified.size(), order));
  } else {
    s.set_verdict(absl::StrFormat(
        "%s: rank %d measured fastest; rank %d measured %.1f %% slower, %s; %s",
        s.separated() ? "not confirmed" : "a tie at this run's resolution", best->rank(),
        predicted->rank(), s.regret_pct(),
        s.separated() ? "beyond the steps' spread (every step of rank " +
                            std::to_string(best->rank()) + " was faster)"
                      : "within the steps' spread (their step times overlap)",
        order));
  }
  return s;
}

}  // namespace paratune::server
