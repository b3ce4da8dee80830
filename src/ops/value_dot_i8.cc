// The AVX512-VNNI + VBMI kernel is compiled for that ISA with a function attribute and chosen
// at run time, as ops/code_dot_i16.cc's is; on AVX2 without it, ops/value_dot_i8_avx2.h's
// kernel; elsewhere the twin runs.
#include "ops/value_dot_i8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/prefetch.h"
#include "ops/query_chunks.h"
#include "ops/value_dot_i8_avx2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "ops/reduce_avx512.h"
#include "ops/value_tile_avx512.h"
#define KVPACK_HAVE_I8V_KERNEL 1
#define KVPACK_I8V_ATTR \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vbmi,avx512vnni")))
#else
#define KVPACK_HAVE_I8V_KERNEL 0
#endif

namespace kvpack {
namespace {

constexpr float kI8Max = 127.0f;
constexpr size_t kD = 64, kRowBytes = 16;  // channels and bytes of a 2-bit row

// Code c of a packed 2-bit row.
inline int CodeAt(const uint8_t* row, size_t c) { return (row[c / 4] >> (2 * (c % 4))) & 3; }

#if KVPACK_HAVE_I8V_KERNEL
// GCC 12's intrinsic headers build some results from `_mm512_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

bool CpuHasI8ValueKernel() {
  static const bool ok = __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vbmi") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

constexpr int kBlocks = static_cast<int>(kI8ValueTileRowsMax / 16);  // 16-row blocks per tile
constexpr size_t kMaxQ = 3;        // query rows per pass: 3 x 4 accumulators in registers
// Tiles per weight phase (see WeightPhase below).
constexpr int kPhaseTiles = 8;

// The rows' (scale, min) pairs stream from memory as their codes do: while a phase multiplies
// tile t with its codes, it asks for the parameters of the next phase's tile t
// (kParamPrefetchRows = a phase's rows ahead; 4 n_groups bytes a row; the code loops ask for
// kPrefetchAheadBytes ahead, 256 rows of 16 bytes), which the next phase's weight pass then
// reads at a rate no prefetch a few tiles ahead keeps up with. Asked for 256 rows ahead from
// the weight pass instead, KIVI-2's value pass from memory took 16% longer
// (kv_codec_bench AccumulateCold/kivi:bits=2/8192/30, 1093 and 1102 against 947 and 943 us;
// docs/performance-history.md, session 28). (The 4-bit value kernels of code_dot_i16.cc
// measured no different with a parameter prefetch.)
constexpr size_t kParamPrefetchRows = kPhaseTiles * kI8ValueTileRowsMax;
KVPACK_I8V_ATTR inline void PrefetchRowParamsAhead(const uint16_t* params, size_t n_rows,
                                                   size_t row_bytes) {
  const char* ahead = reinterpret_cast<const char*>(params) + kParamPrefetchRows * row_bytes;
  for (size_t off = 0; off < n_rows * row_bytes; off += 64) PrefetchCodeLine(ahead + off);
}

// acc += four u8 (codes) x s8 (weights) products per 32-bit lane, in place (the asm ties the
// accumulator to its register; code_dot_i16.cc says why). Volatile: RowDotsI8 issues its
// weight broadcasts first.
KVPACK_I8V_ATTR inline __m512i DotQuadsAdd(__m512i acc, __m512i codes, __m512i w) {
  asm volatile("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(codes), "v"(w));
  return acc;
}

// Rows of two groups (4 halves each: scale and min of group 0, then of group 1) split by
// group: row j's halves are 4 j + 2 g (the scale of group g) and 4 j + 2 g + 1 (its min),
// rows 8..15 in the second source (index + 32 = 4 j + ... for j >= 8). idx[g]: scales then mins.
struct SplitTwoGroups {
  alignas(64) uint16_t idx[2][32];
};
constexpr SplitTwoGroups kSplitTwoGroups = [] {
  SplitTwoGroups t{};
  for (int g = 0; g < 2; ++g) {
    for (int j = 0; j < 16; ++j) {
      t.idx[g][j] = static_cast<uint16_t>(4 * j + 2 * g);
      t.idx[g][16 + j] = static_cast<uint16_t>(4 * j + 2 * g + 1);
    }
  }
  return t;
}();

// Byte permutations of four 2-bit rows (one 64-byte line) for RowDotsI8: pick[b], lane j,
// byte r: the byte of row r that holds channel 16 b + j's code.
struct PickCodes {
  alignas(64) uint8_t idx[4][64];
};
constexpr PickCodes kPickCodes = [] {
  PickCodes t{};
  for (int b = 0; b < 4; ++b) {
    for (int j = 0; j < 16; ++j) {
      for (int r = 0; r < 4; ++r) t.idx[b][4 * j + r] = static_cast<uint8_t>(16 * r + 4 * b + j / 4);
    }
  }
  return t;
}();

// Scales and mins (as floats) of groups [gb, gb + NG) of the 16 rows from r, of which rows
// [r, r + n) exist, into scale[g][b], min[g][b]. One group per row: the row's (scale, min)
// word of 16 rows, one 16-bit permutation into scales | mins. Two: two loads (8 rows of 4
// halves each) and one two-source 16-bit permutation per group. Four: GroupParamWords.
template <int NG>
KVPACK_I8V_ATTR inline void BlockParams(const uint16_t* params, size_t n_groups, size_t gb,
                                        size_t r, int64_t n, int b,
                                        __m512 (&scale)[NG][kBlocks],
                                        __m512 (&min)[NG][kBlocks]) {
  const auto* words = reinterpret_cast<const uint32_t*>(params) + r * n_groups;
  if (n_groups == 1 || n_groups == 2) {
    __m512i halves[2];  // [scales of the 16 rows | their mins], per group
    if (n_groups == 1) {
      const __m512i x = LoadWords(words, n);
      const __m512i split = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                             30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
      halves[0] = _mm512_permutexvar_epi16(split, x);
    } else {
      const __m512i lo = LoadWords(words, 2 * n), hi = LoadWords(words + 16, 2 * n - 16);
#pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        halves[g] = _mm512_permutex2var_epi16(lo, _mm512_load_si512(kSplitTwoGroups.idx[g]), hi);
      }
    }
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) {
      scale[g][b] = _mm512_cvtph_ps(_mm512_castsi512_si256(halves[g]));
      min[g][b] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves[g], 1));
    }
    return;
  }
#pragma GCC unroll 2
  for (int g = 0; g < NG; ++g) {
    const __m512i x = GroupParamWords(params, n_groups, gb + g, r, n);
    scale[g][b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
    min[g][b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
  }
}

// Weight phases of kPhaseTiles tiles. The weights of all of a phase's tiles are formed first, the largest
// magnitudes of every (tile, query row, group) then reduced 16 at a time (ReduceEach16: 45
// operations for 16 where one reduction takes 9) and their steps divided as vectors, and only
// then is each tile quantized and multiplied with its codes. One pair at a time, the
// reduction, two scalar divisions and a broadcast each waited on the one before, and the
// weights took more of the value pass than the multiplies with the codes (48% against 35%
// of KIVI-2's, kv_codec_bench Accumulate/kivi:bits=2/8192/1 under perf).

// A phase's weights for query rows [0, NQ) and NG groups: pair r = i * NG + g.
template <size_t NQ, int NG>
struct WeightPhase {
  static constexpr int kPairs = static_cast<int>(NQ) * NG;
  static constexpr int kSlots = (kPhaseTiles * kPairs + 15) / 16 * 16;  // (tile, pair) slots
  alignas(64) float w[kPhaseTiles][kPairs][kI8ValueTileRowsMax];  // p * scale
  alignas(64) float lane_max[kSlots][16];  // lane-wise max |w| of slot t * kPairs + r
  alignas(64) float lane_sum[kSlots][16];  // lane-wise sum of p * min
  alignas(64) float min_sum[kSlots];       // sum of p * min
  alignas(64) float amax[kSlots];          // max |w|
  alignas(64) float inv[kSlots];           // 127 / amax (0 where !(amax > 0))
  alignas(64) float step[kSlots];          // amax / 127 (0 where !(amax > 0))
};

// Tile t of a phase (n_rows <= 64 rows; p, params at its first row): w = p * scale into
// ph.w[t], each pair's lane-wise max |w| (vrangeps, imm8 0x0B: the larger magnitude with the
// sign cleared; Intel SDM, VRANGEPS) into ph.lane_max, and the lane-wise sums of p * min into
// ph.lane_sum. Rows past n_rows load as p = 0. The parameters of two groups at a time are in
// registers (four groups' would take 32).
template <size_t NQ, int NG>
KVPACK_I8V_ATTR void FormTileWeights(const float* p, size_t ldp, const uint16_t* params,
                                     size_t n_rows, int t, WeightPhase<NQ, NG>& ph) {
  constexpr int kSub = NG < 2 ? NG : 2;
  __mmask16 live[kBlocks];
#pragma GCC unroll 4
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t left = static_cast<int64_t>(n_rows) - 16 * b;
    live[b] = left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  }
#pragma GCC unroll 2
  for (int gb = 0; gb < NG; gb += kSub) {
    __m512 scale[kSub][kBlocks], min[kSub][kBlocks];
#pragma GCC unroll 4
    for (int b = 0; b < kBlocks; ++b) {
      BlockParams<kSub>(params, NG, gb, 16 * b, static_cast<int64_t>(n_rows) - 16 * b, b, scale,
                        min);
    }
#pragma GCC unroll 4
    for (size_t i = 0; i < NQ; ++i) {
      __m512 pb[kBlocks];
#pragma GCC unroll 4
      for (int b = 0; b < kBlocks; ++b) pb[b] = _mm512_maskz_loadu_ps(live[b], p + i * ldp + 16 * b);
#pragma GCC unroll 2
      for (int g = 0; g < kSub; ++g) {
        const int r = static_cast<int>(i) * NG + gb + g;
        __m512 vmax = _mm512_setzero_ps(), vsum = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int b = 0; b < kBlocks; ++b) {
          const __m512 w = _mm512_mul_ps(pb[b], scale[g][b]);
          _mm512_store_ps(ph.w[t][r] + 16 * b, w);
          vmax = _mm512_range_ps(vmax, w, 0x0B);
          vsum = _mm512_fmadd_ps(pb[b], min[g][b], vsum);
        }
        const int v = t * WeightPhase<NQ, NG>::kPairs + r;
        _mm512_store_ps(ph.lane_max[v], vmax);
        _mm512_store_ps(ph.lane_sum[v], vsum);
      }
    }
  }
}

