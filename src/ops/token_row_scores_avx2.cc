// Compiled for AVX2 + FMA + F16C with a function attribute (ops/packed_scores.cc chooses it at
// run time); the design is in the header.
#include "ops/token_row_scores_avx2.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "ops/code_dot.h"
#include "ops/code_pairs_avx2.h"
#include "ops/cpu_features.h"
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

// Eight rows' scores from their integer dots per group (dots[g][i] lane t: row t) and their
// parameters (the rows' fp16 pairs, or kQ4_0: two scales per row with min = -8 scale, exact
// in float): ScoreGroupedRowsRef's float steps, per group g in order, acc = fma(alpha_i *
// scale_tg, dot, acc) (from 0), then acc = fma(min_tg, qsum_ig, acc).
template <size_t NQ, int NG, bool kQ4_0>
KVPACK_TRS_AVX2_ATTR inline void StoreGroupedScores(const uint16_t* params,
                                                    const __m256i (&dots)[NG][NQ],
                                                    const float* alpha, const float* qsum,
                                                    float* scores, size_t ld) {
  __m256 scale[NG], min[NG];
  if constexpr (kQ4_0) {
    LoadScaleMinPairs8(params, &scale[0], &scale[1]);  // the two scales of a row
    for (int g = 0; g < NG; ++g) min[g] = _mm256_mul_ps(scale[g], _mm256_set1_ps(-8.0f));
  } else if constexpr (NG == 1) {
    LoadScaleMinPairs8(params, &scale[0], &min[0]);
  } else {
    LoadScaleMinPairs8TwoGroups(params, scale, min);
  }
  for (size_t i = 0; i < NQ; ++i) {
    __m256 acc = _mm256_setzero_ps();
    for (int g = 0; g < NG; ++g) {
      acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(alpha[i]), scale[g]),
                            _mm256_cvtepi32_ps(dots[g][i]), acc);
      acc = _mm256_fmadd_ps(min[g], _mm256_set1_ps(qsum[i * NG + g]), acc);
    }
    _mm256_storeu_ps(scores + i * ld, acc);
  }
}

// Rows 0-3 and 4-7 after two rounds of horizontal adds (row j's sum of each 128-bit lane in
// dword j of h0, h1): the eight rows' dots in order.
KVPACK_TRS_AVX2_ATTR inline __m256i SumLaneHalves(__m256i h0, __m256i h1) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                          _mm256_permute2x128_si256(h0, h1, 0x31));
}

// 2- and 4-bit rows [0, n_full) in runs of eight: the integer dots of each group, then
// StoreGroupedScores. NG = 1: one group over the row; NG = 2: one per 16-byte chunk. kQ4_0:
// params are two fp16 scales per row.
template <size_t NQ, int kBits, int NG, bool kQ4_0>
KVPACK_TRS_AVX2_ATTR void ScoreRuns(const uint8_t* rows, size_t n_full, size_t row_bytes,
                                    const uint16_t* params, const __m256i* qa, size_t n_chunks,
                                    const float* alpha, const float* qsum, float* scores,
                                    size_t ld) {
  static_assert(NG == 1 || NG == 2);
  static_assert(!kQ4_0 || NG == 2);
  constexpr size_t kSlots = 8 / kBits;
  const size_t q_stride = n_chunks * kSlots, chunks_per_group = n_chunks / NG;
  constexpr size_t kParamsPerRow = kQ4_0 ? 2 : 2 * NG;  // fp16 values
  for (size_t t0 = 0; t0 < n_full; t0 += 8) {
    const uint8_t* r = rows + t0 * row_bytes;
    for (size_t off = 0; off < 8 * row_bytes; off += 64) {
      PrefetchCodeLine(r + kPrefetchAheadBytes + off);
    }
    PrefetchCodeLine(params + kParamsPerRow * t0 + kPrefetchAheadBytes / 4);
    __m256i dots[NG][NQ];
    for (int g = 0; g < NG; ++g) {
      const size_t c0 = g * chunks_per_group;
      EightRowDots<NQ, kBits>(r + c0 * kCodeChunkBytes, row_bytes, qa + c0 * kSlots,
                              chunks_per_group, q_stride, dots[g]);
    }
    StoreGroupedScores<NQ, NG, kQ4_0>(params + kParamsPerRow * t0, dots, alpha, qsum, scores + t0,
                                      ld);
  }
}

// Rows [0, n_rows) by `runs(rows, n_runs, params, scores, ld)`, an eight-row kernel over rows
// [0, n_runs): the runs of eight in place, then the last rows (fewer than eight) copied into a
// block of eight with zero codes and zero parameters after them, scored into a buffer of which
// their columns are kept. (Before session 40 the twin scored those rows, one at a time in
// scalar code: in a decode step at depth 8192 + k, each head's last attention tile ends in up
// to seven of them, and that was about 1% of FlexGen-2's and q4_0's step under perf.) The
// scores are the same: the kernels equal the twins bit for bit, row by row.
constexpr size_t kMaxTailRowBytes = 128;  // d = 256 at 4 bits
constexpr size_t kMaxParamsPerRow = 4;    // two groups' (scale, min)

