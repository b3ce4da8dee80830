// The transposing reduction of 16 float vectors, shared by the AVX-512 kernels that form
// many lane sums (or maxima) at once (ops/packed_scores.cc, ops/lowrank_runs_avx512.cc).
// Internal to ops/: include only from a file that calls it from functions compiled for
// AVX-512 F (a caller's target attribute must include avx512f for it to inline).
#ifndef KVPACK_OPS_REDUCE_AVX512_H_
#define KVPACK_OPS_REDUCE_AVX512_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KVPACK_REDUCE_INLINE __attribute__((target("avx512f"), always_inline)) inline

namespace kvpack {

template <bool kAdd>
KVPACK_REDUCE_INLINE __m512 Combine(__m512 a, __m512 b) {
  return kAdd ? _mm512_add_ps(a, b) : _mm512_max_ps(a, b);
}

// 16 vectors reduced to one: lane j = the sum (kAdd) or the maximum of v[j]'s lanes. Four
// rounds of halving pair the vectors up (128-bit lanes, then elements), 45 operations for
// the 16 where one reduction each takes 9; the last round leaves v[4 e + L] in element e of
// 128-bit lane L, which one permutation puts in order. The sums' order is a pairwise tree.
template <bool kAdd>
KVPACK_REDUCE_INLINE __m512 ReduceEach16(const __m512 (&v)[16]) {
  constexpr auto op = Combine<kAdd>;
  __m512 u[8], w[4], x[2];
#pragma GCC unroll 8
  for (int a = 0; a < 8; ++a) {
    u[a] = op(_mm512_shuffle_f32x4(v[2 * a], v[2 * a + 1], 0x44),
              _mm512_shuffle_f32x4(v[2 * a], v[2 * a + 1], 0xEE));
  }
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    w[b] = op(_mm512_shuffle_f32x4(u[2 * b], u[2 * b + 1], 0x88),
              _mm512_shuffle_f32x4(u[2 * b], u[2 * b + 1], 0xDD));
  }
#pragma GCC unroll 2
  for (int c = 0; c < 2; ++c) {
    x[c] = op(_mm512_shuffle_ps(w[2 * c], w[2 * c + 1], 0x44),
              _mm512_shuffle_ps(w[2 * c], w[2 * c + 1], 0xEE));
  }
  const __m512 r = op(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

}  // namespace kvpack

#endif  // x86-64 with GCC or Clang

#endif  // KVPACK_OPS_REDUCE_AVX512_H_
