// MakeGrpcRendezvous against the coordinator's Rendezvous service in this process: values
// cross the wire byte for byte, Get waits across several server-capped calls for a Set
// made through another channel, a key never set throws naming it and its namespace after
// the timeout, a rejected token throws naming the status, Set rides out a coordinator that
// comes up late, and two ranks with their own channels form a Gloo group and all-reduce.
#include "worker/grpc_rendezvous.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/communicator.h"
#include "server/auth.h"
#include "server/clock.h"
#include "server/rendezvous_service.h"
#include "tests/e2e/fault_harness.h"

namespace paratune::worker {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

double ElapsedMs(Steady::time_point start) {
  return std::chrono::duration<double, std::milli>(Steady::now() - start).count();
}

// A Rendezvous service on 127.0.0.1 (port 0 = any; a given port to come back on it).
class Server {
 public:
  Server(const server::Authenticator* auth, server::RendezvousOptions options, int port = 0)
      : store_(&clock_, options), service_(&store_, auth, nullptr) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                       &port_);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
  }
  ~Server() {
    store_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
  }
  int port() const { return port_; }
  server::RendezvousStore& store() { return store_; }
  std::shared_ptr<grpc::Channel> NewChannel() const {
    // A channel of its own each time (no subchannel sharing), as separate processes have.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port_),
                                     grpc::InsecureChannelCredentials(), args);
  }

 private:
  server::SystemClock clock_;
  server::RendezvousStore store_;
  server::RendezvousService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

class GrpcRendezvousTest : public ::testing::Test {
 protected:
  GrpcRendezvousTest() : auth_(*server::Authenticator::FromTokens("client-tok", "worker-tok")) {}
  server::Authenticator auth_;
};

TEST_F(GrpcRendezvousTest, RoundTripAcrossChannelsAndNamespaces) {
  Server srv(&auth_, {});
  auto a = MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "verify/j1/0/1", milliseconds(5000));
  auto b = MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "verify/j1/0/1", milliseconds(5000));
  auto other =
      MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "verify/j1/0/2", milliseconds(300));
  std::vector<char> value(70'000);
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 31 % 256);
  a->Set("rank_0", value);
  EXPECT_EQ(b->Get("rank_0"), value);
  // The server holds it under the namespace given at construction.
  EXPECT_EQ(srv.store().Get("verify/j1/0/1", "rank_0", 0)->value().size(), 70'000u);
  EXPECT_THROW(other->Get("rank_0"), std::runtime_error);  // another namespace
}

TEST_F(GrpcRendezvousTest, GetWaitsOverSeveralCappedCallsForASetFromAnotherChannel) {
  server::RendezvousOptions o;
  o.max_wait_ms = 100;  // the client has to call again every 100 ms
  Server srv(&auth_, o);
  auto waiter = MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "ns", milliseconds(10'000));
  auto setter = MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "ns", milliseconds(10'000));
  const auto start = Steady::now();
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(450));
    setter->Set("addr", Bytes("10.1.2.3:5000"));
  });
  const std::vector<char> got = waiter->Get("addr");
  const double waited = ElapsedMs(start);
  t.join();
  EXPECT_EQ(got, Bytes("10.1.2.3:5000"));
  EXPECT_GE(waited, 440);
  EXPECT_LT(waited, 8000);  // room for a loaded machine, below the 10 s rendezvous timeout
}

TEST_F(GrpcRendezvousTest, GetTimeoutThrowsNamingKeyAndNamespace) {
  Server srv(&auth_, {});
  auto r = MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "verify/j9/3/1", milliseconds(400));
  const auto start = Steady::now();
  try {
    r->Get("rank_1");
    FAIL() << "Get of a key never set returned";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "rendezvous: key 'rank_1' in namespace 'verify/j9/3/1' was not set within 400 ms");
  }
  EXPECT_GE(ElapsedMs(start), 390);
  EXPECT_LT(ElapsedMs(start), 5000);  // room for a loaded machine
}

TEST_F(GrpcRendezvousTest, RejectedTokenThrowsAtOnce) {
  Server srv(&auth_, {});
  auto client = MakeGrpcRendezvous(srv.NewChannel(), "client-tok", "ns", milliseconds(5000));
  const auto start = Steady::now();
  try {
    client->Set("k", Bytes("v"));
    FAIL() << "Set with the client token succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "rendezvous Set of key 'k' in namespace 'ns': PERMISSION_DENIED: the client token "
              "cannot call the worker API");
  }
  auto none = MakeGrpcRendezvous(srv.NewChannel(), "", "ns", milliseconds(5000));
  EXPECT_THROW(none->Get("k"), std::runtime_error);
  EXPECT_LT(ElapsedMs(start), 4500);  // not retried until the 5 s timeout (loaded host)
  auto bad_ns = MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "", milliseconds(5000));
  try {
    bad_ns->Set("k", Bytes("v"));
    FAIL() << "Set with an empty namespace succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("INVALID_ARGUMENT: namespace must not be empty"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(GrpcRendezvousTest, SetRetriesUntilTheCoordinatorComesUp) {
  // A port below the kernel's ephemeral range: while nothing listens on it (600 ms) no
  // parallel test's port-0 server or connection can be handed it.
  int port = e2e::PortBelowEphemeralRange();
  if (port == 0) {
    Server probe(&auth_, {});
    port = probe.port();
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  auto r = MakeGrpcRendezvous(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                                        grpc::InsecureChannelCredentials(), args),
                              "worker-tok", "ns", milliseconds(10'000));
  std::unique_ptr<Server> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(600));
    late = std::make_unique<Server>(&auth_, server::RendezvousOptions{}, port);
  });
  const auto start = Steady::now();
  r->Set("k", Bytes("after the outage"));
  const double took = ElapsedMs(start);
  starter.join();
  ASSERT_EQ(late->port(), port);
  EXPECT_GE(took, 550);  // nothing listened before 600 ms
  EXPECT_EQ(*late->store().Get("ns", "k", 0)->value().data(), 'a');
  EXPECT_EQ(r->Get("k"), Bytes("after the outage"));
}

TEST_F(GrpcRendezvousTest, TwoRanksWithTheirOwnChannelsAllReduce) {
  Server srv(&auth_, {});
  constexpr int kN = 1000;
  std::vector<std::vector<float>> bufs(2, std::vector<float>(kN));
  std::vector<absl::Status> status(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < kN; ++i) bufs[r][i] = static_cast<float>((r + 1) * i);
    ranks.emplace_back([&, r] {
      auto rdv =
          MakeGrpcRendezvous(srv.NewChannel(), "worker-tok", "allreduce", milliseconds(30'000));
      auto comm = kernels::MakeGlooCommunicator(rdv, "g", r, 2);
      if (!comm.ok()) {
        status[r] = comm.status();
        return;
      }
      status[r] = (*comm)->AllReduce(bufs[r].data(), kN, kernels::DType::kF32);
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(bufs[0][i], 3.0f * i) << i;  // 1·i + 2·i
    ASSERT_EQ(bufs[1][i], 3.0f * i) << i;
  }
  // Both ranks' addresses went through the store (Gloo's "g/rank_<r>" keys).
  EXPECT_TRUE(srv.store().Get("allreduce", "g/rank_0", 0)->has_value());
  EXPECT_TRUE(srv.store().Get("allreduce", "g/rank_1", 0)->has_value());
}

}  // namespace
}  // namespace paratune::worker
