// Compiled for AVX2 + FMA + F16C with a function attribute (ops/packed_scores.cc chooses it at
// run time); the design is in the header.
#include "ops/token_row_scores_avx2.h"

#include <cstring>
#include <vector>

#include "ops/code_dot.h"
#include "ops/fp16_pairs_avx2.h"
#include "ops/packed_scores.h"
#include "ops/prefetch.h"
#include "ops/query_chunks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_TRS_AVX2 1
#define KVPACK_TRS_AVX2_ATTR __attribute__((target("avx2,fma,f16c")))
#else
#define KVPACK_HAVE_TRS_AVX2 0
#endif

namespace kvpack {
namespace {

#if KVPACK_HAVE_TRS_AVX2
// GCC 12's intrinsic headers build some results from `_mm256_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr size_t kMaxQ = 3;    // query rows per pass
constexpr size_t kChunk = 16;  // bytes of a row per 128-bit half
// Storage of one arranged query vector (a std::vector of __m256i drops its attributes).
struct alignas(32) Vec256 {
  int8_t bytes[32];
};

// Query row i's slot s of chunk c (32 bytes, both halves alike): byte j holds channel
// k (16 c + j) + s of q8 (k = 8 / bits), the channel whose code byte 16 c + j holds in slot s.
// qa: [n_q, d * bits / 8 / 16, k] vectors.
void ArrangeQuery(const int8_t* q8, size_t n_q, size_t d, int bits, __m256i* qa) {
  const size_t k = 8 / bits, n_chunks = d * bits / 8 / kChunk;
  alignas(32) int8_t v[32];
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t c = 0; c < n_chunks; ++c) {
      for (size_t s = 0; s < k; ++s) {
        for (size_t j = 0; j < kChunk; ++j)
          v[j] = v[j + kChunk] = q8[i * d + k * (kChunk * c + j) + s];
        std::memcpy(&qa[(i * n_chunks + c) * k + s], v, sizeof(v));
      }
    }
  }
}

// Rows r and r + 1 (row_bytes apart) against query rows [0, NQ): lane l of acc[i] sums the
// products of row r's (l < 4) or row r + 1's (l >= 4) bytes 4 (l % 4) .. + 3 of every chunk.
template <size_t NQ, int kBits>
KVPACK_TRS_AVX2_ATTR inline __attribute__((always_inline)) void PairDots(
    const uint8_t* r, size_t row_bytes, const __m256i* qa, size_t n_chunks, __m256i (&acc)[NQ]) {
  constexpr int k = 8 / kBits;
  const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << kBits) - 1));
  const __m256i ones = _mm256_set1_epi16(1);
  for (size_t i = 0; i < NQ; ++i) acc[i] = _mm256_setzero_si256();
  for (size_t c = 0; c < n_chunks; ++c) {
    const __m256i x = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + kChunk * c))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + row_bytes + kChunk * c)), 1);
    __m256i m16[NQ];
    for (size_t i = 0; i < NQ; ++i) m16[i] = _mm256_setzero_si256();
    for (int s = 0; s < k; ++s) {
      const __m256i v = _mm256_and_si256(_mm256_srli_epi16(x, kBits * s), mask);
      for (size_t i = 0; i < NQ; ++i) {
        m16[i] = _mm256_add_epi16(m16[i], _mm256_maddubs_epi16(v, qa[(i * n_chunks + c) * k + s]));
      }
    }
    for (size_t i = 0; i < NQ; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(m16[i], ones));
  }
}

