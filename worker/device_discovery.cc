// Device discovery. CPU: sysconf and /proc/meminfo. CUDA (PARATUNE_HAVE_CUDA only): the
// runtime for names and memory; NVLink peers from NVML, loaded with dlopen so that the
// worker needs neither the NVML headers at build time nor the library on CPU nodes.
#include "worker/device_discovery.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

#ifdef PARATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace paratune::worker {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

#ifdef PARATUNE_HAVE_CUDA
// The NVML subset used here, declared by hand (stable C ABI; values from nvml.h).
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlP2PCapsIndexNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kNvmlP2PStatusOk = 0;         // NVML_P2P_STATUS_OK

// NVLink peers among the CUDA ordinals in `ordinals`; empty lists when NVML is missing.
std::vector<std::vector<int>> NvlinkPeers(const std::vector<int>& ordinals) {
  std::vector<std::vector<int>> peers(ordinals.size());
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return peers;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlShutdown"));
  auto by_bus = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(
      dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto p2p = reinterpret_cast<int (*)(NvmlDevice, NvmlDevice, int, int*)>(
      dlsym(lib, "nvmlDeviceGetP2PStatus"));
  if (init == nullptr || shutdown == nullptr || by_bus == nullptr || p2p == nullptr ||
      init() != kNvmlSuccess) {
    dlclose(lib);
    return peers;
  }
  std::vector<NvmlDevice> handles(ordinals.size(), nullptr);
  for (size_t i = 0; i < ordinals.size(); ++i) {
    char bus_id[64] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinals[i]) != cudaSuccess ||
        by_bus(bus_id, &handles[i]) != kNvmlSuccess) {
      handles[i] = nullptr;
    }
  }
  for (size_t i = 0; i < ordinals.size(); ++i) {
    for (size_t j = 0; j < ordinals.size(); ++j) {
      if (i == j || handles[i] == nullptr || handles[j] == nullptr) continue;
      int status = -1;
      if (p2p(handles[i], handles[j], kNvmlP2PCapsIndexNvlink, &status) == kNvmlSuccess &&
          status == kNvmlP2PStatusOk) {
        peers[i].push_back(ordinals[j]);
      }
    }
  }
  shutdown();
  dlclose(lib);
  return peers;
}
#endif  // PARATUNE_HAVE_CUDA

absl::StatusOr<DeviceInventory> DiscoverCuda(const std::vector<int>& indices) {
#ifdef PARATUNE_HAVE_CUDA
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError("backend cuda: no CUDA device is visible");
  }
  std::vector<int> ordinals = indices;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  DeviceInventory inv;
  inv.backend = "cuda";
  for (int ordinal : ordinals) {
    if (ordinal < 0 || ordinal >= count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "devices: CUDA device ", ordinal, " does not exist (", count, " visible)"));
    }
    cudaDeviceProp prop{};
    if (cudaError_t err = cudaGetDeviceProperties(&prop, ordinal); err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaGetDeviceProperties(", ordinal,
                                              "): ", cudaGetErrorString(err)));
    }
    v1::Device device;
    device.set_index(ordinal);
    device.set_name(prop.name);
    device.set_memory_bytes(static_cast<int64_t>(prop.totalGlobalMem));
    inv.devices.push_back(device);
  }
  std::vector<std::vector<int>> peers = NvlinkPeers(ordinals);
  for (size_t i = 0; i < inv.devices.size(); ++i) {
    for (int p : peers[i]) inv.devices[i].add_nvlink_peers(p);
  }
  inv.device_kind =
      DeviceKindFromName(inv.devices[0].name(), inv.devices[0].memory_bytes());
  return inv;
#else
  (void)indices;
  return absl::FailedPreconditionError(
      "backend cuda: this paratune-worker was built without CUDA (PARATUNE_CUDA=OFF)");
#endif
}

absl::StatusOr<DeviceInventory> DiscoverCpu(const std::vector<int>& indices,
                                            int32_t cores, int64_t memory) {
  DeviceInventory inv;
  inv.backend = "cpu";
  inv.device_kind = "cpu";
  std::vector<int> slots = indices;
  if (slots.empty()) {
    for (int i = 0; i < cores; ++i) slots.push_back(i);
  }
  for (int slot : slots) {
    if (slot < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("devices: index ", slot, " must be >= 0"));
    }
    v1::Device device;
    device.set_index(slot);
    device.set_name("cpu");
    // Ranks are threads sharing host memory: each slot can address all of it.
    device.set_memory_bytes(memory);
    inv.devices.push_back(device);
  }
  return inv;
}

}  // namespace

