#include "kernels/serving/serve_loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/rank_threads.h"
#include "kernels/serving/serve_loop_internal.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

using internal::Broadcast;
using internal::Clock;
using internal::Elapsed;

// With attention data parallelism each rank serves its own requests: the clients (closed
// loop) or the arrivals are dealt round-robin over the ranks that get any, request i to
// rank i % owners, as a load-balancing router spreads identical requests.
struct RankShare {
  std::vector<TraceRequest> requests;  // this rank's, in trace order
  int64_t concurrency = 0;             // its closed-loop clients
};
RankShare ShareOf(const ServeOptions& o, const std::vector<TraceRequest>& trace, int rank,
                  int ranks) {
  RankShare share;
  if (!o.model.attention_dp) {
    share.requests = trace;
    share.concurrency = o.trace.concurrency;
    return share;
  }
  const int64_t c = o.trace.concurrency;
  const int64_t owners = c > 0 ? std::min<int64_t>(ranks, c) : ranks;
  for (size_t i = static_cast<size_t>(rank); rank < owners && i < trace.size();
       i += static_cast<size_t>(owners)) {
    share.requests.push_back(trace[i]);
  }
  if (c > 0 && rank < owners) share.concurrency = c / owners + (rank < c % owners ? 1 : 0);
  return share;
}

