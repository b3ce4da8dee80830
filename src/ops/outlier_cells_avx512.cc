// AVX-512 kernels of the outlier cells (ops/outlier_cells_avx512.h), compiled with a function
// attribute and chosen at run time, as ops/packed_scores.cc does.
#include "ops/outlier_cells_avx512.h"

#include <algorithm>
#include <cstring>

#include "ops/code_dot.h"
#include "ops/outlier_cells.h"

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
// Cells are read in stream order; each cell asks for the lines kPrefetchBytes past its own
// (as the other streaming kernels do, ops/packed_scores.cc).
constexpr uintptr_t kPrefetchBytes = 4096;

KVPACK_OUTLIER_INLINE void PrefetchCellAhead(const uint32_t* stream, const uint32_t* cell_begin,
                                             size_t c) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(stream + cell_begin[c]) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(stream + cell_begin[c + 1]);
  for (uintptr_t a = begin; a < end; a += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(a + kPrefetchBytes), _MM_HINT_T0);
  }
}

// A parsed cell (one-byte counts: the fast kernels' head sizes): its rounds, the lanes'
// counts in rank order and their ranks, and the first entry.
struct CellView {
  int n_rounds;
  __m512i count;  // by rank
  __m512i rank;   // by lane
  const uint32_t* entries;
};

KVPACK_OUTLIER_INLINE CellView ViewCell(const uint32_t* words) {
  static_assert(OutlierCellHeaderWords(OutlierLanes::kRows, kOutlierFastMaxScoreDim) == 8 &&
                OutlierCellHeaderWords(OutlierLanes::kChannels, kOutlierFastMaxAccumulateDim) == 8,
                "one-byte counts and ranks: 8 words");
  CellView v;
  v.n_rounds = static_cast<int>(words[0] & 0xff);
  v.count = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words)));
  v.rank = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + 4)));
  v.entries = words + 8;
  return v;
}

// The lanes of round k (a prefix of the ranking).
KVPACK_OUTLIER_INLINE __mmask16 RoundMask(const CellView& v, int k) {
  return _mm512_cmpgt_epi32_mask(v.count, _mm512_set1_epi32(k));
}

// Entry words -> fp32 values (low halves) and the other index (high halves).
KVPACK_OUTLIER_INLINE __m512 EntryValues(__m512i words) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
}

// table[index] for index < 32 * kChunks, table in 2 * kChunks registers of 16 floats.
template <int kChunks>
KVPACK_OUTLIER_INLINE __m512 Lookup(const __m512* table, __m512i index) {
  const __m512 a = _mm512_permutex2var_ps(table[0], index, table[1]);
  if constexpr (kChunks == 1) {
    return a;
  } else {
    const __m512 b = _mm512_permutex2var_ps(table[2], index, table[3]);
    const __m512 ab = _mm512_mask_blend_ps(_mm512_test_epi32_mask(index, _mm512_set1_epi32(32)), a, b);
    if constexpr (kChunks == 2) {
      return ab;
    } else {
      const __m512 c = _mm512_permutex2var_ps(table[4], index, table[5]);
      const __m512 e = _mm512_permutex2var_ps(table[6], index, table[7]);
      const __m512 ce = _mm512_mask_blend_ps(_mm512_test_epi32_mask(index, _mm512_set1_epi32(32)), c, e);
      return _mm512_mask_blend_ps(_mm512_test_epi32_mask(index, _mm512_set1_epi32(64)), ab, ce);
    }
  }
}

