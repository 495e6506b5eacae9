// The DeviceProfile catalog. Sources (peak rates are dense, i.e. without 2:4 sparsity):
//  - A100: NVIDIA A100 Tensor Core GPU datasheet (2021) and "NVIDIA A100 Tensor Core GPU
//    Architecture" whitepaper: FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s; HBM2 1,555 GB/s
//    (40GB), HBM2e 2,039 GB/s (80GB SXM); 108 SMs; NVLink 3: 600 GB/s total, 300 GB/s per
//    direction.
//  - H100 SXM5: NVIDIA H100 datasheet / Hopper whitepaper: FP32 67, TF32 494.7, BF16 989.4,
//    FP8 1978.9 TFLOP/s; HBM3 3.35 TB/s; 132 SMs; NVLink 4: 900 GB/s total (450 per dir).
//  - H200: NVIDIA H200 datasheet: H100 compute, 141 GB HBM3e at 4.8 TB/s.
//  - B200: NVIDIA DGX B200 / HGX B200 datasheets: BF16 2.25, FP8 4.5 PFLOP/s dense, TF32 1.1
//    PFLOP/s, FP32 75 TFLOP/s; 192 GB HBM3e at 8 TB/s; 148 SMs; NVLink 5: 1.8 TB/s total.
//  - Memory capacity is what nvidia-smi reports as total (81,920 MiB for A100-80GB).
//  - Bus bandwidths are achievable NCCL bus bandwidths (nccl-tests all_reduce_perf, large
//    messages) rather than link rates: DGX A100 ~230 GB/s inside a node (NVIDIA nccl-tests
//    results for DGX A100), DGX H100 ~360 GB/s without NVLS. Across nodes each GPU has its
//    own HCA: 200 Gb/s HDR on DGX A100 (25 GB/s, ~22 GB/s achieved), 400 Gb/s NDR on
//    DGX H100/H200/B200 (50 GB/s, ~45 GB/s achieved).
//  - Latencies per ring step: NCCL's LL/Simple protocol tables (~1 us NVLink hop, ~4 us
//    InfiniBand hop); kernel launch and inter-kernel gap ~4 us (A100) / ~3 us (Hopper).
//  - GEMM efficiencies: large cuBLAS FP16/BF16 GEMMs reach ~80% of peak on A100 in
//    isolation (~250 of 312 TFLOP/s, NVIDIA's cuBLAS performance notes); sustained inside
//    training (power and clock limits, memory-bandwidth contention with the other kernels)
//    ~73.5% (~230 TFLOP/s). This one device constant was calibrated against all A100 rows
//    of calibration_runs.json together (bench/model/model_accuracy), never per model. H100
//    SXM cannot hold its boost clock under the 700 W limit during dense GEMMs: sustained
//    BF16 GEMMs run at ~650 TFLOP/s (65%), FP8 at ~1350 (68% of the FP8 peak) in published
//    cuBLASLt/Transformer Engine measurements. Tile 256x128 is the CUTLASS/cuBLAS default
//    for large half-precision GEMMs on Ampere/Hopper. Streaming kernels reach ~80% of HBM
//    bandwidth (STREAM-like copy on A100/H100). Flash attention forward: ~60% of peak on
//    A100 (FlashAttention-2 paper), ~40% on H100 with FlashAttention-2-class kernels
//    (the attention core without flash runs as batched GEMMs instead).
//  - Overlap: NCCL's ring kernels run on 8-16 of the SMs (channels) and share HBM
//    bandwidth, so a GEMM overlapped with a collective loses ~15% of its speed for the
//    collective's duration (NCCL docs on NCCL_MIN/MAX_NCHANNELS; Megatron-Core's
//    tp-comm-overlap notes on SM partitioning).
//  - cpu: order-of-magnitude defaults for a small AVX2 host (2 cores, OpenBLAS); a worker
//    measures its own machine and replaces them.
#include "search/device_catalog.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace paratune {
namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

