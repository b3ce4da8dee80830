// q8_0 weight rows times q8_0-quantized activations (ops/q8_0_dot.h) against the twin:
//   - the Highway path (every target the CPU has, the VNNI kernel switched off by pinning the
//     target) gives the twin's integers and floats in its order: bit for bit;
//   - the AVX512-VNNI kernel and the AVX2 one (the same lanes by other instructions)
//     multiply each block's eight exact 4-product lane sums by the same d_w * d_x and add
//     them in another order: they are within (n_blocks + 5) u
//     sum_{b, lane} |lane_b d_w d_x| of the exact value (u = 2^-24: the products, two chains
//     and a 3-level tree), and the twin within (n_blocks + 2) u sum_b |sumi_b d_w d_x|;
//     more than that, they are bit for bit VnniOrderModel below, that order written out;
//   - QuantizeRowQ8_0Fast and Q8_0Activations hold ggml's quantization of each token.
// Weight bytes cover the whole int8 range (-128 too, which ggml never writes but a file may
// hold), rows are not packed back to back, sizes are the model's (576, 1536) and odd counts
// of blocks.
#include "ops/q8_0_dot.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"

namespace kvpack {
namespace {

std::vector<uint8_t> RandomRows(size_t n, size_t n_rows, size_t row_bytes, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> rows(n_rows * row_bytes, 0xEE);
  for (size_t r = 0; r < n_rows; ++r) {
    for (size_t b = 0; b < n / 32; ++b) {
      uint8_t* blk = &rows[r * row_bytes + b * sizeof(BlockQ8_0)];
      const uint16_t scale = Fp32ToFp16(0.1f * u(rng));
      std::memcpy(blk, &scale, 2);
      for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(rng());
    }
  }
  std::fill(rows.begin() + 2, rows.begin() + 34, uint8_t{0x80});  // a block of -128
  return rows;
}

// The exact product in double, sum_b |sumi_b d_w d_x| and sum_{b, lane} |lane_b d_w d_x|.
void ExactDot(const uint8_t* row, const BlockQ8_0* x, size_t n, double& exact, double& mag,
              double& lane_mag) {
  exact = mag = lane_mag = 0.0;
  for (size_t b = 0; b < n / 32; ++b) {
    BlockQ8_0 w;
    std::memcpy(&w, row + b * sizeof(BlockQ8_0), sizeof(w));
    const double s = static_cast<double>(Fp16ToFp32(w.d)) * Fp16ToFp32(x[b].d);
    int64_t sumi = 0;
    for (int l = 0; l < 8; ++l) {
      int64_t lane = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j) lane += w.qs[j] * x[b].qs[j];
      lane_mag += std::fabs(static_cast<double>(lane) * s);
      sumi += lane;
    }
    exact += static_cast<double>(sumi) * s;
    mag += std::fabs(static_cast<double>(sumi) * s);
  }
}

// The AVX512-VNNI kernel's floats in its order, one lane at a time: lane l (< 8) of block b
// is the exact sum of codes 4 l .. 4 l + 3, multiplied by d_w * d_x (a float product) and
// added by one fused multiply-add into the even blocks' chain or the odd blocks'; the two
// chains are added lane by lane, then lanes l and l + 4, then l and l + 2, then 0 and 1.
float VnniOrderModel(const uint8_t* row, const BlockQ8_0* x, size_t n) {
  float chain[2][8] = {};
  for (size_t b = 0; b < n / 32; ++b) {
    BlockQ8_0 w;
    std::memcpy(&w, row + b * sizeof(BlockQ8_0), sizeof(w));
    const float s = Fp16ToFp32(w.d) * Fp16ToFp32(x[b].d);
    for (int l = 0; l < 8; ++l) {
      int32_t lane = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j) lane += w.qs[j] * x[b].qs[j];
      chain[b % 2][l] = std::fma(static_cast<float>(lane), s, chain[b % 2][l]);
    }
  }
  float lanes[8];
  for (int l = 0; l < 8; ++l) lanes[l] = chain[0][l] + chain[1][l];
  for (int l = 0; l < 4; ++l) lanes[l] += lanes[l + 4];
  for (int l = 0; l < 2; ++l) lanes[l] += lanes[l + 2];
  return lanes[0] + lanes[1];
}

