// Code-domain dot/axpy kernels against their scalar twins on odd sizes, strides, windows,
// group sizes and query counts. Bounds: float summation of m terms differs from the
// (double / in-order) twin by at most m * 2^-23 * sum |terms| (standard bound, loose).
#include "ops/code_dot.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/targets.h>

namespace kvpack {
namespace {

TEST(CodeDot, DotCodeRowsMatchesTheTwin) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t d : {1, 8, 15, 16, 17, 64, 100}) {
    for (size_t n_q : {1, 3, 4, 5, 9}) {
      const size_t n_rows = 7, stride = d + 3, ld = n_rows + 2;
      std::vector<uint8_t> codes(n_rows * stride + 1);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & 255);
      std::vector<float> q(n_q * d);
      for (auto& x : q) x = u(rng);
      std::vector<float> a(n_q * ld, -7.0f), b(n_q * ld, -7.0f);
      DotCodeRows(codes.data() + 1, n_rows, stride, d, q.data(), n_q, a.data(), ld);
      DotCodeRowsRef(codes.data() + 1, n_rows, stride, d, q.data(), n_q, b.data(), ld);
      for (size_t i = 0; i < n_q; ++i) {
        for (size_t t = 0; t < ld; ++t) {
          if (t >= n_rows) {
            ASSERT_EQ(a[i * ld + t], -7.0f) << "wrote outside the rows";
            continue;
          }
          double mag = 0.0;
          for (size_t c = 0; c < d; ++c) mag += std::fabs(q[i * d + c]) * codes[1 + t * stride + c];
          ASSERT_NEAR(a[i * ld + t], b[i * ld + t], d * std::ldexp(1.0, -23) * mag + 1e-30)
              << d << " " << n_q << " " << i << " " << t;
        }
      }
    }
  }
}

TEST(CodeDot, GroupWeightsAndMinSumsMatchTheTwinOnEveryTarget) {
  // Weights are one product each: equal bit for bit. Min sums: the summation bound above,
  // on top of the value msum held before the call. Nothing past row m is written.
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t m : {1, 5, 15, 16, 17, 33, 64}) {
      for (size_t ng : {1, 2, 3}) {
        for (size_t n_q : {1, 3, 5}) {
          const size_t ldp = m + 3, lds = 64 + 16, ldw = 64 + 2;
          std::vector<float> p(n_q * ldp), scale(ng * lds), min(ng * lds);
          for (auto& x : p) x = std::fabs(u(rng));
          for (auto& x : scale) x = std::fabs(u(rng));
          for (auto& x : min) x = u(rng);
          std::vector<float> wa(n_q * ng * ldw, -7.0f), wb(wa);
          std::vector<float> ma(n_q * ng, 0.25f), mb(ma);
          GroupWeightsAndMinSums(p.data(), ldp, n_q, scale.data(), min.data(), lds, ng, m,
                                 wa.data(), ldw, ma.data());
          GroupWeightsAndMinSumsRef(p.data(), ldp, n_q, scale.data(), min.data(), lds, ng, m,
                                    wb.data(), ldw, mb.data());
          ASSERT_EQ(wa, wb) << hwy::TargetName(target) << " m " << m << " ng " << ng;
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t g = 0; g < ng; ++g) {
              double mag = 0.0;
              for (size_t k = 0; k < m; ++k) mag += std::fabs(p[i * ldp + k] * min[g * lds + k]);
              ASSERT_NEAR(ma[i * ng + g], mb[i * ng + g],
                          (m + 1) * std::ldexp(1.0, -23) * (mag + 0.25))
                  << hwy::TargetName(target) << " m " << m << " ng " << ng;
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace kvpack
