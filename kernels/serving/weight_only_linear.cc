#include "kernels/serving/weight_only_linear.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

// Output rows dequantized per GEMM: 64 rows of a 4096-wide input are 1 MiB of fp32,
// small enough to stay in L2 between the dequantization and the multiply.
constexpr int64_t kTileRows = 64;

float ScaleFor(float absmax, float qmax) { return absmax > 0 ? absmax / qmax : 1.0f; }

}  // namespace

absl::Status FillRows(Backend& backend, const Tensor& dst, int64_t rows, int64_t cols,
                      const std::function<float(int64_t, int64_t)>& value) {
  const DType dtype = dst.dtype();
  if (dst.numel() != rows * cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("fill of ", rows, " x ", cols, " values into ", dst.numel(), " elements"));
  }
  if (backend.kind() == BackendKind::kCpu && dtype == DType::kF32) {
    float* w = dst.data_as<float>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = value(r, c);
    }
    return absl::OkStatus();
  }
  constexpr int64_t kRowsPerCopy = 256;
  std::vector<float> host;
  PT_ASSIGN_OR_RETURN(Tensor staging,
                      backend.Empty({std::max<int64_t>(1, std::min(rows, kRowsPerCopy)), cols},
                                    DType::kF32, MemoryTag::kWorkspace));
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerCopy) {
    const int64_t n = std::min(kRowsPerCopy, rows - r0);
    host.resize(n * cols);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < cols; ++c) host[r * cols + c] = value(r0 + r, c);
    }
    char* at = static_cast<char*>(dst.data()) + r0 * cols * SizeOf(dtype);
    if (dtype == DType::kF32) {
      PT_RETURN_IF_ERROR(
          backend.CopyBytes(at, host.data(), n * cols * 4, Backend::CopyKind::kHostToBackend));
    } else {
      // The host buffer is refilled only after this copy returns (complete on return).
      PT_RETURN_IF_ERROR(backend.CopyBytes(staging.data(), host.data(), n * cols * 4,
                                           Backend::CopyKind::kHostToBackend));
      PT_RETURN_IF_ERROR(backend.Cast(dtype, at, DType::kF32, staging.data(), n * cols));
    }
  }
  return backend.Synchronize();  // the staging tensor is freed on return
}

absl::StatusOr<WeightOnlyLinear> WeightOnlyLinear::Create(
    Backend& backend, int64_t out, int64_t in, const std::function<float(int64_t, int64_t)>& value,
    WeightQuant quant, int64_t group, DType dtype) {
  const bool host = backend.kind() == BackendKind::kCpu;
  if (quant != WeightQuant::kNone && (!host || dtype != DType::kF32)) {
    return absl::UnimplementedError(absl::StrCat("weight-only ", ToString(quant),
                                                 " weights run on the CPU backend in fp32 only"));
  }
  WeightOnlyLinear lin;
  lin.backend_ = &backend;
  lin.dtype_ = dtype;
  lin.out_ = out;
  lin.in_ = in;
  lin.quant_ = quant;
  lin.group_ = group;
  switch (quant) {
    case WeightQuant::kNone: {
      PT_ASSIGN_OR_RETURN(lin.values_, backend.Empty({out, in}, dtype, MemoryTag::kWeights));
      PT_RETURN_IF_ERROR(FillRows(backend, lin.values_, out, in, value));
      break;
    }
    case WeightQuant::kInt8: {
      PT_ASSIGN_OR_RETURN(lin.values_, backend.Empty({out, in}, DType::kU8, MemoryTag::kWeights));
      PT_ASSIGN_OR_RETURN(lin.scales_, backend.Empty({out}, DType::kF32, MemoryTag::kWeights));
      auto* q = static_cast<int8_t*>(lin.values_.data());
      std::vector<float> row(in);
      for (int64_t r = 0; r < out; ++r) {
        float absmax = 0;
        for (int64_t c = 0; c < in; ++c) {
          row[c] = value(r, c);
          absmax = std::max(absmax, std::abs(row[c]));
        }
        const float s = ScaleFor(absmax, 127.0f);
        lin.scales_.data_as<float>()[r] = s;
        for (int64_t c = 0; c < in; ++c) {
          q[r * in + c] =
              static_cast<int8_t>(std::clamp(std::nearbyint(row[c] / s), -127.f, 127.f));
        }
      }
      break;
    }
    case WeightQuant::kInt4: {
      if (group <= 0 || group % 2 != 0 || in % group != 0) {
        return absl::InvalidArgumentError(
            "int4_group_size must be even and divide the input width");
      }
      const int64_t groups = in / group;
      PT_ASSIGN_OR_RETURN(lin.values_,
                          backend.Empty({out, in / 2}, DType::kU8, MemoryTag::kWeights));
      PT_ASSIGN_OR_RETURN(lin.scales_,
                          backend.Empty({out, groups}, DType::kF32, MemoryTag::kWeights));
      uint8_t* q = lin.values_.data_as<uint8_t>();
      std::vector<float> row(in);
      for (int64_t r = 0; r < out; ++r) {
        for (int64_t c = 0; c < in; ++c) row[c] = value(r, c);
        for (int64_t gi = 0; gi < groups; ++gi) {
          float absmax = 0;
          for (int64_t c = gi * group; c < (gi + 1) * group; ++c) {
            absmax = std::max(absmax, std::abs(row[c]));
          }
          const float s = ScaleFor(absmax, 7.0f);
          lin.scales_.data_as<float>()[r * groups + gi] = s;
          for (int64_t c = gi * group; c < (gi + 1) * group; c += 2) {
            const int lo = static_cast<int>(std::clamp(std::nearbyint(row[c] / s), -8.f, 7.f));
            const int hi = static_cast<int>(std::clamp(std::nearbyint(row[c + 1] / s), -8.f, 7.f));
            q[(r * in + c) / 2] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
          }
        }
      }
      break;
    }
  }
  return lin;
}

