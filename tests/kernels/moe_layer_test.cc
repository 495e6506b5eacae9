// The MoE layer: finite-difference gradients, layout equivalences (EP = 2 and 4 equal
// EP = 1, ETP = 2 equals ETP = 1; with tokens replicated over the group, as serving runs
// it, the ranks' partial outputs sum to EP = 1's), the dispatcher's round trip, balanced routing's
// counts and the auxiliary loss on a case small enough to derive by hand.
#include "kernels/moe_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/hash_random.h"
#include "kernels/rank_threads.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

std::vector<double> RandomVector(int64_t n, uint64_t seed) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 2.0 * HashUniform(seed, i) - 1.0;
  return v;
}

template <typename T>
std::vector<T> ToVector(const Tensor& t) {
  return std::vector<T>(t.data_as<T>(), t.data_as<T>() + t.numel());
}

MoeLayerConfig SmallConfig() {
  MoeLayerConfig c;
  c.hidden = 12;
  c.num_experts = 8;
  c.topk = 2;
  c.ffn_hidden = 8;
  c.num_shared_experts = 1;
  c.shared_ffn_hidden = 6;
  c.normalize_topk = true;
  c.aux_loss_coeff = 0.05;
  return c;
}

// What one rank computed: output, input gradient, weight gradients, router statistics.
struct RankResult {
  std::vector<double> y, dx, d_router, d_fc1, d_fc2, d_shared_fc1, d_shared_fc2;
  double aux = 0;
  std::vector<int64_t> tokens_per_expert, local_tokens_per_expert;
};

// Runs forward and backward of `config` (its ep and etp) on ep·etp thread ranks. EP rank r
// takes tokens [r·T/ep, (r+1)·T/ep) of x_all (T = x_all rows); every ETP rank of it the same.
// Result index: ep_rank·etp + etp_rank.
std::vector<RankResult> RunLayout(const MoeLayerConfig& config, const MoeWeights<double>& w,
                                  const std::vector<double>& x_all,
                                  const std::vector<double>& dy_all) {
  const int ep = static_cast<int>(config.ep), etp = static_cast<int>(config.etp);
  const int64_t h = config.hidden;
  const int64_t tokens = static_cast<int64_t>(x_all.size()) / h / ep;
  auto rendezvous = MakeInProcessRendezvous();
  std::vector<RankResult> results(ep * etp);
  std::vector<std::thread> threads;
  for (int er = 0; er < ep; ++er) {
    for (int tr = 0; tr < etp; ++tr) {
      threads.emplace_back([&, er, tr]() {
        auto group = [&](const std::string& name, int rank,
                         int size) -> std::unique_ptr<Communicator> {
          if (size == 1) return MakeSelfCommunicator();
          auto c = MakeGlooCommunicator(rendezvous, name, rank, size);
          EXPECT_TRUE(c.ok()) << c.status();
          return c.ok() ? *std::move(c) : nullptr;
        };
        std::unique_ptr<Communicator> ep_comm = group("ep" + std::to_string(tr), er, ep);
        std::unique_ptr<Communicator> etp_comm = group("etp" + std::to_string(er), tr, etp);
        if (ep_comm == nullptr || etp_comm == nullptr) return;
        std::unique_ptr<Backend> be = MakeCpuBackend(0, 1);
        auto layer =
            MoeLayer::Create(config, w, ep_comm.get(), etp_comm.get(), be.get(), DType::kF64);
        ASSERT_TRUE(layer.ok()) << layer.status();
        RankResult& r = results[er * etp + tr];
        r.y.resize(tokens * h);
        r.dx.resize(tokens * h);
        ASSERT_TRUE((*layer)->Forward(x_all.data() + er * tokens * h, tokens, r.y.data()).ok());
        r.aux = (*layer)->aux_loss();
        r.tokens_per_expert = (*layer)->tokens_per_expert();
        r.local_tokens_per_expert = (*layer)->local_tokens_per_expert();
        ASSERT_TRUE((*layer)->Backward(dy_all.data() + er * tokens * h, r.dx.data()).ok());
        const auto& g = (*layer)->grads();
        r.d_router = ToVector<double>(g.router);
        r.d_fc1 = ToVector<double>(g.fc1);
        r.d_fc2 = ToVector<double>(g.fc2);
        r.d_shared_fc1 = ToVector<double>(g.shared_fc1);
        r.d_shared_fc2 = ToVector<double>(g.shared_fc2);
        EXPECT_EQ(be->allocator().Stats().current_by_tag[static_cast<int>(MemoryTag::kActivations)],
                  0)
            << "Backward frees every stored activation";
      });
    }
  }
  for (auto& t : threads) t.join();
  return results;
}

