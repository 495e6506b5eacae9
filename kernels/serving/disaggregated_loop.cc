// Disaggregated serving on the serving kernels: prefill instances and decode instances,
// each a ServingModel on its own tp thread ranks, and a router between them.
//
// A request waits in the queue of the prefill instance with the fewest outstanding
// requests. A prefill instance runs prompt chunks only (its batcher sees each request with
// one output token); the step that finishes a prompt samples the first token, and every
// rank then exports the sequence's KV blocks (its heads' shard) to the router and frees
// them, as a prefill engine hands its cache to a decode engine over NIXL or NCCL. Rank 0
// queues the request on the decode instance with the fewest outstanding requests, whose
// batcher admits it (AddPrefilled) under its own batch and KV limits; every decode rank
// imports its shard into its cache before the sequence's first decode step. In each
// instance rank 0 decides what to take from the router and broadcasts it, so its ranks run
// the same plans; an instance with nothing to do waits at most kIdlePoll for work before
// its ranks meet again. Every instance's clock starts at one moment (the last thread to
// arrive), so arrival, first-token and finish times compare across instances.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "kernels/backend.h"
#include "kernels/serving/serve_loop_internal.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving::internal {
namespace {

constexpr auto kIdlePoll = std::chrono::milliseconds(20);

struct Handoff {
  int64_t id = 0;
  int32_t first_token = 0;
};

// Shared by every thread; every field under mu.
struct Router {
  Router(const ServeOptions& options, const std::vector<TraceRequest>& requests)
      : o(options),
        trace(requests),
        prefill_queue(options.prefill_instances),
        prefill_load(options.prefill_instances, 0),
        decode_queue(options.decode_instances),
        decode_load(options.decode_instances, 0),
        records(requests.size()) {}

  const ServeOptions& o;
  const std::vector<TraceRequest>& trace;
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  int arrived = 0;
  bool started = false;
  Clock::time_point t0;
  std::vector<std::deque<int64_t>> prefill_queue;  // request ids
  std::vector<int64_t> prefill_load;               // queued or running
  std::vector<std::deque<Handoff>> decode_queue;
  std::vector<int64_t> decode_load;
  std::map<std::pair<int64_t, int>, PagedKvCache::SequenceKv> staged;  // (id, tp rank)
  std::vector<RequestRecord> records;                                  // by id
  int64_t next = 0;  // the next trace index to issue
  int64_t finished = 0;
  ServeResult* result = nullptr;
  int threads = 0;  // every instance's ranks

  int64_t size() const { return static_cast<int64_t>(trace.size()); }
  bool closed_loop() const { return o.trace.concurrency > 0; }
  bool poisson() const { return o.trace.request_rate > 0; }
  bool done() const { return finished == size(); }