DeviceProfile A100(const char* name, double memory_gib, double hbm_gbps) {
  DeviceProfile d;
  d.name = name;
  d.arch = "sm80";
  d.peak_fp32_tflops = 19.5;
  d.peak_tf32_tflops = 156;
  d.peak_bf16_tflops = 312;
  d.peak_fp8_tflops = 0;
  d.memory_bytes = memory_gib * kGiB;
  d.memory_bandwidth = hbm_gbps * kGiga;
  d.nvlink_bandwidth = 230 * kGiga;
  d.network_bandwidth = 22 * kGiga;
  d.nvlink_latency_s = 1e-6;
  d.network_latency_s = 4e-6;
  d.kernel_launch_s = 4e-6;
  d.num_sms = 108;
  d.gemm_tile_m = 256;
  d.gemm_tile_n = 128;
  d.gemm_k_overhead = 64;
  d.gemm_efficiency = 0.735;
  d.fp8_gemm_efficiency = 0;
  d.attention_efficiency = 0.60;
  d.memory_efficiency = 0.80;
  d.comm_overlap_slowdown = 0.15;
  d.source =
      "NVIDIA A100 datasheet and Ampere whitepaper (peaks, HBM, NVLink 3); nccl-tests on "
      "DGX A100 (bus bandwidth); HDR 200 Gb/s per GPU";
  return d;
}

DeviceProfile Hopper(const char* name, double memory_gib, double hbm_tbps) {
  DeviceProfile d;
  d.name = name;
  d.arch = "sm90";
  d.peak_fp32_tflops = 67;
  d.peak_tf32_tflops = 494.7;
  d.peak_bf16_tflops = 989.4;
  d.peak_fp8_tflops = 1978.9;
  d.memory_bytes = memory_gib * kGiB;
  d.memory_bandwidth = hbm_tbps * kTera;
  d.nvlink_bandwidth = 360 * kGiga;
  d.network_bandwidth = 45 * kGiga;
  d.nvlink_latency_s = 1e-6;
  d.network_latency_s = 4e-6;
  d.kernel_launch_s = 3e-6;
  d.num_sms = 132;
  d.gemm_tile_m = 256;
  d.gemm_tile_n = 128;
  d.gemm_k_overhead = 256;
  d.gemm_efficiency = 0.65;
  d.fp8_gemm_efficiency = 0.68;
  d.attention_efficiency = 0.40;
  d.memory_efficiency = 0.80;
  d.comm_overlap_slowdown = 0.15;
  d.source =
      "NVIDIA H100/H200 datasheets and Hopper whitepaper (peaks, HBM, NVLink 4); "
      "nccl-tests on DGX H100 (bus bandwidth); NDR 400 Gb/s per GPU";
  return d;
}

// The GEMM efficiency of B200 and GB200 against Hopper's: the Megatron-Bridge 25.11
// performance table (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md; Llama 3 8B on
// 8 and Llama 3.1 405B on 128 or 256 GPUs in FP8, bench/model/data/mbridge_25.11_perf.json)
// measures B200 and GB200 about 20 % below the throughput Hopper's efficiencies predict for
// them (+12.0 ... +28.3 %, median +20.1 % and +20.6 %), while the same table's H100 and
// GB300 rows come out +2.5 % and +1.8 % (median): 0.80. GB300 and B300 keep Hopper's.
// Sustained clocks under the power limit (B200 1,000 W, GB200 1,200 W per GPU, GB300
// 1,400 W) are the likely cause.
constexpr double kB200GemmEfficiencyRelative = 0.80;

