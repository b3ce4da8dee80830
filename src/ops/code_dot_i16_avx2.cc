// Compiled for AVX2 + FMA + F16C with a function attribute (ops/code_dot_i16.cc chooses it at
// run time); the design is in the header.
#include "ops/code_dot_i16_avx2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu_features.h"
#include "ops/prefetch.h"
#include "ops/query_chunks.h"
#include "ops/reduce_avx2.h"
#include "ops/value_tile_weights_avx2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_I16V_AVX2 1
#define KVPACK_I16V_AVX2_ATTR __attribute__((target("avx2,fma,f16c")))
#else
#define KVPACK_HAVE_I16V_AVX2 0
#endif

namespace kvpack {
namespace {

#if KVPACK_HAVE_I16V_AVX2
// GCC 12's intrinsic headers build some results from `_mm256_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr size_t kMaxQ = 3;    // query rows per pass
constexpr size_t kBlock = 16;  // channels per pass: one group, two accumulators per query row
constexpr float kI16Max = 32767.0f;

// QuantizeWeightsI16Scalar's rule (ops/code_dot_i16.cc) over m weights, 16 at a time:
// amax = max |w| (a NaN ignored, as std::max does), then round-to-nearest-even(w * 32767 /
// amax) (vcvtps2dq in the default rounding mode, as nearbyint; |w * inv| <= 32767 plus a
// rounding, so the saturating pack equals the clamp); zeros and step 0 when amax is zero.
// wq: [m rounded up to even], the pad zero.
KVPACK_I16V_AVX2_ATTR float QuantizeWeights(const float* w, size_t m, int16_t* wq) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  size_t k = 0;
  for (; k + 8 <= m; k += 8) {
    vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(w + k)), vmax);
  }
  float amax = HorizontalMax(vmax);
  for (size_t j = k; j < m; ++j) amax = std::max(amax, std::fabs(w[j]));
  if (m % 2) wq[m] = 0;
  if (!(amax > 0.0f)) {
    std::fill(wq, wq + m, int16_t{0});
    return 0.0f;
  }
  const float inv = kI16Max / amax;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (k = 0; k + 16 <= m; k += 16) {
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + k), vinv));
    const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(w + k + 8), vinv));
    const __m256i words = _mm256_packs_epi32(a, b);  // rows 0-3, 8-11 | 4-7, 12-15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + k),
                        _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0)));
  }
  for (; k < m; ++k) {
    wq[k] = static_cast<int16_t>(std::clamp(std::nearbyint(w[k] * inv), -kI16Max, kI16Max));
  }
  return amax / kI16Max;
}

// Two rows' bytes interleaved (byte j of a, then byte j of b; the low 8 of each, or the high 8)
// and widened to int16: one pair per 32-bit lane.
template <int kForm, bool kHigh = false>
KVPACK_I16V_AVX2_ATTR inline __m256i WidenPairs(__m128i a, __m128i b) {
  const __m128i x = kHigh ? _mm_unpackhi_epi8(a, b) : _mm_unpacklo_epi8(a, b);
  return kForm == kSignedByteCodes ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x);
}

