#include "inference/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <queue>
#include <random>

namespace paratune::inference {
namespace {

struct Request {
  double arrival = 0;
  int64_t isl = 0, osl = 0;
  int64_t prompt = 0;     // Tokens to prefill (isl, or isl + generated after preemption).
  int64_t prefilled = 0;  // Of `prompt`.
  int64_t generated = 0;  // Output tokens so far.
  int64_t kv_tokens = 0;  // KV blocks reserved, in tokens of the sequence.
  double kv_slots = 0;    // Of the pool (AttentionSpan::KvSlots of kv_tokens).
  double first_token = -1;
  double finish = -1;
  bool served = false;
};

struct EngineState {
  std::deque<int> waiting;
  std::vector<int> running;  // Admission order.
  double kv_used = 0;        // Pool tokens held (AttentionSpan::KvSlots).
  bool busy = false;
  bool kicked = false;  // A start is scheduled for this instant.
  // The step in flight.
  std::vector<std::pair<int, int64_t>> chunks;  // request, prompt tokens this step.
  std::vector<int> decoding;
  bool static_batch = false;
};

enum class EventKind { kArrival, kStepEnd, kTransferDone, kStart };
struct Event {
  double time;
  EventKind kind;
  int id;
  int64_t seq = 0;  // Ties keep their push order, so arrivals at one instant batch together.
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

int64_t RoundUp(int64_t tokens, int64_t block) { return (tokens + block - 1) / block * block; }

class Simulation {
 public:
  Simulation(const std::vector<SimEngine>& engines, const SimWorkload& w,
             const std::function<double(int64_t)>& transfer)
      : engines_(engines), w_(w), transfer_(transfer), state_(engines.size()) {}

  SimulationResult Run() {
    std::mt19937_64 rng(w_.seed);
    std::normal_distribution<double> unit(0.0, 1.0);
    const auto draw = [&](int64_t mean, double sd) {
      if (sd <= 0) return mean;
      return std::max<int64_t>(1, std::llround(static_cast<double>(mean) + sd * unit(rng)));
    };
    requests_.resize(static_cast<size_t>(w_.num_requests));
    for (Request& r : requests_) {
      r.isl = draw(w_.isl, w_.isl_stddev);
      r.osl = draw(w_.osl, w_.osl_stddev);
      r.prompt = r.isl;
    }
    if (w_.request_rate) {
      std::exponential_distribution<double> gap(*w_.request_rate);
      double t = 0;
      for (int i = 0; i < w_.num_requests; ++i) {
        requests_[static_cast<size_t>(i)].arrival = t;
        Push({t, EventKind::kArrival, i});
        t += gap(rng);
      }
      issued_ = w_.num_requests;
    } else {
      const int64_t first =
          w_.concurrency ? std::min(*w_.concurrency, w_.num_requests) : w_.num_requests;
      for (int i = 0; i < first; ++i) Push({0, EventKind::kArrival, i});
      issued_ = first;
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.time;
      switch (e.kind) {
        case EventKind::kArrival:
          Route(e.id, /*decode=*/false);
          break;
        case EventKind::kStepEnd:
          EndStep(e.id);
          break;
        case EventKind::kTransferDone:
          Route(e.id, /*decode=*/true);
          break;
        case EventKind::kStart:
          state_[e.id].kicked = false;
          if (!state_[e.id].busy) StartStep(e.id);
          break;
      }
    }
    return Summarise();
  }

 private:
  void Push(Event e) {
    e.seq = next_seq_++;
    events_.push(e);
  }

  void Route(int id, bool decode) {
    Request& r = requests_[id];
    if (decode) r.prefilled = r.prompt;
    int best = -1;
    size_t best_load = 0;
    for (size_t i = 0; i < engines_.size(); ++i) {
      const EngineRole role = engines_[i].role;
      const bool ok = decode ? role == EngineRole::kDecode
                             : (role == EngineRole::kMixed || role == EngineRole::kPrefill);
      if (!ok) continue;
      const size_t load = state_[i].waiting.size() + state_[i].running.size();
      if (best < 0 || load < best_load) {
        best = static_cast<int>(i);
        best_load = load;
      }
    }
    if (best < 0) return;
    const SimEngine& e = engines_[best];
    const int64_t whole = e.role == EngineRole::kPrefill ? r.isl : r.isl + r.osl;
    if (e.model->span().KvSlots(whole, e.kv_block_tokens) > e.kv_token_capacity) {
      // The sequence can never be held: the request fails (and frees its client).
      ++dropped_;
      Complete(id, /*served=*/false);
      return;
    }
    state_[best].waiting.push_back(id);
    // Start after every other event of this instant (arrivals at one time form one batch).
    if (!state_[best].busy && !state_[best].kicked) {
      state_[best].kicked = true;
      Push({now_, EventKind::kStart, best});
    }
  }

  // The tokens of the sequence a request reserves on admission (block-rounded).
  int64_t KvNeed(const SimEngine& e, const Request& r) const {
    if (e.role == EngineRole::kPrefill) return RoundUp(r.prompt, e.kv_block_tokens);
    if (e.reserves_whole_sequence) return RoundUp(r.isl + r.osl, e.kv_block_tokens);
    return RoundUp(r.prompt, e.kv_block_tokens);
  }

