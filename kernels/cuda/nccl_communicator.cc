// NCCL communicator on the CUDA backend's stream. Rank 0 creates the ncclUniqueId and
// publishes it through the rendezvous store; collectives are queued on the stream (the
// CommClock synchronises around them when timing).
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/communicator.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kU8: return ncclUint8;
    case DType::kI32: return ncclInt32;
    case DType::kFp8E4M3:
      break;  // a storage format: never communicated
  }
  return absl::InvalidArgumentError("unknown dtype");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int size)
      : comm_(comm), stream_(stream), rank_(rank), size_(size) {}
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    if (barrier_buf_ != nullptr) cudaFree(barrier_buf_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduce(void* buf, int64_t count, DType dtype) override {
    PT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    NCCL_CHECK(ncclAllReduce(buf, buf, count, t, ncclSum, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    PT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    NCCL_CHECK(ncclAllGather(in, out, count, t, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status ReduceScatter(const void* in, void* out, int64_t count, DType dtype) override {
    PT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    NCCL_CHECK(ncclReduceScatter(in, out, count, t, ncclSum, comm_, stream_));
    return absl::OkStatus();
  }
  // All-to-all as NCCL documents it: one grouped send and receive per peer.
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype) override {
    return AllToAllV(in, std::vector<int64_t>(size_, count), out,
                     std::vector<int64_t>(size_, count), dtype);
  }
  absl::Status AllToAllV(const void* in, const std::vector<int64_t>& send_counts, void* out,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    PT_RETURN_IF_ERROR(CheckAllToAllCounts(send_counts, recv_counts, size_));
    PT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    const int64_t elem = SizeOf(dtype);
    const char* src = static_cast<const char*>(in);
    char* dst = static_cast<char*>(out);
    int64_t send_offset = 0, recv_offset = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (send_counts[q] > 0) {
        NCCL_CHECK(ncclSend(src + send_offset * elem, send_counts[q], t, q, comm_, stream_));
      }
      if (recv_counts[q] > 0) {
        NCCL_CHECK(ncclRecv(dst + recv_offset * elem, recv_counts[q], t, q, comm_, stream_));
      }
      send_offset += send_counts[q];
      recv_offset += recv_counts[q];
    }
    NCCL_CHECK(ncclGroupEnd());
    return absl::OkStatus();
  }
  absl::Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    PT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    NCCL_CHECK(ncclSend(buf, count, t, peer, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    PT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    NCCL_CHECK(ncclRecv(buf, count, t, peer, comm_, stream_));
    return absl::OkStatus();
  }
  // An all-reduce of one float, then a stream synchronisation.
  absl::Status Barrier() override {
    if (barrier_buf_ == nullptr) CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
    NCCL_CHECK(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
  void* barrier_buf_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    Backend& backend, std::shared_ptr<GlooRendezvous> rendezvous, const std::string& prefix,
    int rank, int size) {
  auto* cuda = dynamic_cast<CudaBackendBase*>(&backend);
  if (cuda == nullptr) {
    return absl::InvalidArgumentError("NCCL communicator needs the cuda backend");
  }
  const std::string key = absl::StrCat(prefix, "/nccl_unique_id");
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    rendezvous->Set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<char> bytes = rendezvous->Get(key);
    if (bytes.size() != sizeof(id.internal)) {
      return absl::InternalError(absl::StrCat("NCCL unique id has ", bytes.size(), " bytes"));
    }
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  CUDA_CHECK(cudaSetDevice(cuda->device()));
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(comm, cuda->stream(), rank, size));
}

}  // namespace paratune::kernels
