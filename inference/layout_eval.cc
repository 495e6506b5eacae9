#include "inference/layout_eval.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace paratune::inference {
namespace {

// The longest request the workload draws (three standard deviations above the mean).
int64_t LongestSequence(const ServingSpec& s) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(s.isl) + 3 * s.isl_stddev)) +
         static_cast<int64_t>(std::ceil(static_cast<double>(s.osl) + 3 * s.osl_stddev));
}

}  // namespace

absl::StatusOr<LayoutContext> LayoutContext::Create(const InferenceJobSpec& spec) {
  LayoutContext c;
  c.spec_ = spec;
  auto device = DeviceForCluster(spec.cluster);
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.gpu: ", device.status().message()));
  }
  c.device_ = *device;
  c.engine_ = &EngineProfileFor(spec.serving.engine);
  return c;
}

double LayoutContext::kv_fraction() const {
  return spec_.serving.kv_cache_fraction.value_or(engine_->kv_cache_fraction);
}

absl::Status LayoutContext::CheckConfig(const ServingConfig& c) const {
  const auto positive = [](const char* field, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, " (", v, ") must be > 0"));
  };
  for (const auto& [field, v] : {std::pair<const char*, int64_t>{"tp", c.tp},
                                 {"pp", c.pp},
                                 {"ep", c.ep},
                                 {"max_batch_size", c.max_batch_size},
                                 {"max_num_tokens", c.max_num_tokens}}) {
    if (auto s = positive(field, v); !s.ok()) return s;
  }
  if (c.attention_dp) {
    if (auto s = CheckAttentionDp(spec_.model, c.tp, c.ep, "attention_dp"); !s.ok()) return s;
  }
  if (auto s = CheckExpertParallel(spec_.model, c.tp, c.ep, "ep"); !s.ok()) return s;
  if (spec_.model.num_attention_heads % c.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tp (", c.tp,
                                                   ") must divide model.num_attention_heads (",
                                                   spec_.model.num_attention_heads, ")"));
  }
  if (c.disaggregated) {
    if (auto s = positive("prefill_replicas", c.prefill_replicas); !s.ok()) return s;
    if (auto s = positive("decode_replicas", c.decode_replicas); !s.ok()) return s;
  } else if (auto s = positive("replicas", c.replicas); !s.ok()) {
    return s;
  }
  if (c.num_gpus() > spec_.cluster.num_gpus) {
    return absl::InvalidArgumentError(absl::StrCat("the layout uses ", c.num_gpus(), " GPUs (",
                                                   c.ToString(), "), more than cluster.num_gpus (",
                                                   spec_.cluster.num_gpus, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const StepModel>> LayoutContext::Model(const ServingConfig& c) {
  const auto key =
      std::make_tuple(c.tp, c.pp, c.ep, c.attention_dp, c.weight_precision, c.kv_cache_precision);
  auto it = models_.find(key);
  if (it != models_.end()) return it->second;
  auto m = StepModel::Create(spec_.model, device_, *engine_, c, spec_.cluster.gpus_per_node);
  if (!m.ok()) return m.status();
  auto shared = std::make_shared<const StepModel>(std::move(*m));
  models_[key] = shared;
  return shared;
}

double LayoutContext::MemoryDeficitGib(const ServingConfig& c, const StepModel& model) const {
  const RankMemory m = model.Memory(c.max_batch_size, c.max_num_tokens, kv_fraction());
  const double need =
      model.span().KvSlots(LongestSequence(spec_.serving), engine_->kv_block_tokens) *
      model.kv_bytes_per_token_per_rank();
  return (need - m.kv_pool) / kGiB;
}

absl::StatusOr<RankMemory> LayoutContext::FitMemory(const ServingConfig& c,
                                                    const StepModel& model) const {
  const RankMemory m = model.Memory(c.max_batch_size, c.max_num_tokens, kv_fraction());
  const double deficit = MemoryDeficitGib(c, model);
  if (deficit > 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "does not fit by %.1f GiB per GPU (weights %.1f GiB, activations %.1f GiB, reserve "
        "%.1f GiB of %.1f GiB; one %d-token request needs its KV cache)",
        deficit, m.weights / kGiB, m.activations / kGiB, m.reserve / kGiB, m.capacity / kGiB,
        LongestSequence(spec_.serving)));
  }
  return m;
}

ServingMemory LayoutContext::MemoryGib(const RankMemory& m) const {
  ServingMemory out;
  out.weights = m.weights / kGiB;
  out.kv_cache = std::max(0.0, m.kv_pool) / kGiB;
  out.activations = m.activations / kGiB;
  out.reserve = m.reserve / kGiB;
  out.peak = out.weights + out.kv_cache + out.activations + out.reserve;
  out.capacity = m.capacity / kGiB;
  return out;
}

double LayoutContext::KvTransferSeconds(const ServingConfig& c, const StepModel& model,
                                        int64_t isl) const {
  // Every rank of the prefill instance sends its share of the cache to its counterpart:
  // NVLink when both pools fit in one node, the NIC otherwise.
  const bool one_node = c.num_gpus() <= spec_.cluster.gpus_per_node;
  const double bw = one_node ? device_.nvlink_bandwidth : device_.network_bandwidth;
  const double latency = one_node ? device_.nvlink_latency_s : device_.network_latency_s;
  return model.span().KvSlots(isl, 1) * model.kv_bytes_per_token_per_rank() / bw + latency +
         engine_->step_overhead_s;
}

void LayoutContext::ApplyLimits(InferenceRankedConfig* r) const {
  const ServingSpec& s = spec_.serving;
  const double gpus = static_cast<double>(r->config.num_gpus());
  if (s.price_per_gpu_hour && r->output_tokens_per_sec > 0) {
    r->cost_per_million_output_tokens =
        *s.price_per_gpu_hour * gpus / 3600.0 / r->output_tokens_per_sec * 1e6;
  }
  r->meets_limits = true;
  const auto check = [&](const char* name, const LatencyLimits& lim, const LatencyStats& v) {
    const std::tuple<const char*, std::optional<double>, double> parts[] = {
        {"p50", lim.p50, v.p50}, {"p90", lim.p90, v.p90}, {"p99", lim.p99, v.p99}};
    for (const auto& [p, limit, value] : parts) {
      if (!limit || value <= *limit) continue;
      r->meets_limits = false;
      r->notes.push_back(absl::StrFormat("misses %s %s by %.0f ms (%.1f > %.1f ms)", name, p,
                                         value - *limit, value, *limit));
    }
  };
  check("TTFT", s.ttft_ms, r->ttft_ms);
  check("TPOT", s.tpot_ms, r->tpot_ms);
  if (s.min_tokens_per_sec_per_user &&
      r->tokens_per_sec_per_user < *s.min_tokens_per_sec_per_user) {
    r->meets_limits = false;
    r->notes.push_back(absl::StrFormat("below the minimum tokens/s per user by %.1f (%.1f < %.1f)",
                                       *s.min_tokens_per_sec_per_user - r->tokens_per_sec_per_user,
                                       r->tokens_per_sec_per_user, *s.min_tokens_per_sec_per_user));
  }
}

absl::StatusOr<ScreenedLayout> LayoutContext::Screen(const ServingConfig& c,
                                                     std::shared_ptr<const StepModel> model) const {
  auto mem = FitMemory(c, *model);
  if (!mem.ok()) return mem.status();
  const ServingSpec& s = spec_.serving;
  const StepModel& m = *model;
  const double isl = static_cast<double>(s.isl), osl = static_cast<double>(s.osl);
  const double pp = static_cast<double>(c.pp);
  const double capacity = m.KvTokenCapacity(*mem) / pp;  // Per micro-batch engine.
  const double seq_tokens = model->span().KvSlots(
      engine_->reserves_whole_sequence ? s.isl + s.osl : s.isl + s.osl / 2, 1);
  const double decode_engines =
      pp * static_cast<double>(c.disaggregated ? c.decode_replicas : c.replicas);
  double clients = static_cast<double>(s.num_requests);
  if (s.concurrency) clients = static_cast<double>(*s.concurrency);
  // The engine limits are per attention rank; an instance runs attention_dp_size() of them.
  const double dp = static_cast<double>(c.attention_dp_size());
  const double mnt = static_cast<double>(c.max_num_tokens) * dp;
  double b = std::min({static_cast<double>(c.max_batch_size) * dp,
                       std::floor(capacity / seq_tokens), std::ceil(clients / decode_engines)});
  b = std::max(b, 1.0);

  double out_per_sec = 0, tpot = 0, ttft = 0;
  StepWork decode;
  decode.decode_sequences = b;
  decode.decode_context_tokens = b * m.span().AttendedContext(isl + osl / 2);
  decode.sampled_sequences = b;
  if (s.batching == Batching::kStatic) {
    StepWork prefill;
    prefill.prefill_tokens = b * isl;
    prefill.prefill_attention_pairs = b * m.span().ChunkAttentionPairs(0, isl);
    prefill.sampled_sequences = b;
    prefill.prefill_chunks = b;
    const double tp = m.StepSeconds(prefill), td = m.StepSeconds(decode);
    ttft = tp;
    tpot = td;
    out_per_sec = decode_engines * b * osl / (tp + (osl - 1) * td);
  } else if (!c.disaggregated) {
    // Steady state: every step decodes b sequences and prefills the prompts of the b/osl
    // sequences that replace the finished ones.
    double prefill_tokens = b * isl / osl;
    double served = b;
    if (prefill_tokens > mnt - b) {
      prefill_tokens = std::max(mnt - b, 1.0);
      served = std::min(b, prefill_tokens * osl / isl);
    }
    StepWork w = decode;
    w.prefill_tokens = prefill_tokens;
    w.prefill_attention_pairs = prefill_tokens / isl * m.span().ChunkAttentionPairs(0, isl);
    w.sampled_sequences += served / osl;
    const double t = m.StepSeconds(w);
    tpot = t;
    ttft = t * std::ceil(isl / std::max(mnt - b, 1.0));
    out_per_sec = decode_engines * served / t;
  } else {
    StepWork prefill;
    const double chunk = std::min(mnt, isl * std::max(1.0, std::floor(mnt / isl)));
    prefill.prefill_tokens = chunk;
    prefill.prefill_attention_pairs = chunk / isl * m.span().ChunkAttentionPairs(0, isl);
    prefill.sampled_sequences = std::max(1.0, chunk / isl);
    prefill.prefill_chunks = std::max(1.0, std::floor(chunk / isl));
    const double tp = m.StepSeconds(prefill);
    const double prompts_per_sec =
        pp * static_cast<double>(c.prefill_replicas) * (chunk / isl) / tp;
    const double td = m.StepSeconds(decode);
    const double decode_requests_per_sec = decode_engines * b / td / osl;
    const double rps = std::min(prompts_per_sec, decode_requests_per_sec);
    out_per_sec = rps * osl;
    // The prefill instance returns the first token; the KV move delays the second.
    ttft = tp * std::ceil(isl / mnt);
    tpot = td + KvTransferSeconds(c, m, s.isl) / std::max(osl - 1, 1.0);
  }
  if (s.request_rate) out_per_sec = std::min(out_per_sec, *s.request_rate * osl);

  ScreenedLayout out;
  out.model = model;
  InferenceRankedConfig& r = out.estimate;
  r.config = c;
  r.output_tokens_per_sec = out_per_sec;
  r.output_tokens_per_sec_per_gpu = out_per_sec / static_cast<double>(c.num_gpus());
  r.tokens_per_sec_per_user = tpot > 0 ? 1.0 / tpot : 0;
  r.requests_per_sec = out_per_sec / osl;
  r.ttft_ms = {ttft * 1e3, ttft * 1e3, ttft * 1e3, ttft * 1e3};
  r.tpot_ms = {tpot * 1e3, tpot * 1e3, tpot * 1e3, tpot * 1e3};
  const double e2e = (ttft + (osl - 1) * tpot) * 1e3;
  r.e2e_latency_ms = {e2e, e2e, e2e, e2e};
  r.memory = MemoryGib(*mem);
  r.max_concurrency = static_cast<int64_t>(b * decode_engines);
  r.notes.push_back("screening estimate (steady state), not simulated");
  ApplyLimits(&r);
  return out;
}

absl::StatusOr<InferenceRankedConfig> LayoutContext::Evaluate(const ServingConfig& c,
                                                              const StepModel& model,
                                                              RequestCount count) const {
  if (auto s = CheckConfig(c); !s.ok()) return s;
  auto mem = FitMemory(c, model);
  if (!mem.ok()) return mem.status();
  const ServingSpec& s = spec_.serving;
  const double capacity = model.KvTokenCapacity(*mem);
  const int64_t pp = c.pp;

  std::vector<SimEngine> engines;
  const auto add = [&](EngineRole role, int64_t instances) {
    for (int64_t i = 0; i < instances * pp; ++i) {
      SimEngine e;
      e.model = &model;
      e.role = role;
      e.kv_token_capacity = std::floor(capacity / static_cast<double>(pp));
      e.kv_block_tokens = engine_->kv_block_tokens;
      e.reserves_whole_sequence = engine_->reserves_whole_sequence;
      // With attention data parallelism the instance schedules the limits of all its
      // attention ranks.
      e.max_batch_size = c.max_batch_size * c.attention_dp_size();
      e.max_num_tokens = c.max_num_tokens * c.attention_dp_size();
      engines.push_back(e);
    }
  };
  if (c.disaggregated) {
    add(EngineRole::kPrefill, c.prefill_replicas);
    add(EngineRole::kDecode, c.decode_replicas);
  } else {
    add(EngineRole::kMixed, c.replicas);
  }
  const double seq_tokens = model.span().KvSlots(s.isl + s.osl, engine_->kv_block_tokens);
  const int64_t per_engine =
      std::min<int64_t>(c.max_batch_size * c.attention_dp_size(),
                        static_cast<int64_t>(std::floor(capacity / pp / seq_tokens)));
  const int64_t decode_engines = (c.disaggregated ? c.decode_replicas : c.replicas) * pp;
  const int64_t max_concurrency = std::max<int64_t>(1, per_engine) * decode_engines;

  SimWorkload w;
  w.isl = s.isl;
  w.osl = s.osl;
  w.isl_stddev = s.isl_stddev;
  w.osl_stddev = s.osl_stddev;
  w.concurrency = s.concurrency;
  w.request_rate = s.request_rate;
  w.batching = s.batching;
  w.static_batch_size = s.batch_size.value_or(c.max_batch_size);
  w.num_requests = s.num_requests;
  if (count == kSearchRequests) {
    w.num_requests =
        std::min(s.num_requests, std::max<int64_t>(kSearchRequestCap, 8 * max_concurrency));
  }
  const int64_t budget_requests = std::max<int64_t>(
      1, static_cast<int64_t>(kMaxSimulatedOutputTokens / static_cast<double>(s.osl)));
  const bool capped = w.num_requests > budget_requests;
  w.num_requests = std::min(w.num_requests, budget_requests);
  const auto transfer = [&](int64_t isl) { return KvTransferSeconds(c, model, isl); };
  const SimulationResult sim = Simulate(engines, w, transfer);
  if (sim.completed == 0) {
    return absl::ResourceExhaustedError(
        "does not fit: no request completes (a request's KV cache exceeds the pool)");
  }

  InferenceRankedConfig r;
  r.config = c;
  r.output_tokens_per_sec = sim.output_tokens_per_sec;
  r.output_tokens_per_sec_per_gpu = sim.output_tokens_per_sec / static_cast<double>(c.num_gpus());
  r.tokens_per_sec_per_user = sim.tokens_per_sec_per_user;
  r.requests_per_sec = sim.requests_per_sec;
  r.ttft_ms = sim.ttft_ms;
  r.tpot_ms = sim.tpot_ms;
  r.e2e_latency_ms = sim.e2e_latency_ms;
  r.memory = MemoryGib(*mem);
  r.max_concurrency = max_concurrency;

  // Breakdowns: one prefill step of one whole prompt (or a max_num_tokens chunk), one decode
  // step at the simulation's mean decode batch.
  StepWork prefill;
  const double chunk = static_cast<double>(std::min(s.isl, c.max_num_tokens));
  prefill.prefill_tokens = chunk;
  prefill.prefill_attention_pairs = model.span().ChunkAttentionPairs(0, chunk);
  prefill.sampled_sequences = 1;
  prefill.prefill_chunks = 1;
  r.prefill_step = model.Breakdown(prefill);
  StepWork decode;
  decode.decode_sequences = std::max(1.0, std::round(sim.mean_decode_batch));
  decode.decode_context_tokens =
      decode.decode_sequences *
      model.span().AttendedContext(static_cast<double>(s.isl + s.osl / 2));
  decode.sampled_sequences = decode.decode_sequences;
  r.decode_step = model.Breakdown(decode);
  if (c.disaggregated) {
    r.decode_step.kv_transfer = KvTransferSeconds(c, model, s.isl) * 1e3;
  }
  r.notes.push_back(absl::StrFormat(
      "simulated %d requests; KV pool %.0f tokens per instance; mean decode batch %.1f",
      sim.completed, capacity, sim.mean_decode_batch));
  if (const int64_t windowed = model.span().windowed_layers(); windowed > 0) {
    r.notes.push_back(absl::StrFormat(
        "%d of %d layers attend to a %d-token window and keep its KV cache only: a %d-token "
        "sequence holds %.0f tokens of the pool",
        windowed, spec_.model.num_layers, spec_.model.sliding_window, s.isl + s.osl, seq_tokens));
  }
  if (capped) {
    r.notes.push_back(absl::StrFormat(
        "simulated %d of the %d requests (at most %.0f output tokens per simulation)",
        w.num_requests, s.num_requests, kMaxSimulatedOutputTokens));
  }
  if (sim.preemptions > 0) {
    r.notes.push_back(
        absl::StrFormat("%d preemptions (KV cache full; recomputed)", sim.preemptions));
  }
  if (sim.dropped > 0) {
    r.notes.push_back(
        absl::StrFormat("%d requests longer than the KV pool were not served", sim.dropped));
  }
  ApplyLimits(&r);
  return r;
}

}  // namespace paratune::inference
