// AVX-512 kernels of the outlier cells (ops/outlier_cells_avx512.h), compiled with a function
// attribute and chosen at run time, as ops/packed_scores.cc does.
#include "ops/outlier_cells_avx512.h"

#include <algorithm>
#include <cstring>

#include "ops/code_dot.h"
#include "ops/outlier_cells.h"
#include "ops/prefetch.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_OUTLIER_KERNEL 1
#define KVPACK_OUTLIER_ATTR __attribute__((target("avx512f,avx512bw,avx512vl")))
#define KVPACK_OUTLIER_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline
#else
#define KVPACK_HAVE_OUTLIER_KERNEL 0
#endif

namespace kvpack {

#if KVPACK_HAVE_OUTLIER_KERNEL
// GCC 12's intrinsic headers build some results from `_mm512_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

constexpr int kLanes = kOutlierCellLanes;
constexpr int kMaxQueries = 4;  // query rows per pass over the cells
// Cells are read in stream order; each cell asks for two lines kPrefetchAheadBytes past its start
// (as the other streaming kernels do, ops/packed_scores.cc). A cell is about two lines long;
// a loop over its exact lines mispredicted its exit once per cell.
KVPACK_OUTLIER_INLINE void PrefetchCellAhead(const uint32_t* words) {
  const char* ahead = reinterpret_cast<const char*>(words) + kPrefetchAheadBytes;
  _mm_prefetch(ahead, _MM_HINT_T0);
  _mm_prefetch(ahead + 64, _MM_HINT_T0);
}

// A parsed cell (one-byte counts: the fast kernels' head sizes): its rounds, the lanes'
// counts in rank order, and the first entry. Its ranks are read at the end (CellRanks).
struct CellView {
  int n_rounds;
  __m512i count;  // by rank
  const uint32_t* entries;
};

KVPACK_OUTLIER_INLINE CellView ViewCell(const uint32_t* words) {
  static_assert(OutlierCellHeaderWords(OutlierLanes::kRows, kOutlierFastMaxScoreDim) == 8 &&
                OutlierCellHeaderWords(OutlierLanes::kChannels, kOutlierFastMaxAccumulateDim) == 8,
                "one-byte counts and ranks: 8 words");
  CellView v;
  v.n_rounds = static_cast<int>(words[0] & 0xff);
  v.count = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words)));
  v.entries = words + 8;
  return v;
}

// Cells [c0, c0 + kCells) viewed (each asking for the lines ahead of it); whether any holds
// an entry.
template <int kCells>
KVPACK_OUTLIER_INLINE bool ViewCells(const uint32_t* stream, const uint32_t* cell_begin, size_t c0,
                                     CellView (&cell)[kCells]) {
  int any = 0;
  for (int j = 0; j < kCells; ++j) {
    const uint32_t* words = stream + cell_begin[c0 + j];
    PrefetchCellAhead(words);
    cell[j] = ViewCell(words);
    any |= cell[j].n_rounds;
  }
  return any != 0;
}

// rank[o], the position of lane o in the cell's ranking.
KVPACK_OUTLIER_INLINE __m512i CellRanks(const uint32_t* words) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + 4)));
}

// Entry words -> fp32 values (low halves) and the other index (high halves).
KVPACK_OUTLIER_INLINE __m512 EntryValues(__m512i words) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
}

// 16 floats rounded to bf16 as Fp32ToBf16 does (nearest even; a NaN stays a NaN, made
// quiet), each in the high half of its dword.
KVPACK_OUTLIER_INLINE __m512i RoundToBf16High(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x400000));
}

// 32 floats (two loads at `x`) -> one register of 32 bf16 words, in order.
KVPACK_OUTLIER_INLINE __m512i Bf16Table(const float* x) {
  alignas(64) static constexpr uint16_t kHighWords[32] = {
      1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
      33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(RoundToBf16High(_mm512_loadu_ps(x)),
                                   _mm512_load_si512(kHighWords),
                                   RoundToBf16High(_mm512_loadu_ps(x + 16)));
}

// table[index] as floats, where each entry word holds its index in its high half (bits 16..)
// and index < 32 * kChunks; table: kChunks registers of 32 bf16 words. The word permutation
// reads each lane's index from its high word and writes the entry to the high word; the low
// words are zeroed, so each dword is the bf16 entry as a float.
template <int kChunks>
KVPACK_OUTLIER_INLINE __m512 Lookup(const __m512i* table, __m512i words) {
  constexpr __mmask32 kHigh = 0xAAAAAAAAu;
  if constexpr (kChunks == 1) {
    return _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi16(kHigh, table[0], words, table[0]));
  } else if constexpr (kChunks == 2) {
    return _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi16(kHigh, table[0], words, table[1]));
  } else {
    static_assert(kChunks == 4);
    const __m512i a = _mm512_maskz_permutex2var_epi16(kHigh, table[0], words, table[1]);
    const __m512i b = _mm512_maskz_permutex2var_epi16(kHigh, table[2], words, table[3]);
    return _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_test_epi32_mask(words, _mm512_set1_epi32(64 << 16)), a, b));
  }
}

