// The errors the integer paths of the quantized codecs add, derived for the tests that compare
// fused results with the decoded rows: the int8 (or int16) query of the keys (ops/code_dot_i8.h) and
// the int16 or int8 weights of the values of every width (ops/code_dot_i16.h,
// ops/value_dot_i8.h).
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
#ifndef KVPACK_TESTS_KV_INTEGER_BOUNDS_H_
#define KVPACK_TESTS_KV_INTEGER_BOUNDS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kvpack {

// 8-bit codes of the quantization family take an int16 query instead (QuantizeI16,
// ops/code_dot_i8.h): |q'_c - alpha * q16_c| <= alpha * (1/2 + 2^-7), alpha = max|q'| / 32767,
// so the same sum gives d * max|q| * range / 65534 * (1 + 2^-6). `int16_query` selects it
// (q8_0's signed 8-bit codes keep the int8 query).
inline double IntegerKeyScoreBound(const float* q, int d, double range, bool int16_query = false) {
  double qmax = 0.0;
  for (int c = 0; c < d; ++c) qmax = std::max(qmax, static_cast<double>(std::fabs(q[c])));
  if (int16_query) return d * qmax * range / 65534.0 * (1.0 + std::ldexp(1.0, -6));
  return d * qmax * range / 254.0 * (1.0 + std::ldexp(1.0, -15));
}

// Values: per tile, each weight w_k = p_k * (its row's group scale) (per-token groups) or p_k
// (per-channel blocks, the output then times the channel's scale) moves by at most
// s / 2, s = max_k |w_k| / L of its (query row, group), with L = 127 for 2-bit codes (int8
// weights, ops/value_dot_i8.h) and 32767 otherwise (int16 weights, ops/code_dot_i16.h), so an
// output moves by at most s / 2 * sum_k code_k (times the channel's scale); with
// code * scale <= range and |w_k| <= |p_k| * scale, over all tiles of an Accumulate call of m
// rows:
//   |fused - sum_k p_k decoded_k| <= m * max|p| * range / (2 L) * (1 + 2^-10).
// (For 2-bit codes the int16 or float paths, where they run instead, stay inside it too.)
inline double IntegerValueBound(const float* p, int64_t m, double range, int bits) {
  double pmax = 0.0;
  for (int64_t k = 0; k < m; ++k) pmax = std::max(pmax, static_cast<double>(std::fabs(p[k])));
  const double levels = bits == 2 ? 127.0 : 32767.0;
  return m * pmax * range / (2.0 * levels) * (1.0 + std::ldexp(1.0, -10));
}

template <typename Vec>
double SpreadOf(const Vec& x) {
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return static_cast<double>(*hi) - static_cast<double>(*lo);
}

}  // namespace kvpack

#endif  // KVPACK_TESTS_KV_INTEGER_BOUNDS_H_
