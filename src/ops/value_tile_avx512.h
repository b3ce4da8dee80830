// Pieces of the AVX-512 value-tile kernels: the fp16 (scale, min) pairs of 2/4-bit token-group
// rows (kv/codecs/token_group_rows.h; SplitGroupParams layout, [n_rows, n_groups, 2]) read 16
// rows at a time as 32-bit words (ops/code_dot_i16.cc, ops/value_dot_i8.cc), and a tile's
// weights p * scale with their largest magnitude and the p . min sum, one (query row, group)
// at a time (ops/code_dot_i16.cc; ops/value_dot_i8.cc forms many tiles' at once). Internal to
// ops/: include only from a file that calls these from functions compiled for AVX-512 BW and
// DQ (a caller's target attribute must include the one below for them to inline).
#ifndef KVPACK_OPS_VALUE_TILE_AVX512_H_
#define KVPACK_OPS_VALUE_TILE_AVX512_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define KVPACK_VALUE_TILE_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq"), always_inline)) inline

namespace kvpack {

// 16 words from p, of which the first `valid` exist (the rest load as 0 and are not read).
KVPACK_VALUE_TILE_INLINE __m512i LoadWords(const uint32_t* p, int64_t valid) {
  if (valid >= 16) return _mm512_loadu_si512(p);
  if (valid <= 0) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << valid) - 1), p);
}

// The (scale, min) fp16 pairs of group g of rows [r, r + 16) as 32-bit words (scale in the
// low half), of which rows [r, r + n) exist: n_groups = 1 is one load, 2 and 4 pick every
// second or fourth word of two or four loads.
KVPACK_VALUE_TILE_INLINE __m512i GroupParamWords(const uint16_t* params, size_t n_groups,
                                                   size_t g, size_t r, int64_t n) {
  const auto* words = reinterpret_cast<const uint32_t*>(params) + r * n_groups;
  const int64_t valid = n * static_cast<int64_t>(n_groups);
  if (n_groups == 1) return LoadWords(words, valid);
  const __m512i a = LoadWords(words, valid), b = LoadWords(words + 16, valid - 16);
  if (n_groups == 2) {
    const __m512i pick = _mm512_add_epi32(
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
        _mm512_set1_epi32(static_cast<int>(g)));
    return _mm512_permutex2var_epi32(a, pick, b);
  }
  const __m512i c = LoadWords(words + 32, valid - 32), e = LoadWords(words + 48, valid - 48);
  const __m512i pick = _mm512_add_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
      _mm512_set1_epi32(static_cast<int>(g)));
  const __m512i lo = _mm512_permutex2var_epi32(a, pick, b);  // lanes 0..7: rows r .. r + 7
  const __m512i hi = _mm512_permutex2var_epi32(c, pick, e);  // lanes 8..15: rows r + 8 ..
  return _mm512_mask_blend_epi32(0xff00, lo, hi);
}

// One (query row, group) of a 64-row tile (4 blocks of 16 rows): w[b] = p[b] * scale[b], and
// returns max |w| (vrangeps, imm8 0x0B: the larger magnitude with the sign cleared; Intel
// SDM, VRANGEPS) with `min_sum` = the sum of p * min over the tile (a float sum in lane
// order, then the lanes'). Rows that do not exist must load as p = 0.
KVPACK_VALUE_TILE_INLINE float TileWeights4(const __m512 (&p)[4], const __m512 (&scale)[4],
                                            const __m512 (&min)[4], __m512 (&w)[4],
                                            float& min_sum) {
  __m512 vmax = _mm512_setzero_ps(), macc = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    w[b] = _mm512_mul_ps(p[b], scale[b]);
    vmax = _mm512_range_ps(vmax, w[b], 0x0B);
    macc = _mm512_fmadd_ps(p[b], min[b], macc);
  }
  min_sum = _mm512_reduce_add_ps(macc);
  return _mm512_reduce_max_ps(vmax);
}

}  // namespace kvpack

#endif  // x86-64 with GCC or Clang
#endif  // KVPACK_OPS_VALUE_TILE_AVX512_H_