// The rounds of kCells cells side by side: one loop to the longest cell's round count (a
// finished cell's lanes are masked off; its load reads the next cell or the stream's slack),
// so that a pass pays one loop exit per kCells cells and their multiply-add chains overlap.
// Each cell keeps its own accumulators and entry order, so the floats are those of one cell
// at a time. acc[i][j]: query (or weight) row i, cell j, by rank. Unless kAll, entries whose
// other index is outside [lo, hi) add nothing.
template <int kNq, int kCells, int kChunks, bool kAll>
KVPACK_OUTLIER_INLINE void RunRounds(const CellView (&cell)[kCells], const __m512i (&table)[kNq][kChunks],
                                     __m512i lo, __m512i hi, __m512 (&acc)[kNq][kCells]) {
  int n_rounds = 0;
  const uint32_t* e[kCells];
  for (int j = 0; j < kCells; ++j) {
    n_rounds = std::max(n_rounds, cell[j].n_rounds);
    e[j] = cell[j].entries;
    for (int i = 0; i < kNq; ++i) acc[i][j] = _mm512_setzero_ps();
  }
  for (int k = 0; k < n_rounds; ++k) {
    const __m512i round = _mm512_set1_epi32(k);
    for (int j = 0; j < kCells; ++j) {
      __mmask16 m = _mm512_cmpgt_epi32_mask(cell[j].count, round);
      const __m512i w = _mm512_loadu_si512(e[j]);
      e[j] += __builtin_popcount(m);
      const __m512 v = EntryValues(w);
      const __m512i other = _mm512_srli_epi32(w, 16);
      if constexpr (!kAll) {
        m &= _mm512_cmpge_epi32_mask(other, lo) & _mm512_cmplt_epi32_mask(other, hi);
      }
      for (int i = 0; i < kNq; ++i) {
        acc[i][j] = _mm512_mask3_fmadd_ps(Lookup<kChunks>(table[i], w), v, acc[i][j], m);
      }
    }
  }
}

// Scores of slices [s, s + kCells) (one cell each) for kNq query rows.
template <int kNq, int kChunks, int kCells>
KVPACK_OUTLIER_INLINE void ScoreCells(const uint32_t* stream, const uint32_t* cell_begin, int64_t s,
                                      const __m512i (&q)[kNq][kChunks], int64_t r0, int64_t r1,
                                      float* scores, int64_t ld) {
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kRows);
  CellView cell[kCells];
  if (!ViewCells(stream, cell_begin, static_cast<size_t>(s), cell)) return;
  __m512 acc[kNq][kCells];
  RunRounds<kNq, kCells, kChunks, true>(cell, q, __m512i{}, __m512i{}, acc);
  for (int j = 0; j < kCells; ++j) {
    const __m512i rank = CellRanks(stream + cell_begin[s + j]);
    const int64_t first = (s + j) * kSlice;
    const bool inside = first >= r0 && first + kSlice <= r1;
    for (int i = 0; i < kNq; ++i) {
      const __m512 sums = _mm512_permutexvar_ps(rank, acc[i][j]);
      float* dst = scores + i * ld;
      if (inside) {
        float* at = dst + (first - r0);
        _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), sums));
      } else {
        alignas(64) float tmp[kLanes];
        _mm512_store_ps(tmp, sums);
        for (int o = 0; o < kLanes; ++o) {
          const int64_t r = first + o;
          if (r >= r0 && r < r1) dst[r - r0] += tmp[o];
        }
      }
    }
  }
}