// One rank's loop: its requests' records go to result->requests (under *mu); rank 0 fills
// the rest of *result.
absl::Status RunRank(const ServeOptions& o, const std::vector<TraceRequest>& all_requests,
                     internal::RankResources& ranks, ServeResult* result, std::mutex* mu) {
  Communicator& comm = ranks.groups.host();
  const bool adp = o.model.attention_dp;
  const RankShare share = ShareOf(o, all_requests, comm.rank(), comm.size());
  const std::vector<TraceRequest>& trace = share.requests;
  PT_ASSIGN_OR_RETURN(internal::RankModel rank_model, internal::MakeRankModel(o, ranks));
  const std::unique_ptr<ServingModel>& model = rank_model.model;
  const int64_t V = o.model.shape.vocab_size;

  PT_RETURN_IF_ERROR(internal::WarmUp(o, *model, *rank_model.backend));
  const BatcherLimits limits = internal::LimitsFor(o, *model);
  ContinuousBatcher batcher(limits);

  const int64_t n = static_cast<int64_t>(trace.size());
  // Indexed by request id (the full trace's index).
  std::vector<RequestRecord> records(all_requests.size());
  std::map<int64_t, std::vector<int32_t>> prompts;
  std::map<int64_t, int32_t> last_token;
  int64_t next_arrival = 0;  // trace index of the next request to admit
  int64_t finished = 0;
  const bool closed_loop = o.trace.concurrency > 0;
  auto add = [&](int64_t i, double now) -> absl::Status {
    const TraceRequest& r = trace[i];
    PT_RETURN_IF_ERROR(batcher.Add(r.id, r.isl, r.osl));
    prompts[r.id] = PromptTokens(o.trace.seed, r.id, r.isl, V);
    RequestRecord& rec = records[r.id];
    rec.id = r.id, rec.isl = r.isl, rec.osl = r.osl;
    rec.arrival_s = closed_loop ? now : r.arrival_s;
    return absl::OkStatus();
  };
  if (closed_loop) {
    for (; next_arrival < std::min(n, share.concurrency); ++next_arrival) {
      PT_RETURN_IF_ERROR(add(next_arrival, 0.0));
    }
  }
  // Closed-loop requests issued at a completion: they arrive while the next step runs.
  std::vector<std::pair<int64_t, double>> returning;
  StepStats stats;
  PT_RETURN_IF_ERROR(comm.Barrier());
  const Clock::time_point t0 = Clock::now();
  // Attention-DP ranks step together (the experts' all-to-all): the loop runs while any
  // rank has requests left, and a rank with nothing to run then steps a one-token dummy
  // sequence (TensorRT-LLM's dummy requests).
  constexpr int64_t kDummySeq = -2;
  const auto any_rank = [&](bool mine) -> absl::StatusOr<bool> {
    double v = mine ? 1.0 : 0.0;
    PT_RETURN_IF_ERROR(comm.AllReduce(&v, 1, DType::kF64));
    return v > 0;
  };
  while (true) {
    if (adp) {
      PT_ASSIGN_OR_RETURN(const bool unfinished, any_rank(finished < n));
      if (!unfinished) break;
    } else if (finished >= n) {
      break;
    }
    // Only Poisson admission reads the clock; offline and closed-loop plans depend on
    // completions alone, so they skip the broadcast (one collective less per step).
    double now = 0;
    if (o.trace.request_rate > 0) {
      PT_ASSIGN_OR_RETURN(now, Broadcast(comm, Elapsed(t0)));
    }
    if (!closed_loop) {
      while (next_arrival < n && trace[next_arrival].arrival_s <= now) {
        PT_RETURN_IF_ERROR(add(next_arrival, now));
        ++next_arrival;
      }
    }
    std::vector<SeqChunk> plan = batcher.Plan();
    if (!returning.empty()) {
      for (const auto& [i, at] : returning) PT_RETURN_IF_ERROR(add(i, at));
      returning.clear();
      if (plan.empty()) plan = batcher.Plan();  // nothing was running: they go at once
    }
    bool dummy = false;
    if (adp) {
      PT_ASSIGN_OR_RETURN(const bool someone_runs, any_rank(!plan.empty()));
      dummy = someone_runs && plan.empty();
      if (!someone_runs) {
        // Idle until the next Poisson arrival of any rank: the full trace's first after
        // the broadcast time, the same target on every rank.
        const auto next = std::find_if(all_requests.begin(), all_requests.end(),
                                       [&](const TraceRequest& r) { return r.arrival_s > now; });
        if (closed_loop || next == all_requests.end()) {
          return absl::InternalError("serve loop: nothing can run but requests are unfinished");
        }
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(next->arrival_s)));
        continue;
      }
    } else if (plan.empty()) {
      if (closed_loop || next_arrival >= n) {
        return absl::InternalError("serve loop: nothing can run but requests are unfinished");
      }
      // Idle until the next Poisson arrival (the same target on every rank).
      std::this_thread::sleep_until(
          t0 + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>(trace[next_arrival].arrival_s)));
      continue;
    }
    if (dummy) {
      PT_RETURN_IF_ERROR(model->Step({0}, {{kDummySeq, 0, 1, false}}, false).status());
      model->Release(kDummySeq);
      continue;
    }
    const std::vector<int32_t> tokens =
        internal::StepInputTokens(plan, prompts, last_token, &stats);
    PT_ASSIGN_OR_RETURN(StepOutput out, model->Step(tokens, plan, false));
    // The blocks left of each sequence's window go back to the pool.
    for (const SeqChunk& c : plan) model->cache().FreeOutsideWindow(c.seq);
    ++stats.steps;
    const double t = Elapsed(t0);  // rank 0's token times
    const std::vector<TokenEvent> events = batcher.Commit(plan);
    for (size_t e = 0; e < events.size(); ++e) {
      const TokenEvent& ev = events[e];
      RequestRecord& rec = records[ev.seq];
      last_token[ev.seq] = out.next_tokens[e];
      ++rec.output_tokens;
      if (o.keep_tokens) rec.tokens.push_back(out.next_tokens[e]);
      if (ev.first) rec.first_token_s = t;
      if (ev.finished) {
        rec.finish_s = t;
        ++finished;
        model->Release(ev.seq);
        prompts.erase(ev.seq);
        last_token.erase(ev.seq);
        if (closed_loop && next_arrival < n) {
          returning.push_back({next_arrival, t});
          ++next_arrival;
        }
      }
    }
  }
  if (adp || comm.rank() == 0) {  // without attention DP every rank ran every request
    const std::lock_guard<std::mutex> lock(*mu);
    for (const TraceRequest& r : trace) result->requests.push_back(records[r.id]);
  }
  if (comm.rank() != 0) return absl::OkStatus();
  stats.phases = model->times();
  result->steps = stats;
  internal::KeepLargestMemory(rank_model, result);
  return absl::OkStatus();
}

}  // namespace