// Scores of kNq query rows (q rows zero-padded to 32 * kChunks channels in qpad).
template <int kNq, int kChunks>
KVPACK_OUTLIER_ATTR void ScoresPass(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                                    int64_t r1, const float* qpad, float* scores, int64_t ld) {
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kRows);
  __m512 q[kNq][2 * kChunks];
  for (int i = 0; i < kNq; ++i) {
    for (int j = 0; j < 2 * kChunks; ++j) q[i][j] = _mm512_loadu_ps(qpad + i * 128 + 16 * j);
  }
  for (int64_t s = r0 / kSlice; s * kSlice < r1; ++s) {
    const uint32_t* words = stream + cell_begin[s];
    PrefetchCellAhead(stream, cell_begin, static_cast<size_t>(s));
    const CellView cell = ViewCell(words);
    if (cell.n_rounds == 0) continue;
    __m512 acc[kNq];
    for (int i = 0; i < kNq; ++i) acc[i] = _mm512_setzero_ps();
    const uint32_t* e = cell.entries;
    for (int k = 0; k < cell.n_rounds; ++k) {
      const __mmask16 m = RoundMask(cell, k);
      const __m512i w = _mm512_loadu_si512(e);
      e += __builtin_popcount(m);
      const __m512 v = EntryValues(w);
      const __m512i channel = _mm512_srli_epi32(w, 16);
      for (int i = 0; i < kNq; ++i) {
        acc[i] = _mm512_mask3_fmadd_ps(Lookup<kChunks>(q[i], channel), v, acc[i], m);
      }
    }
    const int64_t first = s * kSlice;
    const bool inside = first >= r0 && first + kSlice <= r1;
    for (int i = 0; i < kNq; ++i) {
      const __m512 sums = _mm512_permutexvar_ps(cell.rank, acc[i]);
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

template <int kChunks>
KVPACK_OUTLIER_ATTR void ScoresChunks(const uint32_t* stream, const uint32_t* cell_begin,
                                      int64_t r0, int64_t r1, int d, const float* q, int n_q,
                                      float* scores, int64_t ld) {
  alignas(64) float qpad[kMaxQueries * 128];
  for (int i0 = 0; i0 < n_q; i0 += kMaxQueries) {
    const int nq = std::min(kMaxQueries, n_q - i0);
    std::memset(qpad, 0, sizeof(qpad));
    for (int i = 0; i < nq; ++i) std::memcpy(qpad + i * 128, q + (i0 + i) * d, d * sizeof(float));
    float* dst = scores + i0 * ld;
    switch (nq) {
      case 1: ScoresPass<1, kChunks>(stream, cell_begin, r0, r1, qpad, dst, ld); break;
      case 2: ScoresPass<2, kChunks>(stream, cell_begin, r0, r1, qpad, dst, ld); break;
      case 3: ScoresPass<3, kChunks>(stream, cell_begin, r0, r1, qpad, dst, ld); break;
      default: ScoresPass<4, kChunks>(stream, cell_begin, r0, r1, qpad, dst, ld); break;
    }
  }
}

// Accumulate for kNq weight rows into channel_acc [kNq, n_cells * 16] (zeroed by the caller).
template <int kNq>
KVPACK_OUTLIER_ATTR void AccumulatePass(const uint32_t* stream, const uint32_t* cell_begin,
                                        int64_t r0, int64_t r1, int n_cells, const float* p,
                                        int64_t ld, float* channel_acc) {
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kChannels);
  const int width = n_cells * kLanes;
  for (int64_t s = r0 / kSlice; s * kSlice < r1; ++s) {
    const int64_t first = s * kSlice;
    const bool inside = first >= r0 && first + kSlice <= r1;
    // The slice's weights: p[i, first - r0 + t] for t < 64, zero outside [r0, r1).
    __m512 w[kNq][4];
    for (int i = 0; i < kNq; ++i) {
      if (inside) {
        const float* src = p + i * ld + (first - r0);
        for (int j = 0; j < 4; ++j) w[i][j] = _mm512_loadu_ps(src + 16 * j);
      } else {
        alignas(64) float tmp[kSlice] = {};
        for (int64_t t = std::max(first, r0); t < std::min(first + kSlice, r1); ++t) {
          tmp[t - first] = p[i * ld + (t - r0)];
        }
        for (int j = 0; j < 4; ++j) w[i][j] = _mm512_load_ps(tmp + 16 * j);
      }
    }
    const __m512i lo = _mm512_set1_epi32(static_cast<int>(std::max<int64_t>(r0 - first, 0)));
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(std::min<int64_t>(r1 - first, kSlice)));
    for (int g = 0; g < n_cells; ++g) {
      const uint32_t* words = stream + cell_begin[s * n_cells + g];
      PrefetchCellAhead(stream, cell_begin, static_cast<size_t>(s * n_cells + g));
      const CellView cell = ViewCell(words);
      if (cell.n_rounds == 0) continue;
      __m512 acc[kNq];
      for (int i = 0; i < kNq; ++i) acc[i] = _mm512_setzero_ps();
      const uint32_t* e = cell.entries;
      for (int k = 0; k < cell.n_rounds; ++k) {
        __mmask16 m = RoundMask(cell, k);
        const __m512i x = _mm512_loadu_si512(e);
        e += __builtin_popcount(m);
        const __m512 v = EntryValues(x);
        const __m512i row = _mm512_srli_epi32(x, 16);
        if (!inside) {
          m &= _mm512_cmpge_epi32_mask(row, lo) & _mm512_cmplt_epi32_mask(row, hi);
        }
        for (int i = 0; i < kNq; ++i) {
          acc[i] = _mm512_mask3_fmadd_ps(Lookup<2>(w[i], row), v, acc[i], m);
        }
      }
      for (int i = 0; i < kNq; ++i) {
        float* at = channel_acc + i * width + g * kLanes;
        _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at),
                                           _mm512_permutexvar_ps(cell.rank, acc[i])));
      }
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
