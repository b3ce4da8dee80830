#include "core/aligned_buffer.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace kvpack {
namespace {

using Buffer = AlignedBuffer<uint32_t>;

TEST(AlignedBuffer, GrowingKeepsTheElementsAndTheAlignment) {
  Buffer b;
  for (uint32_t i = 0; i < 300000; ++i) {  // through both growth regimes
    b.Resize(i + 1);
    b[i] = i * 7u;
    ASSERT_EQ(reinterpret_cast<uintptr_t>(b.data()) % Buffer::kAlignment, 0u);
  }
  for (uint32_t i = 0; i < 300000; ++i) ASSERT_EQ(b[i], i * 7u);
}

TEST(AlignedBuffer, DoublesBelowAMebibyteThenGrowsByAQuarter) {
  Buffer b(17);
  EXPECT_EQ(b.capacity(), 32u);
  const size_t mib = Buffer::kSlowGrowthBytes / sizeof(uint32_t);  // elements in 1 MiB
  b.Resize(mib / 2 + 1);
  EXPECT_EQ(b.capacity(), mib);
  b.Resize(mib + 1);
  EXPECT_EQ(b.capacity(), mib + mib / 4);
  const size_t before = b.capacity();
  b.Resize(before + 1);
  EXPECT_EQ(b.capacity(), before + before / 4);
  // The capacity beyond the elements stays below a quarter of them once past 1 MiB.
  Buffer c;
  for (size_t n = mib + 1; n < 8 * mib; n += mib / 3) {
    c.Resize(n);
    EXPECT_LE(c.capacity() - n, n / 4) << n;
  }
}

TEST(AlignedBuffer, ShrinkCopyAndMoveKeepTheElements) {
  Buffer a(100000);
  for (uint32_t i = 0; i < 100000; ++i) a[i] = i;
  a.Resize(1000);
  a.ShrinkToFit();
  EXPECT_EQ(a.capacity(), 1000u);
  Buffer copy = a;
  Buffer moved = std::move(a);
  ASSERT_EQ(copy.size(), 1000u);
  ASSERT_EQ(moved.size(), 1000u);
  for (uint32_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(copy[i], i);
    ASSERT_EQ(moved[i], i);
  }
  copy.Resize(0);
  copy.ShrinkToFit();
  EXPECT_EQ(copy.data(), nullptr);
}

}  // namespace
}  // namespace kvpack