// Blackwell (B200 and later): Hopper's efficiencies and latencies (B200 and GB200 then
// scale their GEMM efficiencies, above), B200's dense peaks, NVLink 5 (1.8 TB/s total per GPU; bus
// bandwidth at the same 80 % of the unidirectional 900 GB/s that nccl-tests reach on
// Hopper), 148 SMs, block-scaled MXFP8/NVFP4 tensor cores.
DeviceProfile Blackwell(const char* name, double memory_gib, double hbm_tbps) {
  DeviceProfile d = Hopper(name, memory_gib, hbm_tbps);
  d.arch = "sm100";
  d.peak_fp32_tflops = 75;
  d.peak_tf32_tflops = 1100;
  d.peak_bf16_tflops = 2250;
  d.peak_fp8_tflops = 4500;
  d.peak_fp4_tflops = 9000;
  d.block_scaled_formats = true;
  d.nvlink_bandwidth = 720 * kGiga;
  d.num_sms = 148;
  return d;
}

// The host each GPU kind is sold in, per GPU: the GPU-host link each way, DRAM and DRAM
// bandwidth (theoretical channel rates; the offload model applies the achieved fractions).
//  - DGX A100: PCIe Gen4 x16 (32 GB/s); 2 TB (1 TB with the 40 GB GPUs) over 8 GPUs; two
//    EPYC 7742 with 8 channels of DDR4-3200 each (409.6 GB/s).
//  - DGX H100 / HGX H200 / H800: PCIe Gen5 x16 (64 GB/s); 2 TB over 8; two Xeon 8480C with
//    8 channels of DDR5-4800 each (614.4 GB/s).
//  - DGX B200 / HGX B300: PCIe Gen5 x16; 2 TB over 8; two Xeon 8570 with 8 channels of
//    DDR5-5600 (716.8 GB/s).
//  - GH200: NVLink-C2C, 900 GB/s both ways (450 each way); 480 GB LPDDR5X at 512 GB/s.
//  - GB200 / GB300: one Grace per two GPUs over NVLink-C2C (900 GB/s both ways, 225 each
//    way per GPU); 480 GB LPDDR5X at 512 GB/s per Grace.
//  - L40S / RTX PRO 6000 servers: PCIe Gen4 / Gen5 x16; 8 GPUs with two 12-channel DDR5-4800
//    EPYC 9004 (921.6 GB/s) and 1.5 TB.
//  - cpu: the device is the host (no offload).
void SetHosts(std::vector<DeviceProfile>& devices) {
  struct Host {
    const char* name;
    double link_gbps, memory_gib, bandwidth_gbps;
  };
  static constexpr Host kHosts[] = {
      {"a100-40gb", 32, 1024.0 / 8, 409.6 / 8},      {"a100-80gb", 32, 2048.0 / 8, 409.6 / 8},
      {"h100-sxm-80gb", 64, 2048.0 / 8, 614.4 / 8},  {"h200-141gb", 64, 2048.0 / 8, 614.4 / 8},
      {"h800-80gb", 64, 2048.0 / 8, 614.4 / 8},      {"b200-192gb", 64, 2048.0 / 8, 716.8 / 8},
      {"b300", 64, 2048.0 / 8, 716.8 / 8},           {"gh200-96gb", 450, 480e9 / kGiB, 512},
      {"gb200", 225, 480e9 / kGiB / 2, 512.0 / 2},   {"gb300", 225, 480e9 / kGiB / 2, 512.0 / 2},
      {"l40s-48gb", 32, 1536.0 / 8, 921.6 / 8},      {"rtx-pro-6000-96gb", 64, 1536.0 / 8, 921.6 / 8},
  };
  for (DeviceProfile& d : devices) {
    for (const Host& h : kHosts) {
      if (d.name != h.name) continue;
      d.host_link_bandwidth = h.link_gbps * kGiga;
      d.host_memory_per_gpu = h.memory_gib * kGiB;
      d.host_memory_bandwidth = h.bandwidth_gbps * kGiga;
    }
  }
}

