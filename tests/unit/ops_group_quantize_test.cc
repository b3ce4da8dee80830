// The quantizer's vector passes (ops/group_quantize.h) against their scalar twins: the same
// bits on every SIMD target, odd sizes and offsets, ties of the rounding rule, zero extremes
// of either sign, and codes clamped at both ends.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/group_quantize.h"

namespace kvpack {
namespace {

std::vector<float> Data(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

// Bit patterns, so that +0 and -0 differ.
uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

TEST(GroupQuantizeTest, MinMaxGivesTheTwinsBitsOnEveryTarget) {
  std::mt19937 rng(3);
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (size_t n : {1, 2, 7, 16, 31, 32, 33, 64, 65, 100, 257}) {
      for (size_t off : {0, 1, 3}) {
        std::vector<float> x = Data(n + off, rng);
        if (n % 3 == 0) {  // zero extremes of both signs
          for (auto& v : x) v = std::fabs(v);
          x[off + n / 2] = -0.0f;
          x[off] = 0.0f;
        }
        float mn, mx, rmn, rmx;
        MinMaxF32(x.data() + off, n, &mn, &mx);
        MinMaxF32Ref(x.data() + off, n, &rmn, &rmx);
        ASSERT_EQ(Bits(mn), Bits(rmn)) << hwy::TargetName(target) << " n " << n;
        ASSERT_EQ(Bits(mx), Bits(rmx)) << hwy::TargetName(target) << " n " << n;
        float want_mn = x[off], want_mx = x[off];
        for (size_t i = 0; i < n; ++i) {
          want_mn = std::min(want_mn, x[off + i]);
          want_mx = std::max(want_mx, x[off + i]);
        }
        ASSERT_EQ(mn, want_mn);
        ASSERT_EQ(mx, want_mx);
        if (n % 3 == 0) {
          ASSERT_EQ(Bits(mn), 0u) << "a zero minimum is +0";
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(GroupQuantizeTest, CodesGiveTheTwinsBitsOnEveryTarget) {
  std::mt19937 rng(4);
  int ties = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int bits : {2, 4, 8}) {
      const float top = static_cast<float>((1 << bits) - 1);
      for (size_t n : {1, 5, 16, 17, 32, 64, 70, 129}) {
        std::vector<float> x = Data(n + 1, rng);
        // Every third element an exact tie k + 1/2 of min 0 and scale 1; values past both ends.
        for (size_t i = 0; i < x.size(); i += 3) {
          x[i] = static_cast<float>(rng() % (1 << bits)) - 0.5f;
          ++ties;
        }
        x[n / 2] = -7.0f;
        x[n - 1] = top + 9.0f;
        for (float inv : {1.0f, 0.37f, 0.0f}) {
          std::vector<uint8_t> got(n + 1, 0xee), want(n + 1, 0xee);
          const float min = inv == 1.0f ? 0.0f : -1.3f;
          QuantizeCodesU8(x.data() + 1, n, min, inv, top, got.data());
          QuantizeCodesU8Ref(x.data() + 1, n, min, inv, top, want.data());
          ASSERT_EQ(got, want) << hwy::TargetName(target) << " bits " << bits << " n " << n;
          for (size_t i = 0; i < n; ++i) {
            const float v = std::nearbyint((x[1 + i] - min) * inv);
            ASSERT_EQ(want[i], static_cast<uint8_t>(std::clamp(v, 0.0f, top))) << i;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GT(ties, 100);
}

TEST(GroupQuantizeTest, ColumnsGiveTheTwinsBitsOnEveryTarget) {
  std::mt19937 rng(5);
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (size_t d : {1, 8, 16, 24, 64, 67}) {
      for (size_t n : {1, 2, 32, 128}) {
        const size_t ld = d + (d % 2);  // rows with and without padding
        std::vector<float> x = Data(n * ld, rng);
        std::vector<float> mn(d), mx(d), rmn(d), rmx(d);
        ColumnMinMaxF32(x.data(), n, ld, d, mn.data(), mx.data());
        ColumnMinMaxF32Ref(x.data(), n, ld, d, rmn.data(), rmx.data());
        for (size_t c = 0; c < d; ++c) {
          ASSERT_EQ(Bits(mn[c]), Bits(rmn[c])) << hwy::TargetName(target) << " c " << c;
          ASSERT_EQ(Bits(mx[c]), Bits(rmx[c])) << hwy::TargetName(target) << " c " << c;
          float a, b;  // a column is a strided group: MinMaxF32 of its copy
          std::vector<float> col(n);
          for (size_t r = 0; r < n; ++r) col[r] = x[r * ld + c];
          MinMaxF32Ref(col.data(), n, &a, &b);
          ASSERT_EQ(Bits(mn[c]), Bits(a));
          ASSERT_EQ(Bits(mx[c]), Bits(b));
        }
        const float top = 15.0f;
        std::vector<float> inv(d);
        for (size_t c = 0; c < d; ++c) inv[c] = mx[c] > mn[c] ? top / (mx[c] - mn[c]) : 0.0f;
        std::vector<uint8_t> got(n * d), want(n * d);
        QuantizeColumnsU8(x.data(), n, ld, d, mn.data(), inv.data(), top, got.data());
        QuantizeColumnsU8Ref(x.data(), n, ld, d, mn.data(), inv.data(), top, want.data());
        ASSERT_EQ(got, want) << hwy::TargetName(target) << " d " << d << " n " << n;
        for (size_t r = 0; r < n; ++r) {
          for (size_t c = 0; c < d; ++c) {
            ASSERT_EQ(want[r * d + c], QuantizeCode(x[r * ld + c], mn[c], inv[c], top));
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace kvpack
