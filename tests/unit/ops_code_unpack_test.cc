// SIMD code unpacking and dequantization against their scalar twins: every bit width,
// aligned and unaligned first codes, sizes around the vector widths, misaligned pointers.
#include "ops/code_unpack.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "hwy/targets.h"

#include "core/ggml_type.h"
#include "core/half.h"
#include "ops/ggml_quants.h"

namespace kvpack {
namespace {

// Packs codes LSB-first exactly as the bit-stream definition says (independent of both
// implementations under test).
std::vector<uint8_t> Pack(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint8_t> out((codes.size() * bits + 7) / 8 + 1, 0);
  for (size_t i = 0; i < codes.size(); ++i) {
    for (int b = 0; b < bits; ++b) {
      if ((codes[i] >> b) & 1) {
        const size_t pos = i * bits + b;
        out[pos / 8] |= static_cast<uint8_t>(1u << (pos % 8));
      }
    }
  }
  return out;
}

TEST(CodeUnpack, MatchesTheBitStreamDefinitionForEveryWidthAndOffset) {
  std::mt19937 rng(7);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {1, 15, 16, 31, 32, 33, 63, 64, 65, 127, 128, 200, 256, 515}) {
      for (int64_t first : {0, 1, 3, 4, 8, 16}) {
        std::vector<uint8_t> codes(first + n);
        for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
        const std::vector<uint8_t> packed = Pack(codes, bits);
        std::vector<uint8_t> fast(n + 1, 0xEE), ref(n, 0);
        UnpackCodesU8(packed.data(), first, n, bits, fast.data());
        UnpackCodesU8Ref(packed.data(), first, n, bits, ref.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(ref[i], codes[first + i]) << bits << " " << n << " " << first << " " << i;
          ASSERT_EQ(fast[i], codes[first + i]) << bits << " " << n << " " << first << " " << i;
        }
        ASSERT_EQ(fast[n], 0xEE) << "wrote past the end";
      }
    }
  }
}

TEST(CodeUnpack, MisalignedSourceAndDestination) {
  std::vector<uint8_t> codes(256);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 7) & 15);
  std::vector<uint8_t> packed = Pack(codes, 4);
  packed.insert(packed.begin(), 0);  // source now starts one byte in
  std::vector<uint8_t> out(258);
  UnpackCodesU8(packed.data() + 1, 0, 256, 4, out.data() + 1);
  for (size_t i = 0; i < 256; ++i) ASSERT_EQ(out[i + 1], codes[i]);
}

// Dequantization: c * s + m with the SIMD path's fused multiply-add may differ from the
// scalar twin by one rounding of the product: |diff| <= ulp(|c * s| + |m|).
TEST(CodeUnpack, DequantizeMatchesTheScalarTwin) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (size_t n : {1, 7, 8, 15, 16, 17, 64, 100}) {
    std::vector<uint8_t> codes(n + 1);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & 255);
    std::vector<float> scale(n + 1), min(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      scale[i] = u(rng);
      min[i] = u(rng);
    }
    std::vector<float> a(n + 1), b(n + 1);
    // Uniform parameters, misaligned by one element.
    DequantizeCodes(codes.data() + 1, n, 0.37f, -1.25f, a.data() + 1);
    DequantizeCodesRef(codes.data() + 1, n, 0.37f, -1.25f, b.data() + 1);
    for (size_t i = 1; i <= n; ++i) {
      const float bound = std::ldexp(1.0f, -23) * (codes[i] * 0.37f + 1.25f);
      ASSERT_NEAR(a[i], b[i], bound) << n << " " << i;
    }
    DequantizeCodesPerChannel(codes.data() + 1, n, scale.data() + 1, min.data() + 1, a.data() + 1);
    DequantizeCodesPerChannelRef(codes.data() + 1, n, scale.data() + 1, min.data() + 1,
                                 b.data() + 1);
    for (size_t i = 1; i <= n; ++i) {
      const float bound =
          std::ldexp(1.0f, -23) * (codes[i] * std::fabs(scale[i]) + std::fabs(min[i]));
      ASSERT_NEAR(a[i], b[i], bound) << n << " " << i;
    }
  }
}

// Tile kernels against their scalar twins, with odd widths, windows and group sizes.
TEST(CodeUnpack, RowTilesMatchTheScalarTwins) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int bits : {2, 3, 4, 8}) {
    for (size_t d : {8, 40, 64, 96}) {
      const size_t row_bytes = (d * bits + 7) / 8 + 1, n_rows = 5;
      std::vector<uint8_t> codes(n_rows * row_bytes);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & 255);
      std::vector<float> scale(d), min(d);
      for (size_t c = 0; c < d; ++c) {
        scale[c] = u(rng);
        min[c] = u(rng);
      }
      std::vector<float> a(n_rows * d), b(n_rows * d);
      DequantizeRowsPerChannel(codes.data(), n_rows, row_bytes, bits, d, scale.data(), min.data(),
                               a.data());
      DequantizeRowsPerChannelRef(codes.data(), n_rows, row_bytes, bits, d, scale.data(),
                                  min.data(), b.data());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], std::ldexp(1.0f, -22) * (255.0f * 2.0f + 2.0f)) << bits << " " << d;
      }
      for (size_t group : {4, 16, 32, 1000}) {
        const size_t n_groups = (d + std::min(group, d) - 1) / std::min(group, d);
        std::vector<uint16_t> params(n_rows * n_groups * 2);
        for (auto& p : params) p = Fp32ToFp16(u(rng));
        for (size_t first : {size_t{0}, d / 2}) {
          const size_t n = d - first;
          std::vector<float> x(n_rows * n), y(n_rows * n);
          DequantizeRowsPerToken(codes.data(), n_rows, row_bytes, bits, first, n,
                                 std::min(group, d), params.data(), n_groups, x.data());
          DequantizeRowsPerTokenRef(codes.data(), n_rows, row_bytes, bits, first, n,
                                    std::min(group, d), params.data(), n_groups, y.data());
          for (size_t i = 0; i < x.size(); ++i) {
            ASSERT_NEAR(x[i], y[i], std::ldexp(1.0f, -22) * (255.0f * 2.0f + 2.0f))
                << bits << " " << d << " " << group << " " << first;
          }
        }
      }
    }
  }
}