std::vector<DeviceProfile> Catalog() {
  std::vector<DeviceProfile> out;
  out.push_back(A100("a100-40gb", 40, 1555));
  out.push_back(A100("a100-80gb", 80, 2039));
  out.push_back(Hopper("h100-sxm-80gb", 81559.0 / 1024.0, 3.35));
  out.push_back(Hopper("h200-141gb", 143771.0 / 1024.0, 4.8));
  {
    DeviceProfile d = Blackwell("b200-192gb", 192e9 / kGiB, 8.0);
    d.source =
        "NVIDIA DGX B200 / HGX B200 datasheets (dense peaks FP32 75, TF32 1,100, BF16 2,250, "
        "FP8 4,500, FP4 9,000 TFLOP/s; 192 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s total); NDR "
        "400 Gb/s per GPU; GEMM efficiency 0.80 of Hopper's (Megatron-Bridge 25.11 "
        "performance table), other efficiencies Hopper's";
    d.gemm_efficiency *= kB200GemmEfficiencyRelative;
    d.fp8_gemm_efficiency *= kB200GemmEfficiencyRelative;
    out.push_back(d);
  }
  {
    // GB200 NVL72 (NVIDIA GB200 NVL72 datasheet): per GPU a seventy-second of the rack's
    // 360 PFLOP/s BF16, 720 FP8 and 1,440 FP4 with sparsity, so 2,500 / 5,000 / 10,000
    // TFLOP/s dense; 13.4 TB HBM3e over 72 GPUs (186 GB) at 8 TB/s; NVLink 5 at 1.8 TB/s
    // per GPU across the whole 72-GPU domain; ConnectX-7 400 Gb/s per GPU beyond the rack.
    DeviceProfile d = Blackwell("gb200", 186e9 / kGiB, 8.0);
    d.peak_fp32_tflops = 80;
    d.peak_tf32_tflops = 1250;
    d.peak_bf16_tflops = 2500;
    d.peak_fp8_tflops = 5000;
    d.peak_fp4_tflops = 10000;
    d.nvlink_domain = 72;
    d.source =
        "NVIDIA GB200 NVL72 datasheet (rack peaks / 72, dense: BF16 2,500, FP8 5,000, FP4 "
        "10,000 TFLOP/s; 186 GB HBM3e at 8 TB/s; NVLink 5 1.8 TB/s in a 72-GPU domain); "
        "ConnectX-7 400 Gb/s per GPU; GEMM efficiency 0.80 of Hopper's (Megatron-Bridge "
        "25.11 performance table), other efficiencies Hopper's";
    d.gemm_efficiency *= kB200GemmEfficiencyRelative;
    d.fp8_gemm_efficiency *= kB200GemmEfficiencyRelative;
    out.push_back(d);
  }
  {
    // HGX B300 (Blackwell Ultra; NVIDIA HGX B300 datasheet): per GPU BF16 2,250, FP8 4,500
    // and FP4 13,500 TFLOP/s dense (108 PFLOP/s FP4 dense over 8 GPUs), 2.3 TB HBM3e over 8
    // GPUs (288 GB) at 8 TB/s, NVLink 5 1.8 TB/s, ConnectX-8 800 Gb/s per GPU.
    DeviceProfile d = Blackwell("b300", 288e9 / kGiB, 8.0);
    d.peak_fp4_tflops = 13500;
    d.network_bandwidth = 90 * kGiga;
    d.source =
        "NVIDIA HGX B300 datasheet (dense BF16 2,250, FP8 4,500, FP4 13,500 TFLOP/s per GPU; "
        "288 GB HBM3e at 8 TB/s; NVLink 5 1.8 TB/s); ConnectX-8 800 Gb/s per GPU; "
        "efficiencies assumed equal to Hopper";
    out.push_back(d);
  }
  {
    // GB300 NVL72 (NVIDIA GB300 NVL72 datasheet): the rack's 1,080 PFLOP/s dense FP4, 720
    // FP8 and 360 BF16 with sparsity over 72 GPUs: 15,000 / 5,000 / 2,500 TFLOP/s dense per
    // GPU; 20.7 TB HBM3e (288 GB per GPU) at 8 TB/s; a 72-GPU NVLink 5 domain; ConnectX-8
    // SuperNIC 800 Gb/s per GPU.
    DeviceProfile d = Blackwell("gb300", 288e9 / kGiB, 8.0);
    d.peak_fp32_tflops = 80;
    d.peak_tf32_tflops = 1250;
    d.peak_bf16_tflops = 2500;
    d.peak_fp8_tflops = 5000;
    d.peak_fp4_tflops = 15000;
    d.nvlink_domain = 72;
    d.network_bandwidth = 90 * kGiga;
    d.source =
        "NVIDIA GB300 NVL72 datasheet (rack peaks / 72, dense: BF16 2,500, FP8 5,000, FP4 "
        "15,000 TFLOP/s; 288 GB HBM3e at 8 TB/s; NVLink 5 in a 72-GPU domain); ConnectX-8 "
        "800 Gb/s per GPU; efficiencies Hopper's (the Megatron-Bridge 25.11 performance table's "
        "GB300 rows match them)";
    out.push_back(d);
  }
  {
    // H800 SXM: the H100 SXM's compute and HBM with NVLink cut to 400 GB/s total per GPU
    // (NVIDIA H800 product brief), 4/9 of the H100's 900 GB/s, so 4/9 of its measured bus
    // bandwidth (360 GB/s).
    DeviceProfile d = Hopper("h800-80gb", 81559.0 / 1024.0, 3.35);
    d.nvlink_bandwidth = 160 * kGiga;
    d.source =
        "NVIDIA H800 SXM product brief (H100 SXM compute and HBM, NVLink 400 GB/s total per "
        "GPU: bus bandwidth 4/9 of the DGX H100's); NDR 400 Gb/s per GPU";
    out.push_back(d);
  }
  {
    // GH200 Grace Hopper superchip, 96 GB HBM3 version: the H100 SXM tensor cores with
    // 4.0 TB/s (NVIDIA GH200 Grace Hopper Superchip datasheet, 2023); one GPU per module,
    // modules joined by the NVLink Switch System or by InfiniBand (NDR 400 Gb/s).
    DeviceProfile d = Hopper("gh200-96gb", 96e9 / kGiB, 4.0);
    d.source =
        "NVIDIA GH200 Grace Hopper Superchip datasheet (H100 tensor cores, 96 GB HBM3 at "
        "4 TB/s); efficiencies as H100 SXM; NDR 400 Gb/s per GPU";
    out.push_back(d);
  }
  {
    // L40S (Ada, PCIe): NVIDIA L40S datasheet: FP32 91.6, TF32 183, BF16/FP16 362, FP8 733
    // TFLOP/s dense (the datasheet's 733/1466 are with sparsity for BF16/FP8), 48 GB GDDR6
    // at 864 GB/s, 142 SMs, PCIe Gen4 x16 (64 GB/s bidirectional), no NVLink: GPUs in one
    // server all-reduce over PCIe at ~20 GB/s bus bandwidth (nccl-tests on PCIe Gen4
    // servers), ~10 us per step.
    DeviceProfile d = Hopper("l40s-48gb", 48e9 / kGiB, 0.864);
    d.arch = "sm89";
    d.peak_fp32_tflops = 91.6;
    d.peak_tf32_tflops = 183;
    d.peak_bf16_tflops = 362;
    d.peak_fp8_tflops = 733;
    d.num_sms = 142;
    d.nvlink_bandwidth = 20 * kGiga;
    d.nvlink_latency_s = 10e-6;
    d.network_bandwidth = 12.5 * kGiga;
    d.kernel_launch_s = 4e-6;
    d.gemm_efficiency = 0.70;
    d.fp8_gemm_efficiency = 0.70;
    d.source =
        "NVIDIA L40S datasheet (dense peaks, 48 GB GDDR6 at 864 GB/s, PCIe Gen4, no "
        "NVLink); nccl-tests bus bandwidth over PCIe Gen4; 100 Gb/s Ethernet per GPU; GEMM "
        "efficiency assumed 70 % (clocks hold under the 350 W limit)";
    out.push_back(d);
  }
  {
    // RTX PRO 6000 Blackwell Server Edition (GB202, PCIe): NVIDIA's GTC 2025 announcement
    // and product page: 188 SMs, 125 TFLOP/s FP32, 4,000 FP4 TOPS with sparsity (so 2,000
    // FP4, 1,000 FP8 and 500 BF16 TFLOP/s dense), 96 GB GDDR7 on a 512-bit bus at 28 Gbps
    // (1,792 GB/s), PCIe Gen5 x16 without NVLink: all-reduce over PCIe at ~40 GB/s bus
    // bandwidth.
    DeviceProfile d = Hopper("rtx-pro-6000-96gb", 96e9 / kGiB, 1.792);
    d.arch = "sm120";
    d.peak_fp32_tflops = 125;
    d.peak_tf32_tflops = 250;
    d.peak_bf16_tflops = 500;
    d.peak_fp8_tflops = 1000;
    d.peak_fp4_tflops = 2000;
    d.block_scaled_formats = true;
    d.num_sms = 188;
    d.nvlink_bandwidth = 40 * kGiga;
    d.nvlink_latency_s = 8e-6;
    d.network_bandwidth = 50 * kGiga;
    d.kernel_launch_s = 3e-6;
    d.gemm_efficiency = 0.70;
    d.fp8_gemm_efficiency = 0.70;
    d.source =
        "NVIDIA RTX PRO 6000 Blackwell announcement (GTC 2025): 188 SMs, FP4 4 POPS sparse, "
        "96 GB GDDR7 at 1.79 TB/s, PCIe Gen5, no NVLink; GEMM efficiency assumed 70 %";
    out.push_back(d);
  }
  {
    DeviceProfile d;
    d.name = "cpu";
    d.arch = "cpu";
    d.host_memory = true;
    d.peak_fp32_tflops = 0.1;
    d.peak_tf32_tflops = 0.1;
    d.peak_bf16_tflops = 0.1;
    d.memory_bytes = 16 * kGiB;
    d.memory_bandwidth = 20 * kGiga;
    d.nvlink_bandwidth = 5 * kGiga;  // Shared-memory Gloo between ranks on one host.
    d.network_bandwidth = 1 * kGiga;
    d.nvlink_latency_s = 20e-6;
    d.network_latency_s = 50e-6;
    d.kernel_launch_s = 1e-6;
    d.num_sms = 2;
    d.gemm_tile_m = 64;
    d.gemm_tile_n = 64;
    d.gemm_k_overhead = 16;
    d.gemm_efficiency = 0.8;
    d.attention_efficiency = 0.3;
    d.memory_efficiency = 0.7;
    d.source =
        "order-of-magnitude defaults for a 2-core AVX2 host with OpenBLAS; replaced by a "
        "worker's measurements";
    out.push_back(d);
  }
  SetHosts(out);
  return out;
}

