// ggml block (de)quantization: layouts checked on hand-built blocks, quantizer error bounds
// derived from the formats, fp16/bf16 exactness, misaligned sources, error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/ggml_quants.h"

namespace kvpack {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;      // 1.0 in fp16
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename Block>
std::vector<uint8_t> Bytes(const std::vector<Block>& blocks) {
  std::vector<uint8_t> b(blocks.size() * sizeof(Block));
  std::memcpy(b.data(), blocks.data(), b.size());
  return b;
}

std::vector<float> Dequant(GgmlType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  const Status s = DequantizeRow(type, bytes.data(), out.data(), n);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// --- fp16 / bf16 --------------------------------------------------------------------------

TEST(GgmlQuants, F16IsExactOnRepresentableValues) {
  // Every integer in [-2048, 2048] has an 11-bit significand, powers of two from the smallest
  // subnormal 2^-24 up to 2^15, the largest finite 65504, and signed zeros are all exact.
  std::vector<float> v;
  for (int i = -2048; i <= 2048; ++i) v.push_back(static_cast<float>(i));
  for (int e = -24; e <= 15; ++e) {
    v.push_back(std::ldexp(1.0f, e));
    v.push_back(-std::ldexp(1.0f, e));
  }
  v.push_back(65504.0f);
  v.push_back(-0.0f);
  v.push_back(1.0f + 1.0f / 1024.0f);     // 1 + one ulp of fp16
  v.push_back(3.0f * std::ldexp(1.0f, -24));  // a subnormal with two bits set
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<uint8_t> bytes(2 * v.size());
  ASSERT_TRUE(QuantizeRow(GgmlType::kF16, v.data(), bytes.data(), n).ok());
  const std::vector<float> back = Dequant(GgmlType::kF16, bytes, n);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(BitsFromFp32(back[i]), BitsFromFp32(v[i])) << v[i];
  }
}

TEST(GgmlQuants, F16RoundsToNearestWithinHalfUlp) {
  // For normal fp16 values the significand has 11 bits, so rounding to nearest errs by at most
  // half an ulp: |x - x^| <= 2^-11 * |x|.
  const std::vector<float> v = RandomFloats(1000, 7, 100.0f);
  std::vector<uint8_t> bytes(2 * v.size());
  QuantizeRowF16(v.data(), bytes.data(), static_cast<int64_t>(v.size()));
  const std::vector<float> back = Dequant(GgmlType::kF16, bytes, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::fabs(v[i]) < 6.2e-5f) continue;  // below the normal range
    EXPECT_LE(std::fabs(v[i] - back[i]), std::ldexp(std::fabs(v[i]), -11)) << v[i];
  }
}

TEST(GgmlQuants, Bf16IsExactOnRepresentableValuesAndRoundsOtherwise) {
  // bf16 keeps the top 16 bits of an fp32: a value whose low 16 bits are zero is exact.
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -2.5f, 3.0e38f, 1e-38f, 0.15625f, 65536.0f};
  for (float& x : v) x = Fp32FromBits(BitsFromFp32(x) & 0xffff0000u);
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<uint8_t> bytes(2 * v.size());
  ASSERT_TRUE(QuantizeRow(GgmlType::kBF16, v.data(), bytes.data(), n).ok());
  std::vector<float> back = Dequant(GgmlType::kBF16, bytes, n);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(BitsFromFp32(back[i]), BitsFromFp32(v[i]));

  // Otherwise 8 significand bits: |x - x^| <= 2^-8 * |x| (half an ulp).
  const std::vector<float> r = RandomFloats(1000, 9, 3.0f);
  bytes.resize(2 * r.size());
  QuantizeRowBF16(r.data(), bytes.data(), static_cast<int64_t>(r.size()));
  back = Dequant(GgmlType::kBF16, bytes, static_cast<int64_t>(r.size()));
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_LE(std::fabs(r[i] - back[i]), std::ldexp(std::fabs(r[i]), -8)) << r[i];
  }
}

// --- Q8_0 ---------------------------------------------------------------------------------