void ExpectNear(const std::vector<double>& a, const std::vector<double>& b, double tol,
                const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol + 1e-12 * std::abs(b[i])) << what << "[" << i << "]";
  }
}

// Loss = Σ y·dy + aux_loss, whose gradient Backward(dy) computes.
double Loss(const MoeLayerConfig& config, const MoeWeights<double>& w, const std::vector<double>& x,
            const std::vector<double>& dy) {
  std::vector<RankResult> r = RunLayout(config, w, x, dy);
  double loss = r[0].aux;
  for (size_t i = 0; i < dy.size(); ++i) loss += r[0].y[i] * dy[i];
  return loss;
}

void CheckFiniteDifferences(const MoeLayerConfig& config) {
  const int64_t tokens = 6, h = config.hidden;
  const MoeWeights<double> w = MoeWeights<double>::Random(config, 7, 0.5);
  const std::vector<double> x = RandomVector(tokens * h, 11);
  const std::vector<double> dy = RandomVector(tokens * h, 12);
  const RankResult r = RunLayout(config, w, x, dy)[0];
  constexpr double kEps = 1e-6;
  auto check = [&](std::vector<double> MoeWeights<double>::*field, const std::vector<double>& grad,
                   const char* name) {
    const std::vector<double>& v = w.*field;
    for (size_t i = 0; i < v.size(); i += 1 + v.size() / 37) {
      MoeWeights<double> plus = w, minus = w;
      (plus.*field)[i] += kEps;
      (minus.*field)[i] -= kEps;
      const double fd = (Loss(config, plus, x, dy) - Loss(config, minus, x, dy)) / (2 * kEps);
      EXPECT_NEAR(grad[i], fd, 1e-6 + 1e-5 * std::abs(fd)) << name << "[" << i << "]";
    }
  };
  check(&MoeWeights<double>::router, r.d_router, "router");
  check(&MoeWeights<double>::fc1, r.d_fc1, "fc1");
  check(&MoeWeights<double>::fc2, r.d_fc2, "fc2");
  check(&MoeWeights<double>::shared_fc1, r.d_shared_fc1, "shared_fc1");
  check(&MoeWeights<double>::shared_fc2, r.d_shared_fc2, "shared_fc2");
  for (size_t i = 0; i < x.size(); i += 5) {
    std::vector<double> plus = x, minus = x;
    plus[i] += kEps;
    minus[i] -= kEps;
    const double fd = (Loss(config, w, plus, dy) - Loss(config, w, minus, dy)) / (2 * kEps);
    EXPECT_NEAR(r.dx[i], fd, 1e-6 + 1e-5 * std::abs(fd)) << "x[" << i << "]";
  }
}

TEST(MoeLayerTest, SoftmaxTopKGradientsMatchFiniteDifferences) {
  CheckFiniteDifferences(SmallConfig());
}

TEST(MoeLayerTest, SigmoidNormalizedScaledGradientsMatchFiniteDifferences) {
  MoeLayerConfig c = SmallConfig();
  c.score = MoeScoreFunction::kSigmoid;
  c.topk_scaling = 2.5;
  c.topk = 3;
  CheckFiniteDifferences(c);
}

