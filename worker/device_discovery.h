// What this node can run: backend, device kind, devices (memory, NVLink peers), CPU
// cores and host memory. CUDA discovery is compiled only with PARATUNE_HAVE_CUDA.
#ifndef PARATUNE_WORKER_DEVICE_DISCOVERY_H_
#define PARATUNE_WORKER_DEVICE_DISCOVERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "paratune/v1/service.pb.h"

namespace paratune::worker {

/// The devices a worker offers. `devices.size()` is the most ranks one task may use.
struct DeviceInventory {
  std::string backend;      ///< "cpu" | "cuda".
  std::string device_kind;  ///< Catalog kind, e.g. "h100-sxm-80gb" or "cpu".
  std::vector<v1::Device> devices;
  int32_t cpu_cores = 0;     ///< Online cores (sysconf).
  int64_t memory_bytes = 0;  ///< Host memory (MemTotal of /proc/meminfo).
};

/// Online CPU cores, at least 1.
int32_t OnlineCpuCores();

/// MemTotal from a /proc/meminfo-formatted text, in bytes. InvalidArgument when absent.
absl::StatusOr<int64_t> ParseMemTotalBytes(const std::string& meminfo);

/// Host memory in bytes from /proc/meminfo.
absl::StatusOr<int64_t> HostMemoryBytes();

/// Number of CUDA devices; 0 when built without CUDA or when no device/driver exists.
int CudaDeviceCount();

/// Catalog kind for a CUDA device name and memory size ("NVIDIA H100 80GB HBM3" →
/// "h100-sxm-80gb"); unknown devices get their name lower-cased with '-' separators.
std::string DeviceKindFromName(const std::string& name, int64_t memory_bytes);

/// Process-wide device selection for the paratune-worker binary (not for embedders: it
/// changes the environment). kernels/ runs rank r on CUDA device r, so `--devices 4-7`
/// must become CUDA_VISIBLE_DEVICES (composed with an existing one). Call before any other
/// CUDA call. Returns true when CUDA devices were selected this way (the caller then
/// discovers all visible devices), false when there is no CUDA device (the indices stay
/// CPU rank slots; the environment is restored); FailedPrecondition naming an index that
/// does not exist.
absl::StatusOr<bool> SelectCudaDevices(const std::vector<int>& indices);

/// Discovers the devices of `backend` ("auto" | "cuda" | "cpu"), keeping only `indices`
/// when not empty (FailedPrecondition naming an index that does not exist), and announces
/// `device_kind` when not empty. On CPU every index is one rank slot (a thread); with no
/// indices there is one slot per online core.
absl::StatusOr<DeviceInventory> DiscoverDevices(const std::string& backend,
                                                const std::vector<int>& indices,
                                                const std::string& device_kind);

}  // namespace paratune::worker

#endif  // PARATUNE_WORKER_DEVICE_DISCOVERY_H_
