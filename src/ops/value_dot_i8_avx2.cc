// Compiled for AVX2 + FMA + F16C with a function attribute (ops/value_dot_i8.cc chooses it at
// run time); the design is in the header.
#include "ops/value_dot_i8_avx2.h"

#include <algorithm>
#include <cstring>

#include "ops/code_pairs_avx2.h"
#include "ops/cpu_features.h"
#include "ops/prefetch.h"
#include "ops/query_chunks.h"
#include "ops/value_dot_i8.h"
#include "ops/value_tile_weights_avx2.h"

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
static_assert(kTile == kValueTileRows);
constexpr size_t kMaxQ = 3;  // query rows per pass: 3 x 4 int16 accumulators in registers
constexpr size_t kMaxGroups = kValueTileGroups;  // groups per row (4)
constexpr size_t kWindow = 64;  // channels per window: 16 bytes of a row

// Per query row and group: the tile's weights quantized (rows in order, zeros past the rows;
// two rows' weights are the int16 that one vpmaddubsw lane pairs with two rows' codes) and
// the step.
template <size_t NQ>
struct TileWeights {
  alignas(32) int8_t wq[NQ][kMaxGroups][kTile];
  float step[NQ][kMaxGroups];
};

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
  // The loops over query rows and slots are unrolled by pragma: with every acc[i][s] indexed
  // by constants GCC 12 keeps the accumulators in registers as far as they fit, however this
  // function is compiled (all of them for one or two query rows; with three, twelve
  // accumulators, three weight vectors, the codes and the mask exceed the sixteen registers
  // and a few spill). Without the pragmas it kept all of them on the stack (a load and a store
  // each per row pair) when it was compiled on its own, and inlined into TilePass the outcome
  // depended on unrelated code there (session 43: a helper for the weight quantization put
  // them on the stack and KIVI-2's `Accumulate/.../8192/30` went from 3479 to 4326 us).
  __m256i acc[NQ][4];
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
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
#pragma GCC unroll 4
    for (size_t i = 0; i < NQ; ++i) w[i] = WeightPair<NGW>(wq[i], j);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_and_si256(_mm256_srli_epi16(x, 2 * s), mask);
#pragma GCC unroll 4
      for (size_t i = 0; i < NQ; ++i) AddPairProducts(acc[i][s], v, w[i]);
    }
  }
#pragma GCC unroll 4
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
KVPACK_I8V_AVX2_ATTR void TilePass(const float* p, size_t ldp, const ValueTileParams& tp,
                                   size_t n_groups, const uint8_t* codes, size_t d, size_t m,
                                   float* out, float* msum) {
  TileWeights<NQ> tw;
  for (size_t i = 0; i < NQ; ++i) {
    for (size_t g = 0; g < n_groups; ++g) {
      tw.step[i][g] = QuantizeTileRowWeights(p + i * ldp, m, tp.scale[g], tp.min[g], tw.wq[i][g],
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

bool CpuHasAvx2I8ValueKernel() { return KVPACK_HAVE_I8V_AVX2 && CpuHasAvx2FmaF16c(); }

void AccumulateTwoBitRowsI8Avx2(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                                size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                                float* out, float* msum) {
#if KVPACK_HAVE_I8V_AVX2
  const size_t row_bytes = d / 4;
  ValueTileParams tp;
  for (size_t k0 = 0; k0 < n_rows; k0 += kTile) {
    const size_t m = std::min(kTile, n_rows - k0);
    LoadValueTileParams(params + k0 * n_groups * 2, n_groups, 0, n_groups, m, tp);
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
