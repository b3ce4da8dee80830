// Code-domain dot/axpy kernels against their scalar twins on odd sizes, strides, windows,
// group sizes and query counts. Bounds: float summation of m terms differs from the
// (double / in-order) twin by at most m * 2^-23 * sum |terms| (standard bound, loose).
#include "ops/code_dot.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvpack
