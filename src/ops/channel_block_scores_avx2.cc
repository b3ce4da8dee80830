// Compiled for AVX2 + F16C with a function attribute (ops/packed_scores.cc chooses it at run
// time); the design is in the header. No FMA in the attribute: the twin's alpha * dot + xmin is
// a multiply and an add, which a contracted multiply-add would round once instead of twice.
#include "ops/channel_block_scores_avx2.h"

#include <cstring>
#include <vector>

#include "ops/code_dot.h"
#include "ops/code_dot_i8.h"
#include "ops/code_pairs_avx2.h"
#include "ops/cpu_features.h"
#include "ops/query_chunks.h"
#include "ops/reduce_avx2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_CBS_AVX2 1
#define KVPACK_CBS_AVX2_ATTR __attribute__((target("avx2,f16c")))
#else
#define KVPACK_HAVE_CBS_AVX2 0
#endif

namespace kvpack {
namespace {

#if KVPACK_HAVE_CBS_AVX2
// GCC 12's intrinsic headers build some results from `_mm256_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr size_t kMaxQ = 3;           // query rows per pass
constexpr size_t kMaxRowBytes = 128;  // d = 256 at 4 bits
constexpr size_t kMaxD = 256;

// ScaleQuantizeBlockQueryI8 in one pass per query row, for d a multiple of 32 up to kMaxD:
// xs = x * scale (the twin's products), amax = max |xs| (a NaN ignored, as the twin's std::max
// does), xmin = x . min (a float sum in another order), then alpha = amax / 127 and q8 =
// round-to-nearest-even(xs * (127 / amax)) (|xs * inv| <= 127 plus a rounding, so the
// saturating packs equal the twin's clamp), all zero when amax is zero. The general path
// (ScaleQuantizeI8) converts the parameters, scales and quantizes in three dispatched calls;
// per KIVI key block of 32 tokens those took as long as the block's dots (a decode profile of
// KIVI-2 at 8192: 10.2% of samples against 13.3%; 7.1% against 14.1% after).
KVPACK_CBS_AVX2_ATTR inline __m256 LoadHalves8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

KVPACK_CBS_AVX2_ATTR void QuantizeBlockQuery(const float* x, size_t n_q, const uint16_t* params,
                                             size_t d, int8_t* q8, float* alpha, float* xmin) {
  alignas(32) float scale[kMaxD], min[kMaxD], xs[kMaxD];
  for (size_t c = 0; c < d; c += 8) {
    _mm256_store_ps(scale + c, LoadHalves8(params + c));
    _mm256_store_ps(min + c, LoadHalves8(params + d + c));
  }
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t i = 0; i < n_q; ++i) {
    const float* xi = x + i * d;
    __m256 vmax = _mm256_setzero_ps(), vdot = _mm256_setzero_ps();
    for (size_t c = 0; c < d; c += 8) {
      const __m256 v = _mm256_loadu_ps(xi + c);
      const __m256 vs = _mm256_mul_ps(v, _mm256_load_ps(scale + c));
      _mm256_store_ps(xs + c, vs);
      vmax = _mm256_max_ps(_mm256_andnot_ps(sign, vs), vmax);  // a NaN |xs| yields vmax
      vdot = _mm256_add_ps(vdot, _mm256_mul_ps(v, _mm256_load_ps(min + c)));
    }
    const float amax = HorizontalMax(vmax);
    xmin[i] = HorizontalSum(vdot);
    int8_t* qi = q8 + i * d;
    if (!(amax > 0.0f)) {
      alpha[i] = 0.0f;
      std::memset(qi, 0, d);
      continue;
    }
    alpha[i] = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(127.0f / amax);
    for (size_t c = 0; c + 32 <= d; c += 32) {
      __m256i r[4];
      for (int k = 0; k < 4; ++k) {
        r[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(xs + c + 8 * k), inv));
      }
      // Packs work in 128-bit lanes; one dword permutation puts the 32 bytes in order.
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]),
                                               _mm256_packs_epi32(r[2], r[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qi + c),
                          _mm256_permutevar8x32_epi32(bytes, order));
    }
  }
}

