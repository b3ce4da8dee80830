// Eight rows' fp16 (scale, min) pairs (the per-token group parameters of one or two groups per
// row, kv/codecs/token_group_rows.h) as float vectors, for the AVX2 kernels. Internal to ops/;
// include only from code compiled for AVX2 + F16C (a function attribute on the caller).
#ifndef KVPACK_OPS_FP16_PAIRS_AVX2_H_
#define KVPACK_OPS_FP16_PAIRS_AVX2_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstdint>

namespace kvpack {

// pairs: 16 fp16, (scale_r, min_r) for r < 8. scale and min: lane r.
__attribute__((target("avx2,f16c"), always_inline)) inline void LoadScaleMinPairs8(
    const uint16_t* pairs, __m256* scale, __m256* min) {
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs + 8)));
  // Per 128-bit half: [s0 s1 s4 s5 | s2 s3 s6 s7] (and the mins alike); then the 64-bit
  // pairs in order.
  *scale = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                            _MM_SHUFFLE(3, 1, 2, 0)));
  *min = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
                            _MM_SHUFFLE(3, 1, 2, 0)));
}

// The same for two groups per row: pairs holds 32 fp16, (scale_r0, min_r0, scale_r1, min_r1)
// for r < 8 (group 0, then group 1); scale[g] and min[g]: lane r.
__attribute__((target("avx2,f16c"), always_inline)) inline void LoadScaleMinPairs8TwoGroups(
    const uint16_t* pairs, __m256* scale, __m256* min) {
  // Each conversion holds two rows; a dword permutation makes its 64-bit units the rows'
  // (scale_0, min_0, scale_1, min_1) pairs, which 64-bit unpacks and half swaps gather.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256d b[4];
  for (int m = 0; m < 4; ++m) {
    const __m256 a =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs + 8 * m)));
    b[m] = _mm256_castps_pd(_mm256_permutevar8x32_ps(a, order));
  }
  const __m256d lo01 = _mm256_unpacklo_pd(b[0], b[1]), lo23 = _mm256_unpacklo_pd(b[2], b[3]);
  const __m256d hi01 = _mm256_unpackhi_pd(b[0], b[1]), hi23 = _mm256_unpackhi_pd(b[2], b[3]);
  scale[0] = _mm256_castpd_ps(_mm256_permute2f128_pd(lo01, lo23, 0x20));
  scale[1] = _mm256_castpd_ps(_mm256_permute2f128_pd(lo01, lo23, 0x31));
  min[0] = _mm256_castpd_ps(_mm256_permute2f128_pd(hi01, hi23, 0x20));
  min[1] = _mm256_castpd_ps(_mm256_permute2f128_pd(hi01, hi23, 0x31));
}

}  // namespace kvpack

#endif
#endif  // KVPACK_OPS_FP16_PAIRS_AVX2_H_