// The maxima of the first n_tiles tiles' pairs, 16 slots at a time, with their inverses and
// steps (QuantizeWeightsI8Ref's 127 / amax and amax / 127, as vector divisions), and their
// sums of p * min.
template <size_t NQ, int NG>
KVPACK_I8V_ATTR void ReducePhaseMaxima(int n_tiles, WeightPhase<NQ, NG>& ph) {
  const int n = n_tiles * WeightPhase<NQ, NG>::kPairs;
  for (int v = n; v % 16 != 0; ++v) {
    _mm512_store_ps(ph.lane_max[v], _mm512_setzero_ps());
    _mm512_store_ps(ph.lane_sum[v], _mm512_setzero_ps());
  }
  const __m512 k127 = _mm512_set1_ps(kI8Max);
  for (int v0 = 0; v0 < n; v0 += 16) {
    __m512 lanes[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) lanes[j] = _mm512_load_ps(ph.lane_sum[v0 + j]);
    _mm512_store_ps(ph.min_sum + v0, ReduceEach16<true>(lanes));
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) lanes[j] = _mm512_load_ps(ph.lane_max[v0 + j]);
    const __m512 m = ReduceEach16<false>(lanes);
    const __mmask16 live = _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_store_ps(ph.amax + v0, m);
    _mm512_store_ps(ph.inv + v0, _mm512_maskz_div_ps(live, k127, m));
    _mm512_store_ps(ph.step + v0, _mm512_maskz_div_ps(live, m, k127));
  }
}

