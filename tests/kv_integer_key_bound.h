// The error the integer key path (ops/code_dot_i8.h, kv/codecs/quant_common.cc) adds to a
// fused score, derived for the tests that compare fused scores with q . decoded rows.
//
// A 2- or 4-bit key row is scored as alpha * (q8 . codes) (+ the min terms in float), with
// q8 = round(q' / alpha), q' the query with the format's per-channel scales folded in
// (per-channel groups) or the query itself (per-token groups), alpha = max|q'| / 127. Each
// |q'_c - alpha * q8_c| <= alpha * (1/2 + 2^-16), so the score moves by at most
//   sum_c alpha/2 (1 + 2^-15) * code_c * (1, or the row's group scale s)
// and code_c * scale_c <= the range (max - min) of the quantized group, alpha <= max|q| *
// max scale / 127 (per-channel) or max|q| / 127 (per-token, times s inside the sum):
//   |fused - q . decoded| <= d * max|q| * range / 254 * (1 + 2^-15).
// `range` bounds the spread of every quantized group: the spread of the appended data.
#ifndef KVPACK_TESTS_KV_INTEGER_KEY_BOUND_H_
#define KVPACK_TESTS_KV_INTEGER_KEY_BOUND_H_

#include <algorithm>
#include <cmath>

namespace kvpack {

inline double IntegerKeyScoreBound(const float* q, int d, double range) {
  double qmax = 0.0;
  for (int c = 0; c < d; ++c) qmax = std::max(qmax, static_cast<double>(std::fabs(q[c])));
  return d * qmax * range / 254.0 * (1.0 + std::ldexp(1.0, -15));
}

template <typename Vec>
double SpreadOf(const Vec& x) {
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return static_cast<double>(*hi) - static_cast<double>(*lo);
}

}  // namespace kvpack

#endif  // KVPACK_TESTS_KV_INTEGER_KEY_BOUND_H_