// The SIMD block dequantizers against ggml_quants' scalar DequantizeRow (the reference
// layouts), on random blocks including extreme codes. (q4_0: (c - 8) * d computed as
// c * d - 8d may differ by one rounding: bound ulp(9 |d| * 8).)
// Every target; block counts around the vector width and the 64-block scale chunks.
TEST(CodeUnpack, GgmlBlocksMatchTheScalarDequantizer) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (size_t n_blocks : {1, 2, 5, 17, 64, 65, 130}) {
      for (int fmt = 0; fmt < 2; ++fmt) {
        const size_t bytes = fmt == 0 ? 34 : 18;
        std::vector<uint8_t> blocks(n_blocks * bytes);
        for (auto& b : blocks) b = static_cast<uint8_t>(rng() & 255);
        for (size_t b = 0; b < n_blocks; ++b) {
          const uint16_t d = Fp32ToFp16(u(rng));
          std::memcpy(&blocks[b * bytes], &d, 2);
        }
        std::vector<float> fast(n_blocks * 32), ref(n_blocks * 32);
        if (fmt == 0) {
          DequantizeQ8_0Blocks(blocks.data(), n_blocks, fast.data());
          ASSERT_TRUE(DequantizeRow(GgmlType::kQ8_0, blocks.data(), ref.data(), n_blocks * 32).ok());
          for (size_t i = 0; i < fast.size(); ++i) ASSERT_EQ(fast[i], ref[i]) << i;
        } else {
          DequantizeQ4_0Blocks(blocks.data(), n_blocks, fast.data());
          ASSERT_TRUE(DequantizeRow(GgmlType::kQ4_0, blocks.data(), ref.data(), n_blocks * 32).ok());
          for (size_t i = 0; i < fast.size(); ++i) {
            uint16_t d;
            std::memcpy(&d, &blocks[(i / 32) * bytes], 2);
            ASSERT_NEAR(fast[i], ref[i], std::ldexp(8.0f * std::fabs(Fp16ToFp32(d)), -22)) << i;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CodeUnpack, GroupParamsSplitLikeTheTwinOnEveryTarget) {
  std::mt19937 rng(13);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (size_t n_groups : {1, 2, 3}) {
      for (size_t n_rows : {1, 15, 16, 17, 64, 100}) {
        std::vector<uint16_t> params(n_rows * n_groups * 2);
        for (auto& p : params) {
          p = Fp32ToFp16(static_cast<float>(static_cast<int>(rng() % 2000) - 1000) / 128.0f);
        }
        for (size_t g0 = 0; g0 < n_groups; ++g0) {
          const size_t ng = n_groups - g0, ld = n_rows + 3;
          std::vector<float> s(ng * ld, -1.0f), m(ng * ld, -1.0f), s_ref = s, m_ref = m;
          SplitGroupParams(params.data(), n_rows, n_groups, g0, ng, s.data(), m.data(), ld);
          SplitGroupParamsRef(params.data(), n_rows, n_groups, g0, ng, s_ref.data(),
                              m_ref.data(), ld);
          ASSERT_EQ(s, s_ref) << "groups " << n_groups << " rows " << n_rows << " g0 " << g0;
          ASSERT_EQ(m, m_ref) << "groups " << n_groups << " rows " << n_rows << " g0 " << g0;
          // The twin reads (scale, min) in that order: row 0's first pair is not swapped.
          ASSERT_EQ(s_ref[0], Fp16ToFp32(params[g0 * 2]));
          ASSERT_EQ(m_ref[0], Fp16ToFp32(params[g0 * 2 + 1]));
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}


// Windows of selected or consecutive rows equal the per-row definition.
TEST(CodeUnpack, RowWindowsMatchTheTwin) {
  std::mt19937 rng(9);
  for (int bits : {2, 3, 4, 8}) {
    const size_t row_len = 192, row_bytes = (row_len * bits + 7) / 8 + 1, n_rows = 20;
    std::vector<uint8_t> src(n_rows * row_bytes);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    const std::vector<int64_t> sel = {3, 4, 9, 19, 0};
    for (int64_t first : {0, 64, 5}) {
      for (size_t n : {64, 128, 7}) {
        for (const int64_t* rows : {static_cast<const int64_t*>(nullptr), sel.data()}) {
          const size_t m = rows ? sel.size() : n_rows;
          std::vector<uint8_t> fast(m * n + 1, 0xEE), ref(m * n, 0);
          UnpackCodeRows(src.data(), rows, m, row_bytes, first, n, bits, fast.data());
          UnpackCodeRowsRef(src.data(), rows, m, row_bytes, first, n, bits, ref.data());
          ASSERT_TRUE(std::equal(ref.begin(), ref.end(), fast.begin())) << bits << " " << first << " " << n;
          ASSERT_EQ(fast[m * n], 0xEE);
          // The twin is the per-row definition.
          std::vector<uint8_t> row(n);
          const size_t r = rows ? rows[m - 1] : m - 1;
          UnpackCodesU8Ref(src.data() + r * row_bytes, first, n, bits, row.data());
          ASSERT_TRUE(std::equal(row.begin(), row.end(), ref.begin() + (m - 1) * n));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