  static size_t LeastLoaded(const std::vector<int64_t>& load) {
    return static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
  }
  void DispatchLocked(int64_t i, double arrival_s) {
    const TraceRequest& r = trace[static_cast<size_t>(i)];
    const size_t p = LeastLoaded(prefill_load);
    prefill_queue[p].push_back(r.id);
    ++prefill_load[p];
    RequestRecord& rec = records[static_cast<size_t>(r.id)];
    rec.id = r.id, rec.isl = r.isl, rec.osl = r.osl;
    rec.arrival_s = arrival_s;
    cv.notify_all();
  }
  // Poisson arrivals up to `now`.
  void AdmitLocked(double now) {
    if (!poisson()) return;
    while (next < size() && trace[static_cast<size_t>(next)].arrival_s <= now) {
      DispatchLocked(next, trace[static_cast<size_t>(next)].arrival_s);
      ++next;
    }
  }
  double NextArrivalLocked() const {
    return poisson() && next < size() ? trace[static_cast<size_t>(next)].arrival_s
                                      : std::numeric_limits<double>::infinity();
  }
  void FinishLocked(int64_t id, double t) {
    records[static_cast<size_t>(id)].finish_s = t;
    ++finished;
    if (closed_loop() && next < size()) DispatchLocked(next++, t);
    cv.notify_all();
  }
  // Every thread: waits for the others, then returns the common start of the clock.
  absl::StatusOr<Clock::time_point> Start() {
    std::unique_lock<std::mutex> lock(mu);
    if (++arrived == threads) {
      t0 = Clock::now();
      started = true;
      const int64_t initial = poisson()       ? 0
                              : closed_loop() ? std::min(size(), o.trace.concurrency)
                                              : size();
      for (; next < initial; ++next) DispatchLocked(next, 0.0);
      cv.notify_all();
    }
    cv.wait(lock, [&] { return started || aborted; });
    if (aborted) return absl::AbortedError("disaggregated serve loop: another rank failed");
    return t0;
  }
  // Rank 0 of an instance with nothing to run: waits for `ready` or kIdlePoll (or the next
  // Poisson arrival, if sooner).
  template <typename Ready>
  absl::Status IdleLocked(std::unique_lock<std::mutex>& lock, Ready ready) {
    auto until = Clock::now() + kIdlePoll;
    const double next_s = NextArrivalLocked();
    if (next_s < std::numeric_limits<double>::infinity()) {
      until = std::min(until, t0 + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(next_s)));
    }
    cv.wait_until(lock, until, [&] { return aborted || ready(); });
    if (aborted) return absl::AbortedError("disaggregated serve loop: another rank failed");
    return absl::OkStatus();
  }
};

// Rank 0's [stop, count, payload...] to every rank of the instance.
absl::StatusOr<std::vector<double>> Command(Communicator& comm, bool stop,
                                            const std::vector<double>& payload) {
  std::vector<double> head{stop ? 1.0 : 0.0, static_cast<double>(payload.size())};
  PT_RETURN_IF_ERROR(Broadcast(comm, &head));
  std::vector<double> body = payload;
  body.resize(static_cast<size_t>(head[1]));
  PT_RETURN_IF_ERROR(Broadcast(comm, &body));
  body.insert(body.begin(), head[0]);
  return body;  // [stop, payload...]
}

absl::StatusOr<RankModel> MakeInstance(const ServeOptions& o, RankResources& res) {
  PT_ASSIGN_OR_RETURN(RankModel in, MakeRankModel(o, res));
  PT_RETURN_IF_ERROR(WarmUp(o, *in.model, *in.backend));
  return in;
}

// Rank 0 of an instance: its step counts, phases and memory into the result.
void Report(Router& router, const StepStats& stats, const RankModel& in, bool decode) {
  const std::lock_guard<std::mutex> lock(router.mu);
  StepStats& s = router.result->steps;
  s.steps += stats.steps;
  s.prefill_tokens += stats.prefill_tokens;
  s.decode_tokens += stats.decode_tokens;
  s.max_step_tokens = std::max(s.max_step_tokens, stats.max_step_tokens);
  s.max_step_sequences = std::max(s.max_step_sequences, stats.max_step_sequences);
  if (decode && s.phases.steps == 0) s.phases = in.model->times();
  KeepLargestMemory(in, router.result);
}

