// The MoE CUDA kernels (kernels/cuda/moe.cu) and the whole MoE layer on the CUDA backend
// against their CPU twins (label `gpu`; skipped with the reason where this binary has no
// CUDA backend or no device exists). fp32,
// tolerance 1e-5 + |ref|·1e-5; the selected experts and the permutation must be identical.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/moe_permute.h"
#include "kernels/cpu/moe_router.h"
#include "kernels/moe_layer.h"

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

// What one layer computed on a backend: output, input gradient and weight gradients.
struct LayerRun {
  std::vector<double> y, dx, d_router, d_fc1, d_fc2, d_shared_fc1;
};

LayerRun RunLayer(Backend& be, const MoeLayerConfig& c, const std::vector<double>& x,
                  const std::vector<double>& dy, int64_t tokens) {
  LayerRun out;
  auto ep = MakeSelfCommunicator(be), etp = MakeSelfCommunicator(be);
  auto layer = MoeLayer::CreateRandom(c, 11, 0.3, ep.get(), etp.get(), &be, DType::kF32);
  EXPECT_TRUE(layer.ok()) << layer.status();
  if (!layer.ok()) return out;
  auto tensor = [&](const std::vector<double>& v) {
    Tensor t =
        be.Empty({static_cast<int64_t>(v.size())}, DType::kF32, MemoryTag::kWorkspace).value();
    EXPECT_TRUE(be.CopyFromHost(t, v).ok());
    return t;
  };
  Tensor tx = tensor(x), tdy = tensor(dy), ty = tensor(x), tdx = tensor(x);
  EXPECT_TRUE((*layer)->Forward(tx.data(), tokens, ty.data()).ok());
  EXPECT_TRUE((*layer)->Backward(tdy.data(), tdx.data()).ok());
  EXPECT_TRUE(be.Synchronize().ok());
  out.y = be.CopyToHost(ty).value();
  out.dx = be.CopyToHost(tdx).value();
  out.d_router = be.CopyToHost((*layer)->grads().router).value();
  out.d_fc1 = be.CopyToHost((*layer)->grads().fc1).value();
  out.d_fc2 = be.CopyToHost((*layer)->grads().fc2).value();
  out.d_shared_fc1 = be.CopyToHost((*layer)->grads().shared_fc1).value();
  return out;
}

void ExpectCloseD(const std::vector<double>& got, const std::vector<double>& ref,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], 1e-4 + 1e-4 * std::abs(ref[i])) << what << "[" << i << "]";
  }
}

// The whole layer (router, permutation, experts through cuBLAS, unpermute, shared expert,
// and every backward) on one GPU against the same layer on the CPU backend, fp32, for
// the softmax top-k and the sigmoid normalised scaled balanced routers, the experts' GEMMs
// grouped (one cuBLAS grouped launch per projection) and one per expert.
// 8 experts of 16 (top-2) and one shared expert of 16 over h 32, dropless.
MoeLayerConfig SmallLayer() {
  MoeLayerConfig c;
  c.hidden = 32;
  c.num_experts = 8;
  c.topk = 2;
  c.ffn_hidden = 16;
  c.num_shared_experts = 1;
  c.shared_ffn_hidden = 16;
  c.routing = ExpertRouting::kDropless;
  return c;
}

TEST(MoeCudaTest, LayerForwardAndBackwardMatchTheCpuBackend) {
  SKIP_WITHOUT_DEVICE();
  constexpr int64_t kTokens = 24;
  MoeLayerConfig c = SmallLayer();
  const std::vector<float> xf = RandomFloats(kTokens * c.hidden, 21, 1.0f);
  const std::vector<float> dyf = RandomFloats(kTokens * c.hidden, 22, 1.0f);
  const std::vector<double> x(xf.begin(), xf.end()), dy(dyf.begin(), dyf.end());
  for (auto [sigmoid, grouped] : {std::pair{false, true}, {true, true}, {false, false}}) {
    c.grouped_gemm = grouped;
    c.score = sigmoid ? MoeScoreFunction::kSigmoid : MoeScoreFunction::kSoftmax;
    c.normalize_topk = sigmoid;
    c.topk_scaling = sigmoid ? 2.5 : 1.0;
    c.routing = sigmoid ? ExpertRouting::kBalanced : ExpertRouting::kDropless;
    std::unique_ptr<Backend> cpu = MakeCpuBackend(0, 1);
    absl::StatusOr<std::unique_ptr<Backend>> gpu = MakeCudaBackend(0, 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const LayerRun want = RunLayer(*cpu, c, x, dy, kTokens);
    const LayerRun got = RunLayer(**gpu, c, x, dy, kTokens);
    ExpectCloseD(got.y, want.y, "y");
    ExpectCloseD(got.dx, want.dx, "dx");
    ExpectCloseD(got.d_router, want.d_router, "d_router");
    ExpectCloseD(got.d_fc1, want.d_fc1, "d_fc1");
    ExpectCloseD(got.d_fc2, want.d_fc2, "d_fc2");
    ExpectCloseD(got.d_shared_fc1, want.d_shared_fc1, "d_shared_fc1");
  }
}

// The serving modes on one GPU: a forward-only layer (no gradient buffers), alone and with
// the tokens replicated over its (one) expert-parallel rank, gives the training layer's
// output on the CPU backend.
TEST(MoeCudaTest, ForwardOnlyLayerMatchesTheCpuTrainingForward) {
  SKIP_WITHOUT_DEVICE();
  constexpr int64_t kTokens = 24;
  const MoeLayerConfig c = SmallLayer();
  const std::vector<float> xf = RandomFloats(kTokens * c.hidden, 23, 1.0f);
  const std::vector<double> x(xf.begin(), xf.end());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(0, 1);
  const LayerRun want = RunLayer(*cpu, c, x, x, kTokens);
  absl::StatusOr<std::unique_ptr<Backend>> gpu = MakeCudaBackend(0, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (bool replicated : {false, true}) {
    MoeLayerConfig f = c;
    f.forward_only = true;
    f.tokens_replicated = replicated;
    Backend& be = **gpu;
    auto ep = MakeSelfCommunicator(be), etp = MakeSelfCommunicator(be);
    auto layer = MoeLayer::CreateRandom(f, 11, 0.3, ep.get(), etp.get(), &be, DType::kF32);
    ASSERT_TRUE(layer.ok()) << layer.status();
    Tensor tx = be.Empty({kTokens * c.hidden}, DType::kF32, MemoryTag::kWorkspace).value();
    Tensor ty = be.Empty({kTokens * c.hidden}, DType::kF32, MemoryTag::kWorkspace).value();
    ASSERT_TRUE(be.CopyFromHost(tx, x).ok());
    ASSERT_TRUE((*layer)->Forward(tx.data(), kTokens, ty.data()).ok());
    ASSERT_TRUE(be.Synchronize().ok());
    ExpectCloseD(be.CopyToHost(ty).value(), want.y, replicated ? "y replicated" : "y");
    EXPECT_FALSE((*layer)->Backward(tx.data(), ty.data()).ok()) << "forward_only has no backward";
  }
}

#else

TEST(MoeCudaTest, LayerForwardAndBackwardMatchTheCpuBackend) {
  GTEST_SKIP() << "built without CUDA";
}
TEST(MoeCudaTest, RouterMatchesCpuTwin) { GTEST_SKIP() << "built without CUDA"; }
TEST(MoeCudaTest, ForwardOnlyLayerMatchesTheCpuTrainingForward) {
  GTEST_SKIP() << "built without CUDA";
}
TEST(MoeCudaTest, PermuteAndUnpermuteMatchCpuTwins) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace paratune::kernels
