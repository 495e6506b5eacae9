// Two processes form Gloo groups through a real paratune-coordinator's Rendezvous service
// (MakeGrpcRendezvous, worker token): an all-reduce whose sum is known, then RunTraining
// with tp = 2 and with pp = 2, one rank per process, whose losses must equal
// RunTrainingInProcess on the same config (and the single-rank run within 1e-5).
//
// The two processes are this test binary run again with the disabled test
// GrpcRendezvousChild.DISABLED_Rank selected and the rank, address, token, namespace and
// output file in the environment.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/communicator.h"
#include "kernels/training/training.h"
#include "paratune/v1/rendezvous.grpc.pb.h"
#include "tests/e2e/fault_harness.h"
#include "worker/grpc_rendezvous.h"

namespace paratune::worker {
namespace {

namespace fs = std::filesystem;
using kernels::training::RunTraining;
using kernels::training::RunTrainingInProcess;
using kernels::training::TrainConfig;
using kernels::training::TrainResult;

constexpr int kCount = 256;  // all-reduce elements
constexpr const char* kWorkerToken = "worker-e2e-token";
constexpr const char* kClientToken = "client-e2e-token";

TrainConfig Tiny(int64_t tp, int64_t pp) {
  TrainConfig c;
  c.shape.hidden_size = 32;
  c.shape.num_attention_heads = 4;
  c.shape.vocab_size = 64;
  c.num_layers = 2;
  c.seq_length = 16;
  c.parallel.micro_batch_size = 2;
  c.num_micro_batches = 2;
  c.steps = 3;
  c.lr = 0.01f;
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  return c;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// One rank: what the parent reads back, one line per part ("allreduce v0 v1 …",
// "tp2 loss0 loss1 loss2", "pp2 …"), numbers printed exactly (%.17g).
TEST(GrpcRendezvousChild, DISABLED_Rank) {
  const std::string rank_text = Env("PARATUNE_RDV_CHILD_RANK");
  if (rank_text.empty()) GTEST_SKIP() << "runs only as a child of TwoProcessesThroughACoordinator";
  const int rank = std::atoi(rank_text.c_str());
  const std::string ns = Env("PARATUNE_RDV_CHILD_NS");
  const std::string token = Env("PARATUNE_RDV_CHILD_TOKEN");
  auto channel =
      grpc::CreateChannel(Env("PARATUNE_RDV_CHILD_ADDR"), grpc::InsecureChannelCredentials());
  std::ostringstream out;
  char num[64];

  std::vector<float> buf(kCount);
  for (int i = 0; i < kCount; ++i) buf[i] = static_cast<float>((rank + 1) * i) + 0.5f;
  auto comm = kernels::MakeGlooCommunicator(
      MakeGrpcRendezvous(channel, token, ns + "/allreduce", std::chrono::seconds(60)), "world",
      rank, 2);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE((*comm)->AllReduce(buf.data(), kCount, kernels::DType::kF32).ok());
  out << "allreduce";
  for (float v : buf) {
    std::snprintf(num, sizeof(num), " %.17g", static_cast<double>(v));
    out << num;
  }
  out << "\n";

  for (const auto& [name, config] : {std::pair{"tp2", Tiny(2, 1)}, std::pair{"pp2", Tiny(1, 2)}}) {
    absl::StatusOr<TrainResult> r =
        RunTraining(config, rank, 1,
                    MakeGrpcRendezvous(channel, token, ns + "/" + name, std::chrono::seconds(60)));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    out << name;
    for (double l : r->losses) {
      std::snprintf(num, sizeof(num), " %.17g", l);
      out << num;
    }
    out << "\n";
  }
  std::ofstream(Env("PARATUNE_RDV_CHILD_OUT")) << out.str();
}

// An in-process rendezvous that records the keys set.
class CountingRendezvous final : public kernels::GlooRendezvous {
 public:
  void Set(const std::string& key, const std::vector<char>& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      keys_.insert(key);
    }
    inner_->Set(key, value);
  }
  std::vector<char> Get(const std::string& key) override { return inner_->Get(key); }
  std::set<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  std::shared_ptr<kernels::GlooRendezvous> inner_ = kernels::MakeInProcessRendezvous();
  std::mutex mu_;
  std::set<std::string> keys_;
};

// The numbers after `tag` on its line of `text`.
std::vector<double> Line(const std::string& text, const std::string& tag) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first != tag) continue;
    std::vector<double> v;
    for (double x; words >> x;) v.push_back(x);
    return v;
  }
  return {};
}

