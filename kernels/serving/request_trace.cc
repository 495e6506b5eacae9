#include "kernels/serving/request_trace.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/hash_random.h"

namespace paratune::kernels::serving {

absl::Status TraceOptions::Validate() const {
  if (num_requests <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_requests (", num_requests, ") must be positive"));
  }
  if (isl <= 0) return absl::InvalidArgumentError(absl::StrCat("isl (", isl, ") must be positive"));
  if (osl <= 0) return absl::InvalidArgumentError(absl::StrCat("osl (", osl, ") must be positive"));
  if (isl_jitter < 0 || isl_jitter >= 1 || osl_jitter < 0 || osl_jitter >= 1) {
    return absl::InvalidArgumentError("isl_jitter and osl_jitter must be in [0, 1)");
  }
  if (concurrency < 0 || request_rate < 0) {
    return absl::InvalidArgumentError("concurrency and request_rate must be >= 0");
  }
  if (concurrency > 0 && request_rate > 0) {
    return absl::InvalidArgumentError("set concurrency or request_rate, not both");
  }
  return absl::OkStatus();
}

const char* TraceOptions::mode() const {
  if (concurrency > 0) return "concurrency";
  if (request_rate > 0) return "rate";
  return "offline";
}

absl::StatusOr<std::vector<TraceRequest>> MakeTrace(const TraceOptions& o) {
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  const uint64_t key = Mix64(o.seed ^ 0x7261636573ull);
  auto jittered = [&](int64_t mean, double jitter, uint64_t index) {
    if (jitter == 0) return mean;
    const double u = 2.0 * HashUniform(key, index) - 1.0;
    return std::max<int64_t>(1, std::llround(mean * (1.0 + jitter * u)));
  };
  std::vector<TraceRequest> out(o.num_requests);
  double t = 0;
  for (int64_t i = 0; i < o.num_requests; ++i) {
    TraceRequest& r = out[i];
    r.id = i;
    r.isl = jittered(o.isl, o.isl_jitter, 3 * i);
    r.osl = jittered(o.osl, o.osl_jitter, 3 * i + 1);
    if (o.request_rate > 0) {
      // Exponential gap: −ln(1 − u)/λ.
      t += -std::log(1.0 - HashUniform(key, 3 * i + 2)) / o.request_rate;
      r.arrival_s = t;
    }
  }
  return out;
}

std::vector<int32_t> PromptTokens(uint64_t seed, int64_t id, int64_t isl, int64_t vocab) {
  const uint64_t key = Mix64(seed + 0x70726f6dull + static_cast<uint64_t>(id));
  std::vector<int32_t> p(isl);
  for (int64_t i = 0; i < isl; ++i) {
    p[i] =
        static_cast<int32_t>(Mix64(key + static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  }
  return p;
}

}  // namespace paratune::kernels::serving
