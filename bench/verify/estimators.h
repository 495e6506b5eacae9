// The timing estimators the verify benchmarks share, so that host_noise's A/A gap is
// computed as prediction_accuracy computes a layout's measurement.
#ifndef PARATUNE_BENCH_VERIFY_ESTIMATORS_H_
#define PARATUNE_BENCH_VERIFY_ESTIMATORS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace paratune::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// What prediction_accuracy's timing estimator drops from each end (see the top of that file).
inline constexpr double kTrim = 0.1;

// The mean of `v` without its lowest and highest floor(n·fraction) values each.
inline double TrimmedMean(std::vector<double> v, double fraction) {
  std::sort(v.begin(), v.end());
  const size_t cut = static_cast<size_t>(static_cast<double>(v.size()) * fraction);
  if (v.size() <= 2 * cut) return Median(v);
  double sum = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - 2 * cut);
}

}  // namespace paratune::bench

#endif  // PARATUNE_BENCH_VERIFY_ESTIMATORS_H_