const std::vector<DeviceProfile>& CatalogRef() {
  static const std::vector<DeviceProfile>* catalog = new std::vector<DeviceProfile>(Catalog());
  return *catalog;
}

}  // namespace

double DeviceProfile::PeakFlops(Precision precision) const {
  const double fp8 = peak_fp8_tflops > 0 ? peak_fp8_tflops : peak_bf16_tflops;
  switch (precision) {
    case Precision::kFp32:
      return peak_fp32_tflops * kTera;
    case Precision::kBf16:
    case Precision::kFp16:
      return peak_bf16_tflops * kTera;
    case Precision::kFp8:
      return fp8 * kTera;
    case Precision::kMxfp8:
      return (block_scaled_formats ? fp8 : peak_bf16_tflops) * kTera;
    case Precision::kNvfp4:
      return (peak_fp4_tflops > 0 && block_scaled_formats ? peak_fp4_tflops : fp8) * kTera;
  }
  return peak_bf16_tflops * kTera;
}

bool DeviceProfile::HopperOrLater() const {
  // "sm" and two or more digits: sm90, sm100, sm120 (not sm89, not "cpu").
  if (arch.size() < 4 || arch[0] != 's' || arch[1] != 'm') return false;
  int capability = 0;
  for (size_t i = 2; i < arch.size(); ++i) {
    if (arch[i] < '0' || arch[i] > '9') return false;
    capability = capability * 10 + (arch[i] - '0');
  }
  return capability >= 90;
}

