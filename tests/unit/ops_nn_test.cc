// RoPE's two halves (angles once per position, rotation per head) against the rotation
// written out in double: each pair (a, b) of each head becomes
// (x_a cos - x_b sin, x_a sin + x_b cos) with theta_i = pos * base^(-2i / n_rot) / factor_i,
// both layouts, channels past n_rot untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/nn.h"

namespace kvpack {
namespace {

TEST(NnRope, AnglesAndRotationMatchTheFormula) {
  constexpr int kHeads = 3, kHeadDim = 16, kRot = 12;
  const float factors[kRot / 2] = {1.0f, 2.0f, 1.0f, 4.0f, 1.0f, 8.0f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (RopeLayout layout : {RopeLayout::kAdjacent, RopeLayout::kHalves}) {
    for (const float* freq_factors : {static_cast<const float*>(nullptr), factors}) {
      const RopeParams params{layout, kRot, 10000.0f, freq_factors};
      for (int64_t pos : {0, 1, 37, 4095}) {
        std::vector<float> x(kHeads * kHeadDim);
        for (auto& v : x) v = u(rng);
        std::vector<float> y = x;
        float cos[kRot / 2], sin[kRot / 2];
        RopeAngles(pos, params, cos, sin);
        ApplyRopeAngles(y.data(), kHeads, kHeadDim, cos, sin, params);
        std::vector<float> z = x;
        ApplyRope(z.data(), kHeads, kHeadDim, pos, params);
        EXPECT_EQ(y, z) << "ApplyRope is RopeAngles then ApplyRopeAngles";
        for (int h = 0; h < kHeads; ++h) {
          const float* xh = &x[h * kHeadDim];
          const float* yh = &y[h * kHeadDim];
          for (int i = 0; i < kRot / 2; ++i) {
            double theta = pos * std::pow(10000.0, -2.0 * i / kRot);
            if (freq_factors) theta /= freq_factors[i];
            const int a = layout == RopeLayout::kAdjacent ? 2 * i : i;
            const int b = layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + kRot / 2;
            const double ya = xh[a] * std::cos(theta) - xh[b] * std::sin(theta);
            const double yb = xh[a] * std::sin(theta) + xh[b] * std::cos(theta);
            // float cos/sin (half an ulp each) and three float roundings, on values <= 4
            EXPECT_NEAR(yh[a], ya, 4e-6) << h << " " << i << " " << pos;
            EXPECT_NEAR(yh[b], yb, 4e-6) << h << " " << i << " " << pos;
          }
          for (int c = kRot; c < kHeadDim; ++c) EXPECT_EQ(yh[c], xh[c]) << "channel " << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