// Tile t's weights quantized: per pair r, wq[r] (64 bytes, rows in order) and its step s[r];
// all zero with s = 0 where !(amax > 0), QuantizeWeightsI8Ref's rule.
template <size_t NQ, int NG>
KVPACK_I8V_ATTR void QuantizeTileWeights(const WeightPhase<NQ, NG>& ph, int t,
                                         int8_t (*wq)[kI8ValueTileRowsMax], float* s) {
  constexpr int kPairs = WeightPhase<NQ, NG>::kPairs;
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 4
  for (int r = 0; r < kPairs; ++r) {
    const int v = t * kPairs + r;
    if (!(ph.amax[v] > 0.0f)) {
      std::memset(wq[r], 0, kI8ValueTileRowsMax);
      s[r] = 0.0f;
      continue;
    }
    // |w * inv| <= 127 (+ a rounding, which cannot reach 127.5): the saturating narrowing
    // equals the twin's clamp.
    const __m512 vinv = _mm512_set1_ps(ph.inv[v]);
    __m512i q[kBlocks];
#pragma GCC unroll 4
    for (int b = 0; b < kBlocks; ++b) {
      q[b] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(ph.w[t][r] + 16 * b), vinv));
    }
    // Saturating packs to int16, then int8 (as a saturating narrowing would), leave 128-bit
    // lane L holding rows 16 j + 4 L .. + 3 in its dword j; one dword permutation puts rows
    // in order.
    const __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]),
                                             _mm512_packs_epi32(q[2], q[3]));
    _mm512_store_si512(wq[r], _mm512_permutexvar_epi32(order, bytes));
    s[r] = ph.step[v];
  }
}