TEST(MoeLayerTest, UnnormalizedBalancedGradientsMatchFiniteDifferences) {
  MoeLayerConfig c = SmallConfig();
  c.normalize_topk = false;
  c.routing = ExpertRouting::kBalanced;
  c.num_shared_experts = 0;
  CheckFiniteDifferences(c);
}

TEST(MoeLayerTest, CapacityRoutingGradientsMatchFiniteDifferences) {
  MoeLayerConfig c = SmallConfig();
  c.routing = ExpertRouting::kCapacity;
  // 6 tokens · top-2 over 8 experts: each expert keeps ⌈12/8 · 0.75⌉ = 2 assignments.
  c.capacity_factor = 0.75;
  const MoeWeights<double> w = MoeWeights<double>::Random(c, 7, 0.5);
  const RankResult r =
      RunLayout(c, w, RandomVector(6 * c.hidden, 11), RandomVector(6 * c.hidden, 12))[0];
  int64_t kept = 0;
  for (int64_t n : r.tokens_per_expert) {
    EXPECT_LE(n, 2);
    kept += n;
  }
  EXPECT_LT(kept, 12) << "the case must drop assignments";
  CheckFiniteDifferences(c);
}

// Layout B (ep, etp) against layout A (ep = etp = 1) on the same 16 tokens: outputs and
// input gradients row for row; each rank's expert shards' gradients equal the matching
// slices of A's; router and shared-expert gradients summed over EP ranks equal A's.
void ExpectLayoutMatchesSingleRank(MoeLayerConfig config) {
  const int64_t tokens = 16, h = config.hidden, f = config.ffn_hidden;
  const int64_t fs = config.shared_ffn_total();
  const MoeWeights<double> w = MoeWeights<double>::Random(config, 3, 0.4);
  const std::vector<double> x = RandomVector(tokens * h, 21);
  const std::vector<double> dy = RandomVector(tokens * h, 22);
  MoeLayerConfig single = config;
  single.ep = single.etp = 1;
  const RankResult a = RunLayout(single, w, x, dy)[0];
  const std::vector<RankResult> b = RunLayout(config, w, x, dy);
  const int64_t ep = config.ep, etp = config.etp, per = tokens / ep;
  const int64_t le = config.local_experts(), fl = f / etp, fsl = fs / etp;
  std::vector<double> router_sum(a.d_router.size(), 0.0);
  std::vector<double> shared1_sum(a.d_shared_fc1.size(), 0.0);
  std::vector<double> shared2_sum(a.d_shared_fc2.size(), 0.0);
  for (int64_t er = 0; er < ep; ++er) {
    for (int64_t tr = 0; tr < etp; ++tr) {
      const RankResult& r = b[er * etp + tr];
      const std::string at = "ep rank " + std::to_string(er) + " etp rank " + std::to_string(tr);
      EXPECT_NEAR(r.aux, a.aux, 1e-14) << at;
      ExpectNear(r.y,
                 std::vector<double>(a.y.begin() + er * per * h, a.y.begin() + (er + 1) * per * h),
                 1e-12, "y " + at);
      ExpectNear(
          r.dx, std::vector<double>(a.dx.begin() + er * per * h, a.dx.begin() + (er + 1) * per * h),
          1e-12, "dx " + at);
      for (int64_t x_ = 0; x_ < le; ++x_) {
        const int64_t e = er * le + x_;
        for (int64_t half = 0; half < 2; ++half) {
          for (int64_t row = 0; row < fl; ++row) {
            for (int64_t c = 0; c < h; ++c) {
              ASSERT_NEAR(r.d_fc1[((x_ * 2 + half) * fl + row) * h + c],
                          a.d_fc1[((e * 2 + half) * f + tr * fl + row) * h + c], 1e-12)
                  << "fc1 " << at;
            }
          }
        }
        for (int64_t row = 0; row < h; ++row) {
          for (int64_t c = 0; c < fl; ++c) {
            ASSERT_NEAR(r.d_fc2[(x_ * h + row) * fl + c], a.d_fc2[(e * h + row) * f + tr * fl + c],
                        1e-12)
                << "fc2 " << at;
          }
        }
      }
      if (tr == 0) {
        for (size_t i = 0; i < router_sum.size(); ++i) router_sum[i] += r.d_router[i];
      }
      for (int64_t half = 0; half < 2; ++half) {
        for (int64_t row = 0; row < fsl; ++row) {
          for (int64_t c = 0; c < h; ++c) {
            shared1_sum[(half * fs + tr * fsl + row) * h + c] +=
                r.d_shared_fc1[(half * fsl + row) * h + c];
          }
        }
      }
      for (int64_t row = 0; row < h; ++row) {
        for (int64_t c = 0; c < fsl; ++c) {
          shared2_sum[row * fs + tr * fsl + c] += r.d_shared_fc2[row * fsl + c];
        }
      }
    }
  }
  ExpectNear(router_sum, a.d_router, 1e-12, "router");
  ExpectNear(shared1_sum, a.d_shared_fc1, 1e-12, "shared_fc1");
  ExpectNear(shared2_sum, a.d_shared_fc2, 1e-12, "shared_fc2");
}