// Rows [0, n_full) in runs of eight: the integer dots, then ScoreGroupedRowsRef's float steps
// for one group, acc = fma(alpha_i * scale_r, dot, 0), score = fma(min_r, qsum_i, acc).
template <size_t NQ, int kBits>
KVPACK_TRS_AVX2_ATTR void ScoreRuns(const uint8_t* rows, size_t n_full, size_t row_bytes,
                                    const uint16_t* params, const __m256i* qa, size_t n_chunks,
                                    const float* alpha, const float* qsum, float* scores,
                                    size_t ld) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t t0 = 0; t0 < n_full; t0 += 8) {
    const uint8_t* r = rows + t0 * row_bytes;
    for (size_t off = 0; off < 8 * row_bytes; off += 64) {
      PrefetchCodeLine(r + kPrefetchAheadBytes + off);
    }
    PrefetchCodeLine(params + 2 * t0 + kPrefetchAheadBytes / 4);
    __m256i p0[NQ], p1[NQ], h01[NQ], h23[NQ];
    PairDots<NQ, kBits>(r, row_bytes, qa, n_chunks, p0);
    PairDots<NQ, kBits>(r + 2 * row_bytes, row_bytes, qa, n_chunks, p1);
    for (size_t i = 0; i < NQ; ++i) h01[i] = _mm256_hadd_epi32(p0[i], p1[i]);
    PairDots<NQ, kBits>(r + 4 * row_bytes, row_bytes, qa, n_chunks, p0);
    PairDots<NQ, kBits>(r + 6 * row_bytes, row_bytes, qa, n_chunks, p1);
    for (size_t i = 0; i < NQ; ++i) h23[i] = _mm256_hadd_epi32(p0[i], p1[i]);
    __m256 scale, min;
    LoadScaleMinPairs8(params + 2 * t0, &scale, &min);
    for (size_t i = 0; i < NQ; ++i) {
      // Lanes: rows 0, 2, 4, 6 in the low half, 1, 3, 5, 7 in the high one; then in order.
      const __m256i dots = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(h01[i], h23[i]), order);
      const __m256 acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(alpha[i]), scale),
                                         _mm256_cvtepi32_ps(dots), _mm256_setzero_ps());
      _mm256_storeu_ps(scores + i * ld + t0, _mm256_fmadd_ps(min, _mm256_set1_ps(qsum[i]), acc));
    }
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_TRS_AVX2

}  // namespace

bool HasAvx2TokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups) {
#if KVPACK_HAVE_TRS_AVX2
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return (bits == 2 || bits == 4) && d % 64 == 0 && d <= 256 &&
         row_bytes == d * static_cast<size_t>(bits) / 8 && n_groups == 1 && cpu &&
         CodeKernelsUseAvx2();
#else
  (void)row_bytes, (void)d, (void)bits, (void)n_groups;
  return false;
#endif
}

void ScoreTokenRowsI8Avx2(const uint8_t* rows, size_t n_rows, size_t d, int bits,
                          const uint16_t* params, const int8_t* q8, const float* alpha,
                          const float* qsum, size_t n_q, float* scores, size_t ld) {
  const size_t row_bytes = d * bits / 8;
  const size_t n_full = n_rows / 8 * 8;
#if KVPACK_HAVE_TRS_AVX2
  const size_t n_chunks = row_bytes / kChunk;
  thread_local std::vector<Vec256> qa;
  qa.resize(n_q * n_chunks * (8 / bits));
  __m256i* qv = reinterpret_cast<__m256i*>(qa.data());
  ArrangeQuery(q8, n_q, d, bits, qv);
  ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
    const __m256i* qai = qv + i0 * n_chunks * (8 / bits);
    if (bits == 2) {
      ScoreRuns<nq, 2>(rows, n_full, row_bytes, params, qai, n_chunks, alpha + i0, qsum + i0,
                       scores + i0 * ld, ld);
    } else {
      ScoreRuns<nq, 4>(rows, n_full, row_bytes, params, qai, n_chunks, alpha + i0, qsum + i0,
                       scores + i0 * ld, ld);
    }
  });
#endif
  // The last rows (fewer than eight) by the twin, which gives the same scores.
  ScoreTokenRowsI8Ref(rows + n_full * row_bytes, n_rows - n_full, row_bytes, d, bits, 1,
                      params + 2 * n_full, q8, alpha, qsum, n_q, scores + n_full, ld);
}

}  // namespace kvpack