// Query rows [0, NQ) against one 64-channel window of the tile's rows (bytes
// [window_byte, window_byte + 16) of each row), four rows at a time: the four rows' 16 bytes
// make one 64-byte vector (one load when a row is the window, kWide = false; four 16-byte
// loads otherwise). Channel block b (window channels 16 b + j, lane j) takes from each of the
// four rows r the byte holding its code (byte 16 r + 4 b + j / 4: lane j's bytes are rows
// 0..3), shifts the lane right by the code's offset 2 (j % 4) and masks each byte to 2 bits;
// one `vpdpbusd` per query row and block adds the four rows' code x weight products. The
// window's NGW groups are g_first .. g_first + NGW - 1 (wq row and step i * n_groups + g).
// Rows past n_rows load as zeros. out: the window's first channel of query row 0, rows d apart.
template <size_t NQ, int NGW, bool kWide>
KVPACK_I8V_ATTR void RowDotsI8(const int8_t (*wq)[kI8ValueTileRowsMax], const float* s,
                               size_t n_groups, size_t g_first, const uint8_t* codes,
                               size_t row_bytes, size_t window_byte, size_t n_rows, float* out,
                               size_t d) {
  constexpr int kBlocksPerGroup = 4 / NGW;
  __m512i pick[4];
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) pick[b] = _mm512_load_si512(kPickCodes.idx[b]);
  const __m512i shift = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
  const __m512i two_bits = _mm512_set1_epi8(3);
  const int8_t* w_rows[NQ][NGW];
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int g = 0; g < NGW; ++g) w_rows[i][g] = wq[i * n_groups + g_first + g];
  }
  __m512i acc[NQ][4];
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) acc[i][b] = _mm512_setzero_si512();
  }
  for (size_t k = 0; k < n_rows; k += 4) {
    const size_t left = n_rows - k;
    __m512i raw;
    if constexpr (!kWide) {
      const uint8_t* line = codes + k * kRowBytes;
      PrefetchCodeLine(line + kPrefetchAheadBytes);
      raw = left >= 4 ? _mm512_loadu_si512(line)
                      : _mm512_maskz_loadu_epi8((__mmask64{1} << (16 * left)) - 1, line);
    } else {
      __m128i part[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        part[r] = _mm_setzero_si128();
        if (static_cast<size_t>(r) >= left) continue;
        const uint8_t* row = codes + (k + r) * row_bytes + window_byte;
        PrefetchCodeLine(row + kPrefetchAheadBytes);
        part[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
      }
      const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(part[0]), part[1], 1);
      const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(part[2]), part[3], 1);
      raw = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    // The weights of rows k .. k + 3 for each (i, g), one broadcast each, all before the dots
    // (volatile, as DotQuadsAdd: in that order). Each broadcast next to its dots, as the
    // compiler placed them, took 4% longer (kv_codec_bench Accumulate/kivi:bits=2/8192/1:
    // 25.6 -> 24.7 us, session 29).
    __m512i wv[NQ][NGW];
#pragma GCC unroll 4
    for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < NGW; ++g) {
        asm volatile("vpbroadcastd %1, %0"
                     : "=v"(wv[i][g])
                     : "m"(*reinterpret_cast<const int32_t*>(w_rows[i][g] + k)));
      }
    }
    __m512i quad[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      quad[b] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi8(pick[b], raw), shift),
                                 two_bits);
    }
#pragma GCC unroll 4
    for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < NGW; ++g) {
#pragma GCC unroll 4
        for (int j = 0; j < kBlocksPerGroup; ++j) {
          const int b = g * kBlocksPerGroup + j;
          acc[i][b] = DotQuadsAdd(acc[i][b], quad[b], wv[i][g]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      float* o = out + i * d + 16 * b;
      const __m512 sv = _mm512_set1_ps(s[i * n_groups + g_first + b / kBlocksPerGroup]);
      _mm512_storeu_ps(o, _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(acc[i][b]), _mm512_loadu_ps(o)));
    }
  }
}