TEST(MoeLayerTest, ExpertParallel2MatchesSingleRank) {
  MoeLayerConfig c = SmallConfig();
  c.ep = 2;
  ExpectLayoutMatchesSingleRank(c);
}

TEST(MoeLayerTest, ExpertParallel4MatchesSingleRank) {
  MoeLayerConfig c = SmallConfig();
  c.ep = 4;
  c.score = MoeScoreFunction::kSigmoid;
  ExpectLayoutMatchesSingleRank(c);
}

TEST(MoeLayerTest, ExpertTensorParallel2MatchesSingleRank) {
  MoeLayerConfig c = SmallConfig();
  c.etp = 2;
  ExpectLayoutMatchesSingleRank(c);
}

TEST(MoeLayerTest, Ep2Etp2MatchesSingleRank) {
  MoeLayerConfig c = SmallConfig();
  c.ep = 2;
  c.etp = 2;
  ExpectLayoutMatchesSingleRank(c);
}

// Forward of `config` on ep·etp thread ranks that all hold the same tokens x
// (tokens_replicated); result index: ep_rank·etp + etp_rank.
std::vector<std::vector<double>> RunReplicatedForward(const MoeLayerConfig& config,
                                                      const MoeWeights<double>& w,
                                                      const std::vector<double>& x) {
  const int ep = static_cast<int>(config.ep), etp = static_cast<int>(config.etp);
  const int64_t tokens = static_cast<int64_t>(x.size()) / config.hidden;
  auto rendezvous = MakeInProcessRendezvous();
  std::vector<std::vector<double>> y(ep * etp, std::vector<double>(x.size()));
  EXPECT_TRUE(
      RunRankThreads(ep * etp, [&](int rank) -> absl::Status {
        const int er = rank / etp, tr = rank % etp;
        PT_ASSIGN_OR_RETURN(auto ep_comm,
                            MakeGroupCommunicator(rendezvous, absl::StrCat("ep", tr), er, ep));
        PT_ASSIGN_OR_RETURN(auto etp_comm,
                            MakeGroupCommunicator(rendezvous, absl::StrCat("etp", er), tr, etp));
        std::unique_ptr<Backend> be = MakeCpuBackend(0, 1);
        PT_ASSIGN_OR_RETURN(auto layer, MoeLayer::Create(config, w, ep_comm.get(), etp_comm.get(),
                                                         be.get(), DType::kF64));
        PT_RETURN_IF_ERROR(layer->Forward(x.data(), tokens, y[rank].data()));
        if (config.tokens_replicated) {
          std::vector<double> dx(x.size());
          const absl::Status backward = layer->Backward(x.data(), dx.data());
          EXPECT_EQ(backward.code(), absl::StatusCode::kUnimplemented) << backward;
        }
        return absl::OkStatus();
      }).ok());
  return y;
}

