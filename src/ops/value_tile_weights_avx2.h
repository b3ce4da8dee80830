// The weights of a value tile on AVX2, shared by the integer value kernels (ops/value_dot_i8_
// avx2.cc: int8 weights of 2-bit rows; ops/code_dot_i16_avx2.cc: int16 weights): per query row
// i and group g of a tile of up to 64 rows, w_k = p_k * scale_k (the twins' float products),
// msum += sum_k p_k * min_k, and w quantized symmetrically to Q. Internal to ops/; include only
// from a file whose callers of these run on a CPU with AVX2 + FMA + F16C.
#ifndef KVPACK_OPS_VALUE_TILE_WEIGHTS_AVX2_H_
#define KVPACK_OPS_VALUE_TILE_WEIGHTS_AVX2_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/fp16_pairs_avx2.h"
#include "ops/reduce_avx2.h"

#define KVPACK_TILE_AVX2_INLINE __attribute__((target("avx2,fma,f16c"))) inline

namespace kvpack {

constexpr size_t kValueTileRows = 64;    // rows per weight tile
constexpr size_t kValueTileGroups = 4;   // groups per row at most

// A tile's per-row (scale, min) as floats, per group of the window, rows in order (zeros past
// the tile's rows).
struct ValueTileParams {
  alignas(32) float scale[kValueTileGroups][kValueTileRows];
  alignas(32) float min[kValueTileGroups][kValueTileRows];
};

// Rows [0, m) of fp16 (scale, min) pairs (params [m, n_groups, 2]), groups g0 .. g0 + ng - 1.
// All of a row's groups with one or two per row: eight rows at a time.
KVPACK_TILE_AVX2_INLINE void LoadValueTileParams(const uint16_t* params, size_t n_groups,
                                                 size_t g0, size_t ng, size_t m,
                                                 ValueTileParams& tp) {
  size_t k0 = 0;
  if (g0 == 0 && ng == n_groups && n_groups == 1) {
    for (; k0 + 8 <= m; k0 += 8) {
      __m256 scale, min;
      LoadScaleMinPairs8(params + 2 * k0, &scale, &min);
      _mm256_store_ps(tp.scale[0] + k0, scale);
      _mm256_store_ps(tp.min[0] + k0, min);
    }
  } else if (g0 == 0 && ng == n_groups && n_groups == 2) {
    for (; k0 + 8 <= m; k0 += 8) {
      __m256 scale[2], min[2];
      LoadScaleMinPairs8TwoGroups(params + 4 * k0, scale, min);
      for (int g = 0; g < 2; ++g) {
        _mm256_store_ps(tp.scale[g] + k0, scale[g]);
        _mm256_store_ps(tp.min[g] + k0, min[g]);
      }
    }
  }
  for (size_t g = 0; g < ng; ++g) {
    for (size_t k = k0; k < m; ++k) {
      const uint16_t* pair = params + (k * n_groups + g0 + g) * 2;
      tp.scale[g][k] = _cvtsh_ss(pair[0]);
      tp.min[g][k] = _cvtsh_ss(pair[1]);
    }
    std::fill(tp.scale[g] + m, tp.scale[g] + kValueTileRows, 0.0f);
    std::fill(tp.min[g] + m, tp.min[g] + kValueTileRows, 0.0f);
  }
}

// Rows [0, m) of q4_0 or q8_0 scales (two fp16 per row, the groups of a 64-channel head): as
// groups 0 and 1, min = -8 scale (q4_0's offset, exact in float) or 0 (q8_0's signed codes).
KVPACK_TILE_AVX2_INLINE void LoadPlaneTileScales(const uint16_t* scales, size_t m,
                                                 float min_per_scale, ValueTileParams& tp) {
  // The two scales of a row sit where a pair's scale and min do.
  size_t k0 = 0;
  const __m256 factor = _mm256_set1_ps(min_per_scale);
  for (; k0 + 8 <= m; k0 += 8) {
    __m256 s0, s1;
    LoadScaleMinPairs8(scales + 2 * k0, &s0, &s1);
    _mm256_store_ps(tp.scale[0] + k0, s0);
    _mm256_store_ps(tp.scale[1] + k0, s1);
    _mm256_store_ps(tp.min[0] + k0, _mm256_mul_ps(s0, factor));
    _mm256_store_ps(tp.min[1] + k0, _mm256_mul_ps(s1, factor));
  }
  for (size_t g = 0; g < 2; ++g) {
    for (size_t k = k0; k < m; ++k) {
      tp.scale[g][k] = _cvtsh_ss(scales[2 * k + g]);
      tp.min[g][k] = tp.scale[g][k] * min_per_scale;
    }
    std::fill(tp.scale[g] + m, tp.scale[g] + kValueTileRows, 0.0f);
    std::fill(tp.min[g] + m, tp.min[g] + kValueTileRows, 0.0f);
  }
}

// One query row's weights over a tile of m rows (p: the tile's first probability) for one
// group: w_k = p_k * scale_k, *msum += sum_k p_k * min_k (in another order than the twins'),
// and w quantized by the twins' rule for Q (int8: QuantizeWeightsI8Ref, int16:
// QuantizeWeightsI16Scalar): amax = max |w_k| (a NaN ignored, as std::max does), all zero
// with step 0 unless amax > 0, else round-to-nearest-even(w_k * (L / amax)) with L = 127 or
// 32767 (|w_k * inv| <= L plus a rounding, which cannot reach L + 1/2: the saturating packs
// equal the twins' clamp). wq: kValueTileRows entries, zeros past m. Returns the step amax / L.
template <typename Q>
KVPACK_TILE_AVX2_INLINE float QuantizeTileRowWeights(const float* p, size_t m, const float* scale,
                                                     const float* min, Q* wq, float* msum) {
  static_assert(std::is_same_v<Q, int8_t> || std::is_same_v<Q, int16_t>);
  constexpr float kLevels = std::numeric_limits<Q>::max();
  constexpr size_t kVecs = kValueTileRows / 8;
  alignas(32) float tail[kValueTileRows];
  const float* pk = p;
  if (m < kValueTileRows) {  // the last tile's probabilities, padded with zeros
    std::copy(p, p + m, tail);
    std::fill(tail + m, tail + kValueTileRows, 0.0f);
    pk = tail;
  }
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 w[kVecs];
  __m256 amax = _mm256_setzero_ps(), msum_lanes = _mm256_setzero_ps();
  for (size_t b = 0; b < kVecs; ++b) {
    const __m256 pv = _mm256_loadu_ps(pk + 8 * b);
    w[b] = _mm256_mul_ps(pv, _mm256_load_ps(scale + 8 * b));
    msum_lanes = _mm256_fmadd_ps(pv, _mm256_load_ps(min + 8 * b), msum_lanes);
    amax = _mm256_max_ps(_mm256_andnot_ps(sign, w[b]), amax);  // a NaN |w| yields amax
  }
  *msum += HorizontalSum(msum_lanes);
  const float m_abs = HorizontalMax(amax);
  if (!(m_abs > 0.0f)) {
    std::memset(wq, 0, kValueTileRows * sizeof(Q));
    return 0.0f;
  }
  const __m256 inv = _mm256_set1_ps(kLevels / m_abs);
  __m256i q[kVecs];
  for (size_t b = 0; b < kVecs; ++b) q[b] = _mm256_cvtps_epi32(_mm256_mul_ps(w[b], inv));
  if constexpr (sizeof(Q) == 1) {
    // Packs work in 128-bit lanes: after both, dword j of lane L holds rows 8 j + 4 L .. + 3
    // of the 32 rows packed; one dword permutation puts them in order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t h = 0; h < 2; ++h) {
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[4 * h], q[4 * h + 1]),
                                               _mm256_packs_epi32(q[4 * h + 2], q[4 * h + 3]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(wq + 32 * h),
                         _mm256_permutevar8x32_epi32(bytes, order));
    }
  } else {
    // One pack leaves rows 0-3 of both inputs in the low lane and 4-7 in the high one; a
    // 64-bit permutation puts the 16 rows in order.
    for (size_t h = 0; h < kVecs / 2; ++h) {
      const __m256i words = _mm256_packs_epi32(q[2 * h], q[2 * h + 1]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(wq + 16 * h),
                         _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0)));
    }
  }
  return m_abs / kLevels;
}

}  // namespace kvpack

#endif
#endif  // KVPACK_OPS_VALUE_TILE_WEIGHTS_AVX2_H_