TEST(Q8_0Dot, EveryPathMatchesTheTwin) {
  bool saw_vnni = false, saw_avx2 = false;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const bool vnni = HasVnniQ8_0Dot();
    const bool avx2 = HasAvx2Q8_0Dot();
    ASSERT_FALSE(vnni && avx2);
    saw_vnni = saw_vnni || vnni;
    saw_avx2 = saw_avx2 || avx2;
    std::mt19937 rng(31);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (size_t n : {32, 64, 96, 160, 576, 1536}) {
      const size_t nb = n / 32;
      for (size_t n_rows : {1, 3, 16, 17}) {
        const size_t row_bytes = nb * sizeof(BlockQ8_0) + 6;
        const std::vector<uint8_t> rows = RandomRows(n, n_rows, row_bytes, rng);
        const size_t n_tok = 2;
        std::vector<float> x(n_tok * n);
        for (auto& v : x) v = g(rng);
        Q8_0Activations xq;
        xq.Quantize(x.data(), n_tok, n);
        for (size_t t = 0; t < n_tok; ++t) {
          std::vector<BlockQ8_0> want(nb);
          QuantizeRowQ8_0(&x[t * n], want.data(), n);
          ASSERT_EQ(0, std::memcmp(want.data(), xq.blocks(t), nb * sizeof(BlockQ8_0)));
          std::vector<float> y(n_rows + 1, -7.0f);
          DotQ8_0Q8_0Rows(rows.data(), row_bytes, n_rows, xq, t, y.data());
          ASSERT_EQ(y[n_rows], -7.0f);  // nothing past the rows written
          for (size_t r = 0; r < n_rows; ++r) {
            const float ref = DotQ8_0Q8_0Ref(&rows[r * row_bytes], xq.blocks(t), n);
            double exact, mag, lane_mag;
            ExactDot(&rows[r * row_bytes], xq.blocks(t), n, exact, mag, lane_mag);
            ASSERT_NEAR(ref, exact, (nb + 2) * std::ldexp(mag, -24) + 1e-30)
                << "n " << n << " row " << r;
            if (vnni || avx2) {
              ASSERT_NEAR(y[r], exact, (nb + 5) * std::ldexp(lane_mag, -24) + 1e-30)
                  << "n " << n << " row " << r;
              ASSERT_EQ(y[r], VnniOrderModel(&rows[r * row_bytes], xq.blocks(t), n))
                  << "n " << n << " row " << r;
            } else {
              ASSERT_EQ(y[r], ref) << hwy::TargetName(target) << " n " << n << " row " << r;
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!saw_vnni && !saw_avx2) {
    GTEST_SKIP() << "no AVX2 or AVX512-VNNI here: only the Highway path was compared";
  }
}

// The vectorized quantizer (QuantizeRowQ8_0Fast: activations and the `q8_0` KV cache) gives
// ggml's reference blocks bit for bit on every target, alone and through Q8_0Activations:
// values at exact halves of a step (round half away from zero), just below them, zeros, a
// block of zeros, NaN (ignored by the max, coded 0), an infinity (d = inf, every code 0),
// and ordinary Gaussian values.
TEST(Q8_0Dot, QuantizerIsGgmls) {
  const size_t n = 32 * 8;
  std::vector<float> x(n);
  std::mt19937 rng(33);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (auto& v : x) v = g(rng);
  for (int j = 0; j < 32; ++j) {
    x[32 + j] = static_cast<float>(j) - 15.5f;       // with amax 127, d = 1: exact halves
    x[64 + j] = std::nextafter(x[32 + j], 0.0f);     // just below them
    x[96 + j] = 0.0f;
    x[128 + j] = static_cast<float>(j % 3) - 1.0f;
  }
  x[32] = x[64] = 127.0f;
  x[128] = 3.0f;  // the block's max, so that 1 and -1 sit at 127 / 3
  x[160 + 5] = std::numeric_limits<float>::quiet_NaN();
  x[192 + 7] = std::numeric_limits<float>::infinity();
  x[224 + 9] = -1e30f;
  std::vector<BlockQ8_0> want(n / 32);
  QuantizeRowQ8_0(x.data(), want.data(), n);
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::vector<BlockQ8_0> got(n / 32);
    QuantizeRowQ8_0Fast(x.data(), n, got.data());
    Q8_0Activations xq;
    xq.Quantize(x.data(), 1, n);
    for (size_t b = 0; b < n / 32; ++b) {
      ASSERT_EQ(0, std::memcmp(&want[b], &got[b], sizeof(BlockQ8_0)))
          << hwy::TargetName(target) << " block " << b;
      ASSERT_EQ(0, std::memcmp(&want[b], xq.blocks(0) + b, sizeof(BlockQ8_0)))
          << hwy::TargetName(target) << " block " << b;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(want[1].qs[1], -15);  // -14.5 rounds away from zero
  EXPECT_EQ(want[2].qs[1], -14);  // just above -14.5 does not
}

}  // namespace
}  // namespace kvpack
