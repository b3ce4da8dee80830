// The int16-weight value kernel (ops/code_dot_i16.h): where the CPU has it, equal bit for bit
// to its scalar twin; on every target (the integer path or the float fallback) within the
// derived bound of the exact sum: per output, s / 2 * sum_k code_k with s = max_k |w_k| / 32767
// of its (query row, group), plus the float summation bound of ops_code_dot_test.cc.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/code_dot_i16.h"
#include "ops/code_unpack.h"

namespace kvpack {
namespace {

constexpr char kNoIntegerKernel[] = "no integer kernel here (AVX512-VNNI + VBMI, or AVX2)";

struct Shape {
  size_t d, first, group;
};

// Min sums msum [n_q, ng] against the twin's: a float sum of n_rows products p * min in
// another order, within n_rows u sum |p min| (u = 2^-24) plus the final rounding.
// min_of(k, g): the min of row k in group g.
template <class MinOf>
void ExpectMinSumsClose(const std::vector<float>& msum, const std::vector<float>& msum_ref,
                        const std::vector<float>& p, size_t ldp, size_t n_q, size_t ng,
                        size_t n_rows, MinOf min_of) {
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t g = 0; g < ng; ++g) {
      double mass = 0.0;
      for (size_t k = 0; k < n_rows; ++k) mass += std::fabs(p[i * ldp + k] * min_of(k, g));
      const float a = msum[i * ng + g], b = msum_ref[i * ng + g];
      ASSERT_LE(std::fabs(a - b), n_rows * std::ldexp(mass, -24) + std::ldexp(std::fabs(b), -23))
          << "msum, query " << i << " group " << g;
    }
  }
}

