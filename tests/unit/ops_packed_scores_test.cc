// The score kernel of runs of per-channel key blocks (ops/packed_scores.h) against its scalar
// twin block by block on every SIMD target, bit width, head size (64 takes the fast path
// where the CPU has AVX512-VNNI; others compose the general kernels), block layout (16 rows
// per step, masked tails, more blocks than one phase) and query count (passes of 3 or 4).
//   - With zero mins the score is alpha * (q8 . code) alone: q8 and alpha follow one rule in
//     both, the dot is exact, so fast and twin agree bit for bit.
//   - With mins, x . min is a float sum in a different order: |difference| <= d u sum |x m|
//     for that sum (u = 2^-24, twice for both orders) plus one rounding of the final add.
#include "ops/packed_scores.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/channel_block_scores_avx2.h"
#include "ops/code_dot_i8.h"
#include "ops/token_row_scores_avx2.h"

namespace kvpack {
namespace {

struct Case {
  std::vector<uint8_t> rows;
  std::vector<uint16_t> params;  // [n_blocks, 2, d]
  std::vector<int64_t> starts;   // [n_blocks + 1]
  std::vector<float> q;
};

Case MakeCase(const std::vector<int64_t>& sizes, size_t row_bytes, size_t d, size_t n_q,
              bool zero_mins, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  Case c;
  c.starts.assign(1, 0);
  for (int64_t n : sizes) c.starts.push_back(c.starts.back() + n);
  c.rows.resize(c.starts.back() * row_bytes);
  for (auto& b : c.rows) b = static_cast<uint8_t>(rng());
  c.params.resize(sizes.size() * 2 * d);
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (size_t j = 0; j < d; ++j) {
      c.params[k * 2 * d + j] = Fp32ToFp16(std::fabs(g(rng)) * 0.1f + 0.01f);
      c.params[k * 2 * d + d + j] = Fp32ToFp16(zero_mins ? 0.0f : g(rng));
    }
  }
  c.q.resize(n_q * d);
  for (auto& x : c.q) x = g(rng);
  if (n_q > 1) std::fill(c.q.begin() + d, c.q.begin() + 2 * d, 0.0f);  // row 1: all zero
  return c;
}

TEST(ChannelBlockScores, MatchTheTwinOnEveryTarget) {
  int fast_runs = 0;
  // One block (16-row steps and masked tails), KIVI's 32-token blocks, and mixed sizes
  // (more blocks than one phase holds).
  std::vector<std::vector<int64_t>> layouts = {{1}, {5}, {16}, {17}, {33}, {70},
                                               {32, 32, 32}, {7, 32, 16, 1, 40, 3}};
  layouts.push_back(std::vector<int64_t>(40, 32));
  layouts.back()[17] = 9;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(21);
    for (int bits : {2, 4, 8}) {  // 8: the int16 query (AVX-512 at d = 64, AVX2 at 64 and 128)
      for (size_t d : {32, 64, 128}) {
        for (size_t pad : {0, 3}) {
          const size_t row_bytes = d * bits / 8 + pad;
          fast_runs += HasFastPackedScores(row_bytes, d, bits) ||
                       HasAvx2ChannelBlockScores(row_bytes, d, bits);
          for (const auto& sizes : layouts) {
            for (size_t n_q : {1, 2, 3, 4, 5, 9}) {
              for (bool zero_mins : {true, false}) {
                const Case c = MakeCase(sizes, row_bytes, d, n_q, zero_mins, rng);
                const size_t n_rows = c.starts.back(), ld = n_rows + 3;
                std::vector<float> fast(n_q * ld, -5.0f), ref(n_q * ld, -5.0f);
                ScoreChannelBlocksI8(c.rows.data(), row_bytes, d, bits, c.params.data(),
                                     c.starts.data(), sizes.size(), c.q.data(), n_q,
                                     fast.data(), ld, /*n_next_blocks=*/0);
                for (size_t k = 0; k < sizes.size(); ++k) {
                  ScoreChannelBlockI8Ref(c.rows.data() + c.starts[k] * row_bytes, sizes[k],
                                         row_bytes, d, bits, c.params.data() + k * 2 * d,
                                         c.q.data(), n_q, ref.data() + c.starts[k], ld);
                }
                for (size_t i = 0; i < n_q; ++i) {
                  for (size_t r = 0; r < ld; ++r) {
                    const float a = fast[i * ld + r], b = ref[i * ld + r];
                    if (r >= n_rows) {
                      ASSERT_EQ(a, -5.0f) << "column " << r << " is past the rows";
                      continue;
                    }
                    size_t k = 0;
                    while (static_cast<int64_t>(r) >= c.starts[k + 1]) ++k;
                    double mass = 0.0;
                    for (size_t j = 0; j < d; ++j) {
                      mass += std::fabs(c.q[i * d + j] * Fp16ToFp32(c.params[k * 2 * d + d + j]));
                    }
                    const double bound = zero_mins ? 0.0
                                                   : 2.0 * d * std::ldexp(mass, -24) +
                                                         std::ldexp(std::fabs(b), -23);
                    ASSERT_LE(std::fabs(a - b), bound)
                        << hwy::TargetName(target) << " bits " << bits << " d " << d << " pad "
                        << pad << " blocks " << sizes.size() << " n_q " << n_q << " query "
                        << i << " row " << r;
                  }
                }
                // Not vacuous: a nonzero query row gives scores that vary with the codes.
                if (n_rows > 1) {
                  EXPECT_NE(ref[0], ref[1]);
                }
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (fast_runs == 0) {
    GTEST_SKIP() << "no AVX2 or AVX512-VNNI: only the general path was compared";
  }
}

// Attention calls a head's blocks a tile at a time and tells each call how many blocks follow
// (their parameters are prefetched): the tiles' scores equal one call's over every block, bit
// for bit, whatever the count says, including 0 and one past what a phase reads.
TEST(ChannelBlockScores, TilesWithTheirFollowingBlocksEqualOneCall) {
  std::mt19937 rng(23);
  std::vector<int64_t> sizes(70, 32);
  sizes[40] = 11;
  for (int bits : {2, 4, 8}) {
    for (size_t d : {64, 128}) {
      const size_t row_bytes = d * bits / 8, n_q = 3;
      const Case c = MakeCase(sizes, row_bytes, d, n_q, /*zero_mins=*/false, rng);
      const size_t n_rows = c.starts.back(), n_blocks = sizes.size();
      std::vector<float> whole(n_q * n_rows), tiled(n_q * n_rows, -5.0f);
      ScoreChannelBlocksI8(c.rows.data(), row_bytes, d, bits, c.params.data(), c.starts.data(),
                           n_blocks, c.q.data(), n_q, whole.data(), n_rows, 0);
      for (size_t b0 = 0; b0 < n_blocks; b0 += 32) {
        const size_t nb = std::min<size_t>(32, n_blocks - b0);
        std::vector<int64_t> starts;
        for (size_t k = 0; k <= nb; ++k) starts.push_back(c.starts[b0 + k] - c.starts[b0]);
        const size_t r0 = static_cast<size_t>(c.starts[b0]);
        ScoreChannelBlocksI8(c.rows.data() + r0 * row_bytes, row_bytes, d, bits,
                             c.params.data() + b0 * 2 * d, starts.data(), nb, c.q.data(), n_q,
                             tiled.data() + r0, n_rows, n_blocks - b0 - nb);
      }
      for (size_t i = 0; i < n_q * n_rows; ++i) {
        ASSERT_EQ(tiled[i], whole[i]) << "bits " << bits << " d " << d << " index " << i;
      }
    }
  }
}

// Per-token rows with one or two (scale, min) groups: the fast paths (AVX512-VNNI, d 64 or
// 128, rows without padding; AVX2, one group, d 64 or 128, rows without padding) equal the
// twin bit for bit; every path on every target within
// one rounding of each term (targets without FMA round the general path's multiply-adds
// twice); row counts around the 16-row steps, query counts around the passes of 3 and 4.
TEST(TokenRowScores, EqualTheTwinOnEveryTarget) {
  int fast_runs = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(22);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int bits : {2, 4}) {
      for (size_t d : {32, 64, 96, 128}) {
        for (size_t n_groups : {1, 2}) {
          for (size_t pad : {0, 3}) {
            const size_t row_bytes = d * bits / 8 + pad;
            const bool fast = HasFastTokenRowScores(row_bytes, d, bits, n_groups) ||
                              HasAvx2TokenRowScores(row_bytes, d, bits, n_groups);
            fast_runs += fast;
            for (size_t n_rows : {1, 5, 16, 17, 40, 100}) {
              for (size_t n_q : {1, 2, 3, 4, 5, 9}) {
                std::vector<uint8_t> rows(n_rows * row_bytes);
                for (auto& b : rows) b = static_cast<uint8_t>(rng());
                std::vector<uint16_t> params(2 * n_rows * n_groups);
                for (size_t k = 0; k < params.size(); k += 2) {
                  params[k] = Fp32ToFp16(std::fabs(g(rng)) * 0.1f + 0.01f);
                  params[k + 1] = Fp32ToFp16(g(rng));
                }
                std::vector<int8_t> q8(n_q * d);
                for (auto& x : q8) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
                std::vector<float> alpha(n_q), qsum(n_q * n_groups);
                for (auto& x : alpha) x = std::fabs(g(rng)) * 0.01f;
                for (auto& x : qsum) x = g(rng) * 4.0f;
                const size_t ld = n_rows + 3;
                std::vector<float> out(n_q * ld, -5.0f), ref(n_q * ld, -5.0f);
                ScoreTokenRowsI8(rows.data(), n_rows, row_bytes, d, bits, n_groups, params.data(),
                                 q8.data(), alpha.data(), qsum.data(), n_q, out.data(), ld);
                ScoreTokenRowsI8Ref(rows.data(), n_rows, row_bytes, d, bits, n_groups,
                                    params.data(), q8.data(), alpha.data(), qsum.data(), n_q,
                                    ref.data(), ld);
                if (fast) {
                  ASSERT_EQ(out, ref) << hwy::TargetName(target) << " bits " << bits << " d " << d
                                      << " groups " << n_groups << " rows " << n_rows << " n_q "
                                      << n_q;
                }
                // The general path on targets without FMA rounds each multiply-add twice:
                // within one rounding of every term the sum adds.
                for (size_t i = 0; i < n_q; ++i) {
                  for (size_t r = 0; r < ld; ++r) {
                    const size_t x = i * ld + r;
                    if (r >= n_rows) {
                      ASSERT_EQ(out[x], -5.0f);
                      continue;
                    }
                    double terms = 0.0;
                    for (size_t k = 0; k < n_groups; ++k) {
                      const uint16_t* pr = &params[(r * n_groups + k) * 2];
                      terms += std::fabs(Fp16ToFp32(pr[0])) * alpha[i] * 127.0 * 15.0 * d +
                               std::fabs(Fp16ToFp32(pr[1]) * qsum[i * n_groups + k]);
                    }
                    ASSERT_LE(std::fabs(out[x] - ref[x]), std::ldexp(terms, -21))
                        << hwy::TargetName(target) << " bits " << bits << " d " << d;
                  }
                }
                if (n_rows > 1) {
                  EXPECT_NE(ref[0], ref[1]);  // not vacuous
                }
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (fast_runs == 0) {
    GTEST_SKIP() << "no AVX2 or AVX512-VNNI: only the general path was compared";
  }
}

// 8-bit per-token rows (FlexGen's 8-bit keys) with the int16 query: the fast path (d = 64,
// AVX512-VNNI) equals the twin bit for bit; and both stay within the derived bound of the
// exact score q . (code * scale + min) in double:
//   sum_c |q_c - alpha q16_c| scale code_c <= alpha (1/2 + 2^-7) sum_g scale_g sum_{c in g} code_c
// plus the float steps (a few roundings of the terms' magnitude). Two-sided: the error is
// nonzero (the query really is quantized) and far below an int8 query's bound.
TEST(TokenRowScores, EightBitRowsWithTheInt16QueryEqualTheTwinAndKeepTheBound) {
  int fast_runs = 0;
  double worst_ratio = 0.0;
  bool saw_error = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(24);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (size_t d : {64, 128}) {
      for (size_t n_groups : {1, 2}) {
        const bool fast = HasFastTokenRowScoresI16(d, n_groups);
        fast_runs += fast;
        const size_t group = d / n_groups;
        for (size_t n_rows : {1, 5, 16, 17, 40, 100}) {
          for (size_t n_q : {1, 3, 4, 5}) {
            std::vector<uint8_t> rows(n_rows * d);
            for (auto& b : rows) b = static_cast<uint8_t>(rng());
            std::vector<uint16_t> params(2 * n_rows * n_groups);
            for (size_t k = 0; k < params.size(); k += 2) {
              params[k] = Fp32ToFp16(std::fabs(g(rng)) * 0.01f + 0.001f);
              params[k + 1] = Fp32ToFp16(g(rng));
            }
            std::vector<float> q(n_q * d);
            for (auto& x : q) x = g(rng);
            std::vector<int16_t> q16(n_q * d);
            std::vector<float> alpha(n_q), qsum(n_q * n_groups, 0.0f);
            for (size_t i = 0; i < n_q; ++i) {
              alpha[i] = QuantizeI16Ref(&q[i * d], d, &q16[i * d]);
              for (size_t c = 0; c < d; ++c) qsum[i * n_groups + c / group] += q[i * d + c];
            }
            const size_t ld = n_rows + 3;
            std::vector<float> out(n_q * ld, -5.0f), ref(n_q * ld, -5.0f);
            ScoreTokenRowsI16(rows.data(), n_rows, d, n_groups, params.data(), q16.data(),
                              alpha.data(), qsum.data(), n_q, out.data(), ld);
            ScoreTokenRowsI16Ref(rows.data(), n_rows, d, n_groups, params.data(), q16.data(),
                                 alpha.data(), qsum.data(), n_q, ref.data(), ld);
            ASSERT_EQ(out, ref) << hwy::TargetName(target) << " d " << d << " groups "
                                << n_groups << " rows " << n_rows << " n_q " << n_q;
            for (size_t i = 0; i < n_q; ++i) {
              for (size_t r = 0; r < ld; ++r) {
                if (r >= n_rows) {
                  ASSERT_EQ(out[i * ld + r], -5.0f);
                  continue;
                }
                double exact = 0.0, bound = 0.0, mag = 0.0, int8_bound = 0.0;
                for (size_t c = 0; c < d; ++c) {
                  const uint16_t* pr = &params[(r * n_groups + c / group) * 2];
                  const double scale = Fp16ToFp32(pr[0]), min = Fp16ToFp32(pr[1]);
                  const double code = rows[r * d + c];
                  exact += q[i * d + c] * (code * scale + min);
                  mag += std::fabs(q[i * d + c]) * (code * scale + std::fabs(min));
                  bound += alpha[i] * (0.5 + std::ldexp(1.0, -7)) * scale * code;
                  int8_bound += alpha[i] * 32767.0 / 127.0 * 0.5 * scale * code;
                }
                const double err = std::fabs(out[i * ld + r] - exact);
                ASSERT_LE(err, bound + 8.0 * std::ldexp(mag, -24))
                    << hwy::TargetName(target) << " d " << d << " query " << i << " row " << r;
                worst_ratio = std::max(worst_ratio, err / int8_bound);
                saw_error = saw_error || err > 0.0;
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_TRUE(saw_error);
  EXPECT_LT(worst_ratio, 0.02);  // at most 1/50 of what an int8 query may cost
  if (fast_runs == 0) GTEST_SKIP() << "no AVX2 or AVX512-VNNI: only the twin ran";
}

// q4_0 plane rows: 32-channel groups with scale s and min -8 s. The fast paths (d = 64 with
// AVX512-VNNI or AVX2) equal the twin bit for bit (the same integers and the same float steps); the
// general path (other head sizes and targets) too where the target has FMA, and within one
// rounding of each multiply-add's terms elsewhere. Scales of both signs (ggml's d is the
// block's max-by-magnitude / -8), row counts around the 16-row steps, passes of 1 to 4 queries.
TEST(Q4_0RowScores, EqualTheTwinOnEveryTarget) {
  int fast_runs = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(23);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (size_t d : {32, 64, 96, 128}) {
      const size_t ng = d / 32;
      const bool fast_path = HasFastQ4_0Scores(d) || HasAvx2Q4_0Scores(d);
      fast_runs += fast_path;
      for (size_t n_rows : {1, 5, 16, 17, 40, 100}) {
        for (size_t n_q : {1, 2, 3, 4, 5, 9}) {
          std::vector<uint8_t> codes(n_rows * d / 2);
          for (auto& b : codes) b = static_cast<uint8_t>(rng());
          std::vector<uint16_t> scales(n_rows * ng);
          for (auto& x : scales) x = Fp32ToFp16(g(rng) * 0.1f);
          std::vector<int8_t> q8(n_q * d);
          for (auto& x : q8) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
          std::vector<float> alpha(n_q), qsum(n_q * ng);
          for (auto& x : alpha) x = std::fabs(g(rng)) * 0.01f;
          for (auto& x : qsum) x = g(rng) * 4.0f;
          const size_t ld = n_rows + 3;
          std::vector<float> fast(n_q * ld, -5.0f), ref(n_q * ld, -5.0f);
          ScoreQ4_0RowsI8(codes.data(), scales.data(), n_rows, d, q8.data(), alpha.data(),
                          qsum.data(), n_q, fast.data(), ld);
          ScoreQ4_0RowsI8Ref(codes.data(), scales.data(), n_rows, d, q8.data(), alpha.data(),
                             qsum.data(), n_q, ref.data(), ld);
          if (fast_path) {
            ASSERT_EQ(fast, ref) << hwy::TargetName(target) << " d " << d << " rows " << n_rows
                                 << " n_q " << n_q;
          }
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t r = 0; r < ld; ++r) {
              const size_t x = i * ld + r;
              if (r >= n_rows) {
                ASSERT_EQ(fast[x], -5.0f);
                continue;
              }
              double terms = 0.0;  // the magnitudes of every product the sum adds
              for (size_t k = 0; k < ng; ++k) {
                const double s = std::fabs(Fp16ToFp32(scales[r * ng + k]));
                terms += s * (alpha[i] * 15.0 * 127.0 * 32.0 + 8.0 * std::fabs(qsum[i * ng + k]));
              }
              ASSERT_LE(std::fabs(fast[x] - ref[x]), std::ldexp(terms, -21))
                  << hwy::TargetName(target) << " d " << d << " rows " << n_rows;
            }
          }
          if (n_rows > 1) {
            EXPECT_NE(ref[0], ref[1]);  // not vacuous
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (fast_runs == 0) {
    GTEST_SKIP() << "no AVX2 or AVX512-VNNI: only the general path was compared";
  }
}

// q8_0 plane rows: signed codes in 32-channel groups with one scale each. The fast path
// (d = 64 with AVX512-VNNI) reads each code as code + 128 and takes 128 x sum(q8) back off:
// it equals the twin bit for bit, and the twin is alpha * sum_g s_g (q8 . code)_g within the
// float rounding of its two steps per group. Codes cover the whole int8 range (-128 too, the
// one ggml never writes), scales both signs, row counts around the 16-row steps, 1 to 9
// queries (passes of up to 4).
TEST(Q8_0RowScores, EqualTheTwinAndTheExactSum) {
  int fast_runs = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(29);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (size_t d : {32, 64, 128}) {
      const size_t ng = d / 32;
      fast_runs += HasFastQ8_0Scores(d);
      for (size_t n_rows : {1, 5, 16, 17, 40, 100}) {
        for (size_t n_q : {1, 2, 3, 4, 5, 9}) {
          std::vector<int8_t> codes(n_rows * d);
          for (auto& b : codes) b = static_cast<int8_t>(rng());
          // Extreme rows: every code at one end, against an extreme query below.
          std::fill(codes.begin(), codes.begin() + d, int8_t{-128});
          std::vector<uint16_t> scales(n_rows * ng);
          for (auto& x : scales) x = Fp32ToFp16(g(rng) * 0.1f);
          std::vector<int8_t> q8(n_q * d);
          for (auto& x : q8) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
          std::fill(q8.begin(), q8.begin() + d, int8_t{127});
          std::vector<float> alpha(n_q);
          for (auto& x : alpha) x = std::fabs(g(rng)) * 0.01f;
          const size_t ld = n_rows + 3;
          std::vector<float> fast(n_q * ld, -5.0f), ref(n_q * ld, -5.0f);
          ScoreQ8_0RowsI8(codes.data(), scales.data(), n_rows, d, q8.data(), alpha.data(), n_q,
                          fast.data(), ld);
          ScoreQ8_0RowsI8Ref(codes.data(), scales.data(), n_rows, d, q8.data(), alpha.data(),
                             n_q, ref.data(), ld);
          ASSERT_EQ(fast, ref) << hwy::TargetName(target) << " d " << d << " rows " << n_rows
                               << " n_q " << n_q;
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t r = 0; r < n_rows; ++r) {
              double exact = 0.0, terms = 0.0;
              for (size_t k = 0; k < ng; ++k) {
                int64_t dot = 0;
                for (size_t c = 32 * k; c < 32 * k + 32; ++c) dot += codes[r * d + c] * q8[i * d + c];
                const double s = Fp16ToFp32(scales[r * ng + k]);
                exact += alpha[i] * s * static_cast<double>(dot);
                terms += std::fabs(alpha[i] * s * static_cast<double>(dot));
              }
              // Per group: alpha * s rounded, the product rounded, the sum rounded.
              ASSERT_NEAR(ref[i * ld + r], exact, 4.0 * std::ldexp(terms, -24) + 1e-30)
                  << "d " << d << " row " << r;
            }
          }
          if (n_rows > 1) {
            EXPECT_NE(ref[0], ref[1]);  // not vacuous
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (fast_runs == 0) GTEST_SKIP() << "no AVX512-VNNI: only the twin ran";
}

}  // namespace
}  // namespace kvpack