absl::Status CheckDeviceSupports(const DeviceProfile& device, Precision precision) {
  struct Need {
    bool (*has)(const DeviceProfile&);
    const char* what;
  };
  Need need;
  switch (precision) {
    case Precision::kFp8:
      need = {[](const DeviceProfile& d) { return d.peak_fp8_tflops > 0; },
              "FP8 tensor cores"};
      break;
    case Precision::kMxfp8:
      need = {[](const DeviceProfile& d) {
                return d.peak_fp8_tflops > 0 && d.block_scaled_formats;
              },
              "block-scaled (MX) FP8 tensor cores"};
      break;
    case Precision::kNvfp4:
      need = {[](const DeviceProfile& d) {
                return d.peak_fp4_tflops > 0 && d.block_scaled_formats;
              },
              "block-scaled FP4 tensor cores"};
      break;
    default:
      return absl::OkStatus();
  }
  if (need.has(device)) return absl::OkStatus();
  std::vector<std::string> with;
  for (const DeviceProfile& d : CatalogRef()) {
    if (need.has(d)) with.push_back(d.name);
  }
  std::sort(with.begin(), with.end());
  return absl::InvalidArgumentError(absl::StrCat(
      "training.precision ", ToString(precision), " is not supported by cluster.gpu ",
      device.name, ": the device has no ", need.what, " (devices with them: ",
      absl::StrJoin(with, ", "), "); use bf16 or fp16"));
}