// Serving folds EP and ETP into the TP group, whose ranks all hold the batch: the partial
// outputs summed over the ep·etp ranks (the caller's all-reduce) equal one rank's output.
void ExpectReplicatedSumMatchesSingleRank(int64_t ep, int64_t etp) {
  MoeLayerConfig c = SmallConfig();
  c.aux_loss_coeff = 0;
  c.shared_ffn_hidden = 8;
  const MoeWeights<double> w = MoeWeights<double>::Random(c, 5, 0.4);
  const std::vector<double> x = RandomVector(16 * c.hidden, 31);
  const std::vector<double> single = RunReplicatedForward(c, w, x)[0];
  c.ep = ep;
  c.etp = etp;
  c.tokens_replicated = true;
  c.forward_only = true;
  const std::vector<std::vector<double>> parts = RunReplicatedForward(c, w, x);
  std::vector<double> sum(x.size(), 0.0);
  for (const std::vector<double>& p : parts) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
  }
  ExpectNear(sum, single, 1e-12, absl::StrCat("ep ", ep, " etp ", etp));
  // Each part holds only its share: no rank alone gives the whole output.
  for (const std::vector<double>& p : parts) {
    double diff = 0;
    for (size_t i = 0; i < p.size(); ++i) diff = std::max(diff, std::abs(p[i] - single[i]));
    EXPECT_GT(diff, 1e-6);
  }
}

TEST(MoeLayerTest, ReplicatedTokensEp2PartialsSumToSingleRank) {
  ExpectReplicatedSumMatchesSingleRank(2, 1);
}

TEST(MoeLayerTest, ReplicatedTokensEp2Etp2PartialsSumToSingleRank) {
  ExpectReplicatedSumMatchesSingleRank(2, 2);
}

TEST(MoeLayerTest, ReplicatedTokensEp4PartialsSumToSingleRank) {
  ExpectReplicatedSumMatchesSingleRank(4, 1);
}

TEST(MoeLayerTest, BalancedRoutingSendsEqualCountsToEveryExpert) {
  MoeLayerConfig c = SmallConfig();
  c.routing = ExpertRouting::kBalanced;
  c.ep = 4;
  const int64_t tokens = 16;
  const MoeWeights<double> w = MoeWeights<double>::Random(c, 5, 0.5);
  const std::vector<RankResult> r =
      RunLayout(c, w, RandomVector(tokens * c.hidden, 1), RandomVector(tokens * c.hidden, 2));
  // 4 tokens per rank · k = 2 over 8 experts: 1 assignment per expert from each rank, so
  // each local expert computes 4 rows; the aux loss is its uniform value, coeff.
  for (const RankResult& rank : r) {
    EXPECT_EQ(rank.tokens_per_expert, std::vector<int64_t>(8, 1));
    EXPECT_EQ(rank.local_tokens_per_expert, std::vector<int64_t>(2, 4));
    EXPECT_NEAR(rank.aux, 0.05, 1e-15);
  }
}