int32_t OnlineCpuCores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int32_t>(n) : 1;
}

absl::StatusOr<int64_t> ParseMemTotalBytes(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    int64_t value = 0;
    std::string unit;
    if (!(fields >> value) || value <= 0) break;
    fields >> unit;
    if (unit.empty()) return value;
    if (Lower(unit) == "kb") return value * 1024;
    return absl::InvalidArgumentError(absl::StrCat("meminfo: unknown MemTotal unit '", unit, "'"));
  }
  return absl::InvalidArgumentError("meminfo: no valid 'MemTotal: <n> kB' line");
}

absl::StatusOr<int64_t> HostMemoryBytes() {
  std::ifstream file("/proc/meminfo");
  if (!file) return absl::UnavailableError("cannot read /proc/meminfo");
  std::stringstream text;
  text << file.rdbuf();
  return ParseMemTotalBytes(text.str());
}

int CudaDeviceCount() {
#ifdef PARATUNE_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

absl::StatusOr<bool> SelectCudaDevices(const std::vector<int>& indices) {
#ifdef PARATUNE_HAVE_CUDA
  if (indices.empty()) return false;
  const char* previous = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> visible;
  if (previous != nullptr) {
    std::stringstream in(previous);
    for (std::string item; std::getline(in, item, ',');) visible.push_back(item);
  }
  std::string mask;
  for (int index : indices) {
    std::string entry = std::to_string(index);
    if (previous != nullptr) {
      if (index < 0 || index >= static_cast<int>(visible.size())) {
        return absl::FailedPreconditionError(
            absl::StrCat("devices: CUDA device ", index, " is not in CUDA_VISIBLE_DEVICES=",
                         previous));
      }
      entry = visible[index];
    }
    absl::StrAppend(&mask, mask.empty() ? "" : ",", entry);
  }
  const std::string saved = previous != nullptr ? previous : "";
  setenv("CUDA_VISIBLE_DEVICES", mask.c_str(), 1);
  const int count = CudaDeviceCount();
  if (count == 0) {
    if (previous != nullptr) {
      setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
    } else {
      unsetenv("CUDA_VISIBLE_DEVICES");
    }
    return false;
  }
  if (count != static_cast<int>(indices.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "devices: only ", count, " of the ", indices.size(),
        " listed CUDA devices exist (CUDA_VISIBLE_DEVICES=", mask, ")"));
  }
  return true;
#else
  (void)indices;
  return false;
#endif
}

std::string DeviceKindFromName(const std::string& name, int64_t memory_bytes) {
  const std::string n = Lower(name);
  const int64_t gib = (memory_bytes + kGiB / 2) / kGiB;
  if (n.find("h100") != std::string::npos) return "h100-sxm-80gb";
  if (n.find("h200") != std::string::npos || n.find("gh200") != std::string::npos) {
    return "h200-141gb";
  }
  if (n.find("b200") != std::string::npos) return "b200-192gb";
  if (n.find("a100") != std::string::npos) return gib > 48 ? "a100-80gb" : "a100-40gb";
  std::string kind;
  for (char c : n) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      kind += c;
    } else if (!kind.empty() && kind.back() != '-') {
      kind += '-';
    }
  }
  while (!kind.empty() && kind.back() == '-') kind.pop_back();
  return kind.empty() ? "unknown-gpu" : kind;
}

absl::StatusOr<DeviceInventory> DiscoverDevices(const std::string& backend,
                                                const std::vector<int>& indices,
                                                const std::string& device_kind) {
  absl::StatusOr<int64_t> memory = HostMemoryBytes();
  if (!memory.ok()) return memory.status();
  const int32_t cores = OnlineCpuCores();
  absl::StatusOr<DeviceInventory> inv;
  if (backend == "cuda" || (backend == "auto" && CudaDeviceCount() > 0)) {
    inv = DiscoverCuda(indices);
  } else if (backend == "cpu" || backend == "auto") {
    inv = DiscoverCpu(indices, cores, *memory);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("backend (", backend, ") must be one of auto, cuda, cpu"));
  }
  if (!inv.ok()) return inv.status();
  inv->cpu_cores = cores;
  inv->memory_bytes = *memory;
  if (!device_kind.empty()) inv->device_kind = device_kind;
  return inv;
}

}  // namespace paratune::worker