template <typename Runs>
KVPACK_TRS_AVX2_ATTR void ScoreRowsPaddingTheTail(const uint8_t* rows, size_t n_rows,
                                                  size_t row_bytes, const uint16_t* params,
                                                  size_t params_per_row, size_t n_q, float* scores,
                                                  size_t ld, Runs runs) {
  const size_t n_full = n_rows / 8 * 8, n_tail = n_rows - n_full;
  if (n_full > 0) runs(rows, n_full, params, scores, ld);
  if (n_tail == 0) return;
  // The Has* predicates above admit no wider rows (d <= 256 at 4 bits, d = 64 at 8).
  KVPACK_CHECK(row_bytes <= kMaxTailRowBytes && params_per_row <= kMaxParamsPerRow);
  alignas(32) uint8_t tail_rows[8 * kMaxTailRowBytes];  // as BlockRows' (channel blocks)
  alignas(32) uint16_t tail_params[8 * kMaxParamsPerRow] = {};
  std::memcpy(tail_rows, rows + n_full * row_bytes, n_tail * row_bytes);
  std::memset(tail_rows + n_tail * row_bytes, 0, (8 - n_tail) * row_bytes);
  std::memcpy(tail_params, params + n_full * params_per_row,
              n_tail * params_per_row * sizeof(uint16_t));
  thread_local std::vector<float> tail_scores;  // [n_q, 8]
  tail_scores.resize(n_q * 8);
  runs(tail_rows, size_t{8}, tail_params, tail_scores.data(), size_t{8});
  for (size_t i = 0; i < n_q; ++i) {
    std::memcpy(scores + i * ld + n_full, &tail_scores[i * 8], n_tail * sizeof(float));
  }
}

// ScoreTokenRowsI8Avx2 and ScoreQ4_0RowsI8Avx2: the query arranged once, then the runs.
template <int NG, bool kQ4_0>
KVPACK_TRS_AVX2_ATTR void ScoreAllRows(const uint8_t* rows, size_t n_rows, size_t d, int bits,
                                       const uint16_t* params, const int8_t* q8, const float* alpha,
                                       const float* qsum, size_t n_q, float* scores, size_t ld) {
  const size_t row_bytes = d * bits / 8, n_chunks = row_bytes / kCodeChunkBytes;
  const size_t q_stride = n_chunks * (8 / bits);
  thread_local std::vector<ArrangedQueryVec> qa;
  qa.resize(n_q * q_stride);
  __m256i* qv = reinterpret_cast<__m256i*>(qa.data());
  ArrangeQueryBySlot(q8, n_q, d, bits, qv);
  constexpr size_t kParamsPerRow = kQ4_0 ? 2 : 2 * NG;
  ScoreRowsPaddingTheTail(
      rows, n_rows, row_bytes, params, kParamsPerRow, n_q, scores, ld,
      [&](const uint8_t* r, size_t n_runs, const uint16_t* pr, float* out, size_t ld_out) {
        ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
          (bits == 2 ? ScoreRuns<nq, 2, NG, kQ4_0>
                     : ScoreRuns<nq, 4, NG, kQ4_0>)(r, n_runs, row_bytes, pr, qv + i0 * q_stride,
                                                    n_chunks, alpha + i0, qsum + i0 * NG,
                                                    out + i0 * ld_out, ld_out);
        });
      });
}

