// Compiled for AVX2 + FMA + F16C with a function attribute (ops/packed_scores.cc chooses it at
// run time); the design is in the header.
#include "ops/token_row_scores_avx2.h"

#include <cstring>
#include <vector>

#include "ops/code_dot.h"
#include "ops/code_pairs_avx2.h"
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

constexpr size_t kMaxQ = 3;  // query rows per pass

// Rows [0, n_full) in runs of eight: the integer dots, then ScoreGroupedRowsRef's float steps
// for one group, acc = fma(alpha_i * scale_r, dot, 0), score = fma(min_r, qsum_i, acc).
template <size_t NQ, int kBits>
KVPACK_TRS_AVX2_ATTR void ScoreRuns(const uint8_t* rows, size_t n_full, size_t row_bytes,
                                    const uint16_t* params, const __m256i* qa, size_t n_chunks,
                                    const float* alpha, const float* qsum, float* scores,
                                    size_t ld) {
  for (size_t t0 = 0; t0 < n_full; t0 += 8) {
    const uint8_t* r = rows + t0 * row_bytes;
    for (size_t off = 0; off < 8 * row_bytes; off += 64) {
      PrefetchCodeLine(r + kPrefetchAheadBytes + off);
    }
    PrefetchCodeLine(params + 2 * t0 + kPrefetchAheadBytes / 4);
    __m256i dots[NQ];
    EightRowDots<NQ, kBits>(r, row_bytes, qa, n_chunks, dots);
    __m256 scale, min;
    LoadScaleMinPairs8(params + 2 * t0, &scale, &min);
    for (size_t i = 0; i < NQ; ++i) {
      const __m256 acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(alpha[i]), scale),
                                         _mm256_cvtepi32_ps(dots[i]), _mm256_setzero_ps());
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
  const size_t n_chunks = row_bytes / kCodeChunkBytes;
  thread_local std::vector<ArrangedQueryVec> qa;
  qa.resize(n_q * n_chunks * (8 / bits));
  __m256i* qv = reinterpret_cast<__m256i*>(qa.data());
  ArrangeQueryBySlot(q8, n_q, d, bits, qv);
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
