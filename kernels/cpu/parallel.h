// ParallelFor: splits [0, n) into contiguous chunks over `threads` std::threads (the
// calling thread takes the first chunk). Small ranges run inline: spawning costs ~20 us.
#ifndef PARATUNE_KERNELS_CPU_PARALLEL_H_
#define PARATUNE_KERNELS_CPU_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace paratune::kernels::cpu {

template <typename F>
void ParallelFor(int64_t n, int threads, int64_t min_per_thread, F&& fn) {
  int64_t t = std::min<int64_t>(threads, n / std::max<int64_t>(1, min_per_thread));
  if (t <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + t - 1) / t;
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < t; ++i) {
    const int64_t b = i * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back([&fn, b, e]() { fn(b, e); });
  }
  fn(int64_t{0}, std::min(n, chunk));
  for (std::thread& th : pool) th.join();
}

}  // namespace paratune::kernels::cpu

#endif  // PARATUNE_KERNELS_CPU_PARALLEL_H_
