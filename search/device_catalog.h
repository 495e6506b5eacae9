// DeviceProfile catalog: peak rates, memory and interconnect of each supported device kind,
// with the documented source of every number (see device_catalog.cc).
#ifndef PARATUNE_SEARCH_DEVICE_CATALOG_H_
#define PARATUNE_SEARCH_DEVICE_CATALOG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "search/specs.h"

namespace paratune {

struct DeviceProfile {
  std::string name;                 ///< Catalog key, e.g. "h100-sxm-80gb".
  /// CUDA architecture: "sm80" (A100), "sm89" (L40S), "sm90" (Hopper), "sm100" (B200,
  /// GB200, B300, GB300), "sm120" (RTX PRO 6000); "cpu".
  std::string arch;
  double peak_fp32_tflops = 0;      ///< Dense, non-tensor-core FP32.
  double peak_tf32_tflops = 0;      ///< Dense.
  double peak_bf16_tflops = 0;      ///< Dense (FP16 equal).
  double peak_fp8_tflops = 0;       ///< Dense; 0 where FP8 tensor cores do not exist.
  /// Dense FP4 (NVFP4); 0 where FP4 tensor cores do not exist (before Blackwell).
  double peak_fp4_tflops = 0;
  /// Tensor cores read block scales (MXFP8's E8M0 per 32 elements, NVFP4's FP8 per 16)
  /// natively: Blackwell. Hopper has FP8 with per-tensor scales only.
  bool block_scaled_formats = false;
  double memory_bytes = 0;          ///< HBM capacity.
  double memory_bandwidth = 0;      ///< HBM bytes/s.
  double nvlink_bandwidth = 0;      ///< Intra-node bus bandwidth per GPU, bytes/s.
  double network_bandwidth = 0;     ///< Inter-node bandwidth per GPU, bytes/s.
  /// GPUs joined by NVLink (NVL72 racks: 72); 0 = one node (cluster.gpus_per_node).
  int nvlink_domain = 0;
  double nvlink_latency_s = 0;      ///< Per collective step inside a node.
  double network_latency_s = 0;     ///< Per collective step across nodes.
  double kernel_launch_s = 0;       ///< Fixed cost per kernel.
  // GEMM and memory-traffic efficiency (see gemm_efficiency.h): measured properties of the
  // device and its libraries (cuBLAS, NCCL), the same for every model.
  int num_sms = 1;                  ///< Streaming multiprocessors (wave quantisation).
  int gemm_tile_m = 128;            ///< Output tile of the large-GEMM kernels (rows).
  int gemm_tile_n = 128;            ///< Output tile (columns).
  double gemm_k_overhead = 0;       ///< Per-tile prologue/epilogue cost, in K elements.
  double gemm_efficiency = 0;       ///< Large, well-shaped BF16 GEMM: fraction of peak.
  double fp8_gemm_efficiency = 0;   ///< Large FP8 GEMM: fraction of the FP8 peak.
  double attention_efficiency = 0;  ///< Fused/flash attention core: fraction of peak.
  double memory_efficiency = 0;     ///< Streaming kernels: fraction of HBM bandwidth.
  /// Compute lost per second of communication hidden behind it: NCCL kernels occupy SMs
  /// and HBM bandwidth while they overlap a GEMM.
  double comm_overlap_slowdown = 0;
  /// Ranks allocate host memory through ParaTune's tracking allocator (the "cpu" device):
  /// no CUDA context, cuBLAS/NCCL workspaces or caching allocator, so no framework
  /// workspace or fragmentation term (memory_model.h FrameworkMemoryFor).
  bool host_memory = false;
  // ---- The host, per GPU (offload) ----
  double host_link_bandwidth = 0;    ///< GPU-host link, bytes/s each way (PCIe, NVLink-C2C).
  double host_memory_per_gpu = 0;    ///< Host DRAM per GPU, bytes.
  double host_memory_bandwidth = 0;  ///< Host DRAM bandwidth per GPU, bytes/s.
  std::string source;               ///< Where the numbers come from.

  /// Dense peak for a GEMM in `precision`: mxfp8 runs at the FP8 rate, nvfp4 at the FP4
  /// rate; a format the device lacks falls back to the next wider one it has (down to BF16).
  double PeakFlops(Precision precision) const;
  /// CUDA compute capability 9.0 or later (arch "sm90", "sm100", "sm120"; not "sm89").
  bool HopperOrLater() const;
};

/// InvalidArgument naming the device and the feature when `device` cannot train in
/// `precision`: fp8 needs FP8 tensor cores (Ada, Hopper and later; peak_fp8_tflops > 0),
/// mxfp8 block-scaled FP8 (Blackwell), nvfp4 block-scaled FP4 (Blackwell).
absl::Status CheckDeviceSupports(const DeviceProfile& device, Precision precision);

/// NotFound listing the known kinds for an unknown one.
absl::StatusOr<DeviceProfile> FindDevice(const std::string& name);
std::vector<std::string> DeviceNames();
/// The catalog profile with the cluster's overrides (bandwidths, memory) applied.
absl::StatusOr<DeviceProfile> DeviceForCluster(const ClusterSpec& cluster);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_DEVICE_CATALOG_H_