// q8_0 rows (64 signed codes, two groups of 32 with one fp16 scale each), eight at a time: per
// row, group and query row, |code| (unsigned) times the query byte carrying code's sign in one
// vpmaddubsw (pairs of at most 2 x 128 x 127, which int16 holds) and one vpmaddwd, the exact
// int32 dot spread over eight lanes; eight rows' lanes summed by a tree of horizontal adds.
// Then the twin's float steps: acc = (alpha_i * s_r0) * dot_0, acc = fma(alpha_i * s_r1, dot_1,
// acc).
template <size_t NQ>
KVPACK_TRS_AVX2_ATTR void ScoreQ8_0Runs(const int8_t* codes, size_t n_full,
                                        const uint16_t* scales, const int8_t* q8,
                                        const float* alpha, float* scores, size_t ld) {
  constexpr size_t kD = 64, kGroup = 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i qv[NQ][2];
  for (size_t i = 0; i < NQ; ++i) {
    for (size_t g = 0; g < 2; ++g) {
      qv[i][g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + i * kD + kGroup * g));
    }
  }
  const auto lane_sums = [&](const int8_t* row, size_t g, size_t i) KVPACK_TRS_AVX2_ATTR {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + kGroup * g));
    return _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(qv[i][g], c)), ones);
  };
  for (size_t t0 = 0; t0 < n_full; t0 += 8) {
    const int8_t* r = codes + t0 * kD;
    for (size_t off = 0; off < 8 * kD; off += 64) PrefetchCodeLine(r + kPrefetchAheadBytes + off);
    __m256 scale[2];
    LoadScaleMinPairs8(scales + 2 * t0, &scale[0], &scale[1]);  // the two scales of a row
    for (size_t i = 0; i < NQ; ++i) {
      __m256 acc = _mm256_setzero_ps();
      for (size_t g = 0; g < 2; ++g) {
        // Rows 0-3 and 4-7: two rounds of pairwise sums leave row j's half-sums in dword j of
        // each 128-bit lane; the lanes added give the dots in row order.
        __m256i h[2];
        for (size_t b = 0; b < 2; ++b) {
          const int8_t* rb = r + 4 * b * kD;
          h[b] = _mm256_hadd_epi32(
              _mm256_hadd_epi32(lane_sums(rb, g, i), lane_sums(rb + kD, g, i)),
              _mm256_hadd_epi32(lane_sums(rb + 2 * kD, g, i), lane_sums(rb + 3 * kD, g, i)));
        }
        const __m256i dots = SumLaneHalves(h[0], h[1]);
        const __m256 a = _mm256_mul_ps(_mm256_set1_ps(alpha[i]), scale[g]);
        acc = g == 0 ? _mm256_mul_ps(a, _mm256_cvtepi32_ps(dots))
                     : _mm256_fmadd_ps(a, _mm256_cvtepi32_ps(dots), acc);
      }
      _mm256_storeu_ps(scores + i * ld + t0, acc);
    }
  }
}

// 8-bit rows of 64 channels (one unsigned byte per code) against an int16 query, eight rows at
// a time: per row and 16-channel chunk the codes widened to int16 (vpmovzxbw) and one
// vpmaddwd per query row (exact int32 pairs, at most 2 x 255 x 32767), the chunks of a group
// added; eight rows' lanes summed by a tree of horizontal adds. Then StoreGroupedScores.
template <size_t NQ, int NG>
KVPACK_TRS_AVX2_ATTR void ScoreI16Runs(const uint8_t* rows, size_t n_full, const uint16_t* params,
                                       const int16_t* q16, const float* alpha, const float* qsum,
                                       float* scores, size_t ld) {
  constexpr size_t kD = 64, kChunk = 16, kChunksPerGroup = kD / kChunk / NG;
  const auto query = [&](size_t i, size_t chunk) KVPACK_TRS_AVX2_ATTR {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q16 + i * kD + kChunk * chunk));
  };
  for (size_t t0 = 0; t0 < n_full; t0 += 8) {
    const uint8_t* r = rows + t0 * kD;
    for (size_t off = 0; off < 8 * kD; off += 64) PrefetchCodeLine(r + kPrefetchAheadBytes + off);
    PrefetchCodeLine(params + 2 * NG * t0 + kPrefetchAheadBytes / 4);
    __m256i dots[NG][NQ];
    for (int g = 0; g < NG; ++g) {
      __m256i half[2][NQ];  // rows 0-3 and 4-7: row j's sums of each 128-bit lane in dword j
      for (size_t b = 0; b < 2; ++b) {
        __m256i pair[2][NQ];
        for (size_t p = 0; p < 2; ++p) {
          __m256i v[2][NQ];
          for (size_t rr = 0; rr < 2; ++rr) {
            const uint8_t* row = r + (4 * b + 2 * p + rr) * kD;
            for (size_t i = 0; i < NQ; ++i) v[rr][i] = _mm256_setzero_si256();
            for (size_t j = 0; j < kChunksPerGroup; ++j) {
              const size_t chunk = g * kChunksPerGroup + j;
              const __m256i c = _mm256_cvtepu8_epi16(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + kChunk * chunk)));
              for (size_t i = 0; i < NQ; ++i) {
                v[rr][i] = _mm256_add_epi32(v[rr][i], _mm256_madd_epi16(c, query(i, chunk)));
              }
            }
          }
          for (size_t i = 0; i < NQ; ++i) pair[p][i] = _mm256_hadd_epi32(v[0][i], v[1][i]);
        }
        for (size_t i = 0; i < NQ; ++i) half[b][i] = _mm256_hadd_epi32(pair[0][i], pair[1][i]);
      }
      for (size_t i = 0; i < NQ; ++i) {
        dots[g][i] = SumLaneHalves(half[0][i], half[1][i]);
      }
    }
    StoreGroupedScores<NQ, NG, false>(params + 2 * NG * t0, dots, alpha, qsum, scores + t0, ld);
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_TRS_AVX2

}  // namespace

