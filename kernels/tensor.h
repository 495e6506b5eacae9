// Tensors and the tracking allocator.
//
// Every byte a rank uses goes through one TrackingAllocator, which records the current and
// peak bytes in total and per tag (weights, activations, gradients, workspace) and refuses
// a request over its capacity with ResourceExhausted naming the bytes asked for, so an
// out-of-memory shape is a result, never a crash. The raw memory (host or CUDA device)
// comes from a RawMemory supplied by the backend.
//
// A Tensor is a typed, shaped view of a reference-counted Buffer; copies share storage.
// Thread-safety: TrackingAllocator is thread-safe; a Tensor is not (one rank owns it).
#ifndef PARATUNE_KERNELS_TENSOR_H_
#define PARATUNE_KERNELS_TENSOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/dtype.h"

namespace paratune::kernels {

/// What a piece of memory holds; the allocator keeps current and peak bytes per tag.
enum class MemoryTag { kWeights = 0, kActivations = 1, kGradients = 2, kWorkspace = 3 };
inline constexpr int kNumMemoryTags = 4;
absl::string_view MemoryTagName(MemoryTag tag);

/// Where raw bytes come from (host heap, CUDA device memory).
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  /// Returns nullptr when the underlying allocation fails.
  virtual void* Allocate(int64_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  /// True when pointers are host-accessible.
  virtual bool host_accessible() const = 0;
};

/// 64-byte aligned host memory.
class HostMemory final : public RawMemory {
 public:
  void* Allocate(int64_t bytes) override;
  void Free(void* ptr) override;
  bool host_accessible() const override { return true; }
};

/// Snapshot of the allocator's accounting.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  std::array<int64_t, kNumMemoryTags> current_by_tag{};
  std::array<int64_t, kNumMemoryTags> peak_by_tag{};
};

/// Counts every allocation against a capacity. Thread-safe.
class TrackingAllocator {
 public:
  /// capacity_bytes <= 0 means unlimited. `raw` must outlive the allocator.
  TrackingAllocator(RawMemory* raw, int64_t capacity_bytes);

  /// ResourceExhausted (with OomBytesRequested() set) when current + bytes > capacity or
  /// the raw allocation fails.
  absl::StatusOr<void*> Allocate(int64_t bytes, MemoryTag tag);
  void Free(void* ptr, int64_t bytes, MemoryTag tag);

  MemoryStats Stats() const;
  /// Sets the peaks back to the current values (between warm-up and timed steps).
  void ResetPeaks();
  int64_t capacity_bytes() const { return capacity_; }
  RawMemory* raw() const { return raw_; }

 private:
  RawMemory* const raw_;
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  MemoryStats stats_ ABSL_GUARDED_BY(mu_);
};

/// The ResourceExhausted status the allocator returns, carrying the bytes requested.
absl::Status OutOfMemoryError(int64_t bytes_requested, int64_t current_bytes,
                              int64_t capacity_bytes, MemoryTag tag);
/// Bytes requested by an out-of-memory status made by OutOfMemoryError, if any.
std::optional<int64_t> OomBytesRequested(const absl::Status& status);

/// Reference-counted allocation; frees itself through its allocator.
class Buffer {
 public:
  Buffer(TrackingAllocator* allocator, void* data, int64_t bytes, MemoryTag tag)
      : allocator_(allocator), data_(data), bytes_(bytes), tag_(tag) {}
  ~Buffer() { allocator_->Free(data_, bytes_, tag_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemoryTag tag() const { return tag_; }

 private:
  TrackingAllocator* allocator_;
  void* data_;
  int64_t bytes_;
  MemoryTag tag_;
};

/// A typed, shaped, contiguous view of a Buffer. Empty (numel 0, no storage) by default.
class Tensor {
 public:
  Tensor() = default;

  /// Allocates numel(shape) elements of `dtype` (uninitialised).
  static absl::StatusOr<Tensor> Empty(TrackingAllocator* allocator, std::vector<int64_t> shape,
                                      DType dtype, MemoryTag tag);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const;
  int64_t bytes() const { return numel() * SizeOf(dtype_); }
  void* data() const {
    return buffer_ ? static_cast<char*>(buffer_->data()) + offset_bytes_ : nullptr;
  }
  /// Address of flat element `elems` (elements of dtype()).
  void* at(int64_t elems) const {
    return static_cast<char*>(data()) + elems * SizeOf(dtype_);
  }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data()); }
  MemoryTag tag() const { return buffer_ ? buffer_->tag() : MemoryTag::kWorkspace; }
  /// Identity of the underlying storage (to count shared storage once).
  const void* storage_id() const { return buffer_.get(); }

  /// Same storage, new shape with the same numel.
  absl::StatusOr<Tensor> Reshape(std::vector<int64_t> shape) const;
  /// Rows [begin, end) along dimension 0 (contiguous), sharing storage.
  Tensor Rows(int64_t begin, int64_t end) const;

 private:
  std::shared_ptr<Buffer> buffer_;
  int64_t offset_bytes_ = 0;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_TENSOR_H_