absl::Status RunPrefillRank(Router& router, RankResources& res, size_t p) {
  const ServeOptions& o = router.o;
  Communicator& comm = res.groups.host();
  const int rank = comm.rank();
  PT_ASSIGN_OR_RETURN(RankModel in, MakeInstance(o, res));
  ServingModel& model = *in.model;
  ContinuousBatcher batcher(LimitsFor(o, model));
  const int64_t V = o.model.shape.vocab_size;
  std::map<int64_t, std::vector<int32_t>> prompts;
  StepStats stats;
  PT_ASSIGN_OR_RETURN(const Clock::time_point t0, router.Start());
  while (true) {
    bool stop = false;
    std::vector<double> taken;
    if (rank == 0) {
      std::unique_lock<std::mutex> lock(router.mu);
      router.AdmitLocked(Elapsed(t0));
      auto ready = [&] { return !router.prefill_queue[p].empty() || router.done(); };
      if (!ready() && batcher.running() + batcher.waiting() == 0) {
        PT_RETURN_IF_ERROR(router.IdleLocked(lock, ready));
        router.AdmitLocked(Elapsed(t0));
      }
      for (int64_t id : router.prefill_queue[p]) taken.push_back(static_cast<double>(id));
      router.prefill_queue[p].clear();
      stop = router.done();
    }
    PT_ASSIGN_OR_RETURN(const std::vector<double> cmd, Command(comm, stop, taken));
    for (size_t i = 1; i < cmd.size(); ++i) {
      const TraceRequest& r = router.trace[static_cast<size_t>(cmd[i])];
      PT_RETURN_IF_ERROR(batcher.Add(r.id, r.isl, 1));  // the prompt and its first token
      prompts[r.id] = PromptTokens(o.trace.seed, r.id, r.isl, V);
    }
    const std::vector<SeqChunk> plan = batcher.Plan();
    if (plan.empty()) {
      if (cmd[0] != 0) break;
      continue;
    }
    const std::vector<int32_t> tokens = StepInputTokens(plan, prompts, {}, &stats);
    PT_ASSIGN_OR_RETURN(const StepOutput out, model.Step(tokens, plan, false));
    for (const SeqChunk& c : plan) model.cache().FreeOutsideWindow(c.seq);
    ++stats.steps;
    const double t = Elapsed(t0);
    const std::vector<TokenEvent> events = batcher.Commit(plan);
    for (size_t e = 0; e < events.size(); ++e) {
      const int64_t id = events[e].seq;
      const TraceRequest& r = router.trace[static_cast<size_t>(id)];
      PagedKvCache::SequenceKv kv;
      if (r.osl > 1) {
        PT_ASSIGN_OR_RETURN(kv, model.cache().Export(id));
      }
      model.Release(id);
      prompts.erase(id);
      const std::lock_guard<std::mutex> lock(router.mu);
      if (r.osl > 1) router.staged[{id, rank}] = std::move(kv);
      if (rank == 0) {
        RequestRecord& rec = router.records[static_cast<size_t>(id)];
        rec.first_token_s = t;
        rec.output_tokens = 1;
        if (o.keep_tokens) rec.tokens.push_back(out.next_tokens[e]);
        --router.prefill_load[p];
        if (r.osl > 1) {
          const size_t d = Router::LeastLoaded(router.decode_load);
          router.decode_queue[d].push_back({id, out.next_tokens[e]});
          ++router.decode_load[d];
        } else {
          router.FinishLocked(id, t);
        }
      }
      router.cv.notify_all();
    }
  }
  if (rank == 0) Report(router, stats, in, false);
  return absl::OkStatus();
}

