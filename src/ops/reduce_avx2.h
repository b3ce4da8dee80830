// Horizontal reductions of one float vector, shared by the AVX2 kernels (ops/*_avx2.cc).
// Internal to ops/: include only from a file that calls them from functions compiled for AVX2
// (a caller's target attribute must include avx for them to inline).
#ifndef KVPACK_OPS_REDUCE_AVX2_H_
#define KVPACK_OPS_REDUCE_AVX2_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KVPACK_REDUCE_AVX2_INLINE __attribute__((target("avx"), always_inline)) inline

namespace kvpack {

// The largest lane (of a vector without NaNs; the callers keep them out with max_ps's rule,
// where the second operand wins over a NaN).
KVPACK_REDUCE_AVX2_INLINE float HorizontalMax(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The sum of the lanes, as a pairwise tree (halves, then pairs, then the last two).
KVPACK_REDUCE_AVX2_INLINE float HorizontalSum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

}  // namespace kvpack

#endif
#endif  // KVPACK_OPS_REDUCE_AVX2_H_