namespace internal {

absl::Status Broadcast(Communicator& comm, std::vector<double>* values) {
  if (comm.rank() != 0) std::fill(values->begin(), values->end(), 0.0);
  if (values->empty()) return absl::OkStatus();
  return comm.AllReduce(values->data(), static_cast<int64_t>(values->size()), DType::kF64);
}

absl::StatusOr<double> Broadcast(Communicator& comm, double value) {
  std::vector<double> v{value};
  PT_RETURN_IF_ERROR(Broadcast(comm, &v));
  return v[0];
}

absl::Status WarmUpRequest(const ServeOptions& o, const StepFn& step) {
  if (o.warmup_steps <= 0) return absl::OkStatus();
  const int64_t id = kWarmUpSeq;
  const int64_t isl = std::min<int64_t>(o.trace.isl, o.model.kv_capacity_tokens() / 2);
  PT_ASSIGN_OR_RETURN(
      std::vector<int32_t> next,
      step(PromptTokens(o.trace.seed, id, isl, o.model.shape.vocab_size), {{id, 0, isl, true}}));
  for (int64_t i = 1; i < o.warmup_steps && isl + i < o.model.kv_capacity_tokens(); ++i) {
    PT_ASSIGN_OR_RETURN(next, step({next[0]}, {{id, isl + i - 1, 1, true}}));
  }
  return absl::OkStatus();
}

absl::Status WarmUp(const ServeOptions& o, ServingModel& model, Backend& backend) {
  PT_RETURN_IF_ERROR(WarmUpRequest(
      o,
      [&](const std::vector<int32_t>& tokens,
          const std::vector<SeqChunk>& chunks) -> absl::StatusOr<std::vector<int32_t>> {
        PT_ASSIGN_OR_RETURN(StepOutput out, model.Step(tokens, chunks, false));
        return std::move(out.next_tokens);
      }));
  model.Release(kWarmUpSeq);
  model.ResetTimes();
  backend.allocator().ResetPeaks();
  return absl::OkStatus();
}

absl::StatusOr<RankModel> MakeRankModel(const ServeOptions& o, RankResources& rank, int64_t stage) {
  RankModel m;
  m.backend = rank.backend.get();
  ServingConfig c = o.model;
  c.stage = stage;
  PT_ASSIGN_OR_RETURN(m.model, ServingModel::Create(c, rank.groups.context(m.backend)));
  // A device's steps run without waiting at phase boundaries or around their collectives
  // (the phase times, which would add those waits to TTFT and TPOT, stay zero).
  if (m.backend->kind() != BackendKind::kCpu) m.model->SetPhaseTiming(false);
  return m;
}

void KeepLargestMemory(const RankModel& rank, ServeResult* result) {
  result->weight_bytes = std::max(result->weight_bytes, rank.model->weight_bytes());
  result->kv_cache_bytes = std::max(result->kv_cache_bytes, rank.model->cache().bytes());
  result->peak_bytes = std::max(result->peak_bytes, rank.backend->allocator().Stats().peak_bytes);
}

absl::Status RunInstances(
    const ServeOptions& o, int instances, const std::string& name,
    const std::function<absl::Status(int instance, int rank, RankResources& resources)>& body,
    const std::function<void()>& on_failure) {
  const int tp = static_cast<int>(o.model.parallel.tp);
  auto rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> group{0};
  const std::string prefix = absl::StrCat(name, group.fetch_add(1));
  return RunRankThreads(instances * tp, [&](int i) -> absl::Status {
    const int instance = i / tp, rank = i % tp;
    absl::Status s = [&]() -> absl::Status {
      RankResources res;
      if (o.backend == BackendKind::kCuda) {
        PT_ASSIGN_OR_RETURN(res.backend, MakeCudaBackend(i, o.capacity_bytes));
      } else {
        res.backend = MakeCpuBackend(o.capacity_bytes, o.model.threads);
      }
      PT_ASSIGN_OR_RETURN(res.groups, MakeServingGroups(*res.backend, rendezvous,
                                                        absl::StrCat(prefix, "-", instance), rank,
                                                        tp, static_cast<int>(o.model.parallel.ep)));
      return body(instance, rank, res);
    }();
    if (!s.ok() && on_failure) on_failure();
    return s;
  });
}

std::vector<int32_t> StepInputTokens(const std::vector<SeqChunk>& plan,
                                     const std::map<int64_t, std::vector<int32_t>>& prompts,
                                     const std::map<int64_t, int32_t>& last_token,
                                     StepStats* stats) {
  std::vector<int32_t> tokens;
  for (const SeqChunk& c : plan) {
    const auto p = prompts.find(c.seq);
    if (p != prompts.end() && c.start < static_cast<int64_t>(p->second.size())) {
      tokens.insert(tokens.end(), p->second.begin() + c.start,
                    p->second.begin() + c.start + c.num_tokens);
      stats->prefill_tokens += c.num_tokens;
    } else {
      tokens.push_back(last_token.at(c.seq));
      ++stats->decode_tokens;
    }
  }
  stats->max_step_tokens =
      std::max<int64_t>(stats->max_step_tokens, static_cast<int64_t>(tokens.size()));
  stats->max_step_sequences =
      std::max<int64_t>(stats->max_step_sequences, static_cast<int64_t>(plan.size()));
  return tokens;
}

BatcherLimits LimitsFor(const ServeOptions& o, ServingModel& model) {
  BatcherLimits limits;
  limits.max_batch_size = o.max_batch_size;
  limits.max_num_tokens = o.max_num_tokens;
  limits.chunked_prefill = o.chunked_prefill;
  limits.kv_block_size = o.model.kv_block_size;
  const KvLayerGroups& groups = model.cache().groups();
  limits.num_kv_blocks = groups.blocks;
  limits.kv_full_groups = groups.full_groups;
  limits.kv_windowed_groups = groups.windowed_groups;
  limits.kv_window = model.cache().shape().window;
  return limits;
}

void FinishResult(ServeResult* result) {
  std::sort(result->requests.begin(), result->requests.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.id < b.id; });
  double first = 1e300, last = 0;
  for (const RequestRecord& r : result->requests) {
    first = std::min(first, r.arrival_s);
    last = std::max(last, r.finish_s);
  }
  result->duration_s = result->requests.empty() ? 0.0 : last - first;
}

}  // namespace internal