absl::StatusOr<DeviceProfile> FindDevice(const std::string& name) {
  for (const DeviceProfile& d : CatalogRef()) {
    if (d.name == name) return d;
  }
  return absl::NotFoundError(absl::StrFormat("unknown device kind \"%s\"; known: %s", name,
                                             absl::StrJoin(DeviceNames(), ", ")));
}

std::vector<std::string> DeviceNames() {
  std::vector<std::string> names;
  for (const DeviceProfile& d : CatalogRef()) names.push_back(d.name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<DeviceProfile> DeviceForCluster(const ClusterSpec& cluster) {
  absl::StatusOr<DeviceProfile> device = FindDevice(cluster.gpu);
  if (!device.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster.gpu: %s", device.status().message()));
  }
  if (cluster.nvlink_bandwidth_gbps > 0) {
    device->nvlink_bandwidth = cluster.nvlink_bandwidth_gbps * kGiga;
  }
  if (cluster.network_bandwidth_gbps > 0) {
    device->network_bandwidth = cluster.network_bandwidth_gbps * kGiga;
  }
  if (cluster.memory_gib > 0) device->memory_bytes = cluster.memory_gib * kGiB;
  if (cluster.host_memory_gib > 0) device->host_memory_per_gpu = cluster.host_memory_gib * kGiB;
  if (cluster.host_link_bandwidth_gbps > 0) {
    device->host_link_bandwidth = cluster.host_link_bandwidth_gbps * kGiga;
  }
  if (cluster.host_memory_bandwidth_gbps > 0) {
    device->host_memory_bandwidth = cluster.host_memory_bandwidth_gbps * kGiga;
  }
  return device;
}

}  // namespace paratune
