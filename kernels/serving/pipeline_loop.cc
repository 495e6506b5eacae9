// The serving loop under pipeline parallelism: pp stages of tp thread ranks, pp micro-batch
// engines in flight (vLLM's virtual engines, TensorRT-LLM's micro-batches).
//
// Stage 0 holds the schedulers: one ContinuousBatcher per engine, each with 1/pp of the KV
// pool, a new request going to the engine with the fewest unfinished requests (vLLM's
// least-loaded virtual engine). Whenever an engine is idle and has work, stage 0 plans its
// step, embeds the tokens, runs its layers and hands the chunks and hidden states to stage
// 1; the last stage samples and hands the tokens back to stage 0, which then commits that
// engine's step. So up to pp steps, of different engines, are in the pipe at once, and an
// engine's next step waits for its previous one's tokens. Each stage's rank r hands to rank
// r of the next (the hidden states are whole on every tp rank), through in-process queues: a
// copy between the ranks' memories, as a p2p transfer would make. Finished sequences are
// freed on stage 0 at once and on the other stages with the next step that reaches them.
// Stage 0's ranks run the same schedule (Poisson arrivals read rank 0's clock), rank 0
// records the requests' times.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "kernels/backend.h"
#include "kernels/serving/serve_loop_internal.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving::internal {
namespace {

struct StageMessage {
  bool stop = false;
  bool timed = false;  // the first step after the warm-up: the stage resets its clocks
  std::vector<SeqChunk> chunks;
  std::vector<int64_t> release;  // sequences to free before the step
  std::vector<float> hidden;     // [StepTokens(chunks), h]
};

// Every queue between the ranks, under one lock; Abort wakes every waiter.
struct Pipe {
  Pipe(int pp, int tp) : forward(static_cast<size_t>(pp * tp)), back(static_cast<size_t>(tp)) {}
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  std::vector<std::deque<StageMessage>> forward;       // into stage s rank r: [s * tp + r]
  std::vector<std::deque<std::vector<int32_t>>> back;  // tokens into stage 0 rank r
  ServeResult* result = nullptr;

  template <typename T>
  void Push(std::deque<T>& q, T value) {
    const std::lock_guard<std::mutex> lock(mu);
    q.push_back(std::move(value));
    cv.notify_all();
  }
  template <typename T>
  absl::StatusOr<T> Pop(std::deque<T>& q) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return aborted || !q.empty(); });
    if (aborted) return absl::AbortedError("pipelined serve loop: another rank failed");
    T value = std::move(q.front());
    q.pop_front();
    return value;
  }
  void Abort() {
    const std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }
};

std::vector<float> Copy(const Tensor& x) {
  return std::vector<float>(x.data_as<float>(), x.data_as<float>() + x.numel());
}

// Each stage's rank 0: the memory it reports (the busiest stage's figures are kept).
void ReportMemory(Pipe& pipe, const RankModel& st) {
  const std::lock_guard<std::mutex> lock(pipe.mu);
  KeepLargestMemory(st, pipe.result);
}

// Stages 1 .. pp − 1.
absl::Status RunLaterStage(const ServeOptions& o, Pipe& pipe, RankResources& res, int64_t s,
                           int rank) {
  const int tp = static_cast<int>(o.model.parallel.tp);
  const int64_t pp = o.model.parallel.pp;
  PT_ASSIGN_OR_RETURN(RankModel st, MakeRankModel(o, res, s));
  ServingModel& model = *st.model;
  const int64_t h = o.model.shape.hidden_size;
  auto& in = pipe.forward[static_cast<size_t>(s * tp + rank)];
  const bool last = s == pp - 1;
  while (true) {
    PT_ASSIGN_OR_RETURN(StageMessage msg, pipe.Pop(in));
    if (msg.stop) {
      if (!last) pipe.Push(pipe.forward[static_cast<size_t>((s + 1) * tp + rank)], std::move(msg));
      break;
    }
    if (msg.timed) {
      model.ResetTimes();
      st.backend->allocator().ResetPeaks();
    }
    for (int64_t id : msg.release) model.Release(id);
    const int64_t n = StepTokens(msg.chunks);
    PT_ASSIGN_OR_RETURN(Tensor x, st.backend->Empty({n, h}, DType::kF32, MemoryTag::kWorkspace));
    std::copy(msg.hidden.begin(), msg.hidden.end(), x.data_as<float>());
    PT_ASSIGN_OR_RETURN(const Tensor y, model.StageForward({}, &x, msg.chunks));
    for (const SeqChunk& c : msg.chunks) model.cache().FreeOutsideWindow(c.seq);
    if (last) {
      PT_ASSIGN_OR_RETURN(StepOutput out, model.Sample(y, msg.chunks, false));
      pipe.Push(pipe.back[static_cast<size_t>(rank)], std::move(out.next_tokens));
    } else {
      msg.hidden = Copy(y);
      pipe.Push(pipe.forward[static_cast<size_t>((s + 1) * tp + rank)], std::move(msg));
    }
  }
  if (rank == 0) ReportMemory(pipe, st);
  return absl::OkStatus();
}

