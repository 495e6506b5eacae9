// Time of one GEMM on a DeviceProfile: FLOPs at peak times an efficiency that depends on
// the shape (tile quantisation, wave quantisation over the SMs, the per-tile K overhead),
// bounded below by the memory traffic of its operands.
#ifndef PARATUNE_SEARCH_GEMM_EFFICIENCY_H_
#define PARATUNE_SEARCH_GEMM_EFFICIENCY_H_

#include "search/device_catalog.h"
#include "search/specs.h"

namespace paratune {

/// Fraction of the `precision` peak reached by a [m x k] x [k x n] GEMM repeated `batch`
/// times (a batched GEMM). The device's large-GEMM efficiency times the best, over the tile
/// shapes cuBLAS chooses between (256x128, 128x128, 128x64, 64x64, smaller tiles running at
/// a lower per-tile efficiency), of tile utilisation x wave utilisation, times
/// k / (k + gemm_k_overhead).
double GemmEfficiency(const DeviceProfile& device, double m, double n, double k, double batch,
                      Precision precision);

/// Seconds for the GEMM: max(compute, operand traffic) plus one kernel launch.
/// `operand_bytes` is the element size of A, B and C (2 for BF16, 1 for FP8 inputs).
double GemmSeconds(const DeviceProfile& device, double m, double n, double k, double batch,
                   Precision precision);

/// Seconds for a memory-bound kernel moving `bytes` (reads plus writes).
double StreamSeconds(const DeviceProfile& device, double bytes);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_GEMM_EFFICIENCY_H_
