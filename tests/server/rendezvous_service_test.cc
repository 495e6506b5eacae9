// The coordinator's rendezvous store: round trips, waits woken by another thread's Set,
// timeouts, an Add counter under eight threads, namespace isolation, validation and limits
// naming the field and the rule, idle expiry, shutdown; and the gRPC service over a real
// channel with the worker token enforced.
#include "server/rendezvous_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace paratune::server {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

double ElapsedMs(Steady::time_point start) {
  return std::chrono::duration<double, std::milli>(Steady::now() - start).count();
}

TEST(RendezvousStoreTest, SetGetRoundTripAndOverwrite) {
  SystemClock clock;
  RendezvousStore store(&clock);
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(store.Set("job/1", "rank_0", binary).ok());
  auto v = store.Get("job/1", "rank_0", 0);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, binary);
  EXPECT_EQ(store.total_bytes(), 4);
  ASSERT_TRUE(store.Set("job/1", "rank_0", "xy").ok());
  EXPECT_EQ(**store.Get("job/1", "rank_0", 0), "xy");
  EXPECT_EQ(store.total_bytes(), 2);  // the old value's bytes were given back
  // Absent key, no wait: answered at once, not found.
  auto missing = store.Get("job/1", "rank_1", 0);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

TEST(RendezvousStoreTest, GetWaitsUntilAnotherThreadSets) {
  SystemClock clock;
  RendezvousStore store(&clock);
  const auto start = Steady::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    ASSERT_TRUE(store.Set("ns", "addr", "10.0.0.7:4000").ok());
  });
  auto v = store.Get("ns", "addr", 10'000);
  const double waited = ElapsedMs(start);
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, "10.0.0.7:4000");
  // Woken by the Set (200 ms), not by the 10 s deadline (the upper bound leaves room for a
  // loaded machine and stays far from 10 s).
  EXPECT_GE(waited, 190);
  EXPECT_LT(waited, 5000);
  EXPECT_EQ(store.waiters(), 0);
}

TEST(RendezvousStoreTest, GetTimesOutAndServerCapsTheWait) {
  SystemClock clock;
  RendezvousOptions o;
  o.max_wait_ms = 150;
  RendezvousStore store(&clock, o);
  auto start = Steady::now();
  auto v = store.Get("ns", "never", 60);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  EXPECT_GE(ElapsedMs(start), 55);
  EXPECT_LT(ElapsedMs(start), 5000);
  // 60 s asked, 150 ms granted (the bound: room for a loaded machine, far from 60 s).
  start = Steady::now();
  v = store.Get("ns", "never", 60'000);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  EXPECT_GE(ElapsedMs(start), 145);
  EXPECT_LT(ElapsedMs(start), 5000);
}

TEST(RendezvousStoreTest, CancelledWaitEndsEarly) {
  SystemClock clock;
  RendezvousStore store(&clock);
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancel = true;
  });
  const auto start = Steady::now();
  auto v = store.Get("ns", "k", 20'000, [&] { return cancel.load(); });
  canceller.join();
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  EXPECT_LT(ElapsedMs(start), 5000);  // a 100 ms tick after the cancel (loaded host), not 20 s
}

