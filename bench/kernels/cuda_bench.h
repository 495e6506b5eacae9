// What the CUDA benches share: exit-on-error checks, device buffers of random bytes (never
// zeros) and the median time of a launch between CUDA events. Header-only; include it only
// where PARATUNE_HAVE_CUDA is set.
#ifndef PARATUNE_BENCH_KERNELS_CUDA_BENCH_H_
#define PARATUNE_BENCH_KERNELS_CUDA_BENCH_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

namespace paratune::bench {

inline void CudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// A device buffer of `bytes`: a 16 MiB random block (a fresh one per seed) tiled over it.
/// Bytes in [0x10, 0x3f]: every fp32, bf16, fp16 and fp8 (e4m3) value they make is finite,
/// positive and under 2.
inline void* DeviceRandom(int64_t bytes, uint32_t seed) {
  const int64_t tile = std::min<int64_t>(bytes, int64_t{16} << 20);
  std::vector<uint8_t> host(tile);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0x10, 0x3f);
  for (auto& b : host) b = static_cast<uint8_t>(dist(gen));
  void* p = nullptr;
  CudaCheck(cudaMalloc(&p, bytes), "cudaMalloc");
  for (int64_t off = 0; off < bytes; off += tile) {
    CudaCheck(cudaMemcpy(static_cast<uint8_t*>(p) + off, host.data(),
                         std::min(tile, bytes - off), cudaMemcpyHostToDevice),
              "cudaMemcpy");
  }
  return p;
}

/// Median milliseconds of `launch` over `reps`, each between two events, after `warmup`
/// untimed launches.
inline double MedianMs(const std::function<void()>& launch, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) launch();
  CudaCheck(cudaGetLastError(), "launch");
  CudaCheck(cudaDeviceSynchronize(), "sync");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    CudaCheck(cudaEventSynchronize(stop), "event");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  CudaCheck(cudaGetLastError(), "launch");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace paratune::bench

#endif  // PARATUNE_BENCH_KERNELS_CUDA_BENCH_H_