bool HasAvx2TokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups) {
#if KVPACK_HAVE_TRS_AVX2
  const bool cpu = CpuHasAvx2FmaF16c();
  const size_t n_chunks = d * static_cast<size_t>(bits) / 8 / kCodeChunkBytes;
  return (bits == 2 || bits == 4) && d % 64 == 0 && d <= 256 &&
         row_bytes == d * static_cast<size_t>(bits) / 8 &&
         (n_groups == 1 || (n_groups == 2 && n_chunks == 2)) && cpu && CodeKernelsUseAvx2();
#else
  (void)row_bytes, (void)d, (void)bits, (void)n_groups;
  return false;
#endif
}

bool HasAvx2Q4_0Scores(size_t d) { return d == 64 && HasAvx2TokenRowScores(32, 64, 4, 2); }

void ScoreTokenRowsI8Avx2(const uint8_t* rows, size_t n_rows, size_t d, int bits, size_t n_groups,
                          const uint16_t* params, const int8_t* q8, const float* alpha,
                          const float* qsum, size_t n_q, float* scores, size_t ld) {
#if KVPACK_HAVE_TRS_AVX2
  (n_groups == 1 ? ScoreAllRows<1, false> : ScoreAllRows<2, false>)(rows, n_rows, d, bits, params,
                                                                    q8, alpha, qsum, n_q, scores,
                                                                    ld);
#else
  (void)rows, (void)n_rows, (void)d, (void)bits, (void)n_groups, (void)params, (void)q8,
      (void)alpha, (void)qsum, (void)n_q, (void)scores, (void)ld;
#endif
}

void ScoreQ4_0RowsI8Avx2(const uint8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                         const int8_t* q8, const float* alpha, const float* qsum, size_t n_q,
                         float* scores, size_t ld) {
#if KVPACK_HAVE_TRS_AVX2
  ScoreAllRows<2, true>(codes, n_rows, d, 4, scales, q8, alpha, qsum, n_q, scores, ld);
#else
  (void)codes, (void)scales, (void)n_rows, (void)d, (void)q8, (void)alpha, (void)qsum, (void)n_q,
      (void)scores, (void)ld;
#endif
}

bool HasAvx2Q8_0Scores(size_t d) {
#if KVPACK_HAVE_TRS_AVX2
  return d == 64 && CpuHasAvx2FmaF16c() && CodeKernelsUseAvx2();
#else
  (void)d;
  return false;
#endif
}

void ScoreQ8_0RowsI8Avx2(const int8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                         const int8_t* q8, const float* alpha, size_t n_q, float* scores,
                         size_t ld) {
#if KVPACK_HAVE_TRS_AVX2
  ScoreRowsPaddingTheTail(
      reinterpret_cast<const uint8_t*>(codes), n_rows, d, scales, 2, n_q, scores, ld,
      [&](const uint8_t* r, size_t n_runs, const uint16_t* sc, float* out, size_t ld_out) {
        ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
          ScoreQ8_0Runs<nq>(reinterpret_cast<const int8_t*>(r), n_runs, sc, q8 + i0 * d, alpha + i0,
                            out + i0 * ld_out, ld_out);
        });
      });
#else
  (void)codes, (void)scales, (void)n_rows, (void)d, (void)q8, (void)alpha, (void)n_q, (void)scores,
      (void)ld;
#endif
}

bool HasAvx2TokenRowScoresI16(size_t d, size_t n_groups) {
#if KVPACK_HAVE_TRS_AVX2
  return d == 64 && (n_groups == 1 || n_groups == 2) && CpuHasAvx2FmaF16c() &&
         CodeKernelsUseAvx2();
#else
  (void)d, (void)n_groups;
  return false;
#endif
}

void ScoreTokenRowsI16Avx2(const uint8_t* rows, size_t n_rows, size_t d, size_t n_groups,
                           const uint16_t* params, const int16_t* q16, const float* alpha,
                           const float* qsum, size_t n_q, float* scores, size_t ld) {
#if KVPACK_HAVE_TRS_AVX2
  ScoreRowsPaddingTheTail(
      rows, n_rows, d, params, 2 * n_groups, n_q, scores, ld,
      [&](const uint8_t* r, size_t n_runs, const uint16_t* pr, float* out, size_t ld_out) {
        ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
          (n_groups == 1 ? ScoreI16Runs<nq, 1>
                         : ScoreI16Runs<nq, 2>)(r, n_runs, pr, q16 + i0 * d, alpha + i0,
                                                qsum + i0 * n_groups, out + i0 * ld_out, ld_out);
        });
      });
#else
  (void)rows, (void)n_rows, (void)d, (void)n_groups, (void)params, (void)q16, (void)alpha,
      (void)qsum, (void)n_q, (void)scores, (void)ld;
#endif
}

}  // namespace kvpack