absl::Status RunDecodeRank(Router& router, RankResources& res, size_t d) {
  const ServeOptions& o = router.o;
  Communicator& comm = res.groups.host();
  const int rank = comm.rank();
  PT_ASSIGN_OR_RETURN(RankModel in, MakeInstance(o, res));
  ServingModel& model = *in.model;
  ContinuousBatcher batcher(LimitsFor(o, model));
  std::map<int64_t, int32_t> last_token;
  std::set<int64_t> to_import;
  StepStats stats;
  PT_ASSIGN_OR_RETURN(const Clock::time_point t0, router.Start());
  while (true) {
    bool stop = false;
    std::vector<double> taken;  // id, first token, ...
    if (rank == 0) {
      std::unique_lock<std::mutex> lock(router.mu);
      auto ready = [&] { return !router.decode_queue[d].empty() || router.done(); };
      if (!ready() && batcher.running() + batcher.waiting() == 0) {
        PT_RETURN_IF_ERROR(router.IdleLocked(lock, ready));
      }
      for (const Handoff& h : router.decode_queue[d]) {
        taken.push_back(static_cast<double>(h.id));
        taken.push_back(static_cast<double>(h.first_token));
      }
      router.decode_queue[d].clear();
      stop = router.done();
    }
    PT_ASSIGN_OR_RETURN(const std::vector<double> cmd, Command(comm, stop, taken));
    for (size_t i = 1; i + 1 < cmd.size(); i += 2) {
      const TraceRequest& r = router.trace[static_cast<size_t>(cmd[i])];
      PT_RETURN_IF_ERROR(batcher.AddPrefilled(r.id, r.isl, r.osl));
      last_token[r.id] = static_cast<int32_t>(cmd[i + 1]);
      to_import.insert(r.id);
    }
    const std::vector<SeqChunk> plan = batcher.Plan();
    if (plan.empty()) {
      if (cmd[0] != 0) break;
      continue;
    }
    for (const SeqChunk& c : plan) {
      if (to_import.erase(c.seq) > 0) {  // its first decode: the prefill's KV comes in
        PagedKvCache::SequenceKv kv;
        {
          std::unique_lock<std::mutex> lock(router.mu);
          const std::pair<int64_t, int> key{c.seq, rank};
          router.cv.wait(lock, [&] { return router.aborted || router.staged.count(key) > 0; });
          if (router.aborted) {
            return absl::AbortedError("disaggregated serve loop: another rank failed");
          }
          kv = std::move(router.staged.at(key));
          router.staged.erase(key);
        }
        PT_RETURN_IF_ERROR(model.cache().Import(c.seq, kv));
      }
    }
    const std::vector<int32_t> tokens = StepInputTokens(plan, {}, last_token, &stats);
    PT_ASSIGN_OR_RETURN(const StepOutput out, model.Step(tokens, plan, false));
    for (const SeqChunk& c : plan) model.cache().FreeOutsideWindow(c.seq);
    ++stats.steps;
    const double t = Elapsed(t0);
    const std::vector<TokenEvent> events = batcher.Commit(plan);
    std::unique_lock<std::mutex> lock(router.mu, std::defer_lock);
    if (rank == 0) lock.lock();
    for (size_t e = 0; e < events.size(); ++e) {
      const int64_t id = events[e].seq;
      last_token[id] = out.next_tokens[e];
      if (rank == 0) {
        RequestRecord& rec = router.records[static_cast<size_t>(id)];
        ++rec.output_tokens;
        if (o.keep_tokens) rec.tokens.push_back(out.next_tokens[e]);
      }
      if (!events[e].finished) continue;
      model.Release(id);
      last_token.erase(id);
      if (rank == 0) {
        --router.decode_load[d];
        router.FinishLocked(id, t);
      }
    }
  }
  if (rank == 0) Report(router, stats, in, true);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServeResult> RunDisaggregated(const ServeOptions& o,
                                             const std::vector<TraceRequest>& trace) {
  const int instances = static_cast<int>(o.prefill_instances + o.decode_instances);
  ServeResult result;
  Router router(o, trace);
  router.result = &result;
  router.threads = instances * static_cast<int>(o.model.parallel.tp);
  PT_RETURN_IF_ERROR(RunInstances(
      o, instances, "disagg",
      [&](int instance, int, RankResources& res) {
        return instance < o.prefill_instances
                   ? RunPrefillRank(router, res, static_cast<size_t>(instance))
                   : RunDecodeRank(router, res,
                                   static_cast<size_t>(instance - o.prefill_instances));
      },
      [&] {
        const std::lock_guard<std::mutex> lock(router.mu);
        router.aborted = true;
        router.cv.notify_all();
      }));
  result.requests = std::move(router.records);
  FinishResult(&result);
  return result;
}

}  // namespace paratune::kernels::serving::internal