// The windows of a query chunk, each with its run of groups (one group covering the window,
// or 2 or 4 groups of 32 or 16 channels).
template <size_t NQ, bool kWide>
KVPACK_I8V_ATTR void WindowsI8(const int8_t (*wq)[kI8ValueTileRowsMax], const float* s,
                               size_t n_groups, const uint8_t* codes, size_t row_bytes, size_t d,
                               size_t n_rows, float* out) {
  const size_t group = d / n_groups;
  for (size_t c = 0; c < d; c += kD) {
    const size_t g_first = c / group, window_byte = c / 4;
    if (group >= kD) {
      RowDotsI8<NQ, 1, kWide>(wq, s, n_groups, g_first, codes, row_bytes, window_byte, n_rows,
                              out + c, d);
    } else if (group == 32) {
      RowDotsI8<NQ, 2, kWide>(wq, s, n_groups, g_first, codes, row_bytes, window_byte, n_rows,
                              out + c, d);
    } else {
      RowDotsI8<NQ, 4, kWide>(wq, s, n_groups, g_first, codes, row_bytes, window_byte, n_rows,
                              out + c, d);
    }
  }
}

// One phase (up to kPhaseTiles tiles from row k0) for query rows [0, NQ): the weights of every
// tile, their maxima, then tile by tile the quantized weights and their products with the
// codes; each tile's sums of p * min added to msum in tile order.
template <size_t NQ, int NG, bool kWide>
KVPACK_I8V_ATTR void PhasePass(const float* p, size_t ldp, const uint16_t* params,
                               const uint8_t* codes, size_t d, size_t n_rows, float* out,
                               float* msum) {
  constexpr int kPairs = WeightPhase<NQ, NG>::kPairs;
  const size_t row_bytes = d / 4;
  const int n_tiles = static_cast<int>((n_rows + kI8ValueTileRowsMax - 1) / kI8ValueTileRowsMax);
  WeightPhase<NQ, NG> ph;
  for (int t = 0; t < n_tiles; ++t) {
    const size_t k0 = t * kI8ValueTileRowsMax, m_rows = std::min(kI8ValueTileRowsMax, n_rows - k0);
    FormTileWeights<NQ, NG>(p + k0, ldp, params + k0 * 2 * NG, m_rows, t, ph);
  }
  ReducePhaseMaxima<NQ, NG>(n_tiles, ph);
  for (int t = 0; t < n_tiles; ++t) {
    const size_t k0 = t * kI8ValueTileRowsMax, m_rows = std::min(kI8ValueTileRowsMax, n_rows - k0);
    alignas(64) int8_t wq[kPairs][kI8ValueTileRowsMax];
    float s[kPairs];
    PrefetchRowParamsAhead(params + k0 * 2 * NG, m_rows, 4 * NG);
    QuantizeTileWeights<NQ, NG>(ph, t, wq, s);
    WindowsI8<NQ, kWide>(wq, s, NG, codes + k0 * row_bytes, row_bytes, d, m_rows, out);
    for (int r = 0; r < kPairs; ++r) msum[r] += ph.min_sum[t * kPairs + r];
  }
}