float WeightOnlyLinear::ScaleOf(int64_t r, int64_t c) const {
  switch (quant_) {
    case WeightQuant::kNone:
      return 0.0f;
    case WeightQuant::kInt8:
      return scales_.data_as<float>()[r];
    case WeightQuant::kInt4:
      return scales_.data_as<float>()[r * (in_ / group_) + c / group_];
  }
  return 0.0f;
}

int64_t WeightOnlyLinear::bytes() const {
  return values_.bytes() + (scales_.defined() ? scales_.bytes() : 0);
}

void WeightOnlyLinear::DequantizeRows(int64_t r0, int64_t r1, float* buf) const {
  if (quant_ == WeightQuant::kInt8) {
    const auto* q = static_cast<const int8_t*>(values_.data());
    const float* s = scales_.data_as<float>();
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = buf + (r - r0) * in_;
      const int8_t* src = q + r * in_;
      for (int64_t c = 0; c < in_; ++c) dst[c] = static_cast<float>(src[c]) * s[r];
    }
  } else if (quant_ == WeightQuant::kInt4) {
    const uint8_t* q = values_.data_as<uint8_t>();
    const int64_t groups = in_ / group_;
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = buf + (r - r0) * in_;
      const uint8_t* src = q + r * in_ / 2;
      const float* s = scales_.data_as<float>() + r * groups;
      for (int64_t c = 0; c < in_; c += 2) {
        const uint8_t byte = src[c / 2];
        // Sign-extend each nibble: (v ^ 8) − 8 maps 0..15 to 0..7, −8..−1.
        const int lo = ((byte & 0xF) ^ 8) - 8, hi = ((byte >> 4) ^ 8) - 8;
        const float sc = s[c / group_];
        dst[c] = static_cast<float>(lo) * sc;
        dst[c + 1] = static_cast<float>(hi) * sc;
      }
    }
  }
}

absl::Status WeightOnlyLinear::Forward(const void* x, int64_t rows, void* y, int threads) const {
  if (rows == 0) return absl::OkStatus();
  if (quant_ != WeightQuant::kNone) {  // CPU and fp32 (Create)
    Forward(static_cast<const float*>(x), rows, static_cast<float*>(y), threads);
    return absl::OkStatus();
  }
  GemmArgs g;
  g.trans_b = true;
  g.m = rows, g.n = out_, g.k = in_;
  g.a = x, g.lda = in_;
  g.b = values_.data(), g.ldb = in_;
  g.c = y, g.ldc = out_;
  return backend_->Gemm(dtype_, g);
}

void WeightOnlyLinear::Forward(const float* x, int64_t rows, float* y, int threads) const {
  if (rows == 0) return;
  if (quant_ == WeightQuant::kNone) {
    cpu::gemm(false, true, rows, out_, in_, 1.0f, x, in_, values_.data_as<float>(), in_, 0.0f, y,
              out_);
    return;
  }
  const int64_t tiles = (out_ + kTileRows - 1) / kTileRows;
  cpu::ParallelFor(tiles, threads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> buf(kTileRows * in_);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t * kTileRows, r1 = std::min(out_, r0 + kTileRows);
      DequantizeRows(r0, r1, buf.data());
      cpu::gemm(false, true, rows, r1 - r0, in_, 1.0f, x, in_, buf.data(), in_, 0.0f, y + r0, out_);
    }
  });
}

std::vector<float> WeightOnlyLinear::Dequantized() const {
  std::vector<float> w(out_ * in_);
  if (quant_ == WeightQuant::kNone) {
    std::copy(values_.data_as<float>(), values_.data_as<float>() + out_ * in_, w.begin());
  } else {
    DequantizeRows(0, out_, w.data());
  }
  return w;
}

}  // namespace paratune::kernels::serving