  // Holds `tokens` of request `r`'s sequence in the pool of engine `ei`.
  void Hold(int ei, Request& r, int64_t tokens) {
    const double slots = engines_[ei].model->span().KvSlots(tokens, engines_[ei].kv_block_tokens);
    state_[ei].kv_used += slots - r.kv_slots;
    r.kv_tokens = tokens;
    r.kv_slots = slots;
  }

  void Admit(int ei) {
    const SimEngine& e = engines_[ei];
    EngineState& s = state_[ei];
    while (!s.waiting.empty() && static_cast<int64_t>(s.running.size()) < e.max_batch_size) {
      Request& r = requests_[s.waiting.front()];
      const int64_t need = KvNeed(e, r);
      if (s.kv_used + e.model->span().KvSlots(need, e.kv_block_tokens) > e.kv_token_capacity) break;
      Hold(ei, r, need);
      s.running.push_back(s.waiting.front());
      s.waiting.pop_front();
    }
  }

  void StartStep(int ei) {
    const SimEngine& e = engines_[ei];
    EngineState& s = state_[ei];
    s.chunks.clear();
    s.decoding.clear();
    if (w_.batching == Batching::kStatic) {
      if (s.running.empty()) {
        // A new batch: up to the batch size, whatever the KV reservation allows.
        const int64_t limit = std::min(w_.static_batch_size, e.max_batch_size);
        while (!s.waiting.empty() && static_cast<int64_t>(s.running.size()) < limit) {
          Request& r = requests_[s.waiting.front()];
          const int64_t need = RoundUp(r.isl + r.osl, e.kv_block_tokens);
          if (!s.running.empty() &&
              s.kv_used + e.model->span().KvSlots(need, e.kv_block_tokens) > e.kv_token_capacity) {
            break;
          }
          Hold(ei, r, need);
          s.running.push_back(s.waiting.front());
          s.waiting.pop_front();
        }
        for (int id : s.running) s.chunks.push_back({id, requests_[id].prompt});
      } else {
        for (int id : s.running) {
          if (requests_[id].finish < 0) s.decoding.push_back(id);
        }
      }
    } else {
      Admit(ei);
      int64_t budget = e.max_num_tokens;
      for (int id : s.running) {
        const Request& r = requests_[id];
        if (r.prefilled >= r.prompt) s.decoding.push_back(id);
      }
      if (!e.reserves_whole_sequence && e.role != EngineRole::kPrefill) {
        // Each decoding sequence writes the KV of its newest token (isl + generated slots);
        // preempt the newest sequences until every one has its slot.
        while (!s.decoding.empty()) {
          double growth = 0;
          for (int id : s.decoding) {
            const Request& r = requests_[id];
            if (r.isl + r.generated > r.kv_tokens) {
              growth +=
                  e.model->span().KvSlots(r.kv_tokens + e.kv_block_tokens, e.kv_block_tokens) -
                  r.kv_slots;
            }
          }
          if (s.kv_used + growth <= e.kv_token_capacity) break;
          Preempt(ei);
          s.decoding.clear();
          for (int id : s.running) {
            if (requests_[id].prefilled >= requests_[id].prompt) s.decoding.push_back(id);
          }
        }
        for (int id : s.decoding) {
          Request& r = requests_[id];
          if (r.isl + r.generated > r.kv_tokens) Hold(ei, r, r.kv_tokens + e.kv_block_tokens);
        }
      }
      budget -= static_cast<int64_t>(s.decoding.size());
      for (int id : s.running) {
        if (budget <= 0) break;
        const Request& r = requests_[id];
        if (r.prefilled >= r.prompt) continue;
        const int64_t chunk = std::min(r.prompt - r.prefilled, budget);
        s.chunks.push_back({id, chunk});
        budget -= chunk;
      }
    }
    if (s.chunks.empty() && s.decoding.empty()) {
      s.busy = false;
      return;
    }
    StepWork work;
    for (const auto& [id, chunk] : s.chunks) {
      const Request& r = requests_[id];
      const double before = static_cast<double>(r.prefilled);
      const double c = static_cast<double>(chunk);
      work.prefill_tokens += c;
      work.prefill_attention_pairs += e.model->span().ChunkAttentionPairs(before, c);
      work.prefill_chunks += 1;
      if (r.prefilled + chunk >= r.prompt) work.sampled_sequences += 1;
    }
    for (int id : s.decoding) {
      const Request& r = requests_[id];
      work.decode_sequences += 1;
      work.decode_context_tokens +=
          e.model->span().AttendedContext(static_cast<double>(r.isl + r.generated));
    }
    work.sampled_sequences += work.decode_sequences;
    const double seconds = e.model->StepSeconds(work);
    decode_batch_sum_ += work.decode_sequences;
    ++steps_;
    s.busy = true;
    Push({now_ + seconds, EventKind::kStepEnd, ei});
  }