// Channels [c, c + 16) of the window (one group) against query rows [0, NQ): per row pair
// (k, k + 1) the two rows' codes of each channel, in pairs[0] (channels 0-7) and pairs[1]
// (8-15), or for nibbles the even channels and the odd ones, multiplied with the weight pair;
// then out = fma(step, sum, out) in channel order. wrow[i], step[i]: query row i's weight row
// and step for the block's group. codes: the window's first byte of row 0. kWide: rows of a
// line or more ask for the second row's line too (ops/code_dot_i16.cc, LoadRowPair).
// One block of 16 channels per pass: with 32 (12 accumulators for three query rows) GCC kept
// some accumulators on the stack, and a pass of 16 was as fast or faster (Accumulate/*/512/1,
// best of 12: FlexGen-4 11.9 -> 10.5 us, KIVI-4 11.9 -> 10.8); the codes are unpacked the same
// number of times either way.
template <size_t NQ, int kForm, bool kWide>
KVPACK_I16V_AVX2_ATTR void Block(const int16_t* const (&wrow)[kMaxQ], const float (&step)[kMaxQ],
                                 const uint8_t* codes, size_t n_rows, size_t row_stride, size_t c,
                                 float* out, size_t d) {
  constexpr bool kNibbles = kForm == kNibbleCodes;
  const uint8_t* base = codes + (kNibbles ? c / 2 : c);
  __m256i acc[NQ][2];
  for (size_t i = 0; i < NQ; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
  const __m256i low_nibble = _mm256_set1_epi16(0x0F);
  for (size_t k = 0; k < n_rows; k += 2) {
    const uint8_t* r0 = base + k * row_stride;
    PrefetchCodeLine(r0 + kPrefetchAheadBytes);
    if constexpr (kWide) PrefetchCodeLine(r0 + row_stride + kPrefetchAheadBytes);
    const bool two = k + 1 < n_rows;
    __m256i pairs[2];
    if constexpr (kNibbles) {  // 8 bytes per row
      const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0));
      const __m128i b = two ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0 + row_stride))
                            : _mm_setzero_si128();
      const __m256i x = WidenPairs<kForm>(a, b);
      pairs[0] = _mm256_and_si256(x, low_nibble);
      pairs[1] = _mm256_srli_epi16(x, 4);
    } else {  // 16 bytes per row
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
      const __m128i b = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + row_stride))
                            : _mm_setzero_si128();
      pairs[0] = WidenPairs<kForm>(a, b);
      pairs[1] = WidenPairs<kForm, true>(a, b);
    }
    for (size_t i = 0; i < NQ; ++i) {
      int32_t pair;
      std::memcpy(&pair, wrow[i] + k, sizeof(pair));
      const __m256i wv = _mm256_set1_epi32(pair);
      for (int h = 0; h < 2; ++h) {
        acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_madd_epi16(pairs[h], wv));
      }
    }
  }
  for (size_t i = 0; i < NQ; ++i) {
    __m256i lo = acc[i][0], hi = acc[i][1];
    if constexpr (kNibbles) {
      // Even channels 0, 2, .., 14 and odd ones: interleaved per 128-bit lane, that is
      // channels 0-3 | 8-11 and 4-7 | 12-15; the lanes' halves then put them in order.
      const __m256i u = _mm256_unpacklo_epi32(lo, hi), v = _mm256_unpackhi_epi32(lo, hi);
      lo = _mm256_permute2x128_si256(u, v, 0x20);
      hi = _mm256_permute2x128_si256(u, v, 0x31);
    }
    float* o = out + i * d + c;
    const __m256 s = _mm256_set1_ps(step[i]);
    _mm256_storeu_ps(o, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(lo), _mm256_loadu_ps(o)));
    _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(hi), _mm256_loadu_ps(o + 8)));
  }
}

size_t GroupsOfWindow(size_t first, size_t d, size_t group) {
  return (first + d - 1) / group - first / group + 1;
}

// The chunk loop over quantized weights wq [n_q * ng][ldq] with steps s [n_q * ng]; codes: the
// window's first byte of row 0.
template <int kForm, bool kWide>
KVPACK_I16V_AVX2_ATTR void AxpyQuantized(const int16_t* wq, size_t ldq, const float* s,
                                         size_t n_q, const uint8_t* codes, size_t n_rows,
                                         size_t row_stride, size_t d, size_t first, size_t group,
                                         float* out) {
  const size_t ng = GroupsOfWindow(first, d, group), g_first = first / group;
  ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
    for (size_t c = 0; c < d; c += kBlock) {
      const int16_t* wrow[kMaxQ] = {};
      float step[kMaxQ] = {};
      for (size_t i = 0; i < nq; ++i) {
        const size_t r = (i0 + i) * ng + (first + c) / group - g_first;
        wrow[i] = wq + r * ldq;
        step[i] = s[r];
      }
      Block<nq, kForm, kWide>(wrow, step, codes, n_rows, row_stride, c, out + i0 * d, d);
    }
  });
}

