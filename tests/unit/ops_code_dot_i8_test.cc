// The integer key kernels (ops/code_dot_i8.h) against their scalar twins: the integer dots
// must agree exactly (integer arithmetic) on every SIMD target, shape, stride, group and row
// count (the AVX-512 path takes batches of 16 rows, AVX2 batches of 8, the rest runs the
// scalar loop); the query
// quantizer must keep its stated bound; the combination with scales and minima must not
// depend on a row's position in the tile.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/code_dot.h"
#include "ops/code_dot_i8.h"

namespace kvpack {
namespace {

TEST(CodeDotI8, IntegerDotsEqualTheTwinExactly) {
  // Every SIMD target this build carries and this CPU runs (AVX-512, AVX2, SSE4, ...): each
  // has its own fast path or none, and all must give the twin's integers.
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(1);
    for (size_t d : {8, 48, 64, 96, 128, 192}) {
      for (size_t group : {8, 24, 32, 64, 96, 128, 1000}) {
        for (size_t n_rows : {1, 7, 8, 9, 15, 16, 33, 64}) {
          for (size_t n_q : {1, 3, 5}) {
            const size_t g = std::min(group, d), stride = d + (d % 3), n_groups = (d + g - 1) / g;
            const size_t ld = n_rows + 3;
            std::vector<uint8_t> codes(n_rows * stride);
            for (auto& c : codes) c = static_cast<uint8_t>(rng() % 128);  // the allowed range
            std::vector<int8_t> q(n_q * d);
            for (auto& x : q) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
            std::vector<int32_t> a(n_q * n_groups * ld, -7), b(a.size(), -7);
            DotCodeRowsI8(codes.data(), n_rows, stride, d, group, q.data(), n_q, a.data(), ld);
            DotCodeRowsI8Ref(codes.data(), n_rows, stride, d, g, q.data(), n_q, b.data(), ld);
            ASSERT_EQ(a, b) << hwy::TargetName(target) << " d " << d << " group " << group
                            << " rows " << n_rows << " n_q " << n_q;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CodeDotI8, QuantizerKeepsItsBoundAndMatchesTheTwin) {
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t n : {1, 7, 16, 64, 100, 300}) {
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng) * (n % 2 ? 1e-3f : 30.0f);
    std::vector<int8_t> q(n), r(n);
    const float alpha = QuantizeI8(x.data(), n, q.data());
    EXPECT_EQ(alpha, QuantizeI8Ref(x.data(), n, r.data()));
    EXPECT_EQ(q, r);
    float amax = 0.0f;
    int hits = 0;
    for (size_t i = 0; i < n; ++i) {
      amax = std::max(amax, std::fabs(x[i]));
      EXPECT_LE(std::abs(static_cast<int>(q[i])), 127);
      EXPECT_LE(std::fabs(x[i] - alpha * q[i]), alpha * (0.5 + std::ldexp(1.0, -16))) << i;
      hits += std::abs(static_cast<int>(q[i])) == 127;
    }
    EXPECT_FLOAT_EQ(alpha, amax / 127.0f);
    EXPECT_GE(hits, 1);  // the largest magnitude maps to +-127
  }
  std::vector<float> zero(9, 0.0f);
  std::vector<int8_t> q(9, 5);
  EXPECT_EQ(QuantizeI8(zero.data(), 9, q.data()), 0.0f);
  EXPECT_EQ(q, std::vector<int8_t>(9, 0));
}

// The int16 query of 8-bit codes: the twin's codes and alpha bit for bit on every target, and
// within alpha * (1/2 + 2^-7) of x (code_dot_i8.h), two-sided: the largest magnitude maps to
// +-32767 and the error is 258 times below the int8 quantizer's bound.
TEST(CodeDotI8, Int16QuantizerKeepsItsBoundAndMatchesTheTwin) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (size_t n : {1, 7, 16, 64, 100, 300}) {
      std::vector<float> x(n);
      for (auto& v : x) v = g(rng) * (n % 2 ? 1e-3f : 30.0f);
      std::vector<int16_t> q(n), r(n);
      const float alpha = QuantizeI16(x.data(), n, q.data());
      ASSERT_EQ(alpha, QuantizeI16Ref(x.data(), n, r.data())) << hwy::TargetName(target);
      ASSERT_EQ(q, r) << hwy::TargetName(target);
      float amax = 0.0f;
      int hits = 0;
      double worst = 0.0;
      for (size_t i = 0; i < n; ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        EXPECT_LE(std::abs(static_cast<int>(q[i])), 32767);
        const double err = std::fabs(x[i] - static_cast<double>(alpha) * q[i]);
        EXPECT_LE(err, alpha * (0.5 + std::ldexp(1.0, -7))) << i;
        worst = std::max(worst, err);
        hits += std::abs(static_cast<int>(q[i])) == 32767;
      }
      EXPECT_FLOAT_EQ(alpha, amax / 32767.0f);
      EXPECT_GE(hits, 1);
      EXPECT_LE(worst, amax / 127.0 * 0.5 / 200.0);  // far below QuantizeI8's alpha / 2
    }
    std::vector<float> zero(9, 0.0f);
    std::vector<int16_t> q(9, 5);
    EXPECT_EQ(QuantizeI16(zero.data(), 9, q.data()), 0.0f);
    EXPECT_EQ(q, std::vector<int16_t>(9, 0));
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CodeDotI8, ScaleQuantizeEqualsScalingThenQuantizing) {
  // Several rows in one call (the rows' phases are interleaved): each row's codes and scale
  // equal quantizing x * scale on its own, on every target; a zero row stays zero.
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (size_t n : {5, 16, 64, 80, 300}) {
      for (size_t n_q : {1, 3, 17}) {
        std::vector<float> x(n_q * n), s(n), m(n), xs(n_q * n);
        for (auto& v : x) v = u(rng);
        for (size_t i = 0; i < n; ++i) {
          s[i] = std::fabs(u(rng));
          m[i] = u(rng);
        }
        if (n_q > 1) std::fill(x.begin() + n, x.begin() + 2 * n, 0.0f);  // row 1: zero
        for (size_t r = 0; r < n_q; ++r) {
          for (size_t i = 0; i < n; ++i) xs[r * n + i] = x[r * n + i] * s[i];
        }
        std::vector<int8_t> a(n_q * n), b(n_q * n);
        std::vector<float> alpha(n_q), dot(n_q);
        ScaleQuantizeI8(x.data(), n_q, s.data(), m.data(), n, a.data(), alpha.data(), dot.data());
        for (size_t r = 0; r < n_q; ++r) {
          EXPECT_EQ(alpha[r], QuantizeI8Ref(&xs[r * n], n, &b[r * n]))
              << hwy::TargetName(target) << " n " << n << " row " << r;
          double ref = 0.0, mag = 0.0;
          for (size_t i = 0; i < n; ++i) {
            ref += static_cast<double>(x[r * n + i]) * m[i];
            mag += std::fabs(x[r * n + i] * m[i]);
          }
          EXPECT_NEAR(dot[r], ref, n * std::ldexp(1.0, -23) * mag);
        }
        EXPECT_EQ(a, b) << hwy::TargetName(target) << " n " << n << " n_q " << n_q;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CodeDotI8, CombineMatchesTheTwinAndIgnoresTilePosition) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  constexpr size_t pld = 64, n_q = 3;
  for (size_t ng : {1, 2, 3}) {
    std::vector<int32_t> dots(n_q * ng * pld);
    std::vector<float> scale(ng * pld), min(ng * pld), alpha(n_q), qsum(n_q * ng);
    for (auto& v : dots) v = static_cast<int32_t>(rng() % 20001) - 10000;
    for (auto& v : scale) v = u(rng);
    for (auto& v : min) v = u(rng);
    for (auto& v : alpha) v = std::fabs(u(rng)) * 0.01f;
    for (auto& v : qsum) v = u(rng);
    for (size_t m : {1, 13, 16, 17, 64}) {
      const size_t ld = m + 2;
      std::vector<float> a(n_q * ld, -7.0f), b(n_q * ld, -7.0f);
      CombineCodeDots(dots.data(), scale.data(), min.data(), pld, m, n_q, ng, alpha.data(),
                      qsum.data(), a.data(), ld);
      CombineCodeDotsRef(dots.data(), scale.data(), min.data(), pld, m, n_q, ng, alpha.data(),
                         qsum.data(), b.data(), ld);
      for (size_t i = 0; i < n_q; ++i) {
        for (size_t k = 0; k < ld; ++k) {
          if (k >= m) {
            ASSERT_EQ(a[i * ld + k], -7.0f) << "wrote past the rows";
            continue;
          }
          double mag = 0.0;
          for (size_t g = 0; g < ng; ++g) {
            mag += std::fabs(alpha[i] * scale[g * pld + k] * dots[(i * ng + g) * pld + k]) +
                   std::fabs(min[g * pld + k] * qsum[i * ng + g]);
          }
          ASSERT_NEAR(a[i * ld + k], b[i * ld + k], 4 * ng * std::ldexp(1.0, -23) * mag);
        }
      }
      // Row k computed inside a 64-row tile equals the same row computed alone.
      for (size_t k = 0; k < m; ++k) {
        std::vector<int32_t> d1(n_q * ng * pld);
        std::vector<float> s1(ng * pld), m1(ng * pld);
        for (size_t i = 0; i < n_q * ng; ++i) d1[i * pld] = dots[i * pld + k];
        for (size_t g = 0; g < ng; ++g)
          s1[g * pld] = scale[g * pld + k], m1[g * pld] = min[g * pld + k];
        std::vector<float> one(n_q);
        CombineCodeDots(d1.data(), s1.data(), m1.data(), pld, 1, n_q, ng, alpha.data(), qsum.data(),
                        one.data(), 1);
        for (size_t i = 0; i < n_q; ++i) ASSERT_EQ(one[i], a[i * ld + k]) << k;
      }
    }
  }
}

TEST(CodeDot, WeightedAxpyMatchesTheTwin) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t d : {8, 17, 32, 48, 64, 96, 128}) {
    for (size_t group : {4, 16, 24, 32, 64, 1000}) {
      for (size_t first : {size_t{0}, size_t{8}, size_t{64}}) {
        for (size_t n_q : {1, 3, 4, 6}) {
          const size_t n_rows = 11, stride = d + 1, ld = n_rows + 5;
          const size_t n_groups = (first + d - 1) / group - first / group + 1;
          std::vector<uint8_t> codes(n_rows * stride);
          for (auto& c : codes) c = static_cast<uint8_t>(rng() & 15);
          std::vector<float> w(n_q * n_groups * ld);
          for (auto& x : w) x = u(rng);
          std::vector<float> a(n_q * d, 0.5f), b(n_q * d, 0.5f);
          AxpyCodeRowsWeighted(w.data(), n_q, ld, codes.data(), n_rows, stride, d, first, group,
                               a.data());
          AxpyCodeRowsWeightedRef(w.data(), n_q, ld, codes.data(), n_rows, stride, d, first, group,
                                  b.data());
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t c = 0; c < d; ++c) {
              const size_t g = (first + c) / group - first / group;
              double mag = 0.5;
              for (size_t t = 0; t < n_rows; ++t)
                mag += std::fabs(w[(i * n_groups + g) * ld + t]) * codes[t * stride + c];
              ASSERT_NEAR(a[i * d + c], b[i * d + c], (n_rows + 1) * std::ldexp(1.0, -23) * mag)
                  << d << " " << group << " " << first << " " << n_q;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
