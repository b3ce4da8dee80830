// The int8-weight value kernel of 2-bit rows (ops/value_dot_i8.h): where the CPU has it,
// out equal bit for bit to its scalar twin (msum, a float sum in another order, close); on
// every target within the derived bound of the exact sum, per output
//   s / 2 * sum_k code_k   with s = max_k |w_k| / 127 of its (query row, group),
// plus the rounding of the fused multiply-add; and the bound is not vacuous (the weights
// really are rounded).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/value_dot_i8.h"

namespace kvpack {
namespace {

int Code(const std::vector<uint8_t>& rows, size_t row_bytes, size_t k, size_t c) {
  return (rows[k * row_bytes + c / 4] >> (2 * (c % 4))) & 3;
}

// One tile's inputs: probabilities [n_q, ldp] in [0, 1) with query row 1 all zero (when there
// is one), (scale, min) pairs with scales of both signs, random code bytes.
struct Tile {
  size_t d, n_q, n_rows, n_groups, ldp;
  std::vector<float> p;
  std::vector<uint16_t> params;
  std::vector<uint8_t> rows;
  float ScaleOf(size_t k, size_t g) const { return Fp16ToFp32(params[(k * n_groups + g) * 2]); }
  float MinOf(size_t k, size_t g) const { return Fp16ToFp32(params[(k * n_groups + g) * 2 + 1]); }
};

Tile MakeTile(size_t d, size_t n_q, size_t n_rows, size_t n_groups, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tile t{d, n_q, n_rows, n_groups, n_rows + 3, {}, {}, {}};
  t.p.resize(n_q * t.ldp);
  for (auto& x : t.p) x = std::fabs(u(rng));
  if (n_q > 1) std::fill(t.p.begin() + t.ldp, t.p.begin() + 2 * t.ldp, 0.0f);
  t.params.resize(n_rows * n_groups * 2);
  for (size_t k = 0; k < t.params.size(); k += 2) {
    t.params[k] = Fp32ToFp16((rng() % 5 == 0 ? -1.0f : 1.0f) * (0.01f + 0.1f * std::fabs(u(rng))));
    t.params[k + 1] = Fp32ToFp16(u(rng));
  }
  t.rows.resize(n_rows * d / 4);
  for (auto& b : t.rows) b = static_cast<uint8_t>(rng());
  return t;
}

// Heads of 64 channels (one window), 128 (two windows, each with a group of its own or
// two of 32) and 192 (three windows of one 192-channel group; 96 or 48 channels per group
// split windows, which the twin takes).
TEST(ValueDotI8, MatchesTheTwinOnEveryTarget) {
  bool saw_kernel = false, saw_wide_kernel = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(21);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t d : {64, 128, 192}) {
      for (size_t n_groups : {1, 2, 4}) {
        for (size_t n_rows : {1, 2, 3, 4, 5, 15, 16, 17, 40, 63, 64, 65, 130, 200, 513, 1030}) {
          const bool kernel = HasI8ValueKernel(d, n_groups);
          saw_kernel = saw_kernel || kernel;
          saw_wide_kernel = saw_wide_kernel || (kernel && d > 64);
          for (size_t n_q : {1, 2, 3, 4, 5, 7}) {
            const Tile t = MakeTile(d, n_q, n_rows, n_groups, rng);
            std::vector<float> base(n_q * d), msum_base(n_q * n_groups);
            for (auto& x : base) x = u(rng);
            for (auto& x : msum_base) x = u(rng);
            std::vector<float> out = base, out_ref = base, msum = msum_base, msum_ref = msum_base;
            AccumulateTwoBitRowsI8(t.p.data(), t.ldp, n_q, t.params.data(), n_groups,
                                   t.rows.data(), d, n_rows, out.data(), msum.data());
            AccumulateTwoBitRowsI8Ref(t.p.data(), t.ldp, n_q, t.params.data(), n_groups,
                                      t.rows.data(), d, n_rows, out_ref.data(), msum_ref.data());
            ASSERT_EQ(out, out_ref) << hwy::TargetName(target) << " d " << d << " groups "
                                    << n_groups << " rows " << n_rows << " n_q " << n_q;
            ASSERT_NE(out, base);  // not vacuous
            // msum: n_rows float products summed in two orders, within n_rows u sum |p min|
            // (u = 2^-24) of each other, plus the final roundings.
            for (size_t i = 0; i < n_q; ++i) {
              for (size_t g = 0; g < n_groups; ++g) {
                double mass = std::fabs(msum_base[i * n_groups + g]);
                for (size_t k = 0; k < n_rows; ++k) {
                  mass += std::fabs(t.p[i * t.ldp + k] * t.MinOf(k, g));
                }
                ASSERT_NEAR(msum[i * n_groups + g], msum_ref[i * n_groups + g],
                            (n_rows + 2) * std::ldexp(mass, -23))
                    << "msum, query " << i << " group " << g;
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_kernel) GTEST_SKIP() << "no AVX512-VNNI + VBMI + DQ here: only the twin ran";
  EXPECT_TRUE(saw_wide_kernel);
}

// The dispatched kernel (the integer path or the twin) against the exact sum of the float
// weights w = p * scale: every output within its derived bound, and the largest error a real
// share of it (a bound that holds only because nothing is rounded would prove nothing).
TEST(ValueDotI8, StaysWithinTheDerivedBoundOfTheExactSum) {
  std::mt19937 rng(22);
  double worst_ratio = 0.0;
  for (size_t d : {64, 128}) {
    for (size_t n_groups : {1, 2, 4}) {
      for (size_t n_rows : {3, 16, 37, 64}) {
        const size_t n_q = 3, group = d / n_groups, row_bytes = d / 4;
        const Tile t = MakeTile(d, n_q, n_rows, n_groups, rng);
        std::vector<float> out(n_q * d, 0.0f), msum(n_q * n_groups, 0.0f);
        AccumulateTwoBitRowsI8(t.p.data(), t.ldp, n_q, t.params.data(), n_groups, t.rows.data(),
                               d, n_rows, out.data(), msum.data());
        for (size_t i = 0; i < n_q; ++i) {
          for (size_t c = 0; c < d; ++c) {
            const size_t g = c / group;
            double exact = 0.0, wmax = 0.0, codes = 0.0;
            for (size_t k = 0; k < n_rows; ++k) {
              const float w = t.p[i * t.ldp + k] * t.ScaleOf(k, g);
              const int code = Code(t.rows, row_bytes, k, c);
              exact += static_cast<double>(w) * code;
              wmax = std::max(wmax, static_cast<double>(std::fabs(w)));
              codes += code;
            }
            // s = wmax / 127 (rounded: a relative 2^-23), each weight within s / 2 of w / s
            // steps (plus the rounding of w * (127 / wmax), 127 * 2^-23 of a step), one fma.
            const double bound = wmax / 127.0 / 2.0 * codes * (1.0 + 1e-5) +
                                 std::ldexp(std::fabs(exact), -23) + 1e-30;
            const double err = std::fabs(out[i * d + c] - exact);
            ASSERT_LE(err, bound) << "d " << d << " groups " << n_groups << " rows " << n_rows
                                  << " query " << i << " channel " << c;
            if (wmax > 0.0) worst_ratio = std::max(worst_ratio, err / bound);
          }
        }
      }
    }
  }
  EXPECT_GT(worst_ratio, 0.05) << "the weights' rounding should show";
}

TEST(ValueDotI8, QuantizerRoundsToNearestAndKeepsZeros) {
  const std::vector<float> w = {0.0f, 1.0f, -0.5f, 0.25f, -1.0f};
  std::vector<int8_t> wq(w.size());
  EXPECT_FLOAT_EQ(QuantizeWeightsI8Ref(w.data(), w.size(), wq.data()), 1.0f / 127.0f);
  // 0.5 * 127 = 63.5 and 0.25 * 127 = 31.75: to nearest, ties to even.
  EXPECT_EQ(wq, (std::vector<int8_t>{0, 127, -64, 32, -127}));
  const std::vector<float> zeros(4, 0.0f);
  std::vector<int8_t> zq(4, 9);
  EXPECT_EQ(QuantizeWeightsI8Ref(zeros.data(), zeros.size(), zq.data()), 0.0f);
  EXPECT_EQ(zq, std::vector<int8_t>(4, 0));
}

}  // namespace
}  // namespace kvpack
