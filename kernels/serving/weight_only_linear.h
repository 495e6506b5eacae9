// Weight-only quantized linear layer (y = x·Ŵᵀ, W stored [out, in]): unquantized in the
// layer's dtype (fp32 on the CPU; fp32, bf16 or fp16 on CUDA, through the backend's GEMM),
// or, on the CPU, int8 with one scale per output row or int4 (two per byte) with one scale
// per group of inputs, as TensorRT-LLM's and vLLM's weight-only GEMMs, activations and
// accumulation fp32. The quantized GEMM dequantizes a tile of output rows at a time into
// fp32 and multiplies it with OpenBLAS, so the weight bytes read from memory are the
// quantized ones (what makes weight-only quantization pay in memory-bound decode steps).
// Thread-safety: Forward is const and may run concurrently; one rank owns the layer.
#ifndef PARATUNE_KERNELS_SERVING_WEIGHT_ONLY_LINEAR_H_
#define PARATUNE_KERNELS_SERVING_WEIGHT_ONLY_LINEAR_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/serving/serving_config.h"
#include "kernels/tensor.h"

namespace paratune::kernels::serving {

/// Fills `dst` ([rows, cols] in its float dtype, on `backend`) with value(r, c): written
/// in place on a host fp32 tensor, else generated on the host's cores (`value` must be
/// safe to call concurrently), staged in fp32 about 16M values at a time and converted on
/// the backend.
absl::Status FillRows(Backend& backend, const Tensor& dst, int64_t rows, int64_t cols,
                      const std::function<float(int64_t, int64_t)>& value);

class WeightOnlyLinear {
 public:
  /// A [out, in] weight whose element (r, c) is `value(r, c)`, quantized as `quant`
  /// (int4: `group` inputs per scale), or stored in `dtype` when not. Storage comes from
  /// `backend` (tag kWeights); the quantized formats need the CPU backend and fp32.
  static absl::StatusOr<WeightOnlyLinear> Create(
      Backend& backend, int64_t out, int64_t in,
      const std::function<float(int64_t, int64_t)>& value, WeightQuant quant, int64_t group,
      DType dtype = DType::kF32);

  /// y[rows, out] = x[rows, in]·Ŵᵀ in the layer's dtype on the backend it was created on
  /// (backend memory, row-major, ld in / out).
  absl::Status Forward(const void* x, int64_t rows, void* y, int threads) const;
  /// The same on host fp32 buffers (a CPU-backend layer).
  void Forward(const float* x, int64_t rows, float* y, int threads) const;
  /// Ŵ, the weight the GEMM multiplies with, [out, in] fp32 (a CPU-backend layer).
  std::vector<float> Dequantized() const;
  /// The scale of element (r, c): |w − ŵ| ≤ scale/2 for every element (round to nearest).
  float ScaleOf(int64_t r, int64_t c) const;
  /// Bytes of weights and scales.
  int64_t bytes() const;
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  WeightQuant quant() const { return quant_; }

 private:
  /// Writes rows [r0, r1) of Ŵ into buf ([r1 − r0, in]).
  void DequantizeRows(int64_t r0, int64_t r1, float* buf) const;

  Backend* backend_ = nullptr;
  DType dtype_ = DType::kF32;
  int64_t out_ = 0, in_ = 0, group_ = 0;
  WeightQuant quant_ = WeightQuant::kNone;
  Tensor values_;  ///< dtype [out, in], int8 [out, in] (as u8) or packed int4 [out, in/2].
  Tensor scales_;  ///< fp32 [out] (int8) or [out, in/group] (int4).
};

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_WEIGHT_ONLY_LINEAR_H_