KVPACK_I16V_AVX2_ATTR void AxpyQuantizedForm(const int16_t* wq, size_t ldq, const float* s,
                                             size_t n_q, const uint8_t* codes, int form,
                                             size_t n_rows, size_t row_stride, size_t d,
                                             size_t first, size_t group, float* out) {
  const bool wide = row_stride >= 64;  // see Block
  const auto run = [&](auto form_c, auto wide_c) {
    AxpyQuantized<decltype(form_c)::value, decltype(wide_c)::value>(
        wq, ldq, s, n_q, codes, n_rows, row_stride, d, first, group, out);
  };
  using Wide = std::true_type;
  using Narrow = std::false_type;
  if (form == kNibbleCodes) {
    using F = std::integral_constant<int, kNibbleCodes>;
    wide ? run(F{}, Wide{}) : run(F{}, Narrow{});
  } else if (form == kSignedByteCodes) {
    using F = std::integral_constant<int, kSignedByteCodes>;
    wide ? run(F{}, Wide{}) : run(F{}, Narrow{});
  } else {
    using F = std::integral_constant<int, kUnsignedByteCodes>;
    wide ? run(F{}, Wide{}) : run(F{}, Narrow{});
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_I16V_AVX2

}  // namespace

bool CpuHasAvx2Int16ValueKernel() { return KVPACK_HAVE_I16V_AVX2 && CpuHasAvx2FmaF16c(); }

void AxpyWeightedI16Avx2(const float* w, size_t n_q, size_t ld, const uint8_t* codes, int form,
                         size_t n_rows, size_t row_stride, size_t d, size_t first, size_t group,
                         float* out) {
#if KVPACK_HAVE_I16V_AVX2
  const size_t ng = GroupsOfWindow(first, d, group);
  const size_t ldq = n_rows + n_rows % 2;
  thread_local std::vector<int16_t> wq;
  thread_local std::vector<float> s;
  wq.resize(n_q * ng * ldq);
  s.resize(n_q * ng);
  for (size_t r = 0; r < n_q * ng; ++r) s[r] = QuantizeWeights(w + r * ld, n_rows, &wq[r * ldq]);
  AxpyQuantizedForm(wq.data(), ldq, s.data(), n_q, codes, form, n_rows, row_stride, d, first,
                    group, out);
#else
  (void)w, (void)n_q, (void)ld, (void)codes, (void)form, (void)n_rows, (void)row_stride, (void)d,
      (void)first, (void)group, (void)out;
#endif
}

void AccumulateTileI16Avx2(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                           TileScales scales, size_t n_groups, size_t g0, size_t ng,
                           const uint8_t* codes, int form, size_t n_rows, size_t row_bytes,
                           size_t d, size_t first, size_t group, float* out, float* msum) {
#if KVPACK_HAVE_I16V_AVX2
  ValueTileParams tp;
  if (scales == TileScales::kPairs) {
    LoadValueTileParams(params, n_groups, g0, ng, n_rows, tp);
  } else {
    LoadPlaneTileScales(params, n_rows, scales == TileScales::kQ4_0 ? -8.0f : 0.0f, tp);
  }
  thread_local std::vector<int16_t> wq;
  thread_local std::vector<float> s;
  wq.resize(n_q * ng * kValueTileRows + 16);  // + 16: room to align the rows to 32 bytes
  s.resize(n_q * ng);
  int16_t* wq0 = wq.data() + (32 - reinterpret_cast<uintptr_t>(wq.data()) % 32) % 32 / 2;
  float unused = 0.0f;
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t g = 0; g < ng; ++g) {
      const size_t r = i * ng + g;
      s[r] = QuantizeTileRowWeights(p + i * ldp, n_rows, tp.scale[g], tp.min[g],
                                    wq0 + r * kValueTileRows, msum ? &msum[r] : &unused);
    }
  }
  const size_t byte0 = form == kNibbleCodes ? first / 2 : first;
  AxpyQuantizedForm(wq0, kValueTileRows, s.data(), n_q, codes + byte0, form, n_rows, row_bytes, d,
                    first, group, out);
#else
  (void)p, (void)ldp, (void)n_q, (void)params, (void)scales, (void)n_groups, (void)g0, (void)ng,
      (void)codes, (void)form, (void)n_rows, (void)row_bytes, (void)d, (void)first, (void)group,
      (void)out, (void)msum;
#endif
}

}  // namespace kvpack
