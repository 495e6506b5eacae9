// Gloo communicator: TCP transport on GlooHost() (127.0.0.1 unless $PARATUNE_GLOO_HOST),
// rendezvous through a HashStore shared by threads, a FileStore shared by processes, or
// any other GlooRendezvous (the coordinator's, over gRPC). All-reduce, all-gather and
// barrier are Gloo's own algorithms; reduce-scatter is a ring over Gloo's unbound buffers
// (k−1 steps, each moving 1/k of the buffer, which is the traffic nccl-tests' (k−1)/k
// factor assumes). All-to-all is Gloo's `alltoall` / `alltoallv` over bytes (any dtype).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "kernels/communicator.h"

namespace paratune::kernels {
namespace {

constexpr std::chrono::seconds kTimeout(300);
// Slots above those Gloo's collectives derive from their tags.
constexpr uint64_t kP2PSlot = 0x7000000000ull;
constexpr uint64_t kRingSlotBase = 0x7100000000ull;

class StoreRendezvous final : public GlooRendezvous {
 public:
  explicit StoreRendezvous(std::unique_ptr<gloo::rendezvous::Store> store)
      : store_(std::move(store)) {}
  gloo::rendezvous::Store& store() { return *store_; }
  void Set(const std::string& key, const std::vector<char>& value) override {
    store_->set(key, value);
  }
  std::vector<char> Get(const std::string& key) override {
    store_->wait({key});
    return store_->get(key);
  }

 private:
  std::unique_ptr<gloo::rendezvous::Store> store_;
};

// A gloo store over a GlooRendezvous of another kind (its Get blocks until the key is set).
class RendezvousAdapter final : public gloo::rendezvous::Store {
 public:
  explicit RendezvousAdapter(std::shared_ptr<GlooRendezvous> r) : r_(std::move(r)) {}
  void set(const std::string& key, const std::vector<char>& data) override { r_->Set(key, data); }
  std::vector<char> get(const std::string& key) override { return r_->Get(key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) r_->Get(k);
  }

 private:
  std::shared_ptr<GlooRendezvous> r_;
};

absl::Status Unsupported(DType dtype) {
  return absl::InvalidArgumentError(
      absl::StrCat("dtype (", DTypeName(dtype), ") must be fp32 or fp64 for Gloo"));
}

template <typename T>
void AddInto(T* acc, const T* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx)
      : ctx_(std::move(ctx)) {}
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }

