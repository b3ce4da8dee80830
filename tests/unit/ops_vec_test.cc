// SIMD kernels against their scalar twins on odd sizes and misaligned pointers.
// Tolerance: a float dot product of length n has |error| <= gamma_n * sum|a_i b_i| with
// gamma_n = n*eps/(1-n*eps) (Higham, Accuracy and Stability, 3.1); both the kernel and the
// reference carry such an error, so we allow 2 * gamma_n * sum|a_i b_i|.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/vec.h"
#include "ops/vec_ref.h"

namespace kvpack {
namespace {

constexpr float kEps = 1.1920929e-7f;

float DotBound(const std::vector<float>& a, const std::vector<float>& b, size_t off, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += std::fabs(a[off + i] * b[off + i]);
  const double gamma = n * kEps / (1.0 - n * kEps);
  return static_cast<float>(2.0 * gamma * s) + 1e-30f;
}

class VecTest : public ::testing::TestWithParam<size_t> {};

TEST_P(VecTest, DotKernelsMatchReference) {
  const size_t n = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(n));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t off : {0u, 1u, 3u}) {
    std::vector<float> a(n + off), b(n + off);
    for (auto& x : a) x = dist(rng);
    for (auto& x : b) x = dist(rng);
    EXPECT_NEAR(DotF32(a.data() + off, b.data() + off, n),
                DotF32Ref(a.data() + off, b.data() + off, n), DotBound(a, b, off, n));
    std::vector<uint16_t> h(n + off), bf(n + off);
    std::vector<float> ah(n + off), abf(n + off);
    for (size_t i = 0; i < n + off; ++i) {
      h[i] = Fp32ToFp16(a[i]);
      ah[i] = Fp16ToFp32(h[i]);
      bf[i] = Fp32ToBf16(a[i]);
      abf[i] = Bf16ToFp32(bf[i]);
    }
    EXPECT_NEAR(DotF16F32(h.data() + off, b.data() + off, n),
                DotF16F32Ref(h.data() + off, b.data() + off, n), DotBound(ah, b, off, n));
    EXPECT_NEAR(DotBF16F32(bf.data() + off, b.data() + off, n),
                DotBF16F32Ref(bf.data() + off, b.data() + off, n), DotBound(abf, b, off, n));

    std::vector<float> y(n + off), y_ref(n + off);
    for (size_t i = 0; i < n + off; ++i) y[i] = y_ref[i] = dist(rng);
    AxpyF32(0.37f, a.data() + off, y.data() + off, n);
    AxpyF32Ref(0.37f, a.data() + off, y_ref.data() + off, n);
    for (size_t i = 0; i < n + off; ++i) {
      // One FMA vs multiply-then-add: at most one rounding apart.
      EXPECT_NEAR(y[i], y_ref[i], 2 * kEps * (std::fabs(y_ref[i]) + std::fabs(0.37f * a[i])));
    }
    AxpyF16(-1.5f, h.data() + off, y.data() + off, n);
    AxpyF16Ref(-1.5f, h.data() + off, y_ref.data() + off, n);
    for (size_t i = 0; i < n + off; ++i) {
      EXPECT_NEAR(y[i], y_ref[i], 4 * kEps * (std::fabs(y_ref[i]) + std::fabs(1.5f * ah[i])));
    }
    // Conversions are exact operations: bit-identical.
    std::vector<uint16_t> h2(n + off);
    std::vector<float> back(n + off), back_ref(n + off);
    ConvertF32ToF16(a.data() + off, h2.data() + off, n);
    for (size_t i = off; i < n + off; ++i) EXPECT_EQ(h2[i], h[i]) << i;
    ConvertF16ToF32(h.data() + off, back.data() + off, n);
    ConvertF16ToF32Ref(h.data() + off, back_ref.data() + off, n);
    for (size_t i = off; i < n + off; ++i) EXPECT_EQ(back[i], back_ref[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, VecTest, ::testing::Values(1, 7, 16, 33, 64, 100, 257, 1000));

// The stores convert whole rows with ConvertF32ToF16 (plain f16, fp16 residual rows): on
// every target it must round as Fp32ToFp16 does where rounding is delicate, at ties (even
// either way), into fp16 subnormals, at the largest finite value and past it (to infinity).
TEST(VecTest, ConvertF32ToF16RoundsAsTheScalarOnEveryTarget) {
  std::vector<float> x = {1.0f + 0x1.0p-11f, 1.0f + 0x3.0p-11f, -(1.0f + 0x1.0p-11f), 65504.0f,
                          65519.0f, 65520.0f, 1e5f, -1e6f, 0x1.0p-24f, 0x1.8p-24f, 0x1.0p-25f,
                          0x1.0p-26f, 3e-5f, -6e-8f, 0.0f, -0.0f, 1e-30f, 0.1f, -2.5f, 1234.5f};
  while (x.size() < 37) x.push_back(static_cast<float>(x.size()) * 0.37f - 3.0f);  // a tail
  std::vector<uint16_t> want(x.size()), got(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = Fp32ToFp16(x[i]);
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::fill(got.begin(), got.end(), uint16_t{0x5555});
    ConvertF32ToF16(x.data(), got.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(got[i], want[i]) << hwy::TargetName(target) << " x = " << x[i];
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(want[5], 0x7c00);  // 65520 rounds to infinity
  EXPECT_EQ(want[8], 0x0001);  // 2^-24: the smallest subnormal
}

TEST(VecTest, DotQ8_0MatchesReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(-127, 127);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t n_blocks : {1u, 3u, 18u}) {
    const size_t n = n_blocks * 32;
    std::vector<uint8_t> blocks(n_blocks * 34 + 1);
    std::vector<float> x(n + 1), deq(n + 1);
    for (size_t b = 0; b < n_blocks; ++b) {
      uint8_t* p = blocks.data() + 1 + b * 34;  // misaligned on purpose
      const uint16_t d = Fp32ToFp16(0.01f * (b + 1));
      std::memcpy(p, &d, 2);
      for (int j = 0; j < 32; ++j) {
        const int8_t q = static_cast<int8_t>(code(rng));
        p[2 + j] = static_cast<uint8_t>(q);
        deq[1 + b * 32 + j] = Fp16ToFp32(d) * q;
      }
    }
    for (auto& v : x) v = dist(rng);
    EXPECT_NEAR(DotQ8_0F32(blocks.data() + 1, x.data() + 1, n),
                DotQ8_0F32Ref(blocks.data() + 1, x.data() + 1, n), DotBound(deq, x, 1, n) * 2);
  }
}

// The tile kernels of one shape against the per-row twins.
void CheckRowTileKernels(size_t d, size_t n_q, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t n_rows = 37, ld = n_rows + 5;
  std::vector<float> rows(n_rows * d + 1), q(n_q * d), p(n_q * ld), out(n_q * d), out_ref(n_q * d);
  std::vector<uint16_t> rows_h(n_rows * d + 1), rows_b(n_rows * d + 1);
  std::vector<float> rows_hf(n_rows * d + 1), rows_bf(n_rows * d + 1);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = dist(rng);
    rows_h[i] = Fp32ToFp16(rows[i]);
    rows_hf[i] = Fp16ToFp32(rows_h[i]);
    rows_b[i] = Fp32ToBf16(rows[i]);
    rows_bf[i] = Bf16ToFp32(rows_b[i]);
  }
  for (auto& x : q) x = dist(rng);
  for (auto& x : p) x = std::fabs(dist(rng));
  std::vector<float> scores(n_q * ld), scores_h(n_q * ld), scores_b(n_q * ld);
  DotRowsF32(rows.data() + 1, n_rows, d, q.data(), n_q, scores.data(), ld);  // misaligned rows
  std::vector<float> scores_tile(n_q * ld);
  DotTileF32(rows.data() + 1, n_rows, d, q.data(), n_q, scores_tile.data(), ld);
  DotRowsF16(rows_h.data() + 1, n_rows, d, q.data(), n_q, scores_h.data(), ld);
  DotRowsBF16(rows_b.data() + 1, n_rows, d, q.data(), n_q, scores_b.data(), ld);
  for (size_t i = 0; i < n_q; ++i) {
    std::vector<float> qi(q.begin() + i * d, q.begin() + (i + 1) * d);
    for (size_t t = 0; t < n_rows; ++t) {
      std::vector<float> r(rows.begin() + 1 + t * d, rows.begin() + 1 + (t + 1) * d);
      std::vector<float> rh(rows_hf.begin() + 1 + t * d, rows_hf.begin() + 1 + (t + 1) * d);
      std::vector<float> rb(rows_bf.begin() + 1 + t * d, rows_bf.begin() + 1 + (t + 1) * d);
      EXPECT_EQ(scores[i * ld + t], DotF32(r.data(), qi.data(), d));  // the same arithmetic
      EXPECT_NEAR(scores[i * ld + t], DotF32Ref(r.data(), qi.data(), d), DotBound(r, qi, 0, d));
      EXPECT_NEAR(scores_tile[i * ld + t], DotF32Ref(r.data(), qi.data(), d),
                  DotBound(r, qi, 0, d));
      EXPECT_NEAR(scores_h[i * ld + t], DotF16F32Ref(rows_h.data() + 1 + t * d, qi.data(), d),
                  DotBound(rh, qi, 0, d));
      EXPECT_NEAR(scores_b[i * ld + t], DotBF16F32Ref(rows_b.data() + 1 + t * d, qi.data(), d),
                  DotBound(rb, qi, 0, d));
    }
  }
  for (int fmt = 0; fmt < 3; ++fmt) {  // f32, fp16, bf16 rows
    std::fill(out.begin(), out.end(), 0.5f);
    std::fill(out_ref.begin(), out_ref.end(), 0.5f);
    if (fmt == 0) {
      AxpyRowsF32(p.data(), n_q, ld, rows.data() + 1, n_rows, d, out.data());
    } else if (fmt == 1) {
      AxpyRowsF16(p.data(), n_q, ld, rows_h.data() + 1, n_rows, d, out.data());
    } else {
      AxpyRowsBF16(p.data(), n_q, ld, rows_b.data() + 1, n_rows, d, out.data());
    }
    double bound_scale = 0.0;
    for (size_t i = 0; i < n_q; ++i) {
      for (size_t t = 0; t < n_rows; ++t) {
        if (fmt == 0) {
          AxpyF32Ref(p[i * ld + t], rows.data() + 1 + t * d, &out_ref[i * d], d);
        } else if (fmt == 1) {
          AxpyF16Ref(p[i * ld + t], rows_h.data() + 1 + t * d, &out_ref[i * d], d);
        } else {
          AxpyBF16Ref(p[i * ld + t], rows_b.data() + 1 + t * d, &out_ref[i * d], d);
        }
        bound_scale = std::max<double>(bound_scale, p[i * ld + t]);
      }
    }
    // Same summation order over t; FMA vs mul+add differs by <= 1 rounding per step:
    // |err| <= n_rows * 2 eps * (|out| + max p * max |row|) ~ 37 * 2.4e-7 * 20.
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out_ref[i], 1e-4) << fmt;
    // f32 and fp16 rows: each query row's sums are its own multiply-adds from out in row
    // order, however many query rows a pass holds and whichever loop is outer, so one query
    // row at a time gives the same floats. (bf16's split blocks sum from zero and add to out
    // at the end, and which channels they take depends on the number of query rows.)
    if (fmt == 2) continue;
    std::vector<float> one(d);
    for (size_t i = 0; i < n_q; ++i) {
      std::fill(one.begin(), one.end(), 0.5f);
      if (fmt == 0) {
        AxpyRowsF32(&p[i * ld], 1, ld, rows.data() + 1, n_rows, d, one.data());
      } else {
        AxpyRowsF16(&p[i * ld], 1, ld, rows_h.data() + 1, n_rows, d, one.data());
      }
      for (size_t c = 0; c < d; ++c) ASSERT_EQ(out[i * d + c], one[c]) << fmt << " " << i;
    }
  }
}

// Every compiled SIMD target this CPU runs (the fp16 and bf16 key kernels have an AVX2 path that
// takes four rows and three query rows at a time), GQA groups of 1 to 5 query rows.
TEST(VecTest, RowTileKernelsMatchPerRowReference) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::mt19937 rng(11);
    for (size_t d : {8u, 20u, 48u, 64u, 128u}) {
      for (size_t n_q : {1u, 2u, 3u, 4u, 5u}) CheckRowTileKernels(d, n_q, rng);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace kvpack

namespace kvpack {
namespace {

// The validation scan against its twin: every length around the vector width, a bad value
// (NaN, +-inf, or a finite one above the limit) at every position, and none.
TEST(VecValidation, AnyAbsAboveMatchesTheTwin) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-100.0f, 100.0f);
    const float inf = std::numeric_limits<float>::infinity();
    for (size_t n : {0, 1, 7, 15, 16, 17, 33, 64, 65, 192}) {
      std::vector<float> x(n);
      for (auto& v : x) v = u(rng);
      for (float limit : {100.0f, 65504.0f, std::numeric_limits<float>::max(), inf}) {
        EXPECT_EQ(AnyAbsAbove(x.data(), n, limit), AnyAbsAboveRef(x.data(), n, limit)) << n;
      }
      EXPECT_FALSE(AnyAbsAbove(x.data(), n, std::numeric_limits<float>::max()));
      for (size_t at = 0; at < n; ++at) {
        for (float bad : {std::nanf(""), inf, -inf, -70000.0f}) {
          std::vector<float> y = x;
          y[at] = bad;
          const float limit = 65504.0f;
          ASSERT_TRUE(AnyAbsAbove(y.data(), n, limit)) << n << " " << at << " " << bad;
          ASSERT_EQ(AnyAbsAbove(y.data(), n, std::numeric_limits<float>::max()),
                    AnyAbsAboveRef(y.data(), n, std::numeric_limits<float>::max()));
          ASSERT_EQ(AnyAbsAbove(y.data(), n, inf), AnyAbsAboveRef(y.data(), n, inf));
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Softmax pieces against the scalar twins: max exactly; exp within 4 ulp of std::exp
// (the kernel's exp measured 1.75 ulp at worst over [-87, 8]), -inf to 0, sums within n ulps
// of the sum; on every SIMD target this CPU runs.
TEST(VecSoftmax, MaxAndExpMatchTheTwins) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-30.0f, 5.0f);
    for (size_t n : {0, 1, 7, 15, 16, 17, 33, 63, 64, 65, 128, 131, 1000}) {
      std::vector<float> x(n + 1);
      for (auto& v : x) v = u(rng);
      if (n > 3) x[2] = -std::numeric_limits<float>::infinity();
      EXPECT_EQ(MaxF32(x.data() + 1, n), MaxF32Ref(x.data() + 1, n)) << n;
      std::vector<float> a = x, b = x;
      const float sa = ExpSubtractSum(a.data() + 1, n, 2.5f);
      const float sb = ExpSubtractSumRef(b.data() + 1, n, 2.5f);
      EXPECT_EQ(a[0], x[0]) << "wrote before the range";
      for (size_t i = 1; i <= n; ++i) {
        ASSERT_NEAR(a[i], b[i], 4.0f * std::ldexp(std::fabs(b[i]), -23) + 1e-38f) << n << " " << i;
      }
      if (n > 3) {
        EXPECT_EQ(a[2], 0.0f);
      }
      EXPECT_NEAR(sa, sb, (n + 4) * std::ldexp(std::fabs(sb), -23) + 1e-37f) << n;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The kernel's exp gives up the range the softmax never uses (ops/vec.cc): results below
// e^-87 flush to 0, above e^88 are +inf, NaN stays NaN; in between within 4 ulp of std::exp
// (a dense sweep of the whole kept range, including the ends where 2^n is the smallest and
// the largest normal exponent).
TEST(VecSoftmax, ExpKeepsItsRangeAndEdges) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    const size_t n = 1 << 16;
    std::vector<float> x(n), y(n);
    for (size_t i = 0; i < n; ++i) x[i] = -87.0f + 175.0f * static_cast<float>(i) / n;
    y = x;
    ExpSubtractSum(y.data(), n, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      const float e = std::exp(x[i]);
      ASSERT_NEAR(y[i], e, 4.0f * std::ldexp(e, -23)) << x[i];
    }
    const float inf = std::numeric_limits<float>::infinity();
    float edges[] = {-inf, -87.5f, -1000.0f, 88.5f, inf, std::nanf(""), 0.0f};
    ExpSubtractSum(edges, 7, 0.0f);
    EXPECT_EQ(edges[0], 0.0f);
    EXPECT_EQ(edges[1], 0.0f);
    EXPECT_EQ(edges[2], 0.0f);
    EXPECT_EQ(edges[3], inf);
    EXPECT_EQ(edges[4], inf);
    EXPECT_TRUE(std::isnan(edges[5]));
    EXPECT_EQ(edges[6], 1.0f);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// SwiGLU's gate against the twin (std::exp): within 8 ulp (the exp's 4, the twin's exp's 1,
// and the three roundings of each side; vec.h), on every SIMD target, odd sizes, in place;
// large |gate| where the exp flushes to 0 or overflows, and NaN.
TEST(VecSwiGlu, MatchesTheTwin) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-12.0f, 12.0f);
    for (size_t n : {1, 7, 16, 17, 100, 1536}) {
      std::vector<float> gate(n), up(n), want(n);
      for (auto& v : gate) v = u(rng);
      for (auto& v : up) v = u(rng);
      if (n > 7) {
        gate[1] = 95.0f;    // exp(-g) flushes to 0: out = g * up
        gate[2] = -95.0f;   // exp(-g) = +inf: out = -0 (the twin's too)
        gate[3] = 0.0f;
        gate[4] = std::nanf("");
        gate[5] = -60.0f;   // exp(-g) = e^60, still in range
      }
      SwiGluF32Ref(gate.data(), up.data(), n, want.data());
      std::vector<float> got = gate;
      SwiGluF32(got.data(), up.data(), n, got.data());  // out aliases gate
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << n << " " << i;
          continue;
        }
        ASSERT_NEAR(got[i], want[i], 8.0f * std::ldexp(std::fabs(want[i]), -23) + 1e-37f)
            << n << " " << i << " gate " << gate[i];
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace kvpack