TEST(CodeDotI16, MatchesTheTwinAndStaysWithinTheBoundOnEveryTarget) {
  bool saw_integer_path = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const bool integer = HasInt16ValueKernel();
    saw_integer_path = saw_integer_path || integer;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const Shape sh : {Shape{64, 0, 64}, Shape{64, 0, 32}, Shape{64, 64, 32},
                           Shape{128, 0, 128}, Shape{48, 16, 16}, Shape{32, 0, 128},
                           Shape{40, 0, 40}, Shape{64, 8, 32}}) {
      for (size_t n_rows : {1, 2, 7, 16, 33, 64}) {
        for (size_t n_q : {1, 2, 3, 4, 7}) {
          for (int max_code : {3, 15, 255}) {
            const size_t g0 = sh.first / sh.group;
            const size_t ng = (sh.first + sh.d - 1) / sh.group - g0 + 1;
            const size_t ld = n_rows + 3, stride = sh.d + 5;
            std::vector<float> w(n_q * ng * ld);
            for (auto& x : w) x = u(rng) * (rng() % 4 == 0 ? 1e-3f : 1.0f);
            std::vector<uint8_t> codes(n_rows * stride);
            for (auto& c : codes) c = static_cast<uint8_t>(rng() % (max_code + 1));
            std::vector<float> base(n_q * sh.d);
            for (auto& x : base) x = u(rng);
            std::vector<float> a = base, b = base, exact = base;
            AxpyCodeRowsWeightedI16(w.data(), n_q, ld, codes.data(), n_rows, stride, sh.d,
                                    sh.first, sh.group, a.data());
            AxpyCodeRowsWeightedRef(w.data(), n_q, ld, codes.data(), n_rows, stride, sh.d,
                                    sh.first, sh.group, exact.data());
            const bool aligned = sh.d % 16 == 0 && sh.first % 16 == 0 && sh.group % 16 == 0;
            if (integer && aligned) {
              AxpyCodeRowsWeightedI16Ref(w.data(), n_q, ld, codes.data(), n_rows, stride, sh.d,
                                         sh.first, sh.group, b.data());
              ASSERT_EQ(a, b) << hwy::TargetName(target) << " d " << sh.d << " group "
                              << sh.group << " rows " << n_rows << " n_q " << n_q;
            }
            for (size_t i = 0; i < n_q; ++i) {
              for (size_t c = 0; c < sh.d; ++c) {
                const size_t g = (sh.first + c) / sh.group - g0;
                double wmax = 0.0, codes_sum = 0.0, mag = std::fabs(base[i * sh.d + c]);
                for (size_t k = 0; k < n_rows; ++k) {
                  const float wk = w[(i * ng + g) * ld + k];
                  wmax = std::max(wmax, static_cast<double>(std::fabs(wk)));
                  codes_sum += codes[k * stride + c];
                  mag += std::fabs(wk) * codes[k * stride + c];
                }
                const double bound = wmax / 32767.0 / 2.0 * codes_sum * (1.0 + 1e-6) +
                                     4.0 * (n_rows + 1) * std::ldexp(1.0, -24) * (mag + 1e-30);
                ASSERT_NEAR(a[i * sh.d + c], exact[i * sh.d + c], bound)
                    << hwy::TargetName(target) << " d " << sh.d << " rows " << n_rows;
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_integer_path) GTEST_SKIP() << kNoIntegerKernel << ": only the float path ran";
}

// Codes read from packed rows: bit-identical to the twin (the scalar unpacking twin, then the
// byte kernel's twin) where the packed integer path runs, and to AxpyCodeRowsWeightedI16 of
// the unpacked window on every target.
TEST(CodeDotI16, PackedRowsMatchTheTwinOnEveryTarget) {
  bool saw_packed_path = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int bits : {2, 4, 8}) {
      for (const Shape sh : {Shape{64, 0, 64}, Shape{64, 0, 32}, Shape{64, 64, 32},
                             Shape{128, 0, 128}, Shape{48, 16, 16}, Shape{64, 8, 32},
                             Shape{192, 0, 192}}) {
        const size_t row_len = sh.first + sh.d + 16;
        for (size_t pad : {0, 5}) {
          const size_t row_bytes = row_len * bits / 8 + pad;
          saw_packed_path =
              saw_packed_path || HasPackedInt16ValueKernel(bits, sh.d, sh.first, sh.group);
          for (size_t n_rows : {1, 2, 7, 16, 33, 64}) {
            for (size_t n_q : {1, 3, 4, 7}) {
              const size_t g0 = sh.first / sh.group;
              const size_t ng = (sh.first + sh.d - 1) / sh.group - g0 + 1;
              const size_t ld = n_rows + 3;
              std::vector<float> w(n_q * ng * ld);
              for (auto& x : w) x = u(rng);
              std::vector<uint8_t> rows(n_rows * row_bytes);
              for (auto& b : rows) b = static_cast<uint8_t>(rng());
              std::vector<float> base(n_q * sh.d);
              for (auto& x : base) x = u(rng);
              std::vector<float> a = base, b = base, c = base;
              AxpyPackedRowsWeightedI16(w.data(), n_q, ld, rows.data(), n_rows, row_bytes, bits,
                                        sh.d, sh.first, sh.group, a.data());
              std::vector<uint8_t> codes(n_rows * sh.d);
              UnpackCodeRowsRef(rows.data(), nullptr, n_rows, row_bytes,
                                static_cast<int64_t>(sh.first), sh.d, bits, codes.data());
              AxpyCodeRowsWeightedI16(w.data(), n_q, ld, codes.data(), n_rows, sh.d, sh.d,
                                      sh.first, sh.group, c.data());
              ASSERT_EQ(a, c) << hwy::TargetName(target) << " bits " << bits << " d " << sh.d
                              << " first " << sh.first << " rows " << n_rows << " n_q " << n_q;
              if (HasPackedInt16ValueKernel(bits, sh.d, sh.first, sh.group)) {
                AxpyPackedRowsWeightedI16Ref(w.data(), n_q, ld, rows.data(), n_rows, row_bytes,
                                             bits, sh.d, sh.first, sh.group, b.data());
                ASSERT_EQ(a, b) << hwy::TargetName(target) << " bits " << bits << " d " << sh.d
                                << " first " << sh.first << " rows " << n_rows;
              }
              ASSERT_NE(a, base);  // not vacuous: the codes moved the outputs
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_packed_path) GTEST_SKIP() << kNoIntegerKernel << ": only the unpacking path ran";
}

// The fused tile (parameters, weights and their quantization in registers): out equal bit
// for bit to the twin (SplitGroupParamsRef, GroupWeightsAndMinSumsRef,
// AxpyPackedRowsWeightedI16Ref); msum, a float sum of m products against the twin's double
// sum, within m u sum |p min| (u = 2^-24) plus the final rounding. Tiles of 1..64 rows (the
// parameter loads of a last, partial block of 16 rows are masked: the params vector ends
// with the tile), 1, 2 and 4 groups per row (fused) and 3 (the composed fallback), whole rows
// and windows (also one head's 64 channels of a 192-channel row with one group, as KCVT's
// values are read), a query row of zeros (all weights 0).
TEST(CodeDotI16, FusedPackedTileMatchesTheTwinOnEveryTarget) {
  bool saw_fused = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int bits : {2, 4, 8}) {
      // {192, 192}: KCVT's value rows, one group over three heads, read one head at a time.
      for (auto [row_len, group] : {std::pair<size_t, size_t>{64, 64}, {64, 32}, {64, 16},
                                    {128, 32}, {96, 32}, {192, 192}}) {
        const size_t n_groups = row_len / group, row_bytes = row_len * bits / 8;
        for (size_t first : {size_t{0}, group, size_t{64}}) {
          if (first >= row_len || (first == 64 && group == 64)) continue;
          const size_t d = row_len == 192 ? 64 : row_len - first;
          const size_t g0 = first / group, ng = n_groups - g0;
          for (size_t n_rows : {1, 2, 15, 16, 17, 40, 63, 64}) {
            saw_fused = saw_fused || HasFusedPackedValueKernel(bits, d, first, group, n_groups, n_rows);
            for (size_t n_q : {1, 3, 4, 5}) {
              const size_t ldp = n_rows + 2;
              std::vector<float> p(n_q * ldp);
              for (auto& x : p) x = std::fabs(u(rng));
              if (n_q > 1) std::fill(p.begin() + ldp, p.begin() + 2 * ldp, 0.0f);
              std::vector<uint16_t> params(n_rows * n_groups * 2);
              for (size_t k = 0; k < params.size(); k += 2) {
                params[k] = Fp32ToFp16(0.01f + 0.1f * std::fabs(u(rng)));
                params[k + 1] = Fp32ToFp16(u(rng));
              }
              std::vector<uint8_t> rows(n_rows * row_bytes);
              for (auto& b : rows) b = static_cast<uint8_t>(rng());
              std::vector<float> base(n_q * d), msum_base(n_q * ng);
              for (auto& x : base) x = u(rng);
              for (auto& x : msum_base) x = u(rng);
              std::vector<float> out = base, out_ref = base, msum = msum_base, msum_ref = msum_base;
              AccumulatePackedRowsI16(p.data(), ldp, n_q, params.data(), n_groups, g0, ng,
                                      rows.data(), n_rows, row_bytes, bits, d, first, group,
                                      out.data(), msum.data());
              AccumulatePackedRowsI16Ref(p.data(), ldp, n_q, params.data(), n_groups, g0, ng,
                                         rows.data(), n_rows, row_bytes, bits, d, first, group,
                                         out_ref.data(), msum_ref.data());
              ASSERT_EQ(out, out_ref) << hwy::TargetName(target) << " bits " << bits << " row "
                                      << row_len << " group " << group << " first " << first
                                      << " rows " << n_rows << " n_q " << n_q;
              ExpectMinSumsClose(msum, msum_ref, p, ldp, n_q, ng, n_rows, [&](size_t k, size_t g) {
                return Fp16ToFp32(params[(k * n_groups + g0 + g) * 2 + 1]);
              });
              ASSERT_NE(out, base);  // not vacuous
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_fused) GTEST_SKIP() << kNoIntegerKernel << ": only the composed path ran";
}

TEST(CodeDotI16, TheBoundIsReached) {
  // Two-sided: the integer path really rounds the weights (a tile whose weights are not
  // multiples of the step gives a nonzero difference from the exact sum).
  if (!HasInt16ValueKernel()) GTEST_SKIP() << kNoIntegerKernel;
  const size_t n_rows = 64, d = 64;
  std::vector<float> w(n_rows);
  for (size_t k = 0; k < n_rows; ++k) w[k] = 1.0f / static_cast<float>(k + 3);
  std::vector<uint8_t> codes(n_rows * d, 3);
  std::vector<float> a(d, 0.0f), exact(d, 0.0f);
  AxpyCodeRowsWeightedI16(w.data(), 1, n_rows, codes.data(), n_rows, d, d, 0, d, a.data());
  AxpyCodeRowsWeightedRef(w.data(), 1, n_rows, codes.data(), n_rows, d, d, 0, d, exact.data());
  EXPECT_NE(a[0], exact[0]);
  EXPECT_NEAR(a[0], exact[0], (1.0f / 3) / 32767.0 / 2 * 3 * n_rows);
}

// Inputs of the plane-row tile tests (q4_0, q8_0): probabilities [n_q, ldp] in [0, 1) with
// row 1 all zero (when there is one), and n fp16 block scales of both signs.
std::vector<float> Probabilities(size_t n_q, size_t ldp, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(n_q * ldp);
  for (auto& x : p) x = u(rng);
  if (n_q > 1) std::fill(p.begin() + ldp, p.begin() + 2 * ldp, 0.0f);
  return p;
}
std::vector<uint16_t> PlaneScales(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  std::vector<uint16_t> scales(n);
  for (auto& x : scales) x = Fp32ToFp16(u(rng));
  return scales;
}

// q4_0 plane rows (scale-only parameters, min = -8 s): where the CPU has the int16 kernel
// (fused at d = 64, composed elsewhere) out equals the twin bit for bit; without it the float
// weights differ from the twin's quantized ones by at most its step bound (s / 2 * sum of the
// codes, as above) plus float summation. msum against the twin as in the fused tile test.
TEST(CodeDotI16, Q4_0TileMatchesTheTwinOnEveryTarget) {
  bool saw_fused = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(10);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t d : {32, 64, 96, 128}) {
      const size_t ng = d / 32;
      for (size_t n_rows : {1, 2, 15, 16, 17, 40, 63, 64}) {
        saw_fused = saw_fused || HasFusedQ4_0ValueKernel(d, n_rows);
        for (size_t n_q : {1, 3, 4, 5}) {
          const size_t ldp = n_rows + 2;
          const std::vector<float> p = Probabilities(n_q, ldp, rng);
          const std::vector<uint16_t> scales = PlaneScales(n_rows * ng, rng);
          std::vector<uint8_t> codes(n_rows * d / 2);
          for (auto& b : codes) b = static_cast<uint8_t>(rng());
          std::vector<float> base(n_q * d), msum_base(n_q * ng);
          for (auto& x : base) x = u(rng);
          for (auto& x : msum_base) x = u(rng);
          std::vector<float> out = base, out_ref = base, msum = msum_base, msum_ref = msum_base;
          AccumulateQ4_0RowsI16(p.data(), ldp, n_q, scales.data(), codes.data(), n_rows, d,
                                out.data(), msum.data());
          AccumulateQ4_0RowsI16Ref(p.data(), ldp, n_q, scales.data(), codes.data(), n_rows, d,
                                   out_ref.data(), msum_ref.data());
          const auto code = [&](size_t k, size_t c) {
            return (codes[k * d / 2 + c / 2] >> (4 * (c % 2))) & 15;
          };
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t c = 0; c < d; ++c) {
              const size_t x = i * d + c;
              if (HasInt16ValueKernel()) {
                ASSERT_EQ(out[x], out_ref[x]) << hwy::TargetName(target) << " d " << d
                                              << " rows " << n_rows << " n_q " << n_q;
                continue;
              }
              double wmax = 0.0, codes_sum = 0.0, mag = std::fabs(base[x]);
              for (size_t k = 0; k < n_rows; ++k) {
                const double w = std::fabs(p[i * ldp + k] * Fp16ToFp32(scales[k * ng + c / 32]));
                wmax = std::max(wmax, w);
                codes_sum += code(k, c);
                mag += w * code(k, c);
              }
              const double bound = wmax / 32767.0 / 2.0 * codes_sum * (1.0 + 1e-6) +
                                   4.0 * (n_rows + 1) * std::ldexp(1.0, -24) * (mag + 1e-30);
              ASSERT_NEAR(out[x], out_ref[x], bound) << hwy::TargetName(target) << " d " << d;
            }
          }
          ExpectMinSumsClose(msum, msum_ref, p, ldp, n_q, ng, n_rows, [&](size_t k, size_t g) {
            return -8.0f * Fp16ToFp32(scales[k * ng + g]);
          });
          ASSERT_NE(out, base);  // not vacuous
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_fused) GTEST_SKIP() << kNoIntegerKernel << ": only the composed path ran";
}

// q8_0 plane rows (signed codes, scale-only parameters, no min): where the fused kernel runs
// (d = 64 with AVX512-VNNI + VBMI) out equals the twin bit for bit; and the twin is within
// the int16 step bound (s / 2 * sum_k |code_k|) plus float summation of the exact sum.
// Codes cover the whole int8 range; row counts around the 16-row steps and the 64-row tile.
TEST(CodeDotI16, Q8_0TileMatchesTheTwinAndTheExactSum) {
  bool saw_fused = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(12);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t d : {32, 64, 128}) {
      const size_t ng = d / 32;
      for (size_t n_rows : {1, 2, 15, 16, 17, 40, 63, 64}) {
        saw_fused = saw_fused || HasFusedQ8_0ValueKernel(d, n_rows);
        for (size_t n_q : {1, 3, 4, 5}) {
          const size_t ldp = n_rows + 2;
          const std::vector<float> p = Probabilities(n_q, ldp, rng);
          const std::vector<uint16_t> scales = PlaneScales(n_rows * ng, rng);
          std::vector<int8_t> codes(n_rows * d);
          for (auto& b : codes) b = static_cast<int8_t>(rng());
          std::vector<float> base(n_q * d);
          for (auto& x : base) x = u(rng);
          std::vector<float> out = base, out_ref = base;
          AccumulateQ8_0RowsI16(p.data(), ldp, n_q, scales.data(), codes.data(), n_rows, d,
                                out.data());
          AccumulateQ8_0RowsI16Ref(p.data(), ldp, n_q, scales.data(), codes.data(), n_rows, d,
                                   out_ref.data());
          ASSERT_EQ(out, out_ref) << hwy::TargetName(target) << " d " << d << " rows " << n_rows
                                  << " n_q " << n_q;
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t c = 0; c < d; ++c) {
              double exact = base[i * d + c], wmax = 0.0, codes_sum = 0.0;
              double mag = std::fabs(exact);
              for (size_t k = 0; k < n_rows; ++k) {
                const double w = p[i * ldp + k] * Fp16ToFp32(scales[k * ng + c / 32]);
                exact += w * codes[k * d + c];
                wmax = std::max(wmax, std::fabs(w));
                codes_sum += std::abs(codes[k * d + c]);
                mag += std::fabs(w * codes[k * d + c]);
              }
              const double bound = wmax / 32767.0 / 2.0 * codes_sum * (1.0 + 1e-6) +
                                   4.0 * (n_rows + 1) * std::ldexp(1.0, -24) * (mag + 1e-30);
              ASSERT_NEAR(out_ref[i * d + c], exact, bound) << "d " << d << " c " << c;
            }
          }
          ASSERT_NE(out, base);  // not vacuous
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_fused) GTEST_SKIP() << kNoIntegerKernel << ": only the twin ran";
}

}  // namespace
}  // namespace kvpack
