// Collective sweep over ranks that are threads of this process (Gloo on CPU, NCCL on GPU
// with one device per rank).
#include "kernels/collective_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/rank_threads.h"
#include "kernels/status_macros.h"

namespace paratune::kernels {
namespace {

// Input element i of rank r. Small integers, so every sum is exact in fp32.
double InputValue(int r, int64_t i) { return static_cast<double>((r + 1) * ((i % 7) + 1)); }

// Buffers live where the backend keeps tensors (host for Gloo, device for NCCL); inputs
// go in and results come out through CopyFromHost / CopyToHost, outside the timed loop.
absl::Status RunRank(const CollectiveSweepConfig& config, Communicator& comm, Backend& be,
                     std::vector<CollectiveSample>& samples) {
  const int k = comm.size(), r = comm.rank();
  const int64_t esize = SizeOf(config.dtype);
  for (size_t si = 0; si < config.sizes_bytes.size(); ++si) {
    const int64_t count = config.sizes_bytes[si] / esize;
    // in/out element counts per op (nccl-tests: size is the full buffer).
    int64_t in_n = count, out_n = count;
    if (config.op == CollectiveOp::kAllGather) in_n = count / k;
    if (config.op == CollectiveOp::kReduceScatter) out_n = count / k;
    PT_ASSIGN_OR_RETURN(Tensor in, be.Empty({in_n}, config.dtype, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(Tensor out, be.Empty({out_n}, config.dtype, MemoryTag::kWorkspace));
    std::vector<double> host_in(in_n);
    const int64_t base = config.op == CollectiveOp::kAllGather ? r * in_n : 0;
    for (int64_t i = 0; i < in_n; ++i) host_in[i] = InputValue(r, base + i);
    PT_RETURN_IF_ERROR(be.CopyFromHost(in, host_in));
    // Timed all-reduces run in place on `out` without refreshing it (values only grow; a
    // memcpy per call would be timed otherwise); the checked call starts from `in`.
    auto once = [&](bool refresh = false) -> absl::Status {
      switch (config.op) {
        case CollectiveOp::kAllReduce:
          if (refresh) PT_RETURN_IF_ERROR(be.Copy(out, in));
          return comm.AllReduce(out.data(), count, config.dtype);
        case CollectiveOp::kAllGather:
          return comm.AllGather(in.data(), out.data(), in_n, config.dtype);
        case CollectiveOp::kReduceScatter:
          return comm.ReduceScatter(in.data(), out.data(), out_n, config.dtype);
        case CollectiveOp::kSendRecv:
          if (r == 0) return comm.Send(in.data(), count, config.dtype, 1);
          if (r == 1) return comm.Recv(out.data(), count, config.dtype, 0);
          return absl::OkStatus();
        case CollectiveOp::kAllToAll:
          return comm.AllToAll(in.data(), out.data(), count / k, config.dtype);
      }
      return absl::OkStatus();
    };
    for (int64_t w = 0; w < config.warmup; ++w) PT_RETURN_IF_ERROR(once());
    PT_RETURN_IF_ERROR(comm.Barrier());
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t it = 0; it < config.iters; ++it) PT_RETURN_IF_ERROR(once());
    PT_RETURN_IF_ERROR(be.Synchronize());
    PT_RETURN_IF_ERROR(comm.Barrier());
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Check the result of one more call from fresh outputs.
    PT_RETURN_IF_ERROR(be.Fill(out, -1.0));
    PT_RETURN_IF_ERROR(once(/*refresh=*/true));
    PT_RETURN_IF_ERROR(be.Synchronize());
    PT_ASSIGN_OR_RETURN(std::vector<double> got, be.CopyToHost(out));
    int64_t wrong = 0;
    for (int64_t i = 0; i < out_n; ++i) {
      double expect = 0;
      switch (config.op) {
        case CollectiveOp::kAllReduce:
          for (int q = 0; q < k; ++q) expect += InputValue(q, i);
          break;
        case CollectiveOp::kAllGather:
          expect = InputValue(static_cast<int>(i / in_n), i);
          break;
        case CollectiveOp::kReduceScatter:
          for (int q = 0; q < k; ++q) expect += InputValue(q, r * out_n + i);
          break;
        case CollectiveOp::kSendRecv:
          expect = r == 1 ? InputValue(0, i) : -1;
          break;
        case CollectiveOp::kAllToAll: {
          // Chunk q came from rank q: its input chunk r.
          const int64_t chunk = count / k;
          expect = InputValue(static_cast<int>(i / chunk), r * chunk + i % chunk);
          break;
        }
      }
      if (got[i] != expect) ++wrong;
    }
    CollectiveSample& sample = samples[si];
    sample.size_bytes = config.sizes_bytes[si];
    sample.count = count;
    sample.time_s = elapsed / static_cast<double>(config.iters);
    sample.wrong = wrong;
  }
  return absl::OkStatus();
}

}  // namespace

double BusBandwidthFactor(CollectiveOp op, int64_t group_size) {
  const double k = static_cast<double>(group_size);
  switch (op) {
    case CollectiveOp::kAllReduce: return 2.0 * (k - 1) / k;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll: return (k - 1) / k;
    case CollectiveOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

absl::Status CollectiveSweepConfig::Validate() const {
  if (group_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("group_size (", group_size, ") must be >= 1"));
  }
  if (op == CollectiveOp::kSendRecv && group_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_size (", group_size, ") must be >= 2 for send_recv"));
  }
  if (dtype != DType::kF32 && dtype != DType::kF64 && backend == BackendKind::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype (", DTypeName(dtype), ") must be fp32 or fp64 on the cpu backend"));
  }
  if (warmup < 0) return absl::InvalidArgumentError(absl::StrCat("warmup (", warmup, ") must be >= 0"));
  if (iters < 1) return absl::InvalidArgumentError(absl::StrCat("iters (", iters, ") must be >= 1"));
  const int64_t unit = group_size * SizeOf(dtype);
  for (int64_t size : sizes_bytes) {
    if (size <= 0 || size % unit != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sizes_bytes (", size, ") must be a positive multiple of group_size x element size (",
          unit, ")"));
    }
  }
  if (sizes_bytes.empty()) return absl::InvalidArgumentError("sizes_bytes must not be empty");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CollectiveSample>> RunCollectiveSweep(
    const CollectiveSweepConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  const int k = static_cast<int>(config.group_size);
  if (config.backend == BackendKind::kCuda) PT_RETURN_IF_ERROR(CheckCudaDevicesForRanks(k));
  std::shared_ptr<GlooRendezvous> rendezvous = MakeInProcessRendezvous();
  static std::atomic<int> sweep_id{0};
  const std::string prefix = absl::StrCat("sweep", sweep_id.fetch_add(1));
  std::vector<std::vector<CollectiveSample>> per_rank(
      k, std::vector<CollectiveSample>(config.sizes_bytes.size()));
  const bool cuda = config.backend == BackendKind::kCuda;
  PT_RETURN_IF_ERROR(RunRankThreads(k, [&](int r) -> absl::Status {
    std::unique_ptr<Backend> be;
    if (cuda) {
      PT_ASSIGN_OR_RETURN(be, MakeCudaBackend(r, 0));
    } else {
      be = MakeCpuBackend(0, 1);
    }
    PT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                        MakeGroupCommunicator(*be, cuda, rendezvous, prefix, r, k));
    return RunRank(config, *comm, *be, per_rank[r]);
  }));
  std::vector<CollectiveSample> out = per_rank[0];
  const double factor = BusBandwidthFactor(config.op, k);
  for (size_t si = 0; si < out.size(); ++si) {
    for (int r = 1; r < k; ++r) {
      out[si].time_s = std::max(out[si].time_s, per_rank[r][si].time_s);
      out[si].wrong += per_rank[r][si].wrong;
    }
    out[si].algbw_gbps = static_cast<double>(out[si].size_bytes) / out[si].time_s / 1e9;
    out[si].busbw_gbps = out[si].algbw_gbps * factor;
  }
  return out;
}

}  // namespace paratune::kernels