TEST(GrpcRendezvousE2eTest, TwoProcessesThroughACoordinator) {
  const fs::path bin = e2e::BinDir();
  ASSERT_FALSE(bin.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
  const fs::path dir = e2e::TestDir(
      "paratune_rdv_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::ofstream(dir / "worker.token") << kWorkerToken << "\n";
  std::ofstream(dir / "client.token") << kClientToken << "\n";
  e2e::Coordinator coordinator(
      bin, dir, dir / "paratune.db",
      {"--worker-token-file", (dir / "worker.token").string(), "--client-token-file",
       (dir / "client.token").string(), "--rendezvous-idle-ttl-ms", "600000"});
  std::string error;
  ASSERT_TRUE(coordinator.Start(&error)) << error;

  const fs::path self = fs::read_symlink("/proc/self/exe");
  const std::string ns = "e2e/" + std::to_string(::getpid());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<e2e::Process>> children;
  for (int rank = 0; rank < 2; ++rank) {
    setenv("PARATUNE_RDV_CHILD_RANK", std::to_string(rank).c_str(), 1);
    setenv("PARATUNE_RDV_CHILD_ADDR", coordinator.address().c_str(), 1);
    setenv("PARATUNE_RDV_CHILD_TOKEN", kWorkerToken, 1);
    setenv("PARATUNE_RDV_CHILD_NS", ns.c_str(), 1);
    setenv("PARATUNE_RDV_CHILD_OUT", (dir / ("rank" + std::to_string(rank) + ".out")).c_str(), 1);
    setenv("PARATUNE_GLOO_HOST", "127.0.0.1", 1);
    children.push_back(std::make_unique<e2e::Process>(
        std::vector<std::string>{self.string(), "--gtest_also_run_disabled_tests",
                                 "--gtest_filter=GrpcRendezvousChild.DISABLED_Rank"},
        dir / ("rank" + std::to_string(rank) + ".log")));
    ASSERT_TRUE(children.back()->ok());
  }
  for (const char* v :
       {"PARATUNE_RDV_CHILD_RANK", "PARATUNE_RDV_CHILD_ADDR", "PARATUNE_RDV_CHILD_TOKEN",
        "PARATUNE_RDV_CHILD_NS", "PARATUNE_RDV_CHILD_OUT", "PARATUNE_GLOO_HOST"}) {
    unsetenv(v);
  }
  ASSERT_TRUE(
      e2e::PollUntil([&] { return !children[0]->Alive() && !children[1]->Alive(); }, 120'000))
      << "the two ranks did not finish in 120 s";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::string> outs(2);
  for (int rank = 0; rank < 2; ++rank) {
    const int status = children[rank]->exit_status();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << ":\n"
        << e2e::ReadFile(dir / ("rank" + std::to_string(rank) + ".log"));
    outs[rank] = e2e::ReadFile(dir / ("rank" + std::to_string(rank) + ".out"));
  }
  std::cerr << "two ranks: all-reduce and two 3-step trainings in " << seconds << " s\n";

  // All-reduce: (1·i + 0.5) + (2·i + 0.5) = 3i + 1, exact in fp32 for i < 256.
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<double> sum = Line(outs[rank], "allreduce");
    ASSERT_EQ(sum.size(), static_cast<size_t>(kCount)) << outs[rank];
    for (int i = 0; i < kCount; ++i)
      ASSERT_EQ(sum[i], 3.0 * i + 1.0) << "rank " << rank << " i " << i;
  }

  // Training: the same config in one process (threads, in-process rendezvous) gives the
  // same losses; every layout gives the single-rank losses within 1e-5 relative.
  absl::StatusOr<TrainResult> single = RunTrainingInProcess(Tiny(1, 1));
  ASSERT_TRUE(single.ok()) << single.status();
  for (const auto& [name, config] : {std::pair{"tp2", Tiny(2, 1)}, std::pair{"pp2", Tiny(1, 2)}}) {
    absl::StatusOr<TrainResult> ref = RunTrainingInProcess(config);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(ref->losses.size(), 3u);
    for (int rank = 0; rank < 2; ++rank) {
      const std::vector<double> losses = Line(outs[rank], name);
      ASSERT_EQ(losses.size(), 3u) << name << " rank " << rank << ": " << outs[rank];
      for (int step = 0; step < 3; ++step) {
        EXPECT_DOUBLE_EQ(losses[step], ref->losses[step])
            << name << " rank " << rank << " step " << step;
        EXPECT_NEAR(losses[step], single->losses[step], 1e-5 * single->losses[step])
            << name << " rank " << rank << " step " << step;
      }
    }
    EXPECT_LT(single->losses[2], single->losses[0]);  // it trains
  }

  // The keys are on the coordinator under the namespaces, behind the worker token.
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials()));
  v1::RendezvousDeleteNamespaceRequest del;
  del.set_namespace_(ns + "/allreduce");
  v1::RendezvousDeleteNamespaceResponse deleted;
  {
    grpc::ClientContext c;
    c.AddMetadata("authorization", std::string("Bearer ") + kClientToken);
    EXPECT_EQ(stub->DeleteNamespace(&c, del, &deleted).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext c;
    c.AddMetadata("authorization", std::string("Bearer ") + kWorkerToken);
    ASSERT_TRUE(stub->DeleteNamespace(&c, del, &deleted).ok());
  }
  // As many keys as Gloo sets to connect two ranks (counted on an in-process rendezvous).
  // The in-process connect itself is not under test here: it failed once in a CI run
  // under load (2 cores, ctest -j2), so it gets up to three tries, each on a fresh store,
  // and every failure is printed.
  std::shared_ptr<CountingRendezvous> counting;
  for (int attempt = 0; attempt < 3; ++attempt) {
    counting = std::make_shared<CountingRendezvous>();
    absl::Status status[2];
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back(
          [&, r] { status[r] = kernels::MakeGlooCommunicator(counting, "world", r, 2).status(); });
    }
    for (auto& t : ranks) t.join();
    if (status[0].ok() && status[1].ok()) break;
    std::cerr << "in-process Gloo connect, try " << attempt + 1 << ": " << status[0] << " / "
              << status[1] << "\n";
    ASSERT_LT(attempt, 2) << "three in-process Gloo connects failed";
  }
  EXPECT_GE(counting->keys().size(), 2u);
  EXPECT_EQ(deleted.deleted_keys(), static_cast<int64_t>(counting->keys().size()));
  {
    grpc::ClientContext c;
    c.AddMetadata("authorization", std::string("Bearer ") + kWorkerToken);
    ASSERT_TRUE(stub->DeleteNamespace(&c, del, &deleted).ok());
    EXPECT_EQ(deleted.deleted_keys(), 0);  // gone
  }
  coordinator.Kill();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace paratune::worker
