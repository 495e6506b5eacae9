// The MoE CUDA kernels (kernels/cuda/moe.cu) against their CPU twins (label `gpu`; skipped
// with the reason where this binary has no CUDA backend or no device exists). fp32,
// tolerance 1e-5 + |ref|·1e-5; the selected experts and the permutation must be identical.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/moe_permute.h"
#include "kernels/cpu/moe_router.h"

#ifdef PARATUNE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cuda/launchers.h"
#include "kernels/hash_random.h"
#endif

namespace paratune::kernels {
namespace {

#ifdef PARATUNE_HAVE_CUDA

std::vector<float> RandomFloats(int64_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * (2.0f * HashUniform(seed, i) - 1.0f);
  return v;
}

std::string NoDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  return n == 0 ? "no CUDA device" : "";
}

#define SKIP_WITHOUT_DEVICE() \
  if (std::string r = NoDeviceReason(); !r.empty()) GTEST_SKIP() << r

// Device copy of a host vector, freed at scope exit.
template <typename T>
struct DeviceVector {
  explicit DeviceVector(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(1, n) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr); }
  std::vector<T> ToHost() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  T* ptr = nullptr;
  size_t n;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i])) << what << "[" << i << "]";
  }
}

TEST(MoeCudaTest, RouterMatchesCpuTwin) {
  SKIP_WITHOUT_DEVICE();
  constexpr int64_t kTokens = 300, kExperts = 64, kTopK = 6;
  const std::vector<float> logits = RandomFloats(kTokens * kExperts, 3, 4.0f);
  for (bool sigmoid : {false, true}) {
    std::vector<float> scores(kTokens * kExperts), probs(kTokens * kTopK);
    std::vector<int32_t> selected(kTokens * kTopK);
    cpu::moe_router_scores(scores.data(), logits.data(), kTokens, kExperts, sigmoid);
    cpu::moe_router_select(selected.data(), scores.data(), kTokens, kExperts, kTopK, false, 0);
    cpu::moe_router_probs(probs.data(), scores.data(), selected.data(), kTokens, kExperts, kTopK,
                          true, 2.5f);
    DeviceVector<float> d_logits(logits), d_scores(scores), d_probs(probs);
    DeviceVector<int32_t> d_selected(selected);
    ASSERT_EQ(
        cuda::moe_router_scores(d_scores.ptr, d_logits.ptr, kTokens, kExperts, sigmoid, nullptr),
        cudaSuccess);
    ASSERT_EQ(cuda::moe_router_topk(d_selected.ptr, d_probs.ptr, d_scores.ptr, kTokens, kExperts,
                                    kTopK, true, 2.5f, nullptr),
              cudaSuccess);
    ExpectClose(d_scores.ToHost(), scores, "scores");
    EXPECT_EQ(d_selected.ToHost(), selected);
    ExpectClose(d_probs.ToHost(), probs, "probs");
  }
}

TEST(MoeCudaTest, PermuteAndUnpermuteMatchCpuTwins) {
  SKIP_WITHOUT_DEVICE();
  constexpr int64_t kTokens = 50, kExperts = 8, kTopK = 2, kHidden = 40;
  std::vector<int32_t> selected(kTokens * kTopK);
  for (int64_t i = 0; i < kTokens * kTopK; ++i) {
    selected[i] = static_cast<int32_t>((i * 5 + i / kTopK) % kExperts);
  }
  std::vector<int32_t> perm(kTokens * kTopK);
  std::vector<int64_t> counts(kExperts);
  cpu::moe_permutation(perm.data(), counts.data(), selected.data(), kTokens * kTopK, kExperts);
  const std::vector<float> x = RandomFloats(kTokens * kHidden, 5, 1.0f);
  const std::vector<float> probs = RandomFloats(kTokens * kTopK, 6, 1.0f);
  std::vector<float> permuted(kTokens * kTopK * kHidden), y(kTokens * kHidden);
  cpu::moe_permute(permuted.data(), x.data(), perm.data(), kTokens * kTopK, kTopK, kHidden);
  cpu::moe_unpermute(y.data(), permuted.data(), probs.data(), perm.data(), kTokens, kTopK, kHidden,
                     kTokens * kTopK);
  DeviceVector<float> d_x(x), d_probs(probs), d_permuted(permuted), d_y(y);
  DeviceVector<int32_t> d_perm(perm), d_scratch(perm);
  ASSERT_EQ(cuda::moe_permute(cuda::ElemType::kF32, d_permuted.ptr, d_x.ptr, d_perm.ptr,
                              kTokens * kTopK, kTopK, kHidden, nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::moe_unpermute(cuda::ElemType::kF32, d_y.ptr, d_permuted.ptr, d_probs.ptr,
                                d_perm.ptr, d_scratch.ptr, kTokens, kTopK, kHidden, nullptr),
            cudaSuccess);
  ExpectClose(d_permuted.ToHost(), permuted, "permuted");
  ExpectClose(d_y.ToHost(), y, "unpermuted");
}

#else

TEST(MoeCudaTest, RouterMatchesCpuTwin) { GTEST_SKIP() << "built without CUDA"; }
TEST(MoeCudaTest, PermuteAndUnpermuteMatchCpuTwins) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace paratune::kernels