// Every phase of the rows in turn, in one call: the per-tile glue (the checks, the dispatch
// and three calls deep) was about 2% of a KIVI-2 decode step at depth 8192 when the codec
// called once per tile (perf, session 20).
template <int NG>
KVPACK_I8V_ATTR void AccumulateAvx512(const float* p, size_t ldp, size_t n_q,
                                      const uint16_t* params, const uint8_t* codes, size_t d,
                                      size_t n_rows, float* out, float* msum) {
  constexpr size_t kPhaseRows = kPhaseTiles * kI8ValueTileRowsMax;
  const size_t row_bytes = d / 4;
  for (size_t k0 = 0; k0 < n_rows; k0 += kPhaseRows) {
    const size_t m_rows = std::min(kPhaseRows, n_rows - k0);
    const uint16_t* phase_params = params + k0 * 2 * NG;
    const uint8_t* phase_codes = codes + k0 * row_bytes;
    ForEachQueryChunk<kMaxQ>(n_q, [&](auto m, size_t i0) {
      const float* p_i = p + i0 * ldp + k0;
      if (row_bytes == kRowBytes) {
        PhasePass<m, NG, false>(p_i, ldp, phase_params, phase_codes, d, m_rows, out + i0 * d,
                                msum + i0 * NG);
      } else {
        PhasePass<m, NG, true>(p_i, ldp, phase_params, phase_codes, d, m_rows, out + i0 * d,
                               msum + i0 * NG);
      }
    });
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_I8V_KERNEL

}  // namespace

bool HasI8ValueKernel(size_t d, size_t n_groups) {
#if KVPACK_HAVE_I8V_KERNEL
  if (d == 0 || d % kD != 0 || !(n_groups == 1 || n_groups == 2 || n_groups == 4) ||
      d % n_groups != 0) {
    return false;
  }
  const size_t group = d / n_groups;  // whole windows per group, or whole groups per window
  if (!(group % kD == 0 || group == 32 || group == 16)) return false;
  return (CpuHasI8ValueKernel() && CodeKernelsUseAvx512()) ||
         (CpuHasAvx2I8ValueKernel() && CodeKernelsUseAvx2());
#else
  (void)d, (void)n_groups;
  return false;
#endif
}

void AccumulateTwoBitRowsI8(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                            size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                            float* out, float* msum) {
  if (n_rows == 0 || n_q == 0) return;
#if KVPACK_HAVE_I8V_KERNEL
  if (HasI8ValueKernel(d, n_groups)) {
    if (!(CpuHasI8ValueKernel() && CodeKernelsUseAvx512())) {  // the AVX2 kernel
      AccumulateTwoBitRowsI8Avx2(p, ldp, n_q, params, n_groups, codes, d, n_rows, out, msum);
      return;
    }
    switch (n_groups) {
      case 1: AccumulateAvx512<1>(p, ldp, n_q, params, codes, d, n_rows, out, msum); return;
      case 2: AccumulateAvx512<2>(p, ldp, n_q, params, codes, d, n_rows, out, msum); return;
      default: AccumulateAvx512<4>(p, ldp, n_q, params, codes, d, n_rows, out, msum); return;
    }
  }
#endif
  AccumulateTwoBitRowsI8Ref(p, ldp, n_q, params, n_groups, codes, d, n_rows, out, msum);
}

float QuantizeWeightsI8Ref(const float* w, size_t m, int8_t* wq) {
  float amax = 0.0f;
  for (size_t k = 0; k < m; ++k) amax = std::max(amax, std::fabs(w[k]));
  if (!(amax > 0.0f)) {
    std::fill(wq, wq + m, int8_t{0});
    return 0.0f;
  }
  const float inv = kI8Max / amax;
  for (size_t k = 0; k < m; ++k) {
    wq[k] = static_cast<int8_t>(std::clamp(std::nearbyint(w[k] * inv), -kI8Max, kI8Max));
  }
  return amax / kI8Max;
}

void AccumulateTwoBitRowsI8Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                               size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                               float* out, float* msum) {
  const size_t group = d / n_groups, row_bytes = d / 4;
  std::vector<float> w(kI8ValueTileRowsMax);
  std::vector<int8_t> wq(kI8ValueTileRowsMax);
  for (size_t k0 = 0; k0 < n_rows; k0 += kI8ValueTileRowsMax) {
    const size_t m = std::min(kI8ValueTileRowsMax, n_rows - k0);
    for (size_t i = 0; i < n_q; ++i) {
      for (size_t g = 0; g < n_groups; ++g) {
        float min_sum = 0.0f;
        for (size_t k = 0; k < m; ++k) {
          const uint16_t* pair = params + ((k0 + k) * n_groups + g) * 2;
          w[k] = p[i * ldp + k0 + k] * Fp16ToFp32(pair[0]);
          min_sum += p[i * ldp + k0 + k] * Fp16ToFp32(pair[1]);
        }
        msum[i * n_groups + g] += min_sum;
        const float s = QuantizeWeightsI8Ref(w.data(), m, wq.data());
        for (size_t c = g * group; c < (g + 1) * group; ++c) {
          int64_t acc = 0;
          for (size_t k = 0; k < m; ++k) {
            acc += int64_t{wq[k]} * CodeAt(codes + (k0 + k) * row_bytes, c);
          }
          out[i * d + c] = std::fma(s, static_cast<float>(acc), out[i * d + c]);
        }
      }
    }
  }
}

}  // namespace kvpack