// Query rows [0, NQ) against the block's rows: scores = alpha_i * dot + xmin_i (the twin's
// multiply, then its add). The rows past the last multiple of eight (a KCVT block holds 20 by
// default) are copied into eight zero-padded rows and take the same kernel; their extra
// scores are dropped.
// Rows r .. r + 7 (row_bytes apart): out[i * out_ld + t] = alpha_i * dot + xmin_i.
template <size_t NQ, int kBits>
KVPACK_CBS_AVX2_ATTR inline void EightRowScores(const uint8_t* r, size_t row_bytes,
                                                const __m256i* qa, const float* alpha,
                                                const float* xmin, float* out, size_t out_ld) {
  __m256i dots[NQ];
  const size_t n_chunks = row_bytes / kCodeChunkBytes;
  EightRowDots<NQ, kBits>(r, row_bytes, qa, n_chunks, n_chunks * (8 / kBits), dots);
  for (size_t i = 0; i < NQ; ++i) {
    const __m256 a = _mm256_mul_ps(_mm256_set1_ps(alpha[i]), _mm256_cvtepi32_ps(dots[i]));
    _mm256_storeu_ps(out + i * out_ld, _mm256_add_ps(a, _mm256_set1_ps(xmin[i])));
  }
}

template <size_t NQ, int kBits>
KVPACK_CBS_AVX2_ATTR void BlockRows(const uint8_t* rows, size_t n_rows, size_t d,
                                    const __m256i* qa, const float* alpha, const float* xmin,
                                    float* scores, size_t ld) {
  const size_t row_bytes = d * kBits / 8;
  size_t t0 = 0;
  for (; t0 + 8 <= n_rows; t0 += 8) {
    EightRowScores<NQ, kBits>(rows + t0 * row_bytes, row_bytes, qa, alpha, xmin, scores + t0, ld);
  }
  if (t0 == n_rows) return;
  const size_t rem = n_rows - t0;
  alignas(32) uint8_t padded[8 * kMaxRowBytes] = {};
  std::memcpy(padded, rows + t0 * row_bytes, rem * row_bytes);
  float tail[NQ][8];
  EightRowScores<NQ, kBits>(padded, row_bytes, qa, alpha, xmin, &tail[0][0], 8);
  for (size_t i = 0; i < NQ; ++i) std::memcpy(scores + i * ld + t0, tail[i], rem * sizeof(float));
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_CBS_AVX2

}  // namespace

bool HasAvx2ChannelBlockScores(size_t row_bytes, size_t d, int bits) {
#if KVPACK_HAVE_CBS_AVX2
  const bool cpu = CpuHasAvx2FmaF16c();
  return (bits == 2 || bits == 4) && d % 64 == 0 && d <= 256 &&
         row_bytes == d * static_cast<size_t>(bits) / 8 && cpu && CodeKernelsUseAvx2();
#else
  (void)row_bytes, (void)d, (void)bits;
  return false;
#endif
}

void ScoreChannelBlockAvx2(const uint8_t* rows, size_t n_rows, size_t d, int bits,
                           const uint16_t* params, const float* q, size_t n_q, float* scores,
                           size_t ld) {
#if KVPACK_HAVE_CBS_AVX2
  thread_local std::vector<float> alpha, xmin;
  thread_local std::vector<int8_t> q8;
  thread_local std::vector<ArrangedQueryVec> qa;
  const size_t n_vecs = d * bits / 8 / kCodeChunkBytes * (8 / bits);  // per query row
  alpha.resize(n_q);
  xmin.resize(n_q);
  q8.resize(n_q * d);
  qa.resize(n_q * n_vecs);
  QuantizeBlockQuery(q, n_q, params, d, q8.data(), alpha.data(), xmin.data());
  __m256i* qv = reinterpret_cast<__m256i*>(qa.data());
  ArrangeQueryBySlot(q8.data(), n_q, d, bits, qv);
  ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
    (bits == 2 ? BlockRows<nq, 2> : BlockRows<nq, 4>)(rows, n_rows, d, qv + i0 * n_vecs,
                                                      alpha.data() + i0, xmin.data() + i0,
                                                      scores + i0 * ld, ld);
  });
#else
  (void)rows, (void)n_rows, (void)d, (void)bits, (void)params, (void)q, (void)n_q, (void)scores,
      (void)ld;
#endif
}

}  // namespace kvpack
