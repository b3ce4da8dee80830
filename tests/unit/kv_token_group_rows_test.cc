// TokenGroupRows' planes (kv/codecs/token_group_rows.h): rows that span heads (KCVT's values,
// one group per row) are stored a plane per head. The planes are a layout, not a format: the
// oracle is the same rows in one interleaved plane. Decode of any window (inside a plane or
// across planes) must be bit-identical, and so must the memory accounting; Scores and
// Accumulate of a head's window read other kernels' paths (whole rows of the plane instead of
// a window of the interleaved rows), so they must agree to float rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kv/codecs/token_group_rows.h"

namespace kvpack {
namespace {

constexpr int kHeads = 3, kD = 64, kRow = kHeads * kD, kRows = 150;

struct Pair {
  TokenGroupRows interleaved, planar;
  explicit Pair(int bits)
      : interleaved(kRow, kRow, bits, QuantMethod::kMinMax),
        planar(kRow, kRow, bits, QuantMethod::kMinMax, kD) {}
};

std::vector<float> RandomRows(std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(kRows * kRow);
  for (auto& v : x) v = g(rng);
  return x;
}

void ExpectSameDecode(const TokenGroupRows& a, const TokenGroupRows& b, int c0, int n) {
  ASSERT_EQ(a.n_rows(), b.n_rows());
  std::vector<float> da(a.n_rows() * n), db(b.n_rows() * n);
  a.Decode(0, a.n_rows(), c0, n, da.data());
  b.Decode(0, b.n_rows(), c0, n, db.data());
  for (size_t i = 0; i < da.size(); ++i) {
    ASSERT_EQ(da[i], db[i]) << "window [" << c0 << ", " << c0 + n << ") at " << i;
  }
}

TEST(TokenGroupRowsPlanes, DecodeAndMemoryEqualInterleaved) {
  for (int bits : {2, 4, 8}) {
    SCOPED_TRACE(bits);
    std::mt19937 rng(bits);
    Pair p(bits);
    const std::vector<float> x = RandomRows(rng);
    for (int r = 0; r < kRows; ++r) {
      p.interleaved.AppendRow(&x[r * kRow]);
      p.planar.AppendRow(&x[r * kRow]);
    }
    // Heads, a window across two planes, the whole row.
    for (int h = 0; h < kHeads; ++h) ExpectSameDecode(p.interleaved, p.planar, h * kD, kD);
    ExpectSameDecode(p.interleaved, p.planar, 40, 100);
    ExpectSameDecode(p.interleaved, p.planar, 0, kRow);
    MemoryUsage mi, mp;
    p.interleaved.AddMemory(mi);
    p.planar.AddMemory(mp);
    EXPECT_EQ(mi.code_bytes, mp.code_bytes);
    EXPECT_EQ(mi.scale_bytes, mp.scale_bytes);
    EXPECT_EQ(mi.zero_bytes, mp.zero_bytes);
    EXPECT_EQ(mp.code_bytes, static_cast<size_t>(kRows) * kRow * bits / 8);
    // Eviction keeps the same rows in every plane.
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < kRows; r += 1 + static_cast<int64_t>(rng() % 3)) keep.push_back(r);
    p.interleaved.Keep(keep);
    p.planar.Keep(keep);
    ExpectSameDecode(p.interleaved, p.planar, 0, kRow);
  }
}

// A head's Scores and Accumulate on its plane against the interleaved rows' window, over
// consecutive rows and over a row list. Both are decode-then-dot up to float rounding and
// the int16 weights' error (each at most 2^-15 of the weight, tests/kv_integer_bounds.h), far
// inside 1e-3 of n * max p * max|value|; the outputs themselves are well above that.
TEST(TokenGroupRowsPlanes, HeadWindowsAgreeWithInterleaved) {
  constexpr int kNq = 3;
  for (int bits : {2, 4, 8}) {
    SCOPED_TRACE(bits);
    std::mt19937 rng(10 + bits);
    Pair p(bits);
    const std::vector<float> x = RandomRows(rng);
    for (int r = 0; r < kRows; ++r) {
      p.interleaved.AppendRow(&x[r * kRow]);
      p.planar.AppendRow(&x[r * kRow]);
    }
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> q(kNq * kD), prob(kNq * kRows);
    for (auto& v : q) v = u(rng) - 0.5f;
    for (auto& v : prob) v = u(rng) / kRows;
    std::vector<int64_t> list;
    for (int64_t r = 3; r < kRows; r += 2) list.push_back(r);
    const float vmax = *std::max_element(x.begin(), x.end(), [](float a, float b) {
      return std::fabs(a) < std::fabs(b);
    });
    for (int h = 0; h < kHeads; ++h) {
      const int64_t* const row_lists[] = {nullptr, list.data()};
      for (const int64_t* rows : row_lists) {
        const int64_t n = rows ? static_cast<int64_t>(list.size()) : kRows - 5;
        std::vector<float> si(kNq * n), sp(kNq * n), oi(kNq * kD, 0.0f), op(kNq * kD, 0.0f);
        p.interleaved.Scores(5, rows, n, h * kD, kD, q.data(), kNq, si.data(), n, 0);
        p.planar.Scores(5, rows, n, h * kD, kD, q.data(), kNq, sp.data(), n, 0);
        for (int64_t i = 0; i < kNq * n; ++i) {
          ASSERT_NEAR(si[i], sp[i], 1e-4f * (1.0f + std::fabs(si[i]))) << "head " << h;
        }
        p.interleaved.Accumulate(5, rows, n, h * kD, kD, prob.data(), kNq, kRows, 0, oi.data());
        p.planar.Accumulate(5, rows, n, h * kD, kD, prob.data(), kNq, kRows, 0, op.data());
        float pmax = 0.0f;
        for (int i = 0; i < kNq; ++i) {
          for (int64_t k = 0; k < n; ++k) pmax = std::max(pmax, prob[i * kRows + k]);
        }
        const float bound = 1e-3f * pmax * static_cast<float>(n) * std::fabs(vmax);
        for (int i = 0; i < kNq * kD; ++i) {
          ASSERT_NEAR(oi[i], op[i], bound) << "head " << h << " channel " << i;
        }
        // Not vacuous: the outputs are well above the bound.
        float mag = 0.0f;
        for (float v : op) mag = std::max(mag, std::fabs(v));
        EXPECT_GT(mag, 10.0f * bound);
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