TEST(RendezvousStoreTest, AddIsAtomicUnderThreads) {
  SystemClock clock;
  RendezvousStore store(&clock);
  constexpr int kThreads = 8, kAdds = 500;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        auto v = store.Add("ns", "counter", 3);
        ASSERT_TRUE(v.ok()) << v.status();
        seen[t].push_back(*v);
      }
    });
  }
  for (auto& th : threads) th.join();
  // 8 × 500 adds of 3: the counter ends at 12000 and every intermediate value 3, 6, …,
  // 12000 was returned exactly once (no lost or doubled update).
  std::vector<bool> hit(kThreads * kAdds + 1, false);
  for (const auto& s : seen) {
    for (int64_t v : s) {
      ASSERT_EQ(v % 3, 0);
      ASSERT_FALSE(hit[v / 3]) << v;
      hit[v / 3] = true;
    }
  }
  EXPECT_EQ(**store.Get("ns", "counter", 0), "12000");  // decimal ASCII, as TCPStore
  EXPECT_EQ(*store.Add("ns", "counter", -12000), 0);
  ASSERT_TRUE(store.Set("ns", "text", "abc").ok());
  absl::StatusOr<int64_t> bad = store.Add("ns", "text", 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("'text'"), std::string::npos);
  ASSERT_TRUE(store.Set("ns", "big", "9223372036854775807").ok());
  EXPECT_EQ(store.Add("ns", "big", 1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(RendezvousStoreTest, NamespacesAreIsolatedAndDeletable) {
  SystemClock clock;
  RendezvousStore store(&clock);
  ASSERT_TRUE(store.Set("verify/j1/0/1", "rank_0", "a").ok());
  ASSERT_TRUE(store.Set("verify/j1/0/1", "rank_1", "b").ok());
  ASSERT_TRUE(store.Set("verify/j1/0/2", "rank_0", "c").ok());
  EXPECT_EQ(**store.Get("verify/j1/0/1", "rank_0", 0), "a");
  EXPECT_EQ(**store.Get("verify/j1/0/2", "rank_0", 0), "c");
  EXPECT_FALSE(store.Get("verify/j1/0/2", "rank_1", 0)->has_value());
  EXPECT_EQ(*store.Add("verify/j1/0/1", "n", 1), 1);
  EXPECT_EQ(*store.Add("verify/j1/0/2", "n", 1), 1);
  EXPECT_EQ(store.namespace_count(), 2);
  EXPECT_EQ(*store.DeleteNamespace("verify/j1/0/1"), 3);
  EXPECT_EQ(*store.DeleteNamespace("verify/j1/0/1"), 0);
  EXPECT_EQ(store.namespace_count(), 1);
  EXPECT_FALSE(store.Get("verify/j1/0/1", "rank_0", 0)->has_value());
  EXPECT_EQ(**store.Get("verify/j1/0/2", "rank_0", 0), "c");
  EXPECT_EQ(store.total_bytes(), 2);  // "c" and "1"
}

TEST(RendezvousStoreTest, ValidationNamesTheFieldAndTheRule) {
  SystemClock clock;
  RendezvousOptions o;
  o.max_value_bytes = 1 << 20;
  o.max_keys_per_namespace = 3;
  o.max_namespaces = 2;
  o.max_total_bytes = 1 << 21;
  RendezvousStore store(&clock, o);
  auto expect = [](const absl::Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
  };
  expect(store.Set("", "k", "v"), absl::StatusCode::kInvalidArgument,
         "namespace must not be empty");
  expect(store.Set("ns", "", "v"), absl::StatusCode::kInvalidArgument, "key must not be empty");
  expect(store.Get("ns", "", 0).status(), absl::StatusCode::kInvalidArgument,
         "key must not be empty");
  expect(store.Add("", "k", 1).status(), absl::StatusCode::kInvalidArgument,
         "namespace must not be empty");
  expect(store.DeleteNamespace("").status(), absl::StatusCode::kInvalidArgument,
         "namespace must not be empty");
  expect(store.Set(std::string(513, 'n'), "k", "v"), absl::StatusCode::kInvalidArgument,
         "namespace (513 bytes) must be at most 512 bytes");
  expect(store.Get("ns", "k", -1).status(), absl::StatusCode::kInvalidArgument,
         "wait_ms (-1) must be >= 0");
  expect(store.Set("ns", "k", std::string((1 << 20) + 1, 'x')), absl::StatusCode::kInvalidArgument,
         "value of key 'k' (1048577 bytes) must be at most 1048576 bytes");
  EXPECT_TRUE(store.Set("ns", "k", std::string(1 << 20, 'x')).ok());  // exactly the cap
  ASSERT_TRUE(store.Set("ns", "k2", "v").ok());
  ASSERT_TRUE(store.Set("ns", "k3", "v").ok());
  expect(store.Set("ns", "k4", "v"), absl::StatusCode::kResourceExhausted,
         "namespace 'ns' already holds the most keys (3)");
  EXPECT_TRUE(store.Set("ns", "k3", "overwrite").ok());  // not a new key
  ASSERT_TRUE(store.Set("ns2", "k", "v").ok());
  expect(store.Set("ns3", "k", "v"), absl::StatusCode::kResourceExhausted,
         "at most 2 rendezvous namespaces");
  // 1 MiB + small values held; another MiB would pass 2 MiB in all.
  expect(store.Set("ns2", "big", std::string(1 << 20, 'y')), absl::StatusCode::kResourceExhausted,
         "at most 2097152 bytes of values in all");
}

TEST(RendezvousStoreTest, IdleNamespacesExpire) {
  FakeClock clock;
  RendezvousOptions o;
  o.idle_ttl_ms = 60'000;
  RendezvousStore store(&clock, o);
  ASSERT_TRUE(store.Set("old", "k", "12345").ok());
  clock.AdvanceMs(30'000);
  ASSERT_TRUE(store.Set("young", "k", "v").ok());
  clock.AdvanceMs(30'000);  // "old" idle 60 s, "young" 30 s
  ASSERT_TRUE(store.Get("young", "k", 0).ok());
  EXPECT_EQ(store.namespace_count(), 1);
  EXPECT_FALSE(store.Get("old", "k", 0)->has_value());
  EXPECT_EQ(store.total_bytes(), 1);
  clock.AdvanceMs(59'000);  // touched by the Get above: 59 s idle, kept
  EXPECT_TRUE(store.Get("young", "k", 0)->has_value());
  EXPECT_EQ(store.namespace_count(), 1);
}

TEST(RendezvousStoreTest, WaiterCapAndShutdown) {
  SystemClock clock;
  RendezvousOptions o;
  o.max_waiters = 1;
  RendezvousStore store(&clock, o);
  absl::StatusOr<std::optional<std::string>> first;
  std::thread waiter([&] { first = store.Get("ns", "k", 20'000); });
  while (store.waiters() == 0) std::this_thread::sleep_for(milliseconds(5));
  absl::StatusOr<std::optional<std::string>> second = store.Get("ns", "k", 1000);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("1 rendezvous Gets already wait"), std::string::npos);
  const auto start = Steady::now();
  store.Shutdown();
  waiter.join();
  EXPECT_LT(ElapsedMs(start), 5000);  // ended by Shutdown (loaded host), not the 20 s wait
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
}

// The service over a real channel, with tokens.
class RendezvousServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auth_ = *Authenticator::FromTokens("client-secret", "worker-secret");
    store_ = std::make_unique<RendezvousStore>(&clock_);
    service_ = std::make_unique<RendezvousService>(store_.get(), &auth_, nullptr);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    stub_ = v1::Rendezvous::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                        grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    store_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
  }
  static void Auth(grpc::ClientContext* c, const std::string& token) {
    if (!token.empty()) c->AddMetadata("authorization", "Bearer " + token);
  }

  SystemClock clock_;
  Authenticator auth_;
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<RendezvousService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  int port_ = 0;
};

TEST_F(RendezvousServiceTest, WorkerTokenRequired) {
  v1::RendezvousSetRequest set;
  set.set_namespace_("ns");
  set.set_key("k");
  set.set_value("v");
  v1::RendezvousSetResponse set_resp;
  for (const auto& [token, code] : std::vector<std::pair<std::string, grpc::StatusCode>>{
           {"", grpc::StatusCode::UNAUTHENTICATED},
           {"nope", grpc::StatusCode::UNAUTHENTICATED},
           {"client-secret", grpc::StatusCode::PERMISSION_DENIED},
           {"worker-secret", grpc::StatusCode::OK}}) {
    grpc::ClientContext c;
    Auth(&c, token);
    EXPECT_EQ(stub_->Set(&c, set, &set_resp).error_code(), code) << "token '" << token << "'";
  }
  EXPECT_EQ(**store_->Get("ns", "k", 0), "v");  // only the worker's Set landed
}

TEST_F(RendezvousServiceTest, GetAddDeleteOverTheWire) {
  v1::RendezvousGetRequest get;
  get.set_namespace_("ns");
  get.set_key("k");
  get.set_wait_ms(5000);
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(150));
    ASSERT_TRUE(store_->Set("ns", "k", std::string("\x01\x02", 2)).ok());
  });
  v1::RendezvousGetResponse got;
  {
    grpc::ClientContext c;
    Auth(&c, "worker-secret");
    ASSERT_TRUE(stub_->Get(&c, get, &got).ok());
  }
  setter.join();
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.value(), std::string("\x01\x02", 2));

  get.set_key("absent");
  get.set_wait_ms(100);
  {
    grpc::ClientContext c;
    Auth(&c, "worker-secret");
    ASSERT_TRUE(stub_->Get(&c, get, &got).ok());
    EXPECT_FALSE(got.found());
    EXPECT_TRUE(got.value().empty());
  }

  v1::RendezvousAddRequest add;
  add.set_namespace_("ns");
  add.set_key("arrived");
  add.set_delta(2);
  v1::RendezvousAddResponse added;
  for (int i = 1; i <= 3; ++i) {
    grpc::ClientContext c;
    Auth(&c, "worker-secret");
    ASSERT_TRUE(stub_->Add(&c, add, &added).ok());
    EXPECT_EQ(added.value(), 2 * i);
  }

  v1::RendezvousSetRequest bad;
  bad.set_namespace_("ns");
  v1::RendezvousSetResponse set_resp;
  {
    grpc::ClientContext c;
    Auth(&c, "worker-secret");
    const grpc::Status s = stub_->Set(&c, bad, &set_resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "key must not be empty");
  }

  v1::RendezvousDeleteNamespaceRequest del;
  del.set_namespace_("ns");
  v1::RendezvousDeleteNamespaceResponse deleted;
  {
    grpc::ClientContext c;
    Auth(&c, "worker-secret");
    ASSERT_TRUE(stub_->DeleteNamespace(&c, del, &deleted).ok());
    EXPECT_EQ(deleted.deleted_keys(), 2);  // "k" and "arrived"
  }
}

}  // namespace
}  // namespace paratune::server