  void Preempt(int ei) {
    EngineState& s = state_[ei];
    const int id = s.running.back();
    s.running.pop_back();
    Request& r = requests_[id];
    s.kv_used -= r.kv_slots;
    r.kv_tokens = 0;
    r.kv_slots = 0;
    // Recompute: the prompt and the tokens generated so far are prefilled again.
    r.prompt = r.isl + r.generated;
    r.prefilled = 0;
    s.waiting.push_front(id);
    ++preemptions_;
  }

  void Release(int ei, int id) {
    EngineState& s = state_[ei];
    s.kv_used -= requests_[id].kv_slots;
    requests_[id].kv_tokens = 0;
    requests_[id].kv_slots = 0;
  }

  void Complete(int id, bool served = true) {
    requests_[id].finish = now_;
    requests_[id].served = served;
    if (!w_.request_rate && w_.concurrency && issued_ < w_.num_requests) {
      Push({now_, EventKind::kArrival, static_cast<int>(issued_)});
      requests_[issued_].arrival = now_;
      ++issued_;
    }
  }

  void EndStep(int ei) {
    const SimEngine& e = engines_[ei];
    EngineState& s = state_[ei];
    std::vector<int> done;
    for (const auto& [id, chunk] : s.chunks) {
      Request& r = requests_[id];
      r.prefilled += chunk;
      if (r.prefilled < r.prompt) continue;
      if (r.first_token < 0) {
        r.first_token = now_;
        r.generated = 1;
      }
      if (e.role == EngineRole::kPrefill) {
        done.push_back(id);
        continue;
      }
      if (r.generated >= r.osl) done.push_back(id);
    }
    for (int id : s.decoding) {
      Request& r = requests_[id];
      r.generated += 1;
      if (r.generated >= r.osl) done.push_back(id);
    }
    if (w_.batching == Batching::kStatic) {
      // The batch holds its slots until every sequence is done.
      bool all = true;
      for (int id : s.running) {
        Request& r = requests_[id];
        if (r.generated >= r.osl && r.finish < 0) Complete(id);
        all = all && r.finish >= 0;
      }
      if (all) {
        for (int id : s.running) Release(ei, id);
        s.running.clear();
      }
    } else {
      for (int id : done) {
        Release(ei, id);
        s.running.erase(std::find(s.running.begin(), s.running.end(), id));
        Request& r = requests_[id];
        if (e.role == EngineRole::kPrefill && r.osl > 1) {
          const double t = transfer_ ? transfer_(r.isl) : 0;
          r.prompt = r.isl;
          Push({now_ + t, EventKind::kTransferDone, id});
        } else {
          Complete(id);
        }
      }
    }
    StartStep(ei);
    // Other idle engines may now have work (a completion issued a new request).
  }

  SimulationResult Summarise() {
    SimulationResult out;
    std::vector<double> ttft, tpot, e2e;
    double first = 1e300, last = 0, tokens = 0;
    for (const Request& r : requests_) {
      if (!r.served) continue;
      first = std::min(first, r.arrival);
      last = std::max(last, r.finish);
      ttft.push_back((r.first_token - r.arrival) * 1e3);
      e2e.push_back((r.finish - r.arrival) * 1e3);
      if (r.osl > 1) tpot.push_back((r.finish - r.first_token) * 1e3 / (r.osl - 1));
      tokens += static_cast<double>(r.osl);
    }
    out.completed = static_cast<int64_t>(e2e.size());
    out.ttft_ms = Percentiles(ttft);
    out.tpot_ms = Percentiles(tpot);
    out.e2e_latency_ms = Percentiles(e2e);
    out.makespan_s = out.completed > 0 ? last - first : 0;
    if (out.makespan_s > 0) {
      out.output_tokens_per_sec = tokens / out.makespan_s;
      out.requests_per_sec = static_cast<double>(out.completed) / out.makespan_s;
    }
    out.tokens_per_sec_per_user = out.tpot_ms.mean > 0 ? 1e3 / out.tpot_ms.mean : 0;
    out.preemptions = preemptions_;
    out.dropped = dropped_;
    out.steps = steps_;
    out.mean_decode_batch = steps_ > 0 ? decode_batch_sum_ / static_cast<double>(steps_) : 0;
    return out;
  }

  const std::vector<SimEngine>& engines_;
  const SimWorkload& w_;
  const std::function<double(int64_t)>& transfer_;
  std::vector<EngineState> state_;
  std::vector<Request> requests_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  double now_ = 0;
  int64_t issued_ = 0;
  int64_t dropped_ = 0;
  int64_t next_seq_ = 0;
  int64_t preemptions_ = 0;
  int64_t steps_ = 0;
  double decode_batch_sum_ = 0;
};

}  // namespace

LatencyStats Percentiles(std::vector<double>& values) {
  LatencyStats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  const auto at = [&](double q) {
    const size_t n = values.size();
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    rank = std::clamp<size_t>(rank, 1, n);
    return values[rank - 1];
  };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  return s;
}

SimulationResult Simulate(const std::vector<SimEngine>& engines, const SimWorkload& workload,
                          const std::function<double(int64_t)>& kv_transfer_seconds) {
  return Simulation(engines, workload, kv_transfer_seconds).Run();
}

}  // namespace paratune::inference