// h = 1, E = 2, k = 1, router [1, −1]: logits (x, −x). Token 1 has x = ln(3)/2, so
// softmax (3/4, 1/4) → expert 0; token 2 has x = 0, (1/2, 1/2), a tie → expert 0.
// counts (2, 0), probability sums (5/4, 3/4):
// L = coeff · E / (k · T²) · (2 · 5/4 + 0 · 3/4) = coeff · 2/4 · 5/2 = 1.25 · coeff.
TEST(MoeLayerTest, AuxLossEqualsHandDerivedValue) {
  MoeLayerConfig c;
  c.hidden = 1;
  c.num_experts = 2;
  c.topk = 1;
  c.ffn_hidden = 1;
  c.aux_loss_coeff = 0.01;
  MoeWeights<double> w = MoeWeights<double>::Random(c, 1, 0.5);
  w.router = {1.0, -1.0};
  const RankResult r = RunLayout(c, w, {0.5 * std::log(3.0), 0.0}, {1.0, 1.0})[0];
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int64_t>{2, 0}));
  EXPECT_NEAR(r.aux, 0.0125, 1e-15);
}

TEST(MoeLayerTest, CreateRandomHoldsTheWeightsOfMoeWeightsRandom) {
  const MoeLayerConfig c = SmallConfig();
  auto self_ep = MakeSelfCommunicator(), self_etp = MakeSelfCommunicator();
  std::unique_ptr<Backend> be = MakeCpuBackend(0, 1);
  auto a = MoeLayer::Create(c, MoeWeights<float>::Random(c, 9, 0.3), self_ep.get(), self_etp.get(),
                            be.get(), DType::kF32);
  auto b = MoeLayer::CreateRandom(c, 9, 0.3, self_ep.get(), self_etp.get(), be.get(), DType::kF32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ToVector<float>((*a)->weights().router), ToVector<float>((*b)->weights().router));
  EXPECT_EQ(ToVector<float>((*a)->weights().fc1), ToVector<float>((*b)->weights().fc1));
  EXPECT_EQ(ToVector<float>((*a)->weights().fc2), ToVector<float>((*b)->weights().fc2));
  EXPECT_EQ(ToVector<float>((*a)->weights().shared_fc2),
            ToVector<float>((*b)->weights().shared_fc2));
}

// Rank 1's capacity holds its weights, gradients, the buffers every rank allocates alike
// before the dispatch plan and the permuted rows, the first buffer the routing sizes, but
// not the expert rows after them: it reports ResourceExhausted and its peer Aborted,
// instead of waiting for it in the all-to-all. Bytes by hand (fp64, T = 4 tokens, h = 12,
// E = 8, k = 2, f = 8, ep = 2, no shared experts, no aux loss): weights = gradients =
// (E·h + 4 experts·(2f·h + h·f))·8 = (96 + 4·288)·8 = 9984; live at the plan: x T·h·8 =
// 384, scores T·E·8 = 256, selected T·k·4 = 32, probs T·k·8 = 64, permutation T·k·4 = 32;
// permuted rows T·k·h·8 = 768.
TEST(MoeLayerTest, OutOfMemoryOnOneRankFailsEveryRankWithoutWaiting) {
  MoeLayerConfig c = SmallConfig();
  c.ep = 2;
  c.num_shared_experts = 0;
  c.aux_loss_coeff = 0;
  c.routing = ExpertRouting::kBalanced;
  const int64_t capacity = 2 * 9984 + 384 + 256 + 32 + 64 + 32 + 768;
  auto rendezvous = MakeInProcessRendezvous();
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r]() {
      auto ep = MakeGlooCommunicator(rendezvous, "oom", r, 2);
      ASSERT_TRUE(ep.ok());
      auto etp = MakeSelfCommunicator();
      std::unique_ptr<Backend> be = MakeCpuBackend(r == 1 ? capacity : 0, 1);
      auto layer = MoeLayer::CreateRandom(c, 1, 0.1, ep->get(), etp.get(), be.get(), DType::kF64);
      ASSERT_TRUE(layer.ok()) << layer.status();
      std::vector<double> x(4 * c.hidden, 0.5), y(4 * c.hidden);
      status[r] = (*layer)->Forward(x.data(), 4, y.data());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(status[0].code(), absl::StatusCode::kAborted) << status[0];
  EXPECT_EQ(status[1].code(), absl::StatusCode::kResourceExhausted) << status[1];
}

