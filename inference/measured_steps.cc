#include "inference/measured_steps.h"

#include <algorithm>
#include <map>

namespace paratune::inference {

PiecewiseLinear::PiecewiseLinear(std::vector<std::pair<double, double>> points, bool through_origin)
    : through_origin_(through_origin) {
  std::map<double, std::pair<double, int>> by_x;  // x -> (sum of y, count)
  for (const auto& [x, y] : points) {
    auto& [sum, n] = by_x[x];
    sum += y;
    ++n;
  }
  for (const auto& [x, sum_n] : by_x) points_.push_back({x, sum_n.first / sum_n.second});
}

double PiecewiseLinear::operator()(double x) const {
  if (points_.empty()) return 0;
  const auto& [x0, y0] = points_.front();
  if (x <= x0) return through_origin_ && x0 > 0 ? y0 * std::max(x, 0.0) / x0 : y0;
  if (points_.size() == 1) return through_origin_ && x0 > 0 ? y0 * x / x0 : y0;
  auto hi = std::upper_bound(points_.begin(), points_.end(), x,
                             [](double v, const auto& p) { return v < p.first; });
  if (hi == points_.end()) hi = points_.end() - 1;  // Beyond the last: its segment's slope.
  const auto lo = hi - 1;
  const double t = (x - lo->first) / (hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

absl::StatusOr<MeasuredStepTable> MeasuredStepTable::Create(const std::vector<StepSample>& samples,
                                                            const AttentionSpan& span) {
  std::vector<std::pair<double, double>> gemm, rest, tp, pre_attn, dec_attn, logits;
  bool prefill = false, decode = false;
  for (const StepSample& s : samples) {
    const double b = static_cast<double>(s.batch);
    const double len = static_cast<double>(s.length);
    const bool is_prefill = s.phase == ServingStepPhase::kPrefill;
    const double rows = is_prefill ? b * len : b;
    gemm.push_back({rows, s.gemm_s});
    tp.push_back({rows, s.tp_comm_s});
    rest.push_back({rows, s.total_s - s.gemm_s - s.attention_s - s.tp_comm_s - s.logits_s});
    logits.push_back({b, s.logits_s});
    if (is_prefill) {
      pre_attn.push_back({b * span.ChunkAttentionPairs(0, len), s.attention_s});
      prefill = true;
    } else {
      dec_attn.push_back({b * span.AttendedContext(len), s.attention_s});
      decode = true;
    }
  }
  if (!prefill || !decode) {
    return absl::InvalidArgumentError(
        "measured serving steps need at least one prefill and one decode step");
  }
  MeasuredStepTable t;
  t.gemm_ = PiecewiseLinear(std::move(gemm), false);
  t.rest_ = PiecewiseLinear(std::move(rest), false);
  t.tp_comm_ = PiecewiseLinear(std::move(tp), false);
  t.prefill_attention_ = PiecewiseLinear(std::move(pre_attn), true);
  t.decode_attention_ = PiecewiseLinear(std::move(dec_attn), true);
  t.logits_ = PiecewiseLinear(std::move(logits), false);
  t.samples_ = static_cast<int64_t>(samples.size());
  return t;
}

StepBreakdown MeasuredStepTable::Breakdown(const StepWork& w) const {
  StepBreakdown b;
  b.source = "measured";
  const double rows = w.prefill_tokens + w.decode_sequences;
  if (rows <= 0) return b;
  double attention = 0;
  if (w.prefill_tokens > 0) attention += prefill_attention_(w.prefill_attention_pairs);
  if (w.decode_sequences > 0) attention += decode_attention_(w.decode_context_tokens);
  const double compute =
      gemm_(rows) + attention + rest_(rows) + logits_(std::max(w.sampled_sequences, 1.0));
  b.compute = std::max(compute, 0.0) * 1e3;
  b.tp_comm = std::max(tp_comm_(rows), 0.0) * 1e3;
  b.total = b.compute + b.tp_comm;
  return b;
}

}  // namespace paratune::inference
