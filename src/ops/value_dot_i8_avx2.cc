// Compiled for AVX2 + FMA + F16C with a function attribute (ops/value_dot_i8.cc chooses it at
// run time); the design is in the header.
#include "ops/value_dot_i8_avx2.h"

#include <algorithm>
#include <cstring>

#include "ops/fp16_pairs_avx2.h"
#include "ops/prefetch.h"
#include "ops/query_chunks.h"
#include "ops/value_dot_i8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_I8V_AVX2 1
#define KVPACK_I8V_AVX2_ATTR __attribute__((target("avx2,fma,f16c")))
#else
#define KVPACK_HAVE_I8V_AVX2 0
#endif

namespace kvpack {
namespace {

#if KVPACK_HAVE_I8V_AVX2
// GCC 12's intrinsic headers build some results from `_mm256_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr size_t kTile = kI8ValueTileRowsMax;  // rows per weight tile (64)
constexpr size_t kMaxQ = 3;       // query rows per pass: 3 x 4 int16 accumulators in registers
constexpr size_t kMaxGroups = 4;  // groups per row
constexpr size_t kWindow = 64;    // channels per window: 16 bytes of a row
constexpr float kI8Max = 127.0f;

// A tile's (scale, min) pairs as floats, per group, rows in order (zeros past the tile's rows).
struct TileParams {
  alignas(32) float scale[kMaxGroups][kTile];
  alignas(32) float min[kMaxGroups][kTile];
};

// Per query row and group: the tile's weights quantized (rows in order, zeros past the rows;
// two rows' weights are the int16 that one vpmaddubsw lane pairs with two rows' codes) and
// the step.
template <size_t NQ>
struct TileWeights {
  alignas(32) int8_t wq[NQ][kMaxGroups][kTile];
  float step[NQ][kMaxGroups];
};

KVPACK_I8V_AVX2_ATTR float HorizontalMax(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

KVPACK_I8V_AVX2_ATTR float HorizontalSum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

KVPACK_I8V_AVX2_ATTR void LoadTileParams(const uint16_t* params, size_t n_groups, size_t m,
                                         TileParams& tp) {
  size_t k0 = 0;
  if (n_groups == 1) {  // eight rows' pairs at a time (one group, or two below)
    for (; k0 + 8 <= m; k0 += 8) {
      __m256 scale, min;
      LoadScaleMinPairs8(params + 2 * k0, &scale, &min);
      _mm256_store_ps(tp.scale[0] + k0, scale);
      _mm256_store_ps(tp.min[0] + k0, min);
    }
  } else if (n_groups == 2) {
    for (; k0 + 8 <= m; k0 += 8) {
      __m256 scale[2], min[2];
      LoadScaleMinPairs8TwoGroups(params + 4 * k0, scale, min);
      for (int g = 0; g < 2; ++g) {
        _mm256_store_ps(tp.scale[g] + k0, scale[g]);
        _mm256_store_ps(tp.min[g] + k0, min[g]);
      }
    }
  }
  for (size_t g = 0; g < n_groups; ++g) {
    for (size_t k = k0; k < m; ++k) {
      const uint16_t* pair = params + (k * n_groups + g) * 2;
      tp.scale[g][k] = _cvtsh_ss(pair[0]);
      tp.min[g][k] = _cvtsh_ss(pair[1]);
    }
    std::fill(tp.scale[g] + m, tp.scale[g] + kTile, 0.0f);
    std::fill(tp.min[g] + m, tp.min[g] + kTile, 0.0f);
  }
}

// Query row p (the tile's first row at p[0]) and group g: w_k = p_k * scale_k (the twin's
// float products), msum += sum_k p_k * min_k (in another order than the twin's), and w
// quantized by QuantizeWeightsI8Ref's rule: amax = max |w_k| (a NaN ignored, as std::max
// does), all zero with step 0 unless amax > 0, else round-to-nearest-even(w_k * (127 / amax))
// (|w_k * inv| <= 127 plus a rounding, which cannot reach 127.5: the saturating packs equal the
// twin's clamp) and step amax / 127.
KVPACK_I8V_AVX2_ATTR void QuantizeRowWeights(const float* p, size_t m, const float* scale,
                                             const float* min, int8_t* wq, float* step,
                                             float* msum) {
  alignas(32) float tail[kTile];
  const float* pk = p;
  if (m < kTile) {  // the last tile's probabilities, padded with zeros
    std::copy(p, p + m, tail);
    std::fill(tail + m, tail + kTile, 0.0f);
    pk = tail;
  }
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 w[kTile / 8];
  __m256 amax = _mm256_setzero_ps(), msum_lanes = _mm256_setzero_ps();
  for (size_t b = 0; b < kTile / 8; ++b) {
    const __m256 pv = _mm256_loadu_ps(pk + 8 * b);
    w[b] = _mm256_mul_ps(pv, _mm256_load_ps(scale + 8 * b));
    msum_lanes = _mm256_fmadd_ps(pv, _mm256_load_ps(min + 8 * b), msum_lanes);
    amax = _mm256_max_ps(_mm256_andnot_ps(sign, w[b]), amax);  // a NaN |w| yields amax
  }
  *msum += HorizontalSum(msum_lanes);
  const float m_abs = HorizontalMax(amax);
  if (!(m_abs > 0.0f)) {
    std::memset(wq, 0, kTile);
    *step = 0.0f;
    return;
  }
  const __m256 inv = _mm256_set1_ps(kI8Max / m_abs);
  __m256i q[kTile / 8];
  for (size_t b = 0; b < kTile / 8; ++b) q[b] = _mm256_cvtps_epi32(_mm256_mul_ps(w[b], inv));
  // Packs work in 128-bit lanes: after both, dword j of lane L holds rows 8 j + 4 L .. + 3 of
  // the 32 rows packed; one dword permutation puts them in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t h = 0; h < 2; ++h) {
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[4 * h], q[4 * h + 1]),
                                             _mm256_packs_epi32(q[4 * h + 2], q[4 * h + 3]));
    _mm256_store_si256(reinterpret_cast<__m256i*>(wq + 32 * h),
                       _mm256_permutevar8x32_epi32(bytes, order));
  }
  *step = m_abs / kI8Max;
}