TEST(GgmlQuants, Q8_0KnownBlock) {
  // d = 0.5, qs[j] = j - 16: element j decodes to (j - 16) * 0.5.
  BlockQ8_0 b;
  b.d = kHalfHalf;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  const std::vector<float> y = Dequant(GgmlType::kQ8_0, Bytes<BlockQ8_0>({b}), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j - 16) * 0.5f) << j;
}

// Bound. The quantizer takes d = amax / 127 (fp32), stores d' = fp16(d) and q = round(x / d),
// |q| <= 127; the decoder returns q * d'. Then
//   |x - q d'| <= |x - q d| + |q| |d - d'| <= d / 2 + 127 |d - d'|,
// where |d - d'| <= 2^-11 d for d in fp16's normal range. x * (1/d) differs from x / d by a
// few fp32 ulps, which can only move a value lying within ~1e-6 of a rounding midpoint, so a
// relative slack of 1e-5 on d / 2 covers it.
TEST(GgmlQuants, Q8_0RoundTripWithinDerivedBound) {
  for (float scale : {1e-3f, 0.5f, 30.0f}) {
    const int64_t n = 32 * 37;
    std::vector<float> x = RandomFloats(static_cast<size_t>(n), 11, scale);
    x[5] = 0.0f;
    std::vector<uint8_t> bytes(GgmlRowBytes(GgmlType::kQ8_0, n));
    ASSERT_TRUE(QuantizeRow(GgmlType::kQ8_0, x.data(), bytes.data(), n).ok());
    const std::vector<float> y = Dequant(GgmlType::kQ8_0, bytes, n);
    double sum_err = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
      const float d = amax / 127.0f;
      const float d_stored = Fp16ToFp32(Fp32ToFp16(d));
      const float bound = 0.5f * d * (1.0f + 1e-5f) + 127.0f * std::fabs(d - d_stored);
      for (int j = 0; j < 32; ++j) {
        const float err = std::fabs(x[b * 32 + j] - y[b * 32 + j]);
        EXPECT_LE(err, bound) << "block " << b << " element " << j;
        sum_err += err;
        // The element of largest magnitude maps to q = +-127 exactly.
        if (std::fabs(x[b * 32 + j]) == amax) {
          EXPECT_EQ(std::fabs(y[b * 32 + j]), 127.0f * d_stored);
        }
      }
    }
    // Two-sided: uniform rounding error averages about d / 4, far from zero.
    EXPECT_GT(sum_err, 0.0);
    EXPECT_EQ(y[5], 0.0f);
  }
}

TEST(GgmlQuants, Q8_0ZeroBlockIsZero) {
  std::vector<float> x(32, 0.0f);
  std::vector<uint8_t> bytes(34, 0xff);
  QuantizeRowQ8_0(x.data(), bytes.data(), 32);
  const std::vector<float> y = Dequant(GgmlType::kQ8_0, bytes, 32);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// --- Q4_0 ---------------------------------------------------------------------------------

TEST(GgmlQuants, Q4_0KnownBlock) {
  // d = 1, qs[j] = j | (15 - j) << 4: element j (low nibble) = j - 8 and element j + 16
  // (high nibble) = 15 - j - 8 = 7 - j.
  BlockQ4_0 b;
  b.d = kHalfOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = Dequant(GgmlType::kQ4_0, Bytes<BlockQ4_0>({b}), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[j + 16], static_cast<float>(7 - j)) << j;
  }
}

