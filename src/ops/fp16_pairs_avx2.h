// Eight rows' fp16 (scale, min) pairs (the per-token group parameters of one group per row,
// kv/codecs/token_group_rows.h) as two float vectors, for the AVX2 kernels. Internal to ops/;
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

}  // namespace kvpack

#endif
#endif  // KVPACK_OPS_FP16_PAIRS_AVX2_H_