// Scores of kNq query rows; q: [kNq, q_stride], q_stride >= 32 * kChunks (the channels past d
// zero).
template <int kNq, int kChunks>
KVPACK_OUTLIER_ATTR void ScoresPass(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                                    int64_t r1, const float* q_rows, int q_stride, float* scores,
                                    int64_t ld) {
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kRows);
  // Cells side by side: kNq * (kChunks tables + kCells sums) registers and the cells' counts;
  // four cells for up to three rows of 64 channels fit in the 32 registers.
  constexpr int kCells = kNq * (kChunks + 4) + 4 <= 28 ? 4 : 2;
  __m512i q[kNq][kChunks];
  for (int i = 0; i < kNq; ++i) {
    for (int j = 0; j < kChunks; ++j) q[i][j] = Bf16Table(q_rows + i * q_stride + 32 * j);
  }
  const int64_t s_end = (r1 + kSlice - 1) / kSlice;
  int64_t s = r0 / kSlice;
  for (; s + kCells <= s_end; s += kCells) {
    ScoreCells<kNq, kChunks, kCells>(stream, cell_begin, s, q, r0, r1, scores, ld);
  }
  for (; s < s_end; ++s) ScoreCells<kNq, kChunks, 1>(stream, cell_begin, s, q, r0, r1, scores, ld);
}

template <int kChunks>
KVPACK_OUTLIER_ATTR void ScoresChunks(const uint32_t* stream, const uint32_t* cell_begin,
                                      int64_t r0, int64_t r1, int d, const float* q, int n_q,
                                      float* scores, int64_t ld) {
  constexpr int kWidth = 32 * kChunks;
  alignas(64) float qpad[kMaxQueries * kWidth];
  for (int i0 = 0; i0 < n_q; i0 += kMaxQueries) {
    const int nq = std::min(kMaxQueries, n_q - i0);
    // A head of exactly 32 * kChunks channels is read in place; others are zero-padded.
    const float* rows = q + i0 * d;
    int stride = d;
    if (d != kWidth) {
      std::memset(qpad, 0, sizeof(float) * nq * kWidth);
      for (int i = 0; i < nq; ++i) std::memcpy(qpad + i * kWidth, rows + i * d, d * sizeof(float));
      rows = qpad;
      stride = kWidth;
    }
    float* dst = scores + i0 * ld;
    switch (nq) {
      case 1: ScoresPass<1, kChunks>(stream, cell_begin, r0, r1, rows, stride, dst, ld); break;
      case 2: ScoresPass<2, kChunks>(stream, cell_begin, r0, r1, rows, stride, dst, ld); break;
      case 3: ScoresPass<3, kChunks>(stream, cell_begin, r0, r1, rows, stride, dst, ld); break;
      default: ScoresPass<4, kChunks>(stream, cell_begin, r0, r1, rows, stride, dst, ld); break;
    }
  }
}

// Accumulate of the cells [g, g + kCells) of slice s (weights w: the slice's 64 rows) into
// channel_acc [kNq, width].
template <int kNq, int kCells>
KVPACK_OUTLIER_INLINE void AccumulateCells(const uint32_t* stream, const uint32_t* cell_begin,
                                           size_t c0, const __m512i (&w)[kNq][2], bool inside,
                                           __m512i lo, __m512i hi, int g, int width,
                                           float* channel_acc) {
  CellView cell[kCells];
  if (!ViewCells(stream, cell_begin, c0, cell)) return;
  __m512 acc[kNq][kCells];
  if (inside) {
    RunRounds<kNq, kCells, 2, true>(cell, w, lo, hi, acc);
  } else {
    RunRounds<kNq, kCells, 2, false>(cell, w, lo, hi, acc);
  }
  for (int j = 0; j < kCells; ++j) {
    const __m512i rank = CellRanks(stream + cell_begin[c0 + j]);
    for (int i = 0; i < kNq; ++i) {
      float* at = channel_acc + i * width + (g + j) * kLanes;
      _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), _mm512_permutexvar_ps(rank, acc[i][j])));
    }
  }
}