// Bound. The quantizer takes max = the signed value of largest magnitude, d = max / -8
// (|d| = amax / 8), stores d' = fp16(d) and q = min(15, trunc(x / d + 8.5)); x / d lies in
// [-8, 8] so x / d + 8.5 >= 0.5 and trunc is floor, i.e. q - 8 = round-half-up(x / d) except
// that x / d in [7.5, 8] clamps to q - 8 = 7. Decoded x^ = (q - 8) d'. So
//   |x - (q - 8) d| <= |d| / 2           when x / d < 7.5,
//   |x - 7 d| = |d| |x / d - 7| <= |d|   otherwise (only x = -max reaches 8),
// and |x - x^| <= |d| + 8 |d - d'|. The element equal to max decodes to -8 d' = max up to the
// fp16 rounding of d: |max - x^| <= 8 |d - d'|.
TEST(GgmlQuants, Q4_0RoundTripWithinDerivedBound) {
  for (float scale : {1e-2f, 1.0f, 50.0f}) {
    const int64_t n = 32 * 41;
    std::vector<float> x = RandomFloats(static_cast<size_t>(n), 13, scale);
    std::vector<uint8_t> bytes(GgmlRowBytes(GgmlType::kQ4_0, n));
    ASSERT_TRUE(QuantizeRow(GgmlType::kQ4_0, x.data(), bytes.data(), n).ok());
    const std::vector<float> y = Dequant(GgmlType::kQ4_0, bytes, n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0, max = 0;
      for (int j = 0; j < 32; ++j) {
        if (amax < std::fabs(x[b * 32 + j])) {
          amax = std::fabs(x[b * 32 + j]);
          max = x[b * 32 + j];
        }
      }
      const float d = max / -8.0f;
      const float d_stored = Fp16ToFp32(Fp32ToFp16(d));
      const float slack = 8.0f * std::fabs(d - d_stored) + 1e-6f * amax;
      int n_within_half = 0;
      for (int j = 0; j < 32; ++j) {
        const float xi = x[b * 32 + j];
        const float err = std::fabs(xi - y[b * 32 + j]);
        EXPECT_LE(err, std::fabs(d) + slack) << "block " << b << " element " << j;
        if (err <= 0.5f * std::fabs(d) + slack) ++n_within_half;
        if (xi == max) {
          EXPECT_LE(err, slack);
        }
      }
      // Only values with x / d >= 7.5 (the side opposite max) may exceed |d| / 2.
      EXPECT_GE(n_within_half, 1);
    }
  }
}

TEST(GgmlQuants, Q4_0QuantizerMatchesFormatOnExactGrid) {
  // x = k * d for d = -0.25 (max = 2 maps to -8): every value on the grid is exact.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = -0.25f * static_cast<float>((j % 16) - 8);  // [-1.75, 2]
  BlockQ4_0 b;
  QuantizeRowQ4_0(x.data(), &b, 32);
  EXPECT_EQ(Fp16ToFp32(b.d), -0.25f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j] & 0x0f, j) << j;
  const std::vector<float> y = Dequant(GgmlType::kQ4_0, Bytes<BlockQ4_0>({b}), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

// --- Q4_K ---------------------------------------------------------------------------------

// Hand-packed scales. Bytes 0-3 hold the 6-bit scales of sub-blocks 0-3 (low bits) and, in
// their top two bits, bits 4-5 of the scales of sub-blocks 4-7; bytes 4-7 the same for mins;
// bytes 8-11 hold the low nibbles of scale (low) and min (high) of sub-blocks 4-7.
//   bytes 0-3 = 01 02 43 C4: sc0..3 = 1, 2, 3 (0x43 & 63), 4 (0xC4 & 63); top bits 0,0,1,3
//   bytes 4-7 = 05 86 07 08: m0..3  = 5, 6 (0x86 & 63), 7, 8;            top bits 0,2,0,0
//   bytes 8-11 = 21 43 65 87:
//     sc4 = 0x1 | 0 << 4 = 1    m4 = 0x2 | 0 << 4 = 2
//     sc5 = 0x3 | 0 << 4 = 3    m5 = 0x4 | 2 << 4 = 36
//     sc6 = 0x5 | 1 << 4 = 21   m6 = 0x6 | 0 << 4 = 6
//     sc7 = 0x7 | 3 << 4 = 55   m7 = 0x8 | 0 << 4 = 8
constexpr uint8_t kQ4KScales[12] = {0x01, 0x02, 0x43, 0xC4, 0x05, 0x86,
                                    0x07, 0x08, 0x21, 0x43, 0x65, 0x87};
constexpr int kQ4KSc[8] = {1, 2, 3, 4, 1, 3, 21, 55};
constexpr int kQ4KM[8] = {5, 6, 7, 8, 2, 36, 6, 8};

BlockQ4_K MakeQ4KBlock() {
  BlockQ4_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kQ4KScales, 12);
  // qs[i]: low nibble i & 15, high nibble 15 - (i & 15).
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i & 15) | ((15 - (i & 15)) << 4));
  return b;
}