  absl::Status AllReduce(void* buf, int64_t count, DType dtype) override {
    return Guard([&]() -> absl::Status {
      gloo::AllreduceOptions opts(ctx_);
      if (dtype == DType::kF32) {
        opts.setOutput(static_cast<float*>(buf), count);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
      } else if (dtype == DType::kF64) {
        opts.setOutput(static_cast<double*>(buf), count);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<double>));
      } else {
        return Unsupported(dtype);
      }
      gloo::allreduce(opts);
      return absl::OkStatus();
    });
  }

  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    if (dtype != DType::kF32 && dtype != DType::kF64) return Unsupported(dtype);
    return Guard([&]() -> absl::Status {
      gloo::AllgatherOptions opts(ctx_);
      // Gloo's all-gather takes bytes through a char view; the element type does not matter.
      const int64_t bytes = count * SizeOf(dtype);
      // In place (`in` is this rank's chunk of `out`): Gloo takes no input buffer then.
      if (in != static_cast<const char*>(out) + rank() * bytes) {
        opts.setInput(static_cast<char*>(const_cast<void*>(in)), bytes);
      }
      opts.setOutput(static_cast<char*>(out), bytes * size());
      gloo::allgather(opts);
      return absl::OkStatus();
    });
  }

  absl::Status ReduceScatter(const void* in, void* out, int64_t count, DType dtype) override {
    if (dtype == DType::kF32) return RingReduceScatter<float>(in, out, count);
    if (dtype == DType::kF64) return RingReduceScatter<double>(in, out, count);
    return Unsupported(dtype);
  }

  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype) override {
    if (count < 0) return absl::InvalidArgumentError("count must be >= 0");
    if (count == 0) return absl::OkStatus();
    return Guard([&]() -> absl::Status {
      gloo::AlltoallOptions opts(ctx_);
      const int64_t bytes = count * SizeOf(dtype) * size();
      opts.setInput(static_cast<char*>(const_cast<void*>(in)), bytes);
      opts.setOutput(static_cast<char*>(out), bytes);
      gloo::alltoall(opts);
      return absl::OkStatus();
    });
  }

  absl::Status AllToAllV(const void* in, const std::vector<int64_t>& send_counts, void* out,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    if (absl::Status s = CheckAllToAllCounts(send_counts, recv_counts, size()); !s.ok()) {
      return s;
    }
    const int64_t elem = SizeOf(dtype);
    std::vector<int64_t> send_bytes(send_counts.size()), recv_bytes(recv_counts.size());
    for (size_t q = 0; q < send_counts.size(); ++q) {
      send_bytes[q] = send_counts[q] * elem;
      recv_bytes[q] = recv_counts[q] * elem;
    }
    // Gloo binds every buffer it is given, even an empty one: a rank that sends or receives
    // nothing passes a one-byte dummy instead of a possibly null pointer.
    char dummy_in = 0, dummy_out = 0;
    const bool no_in = std::accumulate(send_bytes.begin(), send_bytes.end(), int64_t{0}) == 0;
    const bool no_out = std::accumulate(recv_bytes.begin(), recv_bytes.end(), int64_t{0}) == 0;
    return Guard([&]() -> absl::Status {
      gloo::AlltoallvOptions opts(ctx_);
      opts.setInput(no_in ? &dummy_in : static_cast<char*>(const_cast<void*>(in)), send_bytes);
      opts.setOutput(no_out ? &dummy_out : static_cast<char*>(out), recv_bytes);
      gloo::alltoallv(opts);
      return absl::OkStatus();
    });
  }

  absl::Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    return Guard([&]() -> absl::Status {
      auto ub = ctx_->createUnboundBuffer(const_cast<void*>(buf), count * SizeOf(dtype));
      ub->send(peer, kP2PSlot);
      ub->waitSend(kTimeout);
      return absl::OkStatus();
    });
  }

  absl::Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    return Guard([&]() -> absl::Status {
      auto ub = ctx_->createUnboundBuffer(buf, count * SizeOf(dtype));
      ub->recv(peer, kP2PSlot);
      ub->waitRecv(kTimeout);
      return absl::OkStatus();
    });
  }

  absl::Status Barrier() override {
    return Guard([&]() -> absl::Status {
      gloo::BarrierOptions opts(ctx_);
      gloo::barrier(opts);
      return absl::OkStatus();
    });
  }

 private:
  template <typename F>
  absl::Status Guard(F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("gloo: ", e.what()));
    }
  }

  template <typename T>
  absl::Status RingReduceScatter(const void* in, void* out, int64_t count) {
    const int k = size();
    const int r = rank();
    const T* src = static_cast<const T*>(in);
    if (k == 1) {
      if (out != in) std::memmove(out, in, count * sizeof(T));
      return absl::OkStatus();
    }
    acc_.resize(static_cast<size_t>(count) * k * sizeof(T));
    recv_.resize(static_cast<size_t>(count) * sizeof(T));
    std::memcpy(acc_.data(), src, count * k * sizeof(T));
    T* acc = reinterpret_cast<T*>(acc_.data());
    return Guard([&]() -> absl::Status {
      auto send_buf = ctx_->createUnboundBuffer(acc_.data(), acc_.size());
      auto recv_buf = ctx_->createUnboundBuffer(recv_.data(), recv_.size());
      const int next = (r + 1) % k;
      const int prev = (r + k - 1) % k;
      const size_t chunk = count * sizeof(T);
      for (int j = 0; j < k - 1; ++j) {
        const int send_chunk = (r - j - 1 + 2 * k) % k;
        const int recv_chunk = (r - j - 2 + 2 * k) % k;
        const uint64_t slot = kRingSlotBase + static_cast<uint64_t>(j);
        recv_buf->recv(prev, slot, 0, chunk);
        send_buf->send(next, slot, send_chunk * chunk, chunk);
        recv_buf->waitRecv(kTimeout);
        send_buf->waitSend(kTimeout);
        AddInto(acc + recv_chunk * count, reinterpret_cast<const T*>(recv_.data()), count);
      }
      // `out` may alias `in` (in place): `in` was copied into acc_ before the ring.
      std::memcpy(out, acc + r * count, chunk);
      return absl::OkStatus();
    });
  }

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::vector<char> acc_;
  std::vector<char> recv_;
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(CopyFn copy) : copy_(std::move(copy)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduce(void*, int64_t, DType) override { return absl::OkStatus(); }
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    return CopyUnlessSame(out, in, count * SizeOf(dtype));
  }
  absl::Status ReduceScatter(const void* in, void* out, int64_t count, DType dtype) override {
    return CopyUnlessSame(out, in, count * SizeOf(dtype));
  }
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype) override {
    return CopyUnlessSame(out, in, count * SizeOf(dtype));
  }
  absl::Status AllToAllV(const void* in, const std::vector<int64_t>& send_counts, void* out,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    if (absl::Status s = CheckAllToAllCounts(send_counts, recv_counts, 1); !s.ok()) return s;
    if (send_counts[0] != recv_counts[0]) {
      return absl::InvalidArgumentError(absl::StrCat("recv_counts[0] (", recv_counts[0],
                                                     ") must equal send_counts[0] (",
                                                     send_counts[0], ") in a one-rank group"));
    }
    return CopyUnlessSame(out, in, send_counts[0] * SizeOf(dtype));
  }
  absl::Status Send(const void*, int64_t, DType, int peer) override {
    return absl::InvalidArgumentError(absl::StrCat("peer (", peer, ") must be another rank"));
  }
  absl::Status Recv(void*, int64_t, DType, int peer) override {
    return absl::InvalidArgumentError(absl::StrCat("peer (", peer, ") must be another rank"));
  }
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  absl::Status CopyUnlessSame(void* out, const void* in, int64_t bytes) {
    if (in == out || bytes == 0) return absl::OkStatus();
    if (copy_) return copy_(out, in, bytes);
    std::memmove(out, in, bytes);
    return absl::OkStatus();
  }
  CopyFn copy_;
};

}  // namespace

