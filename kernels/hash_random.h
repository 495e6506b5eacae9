// Counter-based random numbers for dropout: the keep decision of an element is a pure
// function of (seed, global element index). The CPU and CUDA kernels draw the same masks,
// every TP/SP layout drops the same elements, and flash attention regenerates its mask in
// backward instead of storing it.
#ifndef PARATUNE_KERNELS_HASH_RANDOM_H_
#define PARATUNE_KERNELS_HASH_RANDOM_H_

#include <cstdint>

#if defined(__CUDACC__)
#define PARATUNE_HD __host__ __device__ __forceinline__
#else
#define PARATUNE_HD inline
#endif

namespace paratune::kernels {

/// splitmix64 finaliser.
PARATUNE_HD uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [0, 1) with 24 random bits.
PARATUNE_HD float HashUniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(Mix64(Mix64(seed) + index) >> 40) * (1.0f / 16777216.0f);
}

/// Dropout keep decision.
PARATUNE_HD bool DropoutKeep(uint64_t seed, uint64_t index, float p) {
  return HashUniform(seed, index) >= p;
}

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_HASH_RANDOM_H_