TEST(GgmlQuants, Q4_KScaleUnpacking) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, kQ4KScales, &sc, &m);
    EXPECT_EQ(sc, kQ4KSc[j]) << j;
    EXPECT_EQ(m, kQ4KM[j]) << j;
  }
}

TEST(GgmlQuants, Q4_KKnownBlock) {
  const BlockQ4_K blk = MakeQ4KBlock();
  const std::vector<float> y = Dequant(GgmlType::kQ4_K, Bytes<BlockQ4_K>({blk, blk}), 512);
  // Element e lies in sub-block s = e / 32 (value d * sc[s] * q - dmin * m[s]); its nibble is
  // in byte 32 * (s / 2) + e % 32, low nibble for even s, high nibble for odd s.
  // Spot checks computed by hand (d = 1, dmin = 0.5):
  EXPECT_EQ(y[0], 1 * 0 - 0.5f * 5);      // s 0, qs[0] low = 0
  EXPECT_EQ(y[33], 2 * 14 - 0.5f * 6);    // s 1, qs[1] high = 15 - 1
  EXPECT_EQ(y[130], 1 * 2 - 0.5f * 2);    // s 4, qs[66] low = 2
  EXPECT_EQ(y[190], 3 * 1 - 0.5f * 36);   // s 5, qs[94] high = 15 - 14
  EXPECT_EQ(y[200], 21 * 8 - 0.5f * 6);   // s 6, qs[104] low = 8
  EXPECT_EQ(y[255], 55 * 0 - 0.5f * 8);   // s 7, qs[127] high = 15 - 15
  for (int e = 0; e < 512; ++e) {
    const int k = e % 256, s = k / 32;
    const uint8_t byte = blk.qs[32 * (s / 2) + k % 32];
    const int q = (s % 2 == 0) ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 1.0f * kQ4KSc[s] * q - 0.5f * kQ4KM[s]) << e;
  }
}

// --- Q6_K ---------------------------------------------------------------------------------

BlockQ6_K MakeQ6KBlock() {
  BlockQ6_K b;
  b.d = kHalfQuarter;
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>((i * 37) & 0xff);
  const int8_t sc[16] = {1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8};
  std::memcpy(b.scales, sc, 16);
  return b;
}

TEST(GgmlQuants, Q6_KKnownBlock) {
  const BlockQ6_K blk = MakeQ6KBlock();
  const std::vector<float> y = Dequant(GgmlType::kQ6_K, Bytes<BlockQ6_K>({blk}), 256);
  // Element e: half h = e / 128, r = e % 128, quarter t = r / 32, l = r % 32.
  // Low 4 bits: ql[64h + l + 32 (t odd)], low nibble for t < 2, high nibble for t >= 2.
  // High 2 bits: bits 2t, 2t + 1 of qh[32h + l]. Scale: scales[8h + l / 16 + 2t].
  // Value: d * scale * (q - 32). Spot checks by hand (d = 0.25, ql[i] = i, qh[i] = 37 i mod 256):
  //  e 0:   ql[0] = 0 low 0;     qh[0] = 0 -> 0;            q 0  -> -32; sc[0] = 1
  EXPECT_EQ(y[0], 0.25f * 1 * -32);
  //  e 45:  t 1, l 13: ql[45] = 0x2D low 13; qh[13] = 225 = 0b11100001, bits 2-3 = 0;
  //         q 13 -> -19; sc[2] = 2
  EXPECT_EQ(y[45], 0.25f * 2 * -19);
  //  e 77:  t 2, l 13: ql[13] = 0x0D high 0; qh[13] bits 4-5 = 2; q 32 -> 0; sc[4] = 3
  EXPECT_EQ(y[77], 0.0f);
  //  e 150: h 1, t 0, l 22: ql[86] = 0x56 low 6; qh[54] = 1998 mod 256 = 206 = 0b11001110,
  //         bits 0-1 = 2; q 38 -> 6; sc[9] = -5
  EXPECT_EQ(y[150], 0.25f * -5 * 6);
  //  e 255: h 1, t 3, l 31: ql[127] = 0x7F high 7; qh[63] = 2331 mod 256 = 27 = 0b00011011,
  //         bits 6-7 = 0; q 7 -> -25; sc[15] = -8
  EXPECT_EQ(y[255], 0.25f * -8 * -25);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, t = r / 32, l = r % 32;
    const uint8_t lo_byte = blk.ql[64 * h + l + 32 * (t % 2)];
    const int lo = (t < 2) ? (lo_byte & 15) : (lo_byte >> 4);
    const int hi = (blk.qh[32 * h + l] >> (2 * t)) & 3;
    const int q = lo | (hi << 4);
    EXPECT_EQ(y[e], 0.25f * blk.scales[8 * h + l / 16 + 2 * t] * (q - 32)) << e;
  }
}

