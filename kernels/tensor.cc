#include "kernels/tensor.h"

#include <cstdlib>
#include <numeric>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paratune::kernels {
namespace {
constexpr char kOomPayloadUrl[] = "paratune.kernels/oom_bytes_requested";
}  // namespace

absl::string_view MemoryTagName(MemoryTag tag) {
  switch (tag) {
    case MemoryTag::kWeights: return "weights";
    case MemoryTag::kActivations: return "activations";
    case MemoryTag::kGradients: return "gradients";
    case MemoryTag::kWorkspace: return "workspace";
  }
  return "?";
}

void* HostMemory::Allocate(int64_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
}

void HostMemory::Free(void* ptr) { std::free(ptr); }

TrackingAllocator::TrackingAllocator(RawMemory* raw, int64_t capacity_bytes)
    : raw_(raw), capacity_(capacity_bytes) {}

absl::Status OutOfMemoryError(int64_t bytes_requested, int64_t current_bytes,
                              int64_t capacity_bytes, MemoryTag tag) {
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "out of memory: requested ", bytes_requested, " bytes (", MemoryTagName(tag), ") with ",
      current_bytes, " of ", capacity_bytes, " bytes in use"));
  status.SetPayload(kOomPayloadUrl, absl::Cord(absl::StrCat(bytes_requested)));
  return status;
}

std::optional<int64_t> OomBytesRequested(const absl::Status& status) {
  if (!absl::IsResourceExhausted(status)) return std::nullopt;
  auto payload = status.GetPayload(kOomPayloadUrl);
  if (!payload) return std::nullopt;
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &bytes)) return std::nullopt;
  return bytes;
}

absl::StatusOr<void*> TrackingAllocator::Allocate(int64_t bytes, MemoryTag tag) {
  const int t = static_cast<int>(tag);
  {
    absl::MutexLock lock(&mu_);
    if (capacity_ > 0 && stats_.current_bytes + bytes > capacity_) {
      return OutOfMemoryError(bytes, stats_.current_bytes, capacity_, tag);
    }
    stats_.current_bytes += bytes;
    stats_.current_by_tag[t] += bytes;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    stats_.peak_by_tag[t] = std::max(stats_.peak_by_tag[t], stats_.current_by_tag[t]);
  }
  void* ptr = raw_->Allocate(bytes);
  if (ptr == nullptr) {
    absl::MutexLock lock(&mu_);
    stats_.current_bytes -= bytes;
    stats_.current_by_tag[t] -= bytes;
    return OutOfMemoryError(bytes, stats_.current_bytes, capacity_, tag);
  }
  return ptr;
}

void TrackingAllocator::Free(void* ptr, int64_t bytes, MemoryTag tag) {
  raw_->Free(ptr);
  absl::MutexLock lock(&mu_);
  stats_.current_bytes -= bytes;
  stats_.current_by_tag[static_cast<int>(tag)] -= bytes;
}

MemoryStats TrackingAllocator::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void TrackingAllocator::ResetPeaks() {
  absl::MutexLock lock(&mu_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_by_tag = stats_.current_by_tag;
}

absl::StatusOr<Tensor> Tensor::Empty(TrackingAllocator* allocator, std::vector<int64_t> shape,
                                     DType dtype, MemoryTag tag) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor shape [", absl::StrJoin(shape, ", "), "] has a negative dim"));
    }
    numel *= d;
  }
  const int64_t bytes = numel * SizeOf(dtype);
  absl::StatusOr<void*> ptr = allocator->Allocate(bytes, tag);
  if (!ptr.ok()) return ptr.status();
  Tensor t;
  t.buffer_ = std::make_shared<Buffer>(allocator, *ptr, bytes, tag);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::numel() const {
  if (!buffer_) return 0;
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

absl::StatusOr<Tensor> Tensor::Reshape(std::vector<int64_t> shape) const {
  const int64_t n =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  if (n != numel()) {
    return absl::InvalidArgumentError(absl::StrCat("reshape to [", absl::StrJoin(shape, ", "),
                                                   "] changes numel ", numel(), " to ", n));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  const int64_t row = shape_.empty() || shape_[0] == 0 ? 0 : numel() / shape_[0];
  Tensor t = *this;
  t.offset_bytes_ += begin * row * SizeOf(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

}  // namespace paratune::kernels