// The int16 that pairs rows 2 j and 2 j + 1 of a weight row.
inline int16_t PairAt(const int8_t* wq, size_t j) {
  int16_t v;
  std::memcpy(&v, wq + 2 * j, sizeof(v));
  return v;
}

// The weight vector of row pair j for a window whose 16-channel quarters belong to groups
// gq[0..3] (vpmaddubsw's signed operand: lane l of quarter Q pairs with channels of gq[Q]).
template <int NGW>
KVPACK_I8V_AVX2_ATTR __m256i WeightPair(const int8_t* const (&wq)[4], size_t j) {
  if constexpr (NGW == 1) {
    return _mm256_set1_epi16(PairAt(wq[0], j));
  } else if constexpr (NGW == 2) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(PairAt(wq[0], j))),
                                   _mm_set1_epi16(PairAt(wq[2], j)), 1);
  } else {
    const __m128i lo =
        _mm_unpacklo_epi64(_mm_set1_epi16(PairAt(wq[0], j)), _mm_set1_epi16(PairAt(wq[1], j)));
    const __m128i hi =
        _mm_unpacklo_epi64(_mm_set1_epi16(PairAt(wq[2], j)), _mm_set1_epi16(PairAt(wq[3], j)));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  }
}

// Query rows [0, NQ) against one 64-channel window (bytes [wb, wb + 16) of each of the m rows,
// row_bytes apart): acc[i][s] lane l (int16) sums the code x weight products of channel
// 4 l + s over the tile's rows, exactly; then, in channel order, out[i * d + c] =
// fma(step, sum, out[i * d + c]) with the step of c's group.
template <size_t NQ, int NGW>
KVPACK_I8V_AVX2_ATTR void WindowPass(const TileWeights<NQ>& tw, size_t n_groups, size_t group,
                                     size_t c0, const uint8_t* codes, size_t row_bytes, size_t m,
                                     float* out, size_t d) {
  const int8_t* wq[NQ][4];
  float step[NQ][4];
  for (size_t i = 0; i < NQ; ++i) {
    for (size_t q = 0; q < 4; ++q) {
      const size_t g = std::min((c0 + 16 * q) / group, n_groups - 1);
      wq[i][q] = tw.wq[i][g];
      step[i][q] = tw.step[i][g];
    }
  }
  const uint8_t* rows = codes + c0 / 4;
  const __m256i mask = _mm256_set1_epi8(3);
  __m256i acc[NQ][4];
  for (size_t i = 0; i < NQ; ++i) {
    for (size_t s = 0; s < 4; ++s) acc[i][s] = _mm256_setzero_si256();
  }
  const size_t n_pairs = (m + 1) / 2;
  for (size_t j = 0; j < n_pairs; ++j) {
    const uint8_t* r0 = rows + 2 * j * row_bytes;
    PrefetchCodeLine(r0 + kPrefetchAheadBytes);
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
    const __m128i b = 2 * j + 1 < m
                          ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + row_bytes))
                          : _mm_setzero_si128();
    // Lane l: byte l of row 2 j, then byte l of row 2 j + 1 (channels 4 l .. 4 l + 3).
    const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(a, b)),
                                              _mm_unpackhi_epi8(a, b), 1);
    __m256i w[NQ];
    for (size_t i = 0; i < NQ; ++i) w[i] = WeightPair<NGW>(wq[i], j);
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_and_si256(_mm256_srli_epi16(x, 2 * s), mask);
      for (size_t i = 0; i < NQ; ++i) {
        acc[i][s] = _mm256_add_epi16(acc[i][s], _mm256_maddubs_epi16(v, w[i]));
      }
    }
  }
  for (size_t i = 0; i < NQ; ++i) {
    // acc[i][s] lane l (128-bit half h: l = 8 h + l') is channel 4 l + s: two rounds of
    // interleaving give, in n[t], channels 8 t .. 8 t + 7 (low half) and 32 + 8 t .. (high).
    const __m256i t0 = _mm256_unpacklo_epi16(acc[i][0], acc[i][1]);
    const __m256i t1 = _mm256_unpackhi_epi16(acc[i][0], acc[i][1]);
    const __m256i t2 = _mm256_unpacklo_epi16(acc[i][2], acc[i][3]);
    const __m256i t3 = _mm256_unpackhi_epi16(acc[i][2], acc[i][3]);
    const __m256i n[4] = {_mm256_unpacklo_epi32(t0, t2), _mm256_unpackhi_epi32(t0, t2),
                          _mm256_unpacklo_epi32(t1, t3), _mm256_unpackhi_epi32(t1, t3)};
    float* o = out + i * d + c0;
    for (size_t t = 0; t < 4; ++t) {
      for (size_t h = 0; h < 2; ++h) {
        const size_t c = 32 * h + 8 * t;
        const __m128i half =
            h == 0 ? _mm256_castsi256_si128(n[t]) : _mm256_extracti128_si256(n[t], 1);
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(half));
        _mm256_storeu_ps(
            o + c, _mm256_fmadd_ps(_mm256_set1_ps(step[i][c / 16]), sum, _mm256_loadu_ps(o + c)));
      }
    }
  }
}