// Accumulate for kNq weight rows into channel_acc [kNq, n_cells * 16] (zeroed by the caller).
template <int kNq>
KVPACK_OUTLIER_ATTR void AccumulatePass(const uint32_t* stream, const uint32_t* cell_begin,
                                        int64_t r0, int64_t r1, int n_cells, const float* p,
                                        int64_t ld, float* channel_acc) {
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kChannels);
  // Cells side by side (as in ScoresPass; the weights take 2 registers per row).
  constexpr int kCells = kNq * (2 + 4) + 4 <= 28 ? 4 : 2;
  const int width = n_cells * kLanes;
  for (int64_t s = r0 / kSlice; s * kSlice < r1; ++s) {
    const int64_t first = s * kSlice;
    const bool inside = first >= r0 && first + kSlice <= r1;
    // The slice's weights: p[i, first - r0 + t] for t < 64, zero outside [r0, r1).
    __m512i w[kNq][2];
    for (int i = 0; i < kNq; ++i) {
      if (inside) {
        const float* src = p + i * ld + (first - r0);
        for (int j = 0; j < 2; ++j) w[i][j] = Bf16Table(src + 32 * j);
      } else {
        alignas(64) float tmp[kSlice] = {};
        for (int64_t t = std::max(first, r0); t < std::min(first + kSlice, r1); ++t) {
          tmp[t - first] = p[i * ld + (t - r0)];
        }
        for (int j = 0; j < 2; ++j) w[i][j] = Bf16Table(tmp + 32 * j);
      }
    }
    const __m512i lo = _mm512_set1_epi32(static_cast<int>(std::max<int64_t>(r0 - first, 0)));
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(std::min<int64_t>(r1 - first, kSlice)));
    const size_t c0 = static_cast<size_t>(s * n_cells);
    int g = 0;
    for (; g + kCells <= n_cells; g += kCells) {
      AccumulateCells<kNq, kCells>(stream, cell_begin, c0 + g, w, inside, lo, hi, g, width, channel_acc);
    }
    for (; g < n_cells; ++g) {
      AccumulateCells<kNq, 1>(stream, cell_begin, c0 + g, w, inside, lo, hi, g, width, channel_acc);
    }
  }
}

}  // namespace

bool OutlierKernelsAvailable() {
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return cpu && CodeKernelsUseAvx512();
}

void OutlierScoresAvx512(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                         int64_t r1, int d, const float* q, int n_q, float* scores, int64_t ld) {
  if (d <= 32) {
    ScoresChunks<1>(stream, cell_begin, r0, r1, d, q, n_q, scores, ld);
  } else if (d <= 64) {
    ScoresChunks<2>(stream, cell_begin, r0, r1, d, q, n_q, scores, ld);
  } else {
    ScoresChunks<4>(stream, cell_begin, r0, r1, d, q, n_q, scores, ld);
  }
}

void OutlierAccumulateAvx512(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                             int64_t r1, int d, const float* p, int n_q, int64_t ld,
                             float* out) {
  const int n_cells = OutlierCellsPerSlice(OutlierLanes::kChannels, d);
  const int width = n_cells * kLanes;
  alignas(64) float channel_acc[kMaxQueries * kOutlierFastMaxAccumulateDim];
  for (int i0 = 0; i0 < n_q; i0 += kMaxQueries) {
    const int nq = std::min(kMaxQueries, n_q - i0);
    std::memset(channel_acc, 0, sizeof(float) * nq * width);
    const float* src = p + i0 * ld;
    switch (nq) {
      case 1: AccumulatePass<1>(stream, cell_begin, r0, r1, n_cells, src, ld, channel_acc); break;
      case 2: AccumulatePass<2>(stream, cell_begin, r0, r1, n_cells, src, ld, channel_acc); break;
      case 3: AccumulatePass<3>(stream, cell_begin, r0, r1, n_cells, src, ld, channel_acc); break;
      default: AccumulatePass<4>(stream, cell_begin, r0, r1, n_cells, src, ld, channel_acc); break;
    }
    for (int i = 0; i < nq; ++i) {
      float* dst = out + (i0 + i) * d;
      for (int c = 0; c < d; ++c) dst[c] += channel_acc[i * width + c];
    }
  }
}

#pragma GCC diagnostic pop
#else   // !KVPACK_HAVE_OUTLIER_KERNEL

bool OutlierKernelsAvailable() { return false; }
void OutlierScoresAvx512(const uint32_t*, const uint32_t*, int64_t, int64_t, int, const float*,
                         int, float*, int64_t) {}
void OutlierAccumulateAvx512(const uint32_t*, const uint32_t*, int64_t, int64_t, int,
                             const float*, int, int64_t, float*) {}

#endif  // KVPACK_HAVE_OUTLIER_KERNEL

}  // namespace kvpack