absl::Status CheckAllToAllCounts(const std::vector<int64_t>& send_counts,
                                 const std::vector<int64_t>& recv_counts, int size) {
  if (static_cast<int64_t>(send_counts.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("send_counts has ", send_counts.size(),
                                                   " entries; must have one per rank (", size,
                                                   ")"));
  }
  if (static_cast<int64_t>(recv_counts.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("recv_counts has ", recv_counts.size(),
                                                   " entries; must have one per rank (", size,
                                                   ")"));
  }
  for (int q = 0; q < size; ++q) {
    if (send_counts[q] < 0 || recv_counts[q] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("send_counts[", q, "] (", send_counts[q], ") and recv_counts[", q, "] (",
                       recv_counts[q], ") must be >= 0"));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<Communicator> MakeSelfCommunicator(CopyFn copy) {
  return std::make_unique<SelfCommunicator>(std::move(copy));
}

std::string GlooHost() {
  const char* host = std::getenv("PARATUNE_GLOO_HOST");
  return host != nullptr && *host != '\0' ? std::string(host) : std::string("127.0.0.1");
}

std::shared_ptr<GlooRendezvous> MakeInProcessRendezvous() {
  return std::make_shared<StoreRendezvous>(std::make_unique<gloo::rendezvous::HashStore>());
}

// A FileStore rendezvous that several rank threads of one process may use at once:
// gloo::rendezvous::FileStore::set appends to a member vector without a lock (two rank
// threads connecting at once crashed in it on a 16-core host), so every call uses its own
// FileStore over the same directory (the store's state is the files). FileStore::get
// waits for the key (Gloo's default timeout, then it throws).
class FileRendezvous final : public GlooRendezvous {
 public:
  explicit FileRendezvous(std::string dir) : dir_(std::move(dir)) {}
  void Set(const std::string& key, const std::vector<char>& value) override {
    gloo::rendezvous::FileStore(dir_).set(key, value);
  }
  std::vector<char> Get(const std::string& key) override {
    return gloo::rendezvous::FileStore(dir_).get(key);
  }

 private:
  std::string dir_;
};

std::shared_ptr<GlooRendezvous> MakeFileRendezvous(const std::string& dir) {
  return std::make_shared<FileRendezvous>(dir);
}

absl::StatusOr<std::shared_ptr<gloo::rendezvous::Context>> ConnectGlooContext(
    std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank (", rank, ") must be in [0, size (", size, "))"));
  }
  if (rendezvous == nullptr) return absl::InvalidArgumentError("rendezvous must not be null");
  auto* store = dynamic_cast<StoreRendezvous*>(rendezvous.get());
  std::unique_ptr<gloo::rendezvous::Store> adapter;
  if (store == nullptr) adapter = std::make_unique<RendezvousAdapter>(rendezvous);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = GlooHost();
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::milliseconds(kTimeout));
    gloo::rendezvous::PrefixStore prefixed(prefix, store != nullptr ? store->store() : *adapter);
    ctx->connectFullMesh(prefixed, device);
    return ctx;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo rendezvous (", prefix, "): ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix, int rank, int size) {
  absl::StatusOr<std::shared_ptr<gloo::rendezvous::Context>> ctx =
      ConnectGlooContext(std::move(rendezvous), prefix, rank, size);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(*std::move(ctx)));
}

}  // namespace paratune::kernels