template <size_t NQ>
KVPACK_I8V_AVX2_ATTR void TilePass(const float* p, size_t ldp, const TileParams& tp,
                                   size_t n_groups, const uint8_t* codes, size_t d, size_t m,
                                   float* out, float* msum) {
  TileWeights<NQ> tw;
  for (size_t i = 0; i < NQ; ++i) {
    for (size_t g = 0; g < n_groups; ++g) {
      QuantizeRowWeights(p + i * ldp, m, tp.scale[g], tp.min[g], tw.wq[i][g], &tw.step[i][g],
                         &msum[i * n_groups + g]);
    }
  }
  const size_t group = d / n_groups, row_bytes = d / 4;
  for (size_t c0 = 0; c0 < d; c0 += kWindow) {
    if (group >= kWindow) {
      WindowPass<NQ, 1>(tw, n_groups, group, c0, codes, row_bytes, m, out, d);
    } else if (group == 32) {
      WindowPass<NQ, 2>(tw, n_groups, group, c0, codes, row_bytes, m, out, d);
    } else {
      WindowPass<NQ, 4>(tw, n_groups, group, c0, codes, row_bytes, m, out, d);
    }
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_I8V_AVX2

}  // namespace

bool CpuHasAvx2I8ValueKernel() {
#if KVPACK_HAVE_I8V_AVX2
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

void AccumulateTwoBitRowsI8Avx2(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                                size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                                float* out, float* msum) {
#if KVPACK_HAVE_I8V_AVX2
  const size_t row_bytes = d / 4;
  TileParams tp;
  for (size_t k0 = 0; k0 < n_rows; k0 += kTile) {
    const size_t m = std::min(kTile, n_rows - k0);
    LoadTileParams(params + k0 * n_groups * 2, n_groups, m, tp);
    ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
      TilePass<nq>(p + i0 * ldp + k0, ldp, tp, n_groups, codes + k0 * row_bytes, d, m, out + i0 * d,
                   msum + i0 * n_groups);
    });
  }
#else
  (void)p, (void)ldp, (void)n_q, (void)params, (void)n_groups, (void)codes, (void)d, (void)n_rows,
      (void)out, (void)msum;
#endif
}

}  // namespace kvpack