// Stage 0: the schedulers, the clock and the records.
absl::Status RunFirstStage(const ServeOptions& o, const std::vector<TraceRequest>& trace,
                           Pipe& pipe, RankResources& res, int rank) {
  const int tp = static_cast<int>(o.model.parallel.tp);
  const int64_t pp = o.model.parallel.pp;
  PT_ASSIGN_OR_RETURN(RankModel st, MakeRankModel(o, res, 0));
  ServingModel& model = *st.model;
  Communicator& comm = res.groups.host();
  const int64_t V = o.model.shape.vocab_size;
  auto& next_stage = pipe.forward[static_cast<size_t>(tp + rank)];
  auto& results = pipe.back[static_cast<size_t>(rank)];
  // One pipeline step outside the schedule (the warm-up): its tokens.
  const auto through =
      [&](const std::vector<int32_t>& tokens,
          const std::vector<SeqChunk>& plan) -> absl::StatusOr<std::vector<int32_t>> {
    PT_ASSIGN_OR_RETURN(const Tensor x, model.StageForward(tokens, nullptr, plan));
    StageMessage msg;
    msg.chunks = plan;
    msg.hidden = Copy(x);
    pipe.Push(next_stage, std::move(msg));
    return pipe.Pop(results);
  };
  PT_RETURN_IF_ERROR(WarmUpRequest(o, through));
  model.Release(kWarmUpSeq);
  std::vector<int64_t> release = {kWarmUpSeq};  // freed here, to free on the later stages
  model.ResetTimes();
  st.backend->allocator().ResetPeaks();

  BatcherLimits limits = LimitsFor(o, model);
  limits.num_kv_blocks = limits.num_kv_blocks / pp;  // each engine its share of the pool
  std::vector<ContinuousBatcher> engines(static_cast<size_t>(pp), ContinuousBatcher(limits));
  const int64_t n = static_cast<int64_t>(trace.size());
  std::vector<RequestRecord> records(trace.size());
  std::map<int64_t, std::vector<int32_t>> prompts;
  std::map<int64_t, int32_t> last_token;
  int64_t next_arrival = 0, finished = 0;
  const bool closed_loop = o.trace.concurrency > 0;
  auto add = [&](int64_t i, double at) -> absl::Status {
    const TraceRequest& r = trace[static_cast<size_t>(i)];
    auto least = std::min_element(engines.begin(), engines.end(), [](const auto& a, const auto& b) {
      return a.running() + a.waiting() < b.running() + b.waiting();
    });
    PT_RETURN_IF_ERROR(least->Add(r.id, r.isl, r.osl));
    prompts[r.id] = PromptTokens(o.trace.seed, r.id, r.isl, V);
    RequestRecord& rec = records[static_cast<size_t>(r.id)];
    rec.id = r.id, rec.isl = r.isl, rec.osl = r.osl;
    rec.arrival_s = at;
    return absl::OkStatus();
  };
  if (closed_loop) {
    for (; next_arrival < std::min(n, o.trace.concurrency); ++next_arrival) {
      PT_RETURN_IF_ERROR(add(next_arrival, 0.0));
    }
  }
  StepStats stats;
  std::deque<size_t> in_flight;  // engines, in the order their steps entered the pipe
  std::vector<std::vector<SeqChunk>> sent(static_cast<size_t>(pp));
  std::vector<bool> busy(static_cast<size_t>(pp), false);
  size_t turn = 0;  // the engine asked first next time (round robin)
  bool timed = true;
  PT_RETURN_IF_ERROR(comm.Barrier());
  const Clock::time_point t0 = Clock::now();
  while (finished < n || !in_flight.empty()) {
    double now = 0;
    if (o.trace.request_rate > 0) {
      PT_ASSIGN_OR_RETURN(now, Broadcast(comm, Elapsed(t0)));
    }
    if (!closed_loop) {
      for (; next_arrival < n && trace[static_cast<size_t>(next_arrival)].arrival_s <= now;
           ++next_arrival) {
        PT_RETURN_IF_ERROR(add(next_arrival, trace[static_cast<size_t>(next_arrival)].arrival_s));
      }
    }
    // An idle engine with work enters the pipe.
    std::vector<SeqChunk> plan;
    size_t e = 0;
    for (size_t k = 0; k < engines.size() && plan.empty(); ++k) {
      e = (turn + k) % engines.size();
      if (!busy[e]) plan = engines[e].Plan();
    }
    if (!plan.empty()) {
      turn = (e + 1) % engines.size();
      const std::vector<int32_t> tokens = StepInputTokens(plan, prompts, last_token, &stats);
      PT_ASSIGN_OR_RETURN(const Tensor x, model.StageForward(tokens, nullptr, plan));
      for (const SeqChunk& c : plan) model.cache().FreeOutsideWindow(c.seq);
      StageMessage msg;
      msg.timed = timed;
      msg.chunks = plan;
      msg.release = std::move(release);
      msg.hidden = Copy(x);
      release.clear();
      timed = false;
      pipe.Push(next_stage, std::move(msg));
      busy[e] = true;
      sent[e] = std::move(plan);
      in_flight.push_back(e);
      ++stats.steps;
      continue;
    }
    if (!in_flight.empty()) {  // the oldest step in the pipe comes back
      PT_ASSIGN_OR_RETURN(const std::vector<int32_t> next, pipe.Pop(results));
      const size_t done = in_flight.front();
      in_flight.pop_front();
      busy[done] = false;
      const double t = Elapsed(t0);
      const std::vector<TokenEvent> events = engines[done].Commit(sent[done]);
      for (size_t k = 0; k < events.size(); ++k) {
        const TokenEvent& ev = events[k];
        RequestRecord& rec = records[static_cast<size_t>(ev.seq)];
        last_token[ev.seq] = next[k];
        ++rec.output_tokens;
        if (o.keep_tokens) rec.tokens.push_back(next[k]);
        if (ev.first) rec.first_token_s = t;
        if (!ev.finished) continue;
        rec.finish_s = t;
        ++finished;
        model.Release(ev.seq);
        release.push_back(ev.seq);
        prompts.erase(ev.seq);
        last_token.erase(ev.seq);
        if (closed_loop && next_arrival < n) PT_RETURN_IF_ERROR(add(next_arrival++, t));
      }
      continue;
    }
    if (closed_loop || next_arrival >= n) {
      return absl::InternalError("pipelined serve loop: nothing can run but requests remain");
    }
    // Idle until the next Poisson arrival (the same target on every rank).
    std::this_thread::sleep_until(
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                 trace[static_cast<size_t>(next_arrival)].arrival_s)));
  }
  StageMessage stop;
  stop.stop = true;
  pipe.Push(next_stage, std::move(stop));
  if (rank != 0) return absl::OkStatus();
  stats.phases = model.times();
  {
    const std::lock_guard<std::mutex> lock(pipe.mu);
    pipe.result->requests = std::move(records);
    pipe.result->steps = stats;
  }
  ReportMemory(pipe, st);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServeResult> RunPipelined(const ServeOptions& o,
                                         const std::vector<TraceRequest>& trace) {
  const int pp = static_cast<int>(o.model.parallel.pp);
  ServeResult result;
  Pipe pipe(pp, static_cast<int>(o.model.parallel.tp));
  pipe.result = &result;
  PT_RETURN_IF_ERROR(RunInstances(
      o, pp, "pipeline",
      [&](int s, int rank, RankResources& res) {
        return s == 0 ? RunFirstStage(o, trace, pipe, res, rank)
                      : RunLaterStage(o, pipe, res, s, rank);
      },
      [&] { pipe.Abort(); }));
  FinishResult(&result);
  return result;
}

}  // namespace paratune::kernels::serving::internal
