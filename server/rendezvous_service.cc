#include "server/rendezvous_service.h"

#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/grpc_services.h"

namespace paratune::server {
namespace {

absl::Status CheckName(const std::string& value, const char* field, int64_t max_bytes) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " must not be empty"));
  if (static_cast<int64_t>(value.size()) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " (", value.size(), " bytes) must be at most ", max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

RendezvousStore::RendezvousStore(const Clock* clock, RendezvousOptions options)
    : clock_(clock), options_(options) {}

RendezvousStore::~RendezvousStore() { Shutdown(); }

void RendezvousStore::ExpireLocked(int64_t now_ms) {
  if (now_ms - last_expiry_ms_ < 1000) return;
  last_expiry_ms_ = now_ms;
  for (auto it = namespaces_.begin(); it != namespaces_.end();) {
    if (now_ms - it->second.last_used_ms >= options_.idle_ttl_ms) {
      for (const auto& [k, v] : it->second.keys) total_bytes_ -= static_cast<int64_t>(v.size());
      it = namespaces_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status RendezvousStore::SetLocked(const std::string& ns, const std::string& key,
                                        std::string value) {
  const int64_t now = clock_->NowMs();
  ExpireLocked(now);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) {
    if (static_cast<int64_t>(namespaces_.size()) >= options_.max_namespaces) {
      return absl::ResourceExhaustedError(
          absl::StrCat("namespace '", ns, "' cannot be created: the coordinator holds at most ",
                       options_.max_namespaces, " rendezvous namespaces (they expire after ",
                       options_.idle_ttl_ms / 1000, " s idle, or DeleteNamespace them)"));
    }
  }
  Namespace* space = it == namespaces_.end() ? nullptr : &it->second;
  const std::string* old = nullptr;
  if (space != nullptr) {
    auto k = space->keys.find(key);
    if (k != space->keys.end()) old = &k->second;
  }
  if (old == nullptr && space != nullptr &&
      static_cast<int64_t>(space->keys.size()) >= options_.max_keys_per_namespace) {
    return absl::ResourceExhaustedError(absl::StrCat("key '", key, "': namespace '", ns,
                                                     "' already holds the most keys (",
                                                     options_.max_keys_per_namespace, ")"));
  }
  const int64_t growth =
      static_cast<int64_t>(value.size()) - (old != nullptr ? static_cast<int64_t>(old->size()) : 0);
  if (total_bytes_ + growth > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "value of key '", key, "': the rendezvous store holds at most ", options_.max_total_bytes,
        " bytes of values in all (", total_bytes_, " in use)"));
  }
  if (space == nullptr) space = &namespaces_[ns];
  space->last_used_ms = now;
  space->keys[key] = std::move(value);
  total_bytes_ += growth;
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(const std::string& ns, const std::string& key,
                                  std::string value) {
  if (absl::Status s = CheckName(ns, "namespace", options_.max_name_bytes); !s.ok()) return s;
  if (absl::Status s = CheckName(key, "key", options_.max_name_bytes); !s.ok()) return s;
  if (static_cast<int64_t>(value.size()) > options_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("value of key '", key, "' (", value.size(),
                                                   " bytes) must be at most ",
                                                   options_.max_value_bytes, " bytes"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  return SetLocked(ns, key, std::move(value));
}

absl::StatusOr<std::optional<std::string>> RendezvousStore::Get(
    const std::string& ns, const std::string& key, int64_t wait_ms,
    const std::function<bool()>& cancelled) {
  if (absl::Status s = CheckName(ns, "namespace", options_.max_name_bytes); !s.ok()) return s;
  if (absl::Status s = CheckName(key, "key", options_.max_name_bytes); !s.ok()) return s;
  if (wait_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("wait_ms (", wait_ms, ") must be >= 0"));
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::min(wait_ms, options_.max_wait_ms));
  std::unique_lock<std::mutex> lock(mu_);
  ExpireLocked(clock_->NowMs());
  const auto lookup = [&]() -> const std::string* {
    auto it = namespaces_.find(ns);
    if (it == namespaces_.end()) return nullptr;
    it->second.last_used_ms = clock_->NowMs();
    auto k = it->second.keys.find(key);
    return k == it->second.keys.end() ? nullptr : &k->second;
  };
  if (const std::string* v = lookup()) return std::optional<std::string>(*v);
  if (wait_ms == 0) return std::optional<std::string>();
  if (shut_down_) return absl::UnavailableError("the rendezvous store is shutting down");
  if (waiters_ >= options_.max_waiters) {
    return absl::UnavailableError(absl::StrCat("key '", key, "': ", options_.max_waiters,
                                               " rendezvous Gets already wait; retry"));
  }
  ++waiters_;
  std::optional<std::string> out;
  absl::Status status;
  while (true) {
    if (const std::string* v = lookup()) {
      out = *v;
      break;
    }
    if (shut_down_) {
      status = absl::UnavailableError("the rendezvous store is shutting down");
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline || (cancelled && cancelled())) break;
    changed_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
  --waiters_;
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& ns, const std::string& key,
                                             int64_t delta) {
  if (absl::Status s = CheckName(ns, "namespace", options_.max_name_bytes); !s.ok()) return s;
  if (absl::Status s = CheckName(key, "key", options_.max_name_bytes); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  int64_t current = 0;
  auto it = namespaces_.find(ns);
  if (it != namespaces_.end()) {
    auto k = it->second.keys.find(key);
    if (k != it->second.keys.end() && !absl::SimpleAtoi(k->second, &current)) {
      return absl::FailedPreconditionError(
          absl::StrCat("key '", key, "' in namespace '", ns,
                       "' holds a value that is not a decimal integer, so Add cannot count on it"));
    }
  }
  if ((delta > 0 && current > std::numeric_limits<int64_t>::max() - delta) ||
      (delta < 0 && current < std::numeric_limits<int64_t>::min() - delta)) {
    return absl::OutOfRangeError(
        absl::StrCat("key '", key, "': ", current, " + delta (", delta, ") overflows int64"));
  }
  const int64_t next = current + delta;
  if (absl::Status s = SetLocked(ns, key, absl::StrCat(next)); !s.ok()) return s;
  return next;
}

absl::StatusOr<int64_t> RendezvousStore::DeleteNamespace(const std::string& ns) {
  if (absl::Status s = CheckName(ns, "namespace", options_.max_name_bytes); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return 0;
  const int64_t n = static_cast<int64_t>(it->second.keys.size());
  for (const auto& [k, v] : it->second.keys) total_bytes_ -= static_cast<int64_t>(v.size());
  namespaces_.erase(it);
  return n;
}

void RendezvousStore::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  changed_.notify_all();
}

int64_t RendezvousStore::namespace_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(namespaces_.size());
}

int64_t RendezvousStore::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

int64_t RendezvousStore::waiters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_;
}

template <typename F>
grpc::Status RendezvousService::Serve(const char* method, grpc::ServerContext* c, F&& body) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  if (auth_ != nullptr && auth_->Enabled(Role::kWorker)) {
    std::string header;
    const auto& md = c->client_metadata();
    auto it = md.find("authorization");
    if (it != md.end()) header.assign(it->second.data(), it->second.size());
    status = auth_->Check(header, Role::kWorker);
  }
  if (status.ok()) status = body();
  if (metrics_ != nullptr) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_->ObserveRequest(method, Transport::kGrpc, status.code(), s);
  }
  return ToGrpcStatus(status);
}

grpc::Status RendezvousService::Set(grpc::ServerContext* c, const v1::RendezvousSetRequest* req,
                                    v1::RendezvousSetResponse*) {
  return Serve("RendezvousSet", c,
               [&] { return store_->Set(req->namespace_(), req->key(), req->value()); });
}

grpc::Status RendezvousService::Get(grpc::ServerContext* c, const v1::RendezvousGetRequest* req,
                                    v1::RendezvousGetResponse* resp) {
  return Serve("RendezvousGet", c, [&] {
    absl::StatusOr<std::optional<std::string>> v = store_->Get(
        req->namespace_(), req->key(), req->wait_ms(), [c] { return c->IsCancelled(); });
    if (!v.ok()) return v.status();
    resp->set_found(v->has_value());
    if (v->has_value()) resp->set_value(**std::move(v));
    return absl::OkStatus();
  });
}

grpc::Status RendezvousService::Add(grpc::ServerContext* c, const v1::RendezvousAddRequest* req,
                                    v1::RendezvousAddResponse* resp) {
  return Serve("RendezvousAdd", c, [&] {
    absl::StatusOr<int64_t> v = store_->Add(req->namespace_(), req->key(), req->delta());
    if (!v.ok()) return v.status();
    resp->set_value(*v);
    return absl::OkStatus();
  });
}

grpc::Status RendezvousService::DeleteNamespace(grpc::ServerContext* c,
                                                const v1::RendezvousDeleteNamespaceRequest* req,
                                                v1::RendezvousDeleteNamespaceResponse* resp) {
  return Serve("RendezvousDeleteNamespace", c, [&] {
    absl::StatusOr<int64_t> n = store_->DeleteNamespace(req->namespace_());
    if (!n.ok()) return n.status();
    resp->set_deleted_keys(*n);
    return absl::OkStatus();
  });
}

}  // namespace paratune::server