absl::Status ServeOptions::Validate() const {
  PT_RETURN_IF_ERROR(model.Validate());
  PT_RETURN_IF_ERROR(trace.Validate());
  BatcherLimits limits;
  limits.max_batch_size = max_batch_size;
  limits.max_num_tokens = max_num_tokens;
  limits.kv_block_size = model.kv_block_size;
  limits.num_kv_blocks = model.num_kv_blocks;
  PT_RETURN_IF_ERROR(limits.Validate());
  if (prefill_instances < 0 || decode_instances < 0 ||
      (disaggregated() && (prefill_instances == 0 || decode_instances == 0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_instances (", prefill_instances, ") and decode_instances (",
                     decode_instances, ") must both be >= 1 (disaggregated) or both 0"));
  }
  if (disaggregated() && model.parallel.pp > 1) {
    return absl::InvalidArgumentError(
        "disaggregated serving (prefill_instances, decode_instances) does not run with pp > 1");
  }
  if (disaggregated() && model.attention_dp) {
    return absl::InvalidArgumentError(
        "disaggregated serving (prefill_instances, decode_instances) does not run with "
        "attention_dp");
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup_steps (", warmup_steps, ") must be >= 0"));
  }
  if (backend == BackendKind::kCuda && (disaggregated() || model.parallel.pp > 1)) {
    return absl::UnimplementedError(
        "the serving loop runs pipeline stages and disaggregated instances on the CPU "
        "backend only (pp 1, aggregated on CUDA)");
  }
  return absl::OkStatus();
}

Distribution Summarize(std::vector<double> v) {
  Distribution d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    const double pos = p * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / static_cast<double>(v.size());
  d.p50 = q(0.5), d.p90 = q(0.9), d.p99 = q(0.99);
  d.min = v.front(), d.max = v.back();
  return d;
}

int64_t ServeResult::output_tokens() const {
  int64_t n = 0;
  for (const RequestRecord& r : requests) n += r.output_tokens;
  return n;
}

double ServeResult::output_tokens_per_s() const {
  return duration_s > 0 ? static_cast<double>(output_tokens()) / duration_s : 0.0;
}

Distribution ServeResult::ttft_s() const {
  std::vector<double> v;
  for (const RequestRecord& r : requests) v.push_back(r.ttft_s());
  return Summarize(v);
}

Distribution ServeResult::tpot_s() const {
  std::vector<double> v;
  for (const RequestRecord& r : requests) {
    if (r.output_tokens > 1) v.push_back(r.tpot_s());
  }
  return Summarize(v);
}

Distribution ServeResult::e2e_s() const {
  std::vector<double> v;
  for (const RequestRecord& r : requests) v.push_back(r.e2e_s());
  return Summarize(v);
}

double ServeResult::mean_in_flight() const {
  double sum = 0;
  for (const RequestRecord& r : requests) sum += r.e2e_s();
  return duration_s > 0 ? sum / duration_s : 0.0;
}

absl::StatusOr<ServeResult> RunServeLoop(const ServeOptions& options) {
  PT_RETURN_IF_ERROR(options.Validate());
  PT_ASSIGN_OR_RETURN(const std::vector<TraceRequest> trace, MakeTrace(options.trace));
  if (options.backend == BackendKind::kCuda) {
    PT_RETURN_IF_ERROR(CheckCudaDevicesForRanks(options.model.parallel.tp));
  }
  if (options.disaggregated()) return internal::RunDisaggregated(options, trace);
  if (options.model.parallel.pp > 1) return internal::RunPipelined(options, trace);
  ServeResult result;
  std::mutex mu;
  PT_RETURN_IF_ERROR(
      internal::RunInstances(options, 1, "serve", [&](int, int, internal::RankResources& res) {
        return RunRank(options, trace, res, &result, &mu);
      }));
  internal::FinishResult(&result);
  return result;
}

}  // namespace paratune::kernels::serving