TEST(MoeLayerTest, ConfigRulesNameTheField) {
  MoeLayerConfig c = SmallConfig();
  c.ep = 3;
  EXPECT_EQ(c.Validate().message(), "ep (3) must divide num_experts (8)");
  c = SmallConfig();
  c.etp = 3;
  EXPECT_EQ(c.Validate().message(), "etp (3) must divide ffn_hidden (8)");
  c = SmallConfig();
  c.topk = 9;
  EXPECT_EQ(c.Validate().message(), "topk (9) must be <= num_experts (8)");
  c = SmallConfig();
  c.etp = 4;
  EXPECT_EQ(c.Validate().message(),
            "etp (4) must divide num_shared_experts * shared_ffn_hidden (6)");
  c = SmallConfig();
  c.aux_loss_coeff = 0;
  c.ep = 4;
  c.tokens_replicated = true;
  c.forward_only = true;
  EXPECT_EQ(c.Validate().message(),
            "ep * etp (4) must divide num_shared_experts * shared_ffn_hidden (6)");
  c.ep = 2;
  c.aux_loss_coeff = 0.1;
  EXPECT_EQ(c.Validate().message(),
            "tokens_replicated (serving) routes by the real top-k without an auxiliary loss "
            "(routing must not be balanced, aux_loss_coeff must be 0)");
}

// Rows tagged (source rank, expert, index) reach the EP rank owning their expert,
// expert-major and in source-rank order; Combine brings every row back where it was.
TEST(AllToAllTokenDispatcherTest, DispatchThenCombineRoundTripsEveryRow) {
  constexpr int kEp = 3;
  constexpr int64_t kExperts = 6, kLocal = 2, kHidden = 2;
  auto count = [](int rank, int64_t e) -> int64_t { return (rank * 5 + e * 3) % 4; };
  auto rendezvous = MakeInProcessRendezvous();
  std::vector<int> failures(kEp, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kEp; ++r) {
    threads.emplace_back([&, r]() {
      auto comm = MakeGlooCommunicator(rendezvous, "d", r, kEp);
      ASSERT_TRUE(comm.ok()) << comm.status();
      AllToAllTokenDispatcher dispatcher(comm->get(), kExperts, kHidden, DType::kF32);
      std::vector<int64_t> per_expert(kExperts);
      std::vector<float> rows;
      for (int64_t e = 0; e < kExperts; ++e) {
        per_expert[e] = count(r, e);
        for (int64_t i = 0; i < per_expert[e]; ++i) {
          rows.push_back(static_cast<float>(100 * r + 10 * e + i));
          rows.push_back(-1.0f);
        }
      }
      ASSERT_TRUE(dispatcher.Plan(per_expert).ok());
      const int64_t n = dispatcher.received_rows();
      std::vector<float> expert_rows(n * kHidden),
          ws(std::max<int64_t>(n, rows.size() / 2) * kHidden);
      ASSERT_TRUE(dispatcher.Dispatch(rows.data(), expert_rows.data(), ws.data()).ok());
      int64_t at = 0;
      for (int64_t le = 0; le < kLocal; ++le) {
        const int64_t e = r * kLocal + le;
        int64_t expected_rows = 0;
        for (int q = 0; q < kEp; ++q) {
          expected_rows += count(q, e);
          for (int64_t i = 0; i < count(q, e); ++i, ++at) {
            failures[r] += expert_rows[at * kHidden] != static_cast<float>(100 * q + 10 * e + i);
          }
        }
        failures[r] += dispatcher.local_tokens_per_expert()[le] != expected_rows;
      }
      failures[r] += at != n;
      std::vector<float> back(rows.size(), 0.0f);
      ASSERT_TRUE(dispatcher.Combine(expert_rows.data(), back.data(), ws.data()).ok());
      failures[r] += back != rows;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(kEp, 0));
}

}  // namespace
}  // namespace paratune::kernels
