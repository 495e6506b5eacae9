#include "search/pipeline_schedule.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace paratune {

std::vector<PipelineOp> StageSchedule(int64_t stage, int64_t p, int64_t v, int64_t m) {
  // Micro-batches go through the model chunks in groups of p (Megatron's interleaved order;
  // with v = 1 this is simply 0, 1, ..., m-1).
  std::vector<PipelineOp> forwards, backwards;
  forwards.reserve(static_cast<size_t>(m * v));
  backwards.reserve(static_cast<size_t>(m * v));
  for (int64_t first = 0; first < m; first += p) {
    const int64_t size = std::min(p, m - first);
    for (int64_t j = 0; j < v; ++j) {
      for (int64_t i = 0; i < size; ++i) {
        forwards.push_back({true, j, first + i});
        backwards.push_back({false, v - 1 - j, first + i});
      }
    }
  }
  const int64_t total = m * v;
  int64_t warmup = v == 1 ? p - stage - 1 : 2 * (p - stage - 1) + (v - 1) * p;
  warmup = std::min(warmup, total);
  std::vector<PipelineOp> ops;
  ops.reserve(static_cast<size_t>(2 * total));
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back(forwards[f]);
  while (f < total) {
    ops.push_back(forwards[f++]);
    ops.push_back(backwards[b++]);
  }
  while (b < total) ops.push_back(backwards[b++]);
  return ops;
}

namespace {

double BusiestStage(const PipelineInput& in) {
  double busiest = 0;
  for (int64_t r = 0; r < in.stages; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < in.chunks; ++j) {
      sum += in.forward[r * in.chunks + j] + in.backward[r * in.chunks + j];
    }
    busiest = std::max(busiest, sum);
  }
  return busiest;
}

}  // namespace

double PipelineClosedForm(const PipelineInput& in) {
  double total = 0;
  for (size_t i = 0; i < in.forward.size(); ++i) total += in.forward[i] + in.backward[i];
  const double p = static_cast<double>(in.stages);
  const double mean_stage = total / p;
  return static_cast<double>(in.micro_batches) * BusiestStage(in) +
         (p - 1.0) * (mean_stage / static_cast<double>(in.chunks) + 2.0 * in.p2p_s);
}

absl::StatusOr<PipelineResult> SimulatePipeline(const PipelineInput& in) {
  const int64_t p = in.stages, v = in.chunks;
  if (p < 1 || v < 1 || in.micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline: stages (%d), chunks (%d) and micro_batches (%d) must be >= 1", p, v,
        in.micro_batches));
  }
  if (static_cast<int64_t>(in.forward.size()) != p * v ||
      static_cast<int64_t>(in.backward.size()) != p * v) {
    return absl::InvalidArgumentError("pipeline: forward/backward must have stages*chunks entries");
  }
  if (v > 1 && in.micro_batches % p != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline: the interleaved schedule needs micro_batches (%d) to be a multiple of "
        "stages (%d)", in.micro_batches, p));
  }
  int64_t m = in.micro_batches;
  if (in.max_simulated_micro_batches > 0 && m > in.max_simulated_micro_batches) {
    // Keep whole groups of p so that the interleaved order stays regular.
    m = std::max(p, in.max_simulated_micro_batches / p * p);
  }
  const int64_t extra = in.micro_batches - m;

  std::vector<std::vector<PipelineOp>> ops(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) ops[r] = StageSchedule(r, p, v, m);
  // Finish times, -1 = not yet run; indexed [(stage * v + chunk) * m + micro_batch].
  std::vector<double> fwd_done(static_cast<size_t>(p * v * m), -1.0);
  std::vector<double> bwd_done(fwd_done.size(), -1.0);
  auto at = [&](int64_t r, int64_t j, int64_t mb) { return (r * v + j) * m + mb; };

  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  PipelineResult result;
  result.stage_busy.assign(static_cast<size_t>(p), 0.0);
  size_t remaining = 0;
  for (const auto& o : ops) remaining += o.size();
  while (remaining > 0) {
    bool progress = false;
    for (int64_t r = 0; r < p; ++r) {
      while (next[r] < ops[r].size()) {
        const PipelineOp& op = ops[r][next[r]];
        double ready = 0;
        if (op.forward) {
          if (r > 0) {
            ready = fwd_done[at(r - 1, op.chunk, op.micro_batch)];
            if (ready < 0) break;
            ready += in.p2p_s;
          } else if (op.chunk > 0) {
            ready = fwd_done[at(p - 1, op.chunk - 1, op.micro_batch)];
            if (ready < 0) break;
            ready += p > 1 ? in.p2p_s : 0.0;
          }
        } else {
          if (r < p - 1) {
            ready = bwd_done[at(r + 1, op.chunk, op.micro_batch)];
            if (ready < 0) break;
            ready += in.p2p_s;
          } else if (op.chunk < v - 1) {
            ready = bwd_done[at(0, op.chunk + 1, op.micro_batch)];
            if (ready < 0) break;
            ready += p > 1 ? in.p2p_s : 0.0;
          } else {
            ready = fwd_done[at(r, op.chunk, op.micro_batch)];
            if (ready < 0) break;
          }
        }
        const double duration =
            op.forward ? in.forward[r * v + op.chunk] : in.backward[r * v + op.chunk];
        const double start = std::max(free_at[r], ready);
        free_at[r] = start + duration;
        result.stage_busy[r] += duration;
        (op.forward ? fwd_done : bwd_done)[at(r, op.chunk, op.micro_batch)] = free_at[r];
        ++next[r];
        --remaining;
        progress = true;
      }
    }
    if (!progress) return absl::InternalError("pipeline schedule deadlocked");
  }
  const double steady = BusiestStage(in) * static_cast<double>(extra);
  result.stage_finish.resize(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) {
    result.stage_finish[r] = free_at[r] + steady;
    double per_micro_batch = 0;
    for (int64_t j = 0; j < v; ++j) per_micro_batch += in.forward[r * v + j] + in.backward[r * v + j];
    result.stage_busy[r] += per_micro_batch * static_cast<double>(extra);
    result.makespan = std::max(result.makespan, result.stage_finish[r]);
    result.bottleneck_busy = std::max(result.bottleneck_busy, result.stage_busy[r]);
  }
  return result;
}

}  // namespace paratune