// --- misaligned sources, dispatch, errors -------------------------------------------------

TEST(GgmlQuants, MisalignedSourcesGiveTheSameResult) {
  const std::vector<float> x = RandomFloats(256, 17, 2.0f);
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                     GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    std::vector<uint8_t> bytes;
    if (t == GgmlType::kQ4_K) {
      bytes = Bytes<BlockQ4_K>({MakeQ4KBlock()});
    } else if (t == GgmlType::kQ6_K) {
      bytes = Bytes<BlockQ6_K>({MakeQ6KBlock()});
    } else {
      bytes.resize(GgmlRowBytes(t, 256));
      ASSERT_TRUE(QuantizeRow(t, x.data(), bytes.data(), 256).ok());
    }
    const std::vector<float> aligned = Dequant(t, bytes, 256);
    std::vector<uint8_t> shifted(bytes.size() + 3);
    std::memcpy(shifted.data() + 3, bytes.data(), bytes.size());
    std::vector<float> out(256);
    ASSERT_TRUE(DequantizeRow(t, shifted.data() + 3, out.data(), 256).ok());
    for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], aligned[i]) << GgmlTypeName(t) << " " << i;
  }
}

TEST(GgmlQuants, F32IsACopy) {
  const std::vector<float> x = RandomFloats(5, 19, 1.0f);
  std::vector<uint8_t> bytes(20);
  ASSERT_TRUE(QuantizeRow(GgmlType::kF32, x.data(), bytes.data(), 5).ok());
  EXPECT_EQ(Dequant(GgmlType::kF32, bytes, 5), x);
}

TEST(GgmlQuants, ErrorsForBadSizesAndUnsupportedTypes) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(512);
  EXPECT_EQ(DequantizeRow(GgmlType::kQ8_0, bytes.data(), out.data(), 33).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeRow(GgmlType::kQ4_K, bytes.data(), out.data(), 128).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(DequantizeRow(GgmlType::kF16, bytes.data(), out.data(), -1).ok());
  EXPECT_EQ(DequantizeRow(GgmlType::kQ5_0, bytes.data(), out.data(), 32).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(DequantizeRow(static_cast<GgmlType>(5), bytes.data(), out.data(), 32).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(DequantizeRow(GgmlType::kQ8_0, bytes.data(), out.data(), 0).ok());
  const Status q4k = QuantizeRow(GgmlType::kQ4_K, out.data(), bytes.data(), 256);
  EXPECT_EQ(q4k.code(), StatusCode::kUnimplemented);
  EXPECT_NE(q4k.message().find("q4_K"), std::string::npos);
  EXPECT_FALSE(QuantizeRow(GgmlType::kQ4_0, out.data(), bytes.data(), 31).ok());
}

TEST(GgmlQuants, NonFiniteInputsDoNotInvokeUndefinedBehaviour) {
  std::vector<float> x(32, 1.0f);
  x[3] = std::nanf("");
  x[7] = INFINITY;
  std::vector<uint8_t> bytes(34);
  QuantizeRowQ8_0(x.data(), bytes.data(), 32);
  QuantizeRowQ4_0(x.data(), bytes.data(), 32);
  SUCCEED();
}

}  // namespace
}  // namespace kvpack
