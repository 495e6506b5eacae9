#include "kernels/tensor.h"

#include <gtest/gtest.h>

namespace paratune::kernels {
namespace {

TEST(TrackingAllocatorTest, CountsCurrentPeakAndTags) {
  HostMemory host;
  TrackingAllocator alloc(&host, 0);
  {
    auto w = Tensor::Empty(&alloc, {10, 4}, DType::kF32, MemoryTag::kWeights);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w->bytes(), 160);
    auto a = Tensor::Empty(&alloc, {3}, DType::kF64, MemoryTag::kActivations);
    ASSERT_TRUE(a.ok());
    MemoryStats s = alloc.Stats();
    EXPECT_EQ(s.current_bytes, 184);
    EXPECT_EQ(s.current_by_tag[static_cast<int>(MemoryTag::kWeights)], 160);
    EXPECT_EQ(s.current_by_tag[static_cast<int>(MemoryTag::kActivations)], 24);
    Tensor view = a->Rows(1, 3);
    EXPECT_EQ(view.numel(), 2);
    EXPECT_EQ(view.data_as<double>(), a->data_as<double>() + 1);
  }
  MemoryStats s = alloc.Stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.peak_bytes, 184);
  EXPECT_EQ(s.peak_by_tag[static_cast<int>(MemoryTag::kActivations)], 24);
}

TEST(TrackingAllocatorTest, OverCapacityIsResourceExhaustedWithBytes) {
  HostMemory host;
  TrackingAllocator alloc(&host, 1000);
  auto a = Tensor::Empty(&alloc, {200}, DType::kF32, MemoryTag::kWorkspace);
  ASSERT_TRUE(a.ok());
  auto b = Tensor::Empty(&alloc, {60}, DType::kF32, MemoryTag::kActivations);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(b.status()));
  ASSERT_TRUE(OomBytesRequested(b.status()).has_value());
  EXPECT_EQ(*OomBytesRequested(b.status()), 240);
  EXPECT_EQ(alloc.Stats().current_bytes, 800);
}

}  // namespace
}  // namespace paratune::kernels
