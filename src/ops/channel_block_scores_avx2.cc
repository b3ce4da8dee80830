// Compiled for AVX2 with a function attribute (ops/packed_scores.cc chooses it at run time);
// the design is in the header. No FMA in the attribute: the twin's alpha * dot + xmin is a
// multiply and an add, which a contracted multiply-add would round once instead of twice.
#include "ops/channel_block_scores_avx2.h"

#include <vector>

#include "ops/code_dot.h"
#include "ops/code_dot_i8.h"
#include "ops/code_pairs_avx2.h"
#include "ops/query_chunks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_CBS_AVX2 1
#define KVPACK_CBS_AVX2_ATTR __attribute__((target("avx2")))
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

constexpr size_t kMaxQ = 3;  // query rows per pass

// Code c of a packed row.
inline int CodeAt(const uint8_t* row, size_t c, int bits) {
  const size_t k = 8 / bits;
  return (row[c / k] >> (bits * (c % k))) & ((1 << bits) - 1);
}

// Query rows [0, NQ) against the block's rows: scores = alpha_i * dot + xmin_i (the twin's
// multiply, then its add).
template <size_t NQ, int kBits>
KVPACK_CBS_AVX2_ATTR void BlockRows(const uint8_t* rows, size_t n_rows, size_t d, const __m256i* qa,
                                    const int8_t* q8, const float* alpha, const float* xmin,
                                    float* scores, size_t ld) {
  const size_t row_bytes = d * kBits / 8, n_chunks = row_bytes / kCodeChunkBytes;
  size_t t0 = 0;
  for (; t0 + 8 <= n_rows; t0 += 8) {
    __m256i dots[NQ];
    EightRowDots<NQ, kBits>(rows + t0 * row_bytes, row_bytes, qa, n_chunks, dots);
    for (size_t i = 0; i < NQ; ++i) {
      const __m256 a = _mm256_mul_ps(_mm256_set1_ps(alpha[i]), _mm256_cvtepi32_ps(dots[i]));
      _mm256_storeu_ps(scores + i * ld + t0, _mm256_add_ps(a, _mm256_set1_ps(xmin[i])));
    }
  }
  for (; t0 < n_rows; ++t0) {  // the rows left over
    const uint8_t* row = rows + t0 * row_bytes;
    for (size_t i = 0; i < NQ; ++i) {
      int32_t dot = 0;
      for (size_t c = 0; c < d; ++c) dot += CodeAt(row, c, kBits) * q8[i * d + c];
      const float a = alpha[i] * static_cast<float>(dot);
      scores[i * ld + t0] = a + xmin[i];
    }
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_CBS_AVX2

}  // namespace

bool HasAvx2ChannelBlockScores(size_t row_bytes, size_t d, int bits) {
#if KVPACK_HAVE_CBS_AVX2
  static const bool cpu = __builtin_cpu_supports("avx2");
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
  ScaleQuantizeBlockQueryI8(q, n_q, params, d, q8.data(), alpha.data(), xmin.data());
  __m256i* qv = reinterpret_cast<__m256i*>(qa.data());
  ArrangeQueryBySlot(q8.data(), n_q, d, bits, qv);
  ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
    (bits == 2 ? BlockRows<nq, 2> : BlockRows<nq, 4>)(rows, n_rows, d, qv + i0 * n_vecs,
                                                      q8.data() + i0 * d, alpha.data() + i0,
                                                      xmin.data() + i0, scores + i0 * ld, ld);
  });
#else
  (void)rows, (void)n_rows, (void)d, (void)bits, (void)params, (void)q, (void)n_q, (void)scores,
      (void)ld;
#endif
}

}  // namespace kvpack
