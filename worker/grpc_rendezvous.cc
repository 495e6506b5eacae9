// MakeGrpcRendezvous: Set / Get over paratune.v1.Rendezvous. Get long-polls in slices of
// at most kSliceMs (the coordinator caps one call's wait too) until the caller's timeout.
#include "worker/grpc_rendezvous.h"

#include <algorithm>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "paratune/v1/rendezvous.grpc.pb.h"

namespace paratune::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Longest wait asked of the coordinator in one Get call.
constexpr int64_t kSliceMs = 10'000;
// Extra deadline beyond the asked wait, for the answer to come back.
constexpr int64_t kGraceMs = 5'000;

std::string CodeName(grpc::StatusCode code) {
  // gRPC's codes are absl's numbers.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// Worth another try before the timeout: the coordinator restarting or a call cut short.
bool Transient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

class GrpcRendezvous final : public kernels::GlooRendezvous {
 public:
  GrpcRendezvous(std::shared_ptr<grpc::Channel> channel, std::string token, std::string ns,
                 std::chrono::milliseconds timeout)
      : stub_(v1::Rendezvous::NewStub(std::move(channel))),
        token_(std::move(token)),
        ns_(std::move(ns)),
        timeout_(timeout) {}

  void Set(const std::string& key, const std::vector<char>& value) override {
    v1::RendezvousSetRequest req;
    req.set_namespace_(ns_);
    req.set_key(key);
    req.set_value(std::string(value.begin(), value.end()));
    const Clock::time_point deadline = Clock::now() + timeout_;
    Backoff backoff;
    while (true) {
      grpc::ClientContext ctx;
      Prepare(&ctx, std::max<int64_t>(1, RemainingMs(deadline)));
      v1::RendezvousSetResponse resp;
      const grpc::Status s = stub_->Set(&ctx, req, &resp);
      if (s.ok()) return;
      if (!Transient(s.error_code()) || !backoff.SleepBefore(deadline)) {
        throw std::runtime_error(Describe("Set", key, s));
      }
    }
  }

  std::vector<char> Get(const std::string& key) override {
    v1::RendezvousGetRequest req;
    req.set_namespace_(ns_);
    req.set_key(key);
    const Clock::time_point deadline = Clock::now() + timeout_;
    Backoff backoff;
    grpc::Status last;
    while (true) {
      const int64_t wait_ms = std::clamp<int64_t>(RemainingMs(deadline), 0, kSliceMs);
      req.set_wait_ms(wait_ms);
      grpc::ClientContext ctx;
      Prepare(&ctx, wait_ms + kGraceMs);
      v1::RendezvousGetResponse resp;
      last = stub_->Get(&ctx, req, &resp);
      if (last.ok() && resp.found()) {
        return std::vector<char>(resp.value().begin(), resp.value().end());
      }
      if (!last.ok() && !Transient(last.error_code())) {
        throw std::runtime_error(Describe("Get", key, last));
      }
      if (RemainingMs(deadline) <= 0) break;
      if (!last.ok() && !backoff.SleepBefore(deadline)) break;
    }
    std::string why = last.ok() ? ""
                                : absl::StrCat(" (last answer ", CodeName(last.error_code()), ": ",
                                               last.error_message(), ")");
    throw std::runtime_error(absl::StrCat("rendezvous: key '", key, "' in namespace '", ns_,
                                          "' was not set within ", timeout_.count(), " ms", why));
  }

 private:
  // 50 ms doubling to 1 s, never past the deadline.
  class Backoff {
   public:
    /// Sleeps the next backoff step; false when the deadline comes first.
    bool SleepBefore(Clock::time_point deadline) {
      const auto step = std::chrono::milliseconds(ms_);
      if (Clock::now() + step >= deadline) return false;
      std::this_thread::sleep_for(step);
      ms_ = std::min<int64_t>(ms_ * 2, 1000);
      return true;
    }

   private:
    int64_t ms_ = 50;
  };

  static int64_t RemainingMs(Clock::time_point deadline) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  }

  void Prepare(grpc::ClientContext* ctx, int64_t timeout_ms) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  }

  std::string Describe(const char* op, const std::string& key, const grpc::Status& s) const {
    return absl::StrCat("rendezvous ", op, " of key '", key, "' in namespace '", ns_,
                        "': ", CodeName(s.error_code()), ": ", s.error_message());
  }

  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const std::string token_;
  const std::string ns_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<kernels::GlooRendezvous> MakeGrpcRendezvous(std::shared_ptr<grpc::Channel> channel,
                                                            std::string token, std::string ns,
                                                            std::chrono::milliseconds timeout) {
  return std::make_shared<GrpcRendezvous>(std::move(channel), std::move(token), std::move(ns),
                                          timeout);
}

}  // namespace paratune::worker
