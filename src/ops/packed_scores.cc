// The single-pass kernels are compiled for AVX512-BW + VNNI with a function attribute and chosen
// at run time (as ops/code_dot_i16.cc does: Highway 1.0.3's AVX3 target has no VNNI); every
// other case composes the general kernels.
#include "ops/packed_scores.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/code_dot_i8.h"
#include "ops/channel_block_scores_avx2.h"
#include "ops/code_unpack.h"
#include "ops/packed_dot_i8.h"
#include "ops/query_chunks.h"
#include "ops/prefetch.h"
#include "ops/reduce_avx512.h"
#include "ops/token_row_scores_avx2.h"
#include "ops/vec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_BLOCK_KERNEL 1
#define KVPACK_BLOCK_ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))
#define KVPACK_BLOCK_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"), always_inline)) inline
#else
#define KVPACK_HAVE_BLOCK_KERNEL 0
#endif

namespace kvpack {
namespace {

// The general path: the per-block query work and the packed dots as separate kernels.
void ScoreChannelBlockGeneral(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                              int bits, const uint16_t* params, const float* q, size_t n_q,
                              float* scores, size_t ld) {
  thread_local std::vector<float> alpha, xmin, ones;
  thread_local std::vector<int8_t> q8, qp;
  thread_local std::vector<int32_t> dots;
  const size_t pld = (n_rows + kCombinePad - 1) / kCombinePad * kCombinePad;
  alpha.resize(n_q);
  xmin.resize(n_q);
  q8.resize(n_q * d);
  qp.resize(n_q * d);
  dots.resize(n_q * pld);
  ones.assign(pld, 1.0f);
  ScaleQuantizeBlockQueryI8(q, n_q, params, d, q8.data(), alpha.data(), xmin.data());
  ArrangeQueryForPacked(q8.data(), n_q, d, bits, qp.data());
  DotPackedRowsI8(rows, n_rows, row_bytes, d, bits, q8.data(), qp.data(), n_q, dots.data(), pld);
  // One group with unit "scale" and "min": alpha * dot + q . min.
  CombineCodeDots(dots.data(), ones.data(), ones.data(), pld, n_rows, n_q, 1, alpha.data(),
                  xmin.data(), scores, ld);
}

// The general path of ScoreTokenRowsI8: arrangement, packed dots, parameters and the
// combination as separate kernels.
void ScoreTokenRowsGeneral(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                           int bits, const uint16_t* params, const int8_t* q8,
                           const float* alpha, const float* qsum, size_t n_q, float* scores,
                           size_t ld) {
  thread_local std::vector<float> scale, min;
  thread_local std::vector<int8_t> qp;
  thread_local std::vector<int32_t> dots;
  const size_t pld = (n_rows + kCombinePad - 1) / kCombinePad * kCombinePad;
  scale.resize(pld);
  min.resize(pld);
  qp.resize(n_q * d);
  dots.resize(n_q * pld);
  ArrangeQueryForPacked(q8, n_q, d, bits, qp.data());
  DotPackedRowsI8(rows, n_rows, row_bytes, d, bits, q8, qp.data(), n_q, dots.data(), pld);
  SplitGroupParams(params, n_rows, 1, 0, 1, scale.data(), min.data(), pld);
  CombineCodeDots(dots.data(), scale.data(), min.data(), pld, n_rows, n_q, 1, alpha, qsum,
                  scores, ld);
}

#if KVPACK_HAVE_BLOCK_KERNEL
// GCC 12's intrinsic headers build some results from `_mm512_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

bool CpuHasBlockKernel() {
  static const bool ok = __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

// vrangeps: the larger magnitude of the two, sign cleared (imm8[1:0] = 11: absolute max,
// imm8[3:2] = 10: clear the sign; Intel SDM, VRANGEPS).
constexpr int kMaxAbs = 0x0B;

// d = kD channels of kBits-bit codes: W = kD * kBits / 32 dwords per row, so that a tile of
// 16 rows is W 64-byte vectors.
template <int kD, int kBits>
struct RowShape {
  static constexpr int kW = kD * kBits / 32;
  static constexpr size_t kRowBytes = kD * kBits / 8;
};

// A 64-byte int8 query row in packed order (ArrangeQueryForPacked at d = 64, as
// packed_dot_i8.cc's ArrangeQuery64 does it).
template <int kBits>
KVPACK_BLOCK_INLINE __m512i Arranged(__m512i q8) {
  __m512i shuffle, order;
  if constexpr (kBits == 2) {
    shuffle = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  } else {
    shuffle = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    order = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  }
  return _mm512_permutexvar_epi32(order, _mm512_shuffle_epi8(q8, shuffle));
}

// One query row of 16 kV channels against a block's scales and mins, before any reduction:
// lane-wise max |x * scale| (vrangeps) and the lanes of x . min (one multiply-add chain).
template <int kV>
KVPACK_BLOCK_INLINE void ScaledRowLanes(const float* x, const __m512 (&sc)[kV],
                                        const __m512 (&mn)[kV], __m512& vmax, __m512& vdot) {
  vmax = _mm512_setzero_ps();
  vdot = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int j = 0; j < kV; ++j) {
    const __m512 v = _mm512_loadu_ps(x + 16 * j);
    vmax = _mm512_range_ps(vmax, _mm512_mul_ps(v, sc[j]), kMaxAbs);
    vdot = _mm512_fmadd_ps(v, mn[j], vdot);
  }
}

// x * scale quantized to int8 by QuantizeI8's rule, given inv = 127 / max|x * scale| (round
// to nearest even, clamp to +-127) into q8 (64 channels per vector, in order).
template <int kV>
KVPACK_BLOCK_INLINE void QuantizeScaledRow(const float* x, const __m512 (&sc)[kV], __m512 inv,
                                           __m512i (&q8)[kV / 4]) {
  // |x * scale * inv| <= 127 (+ a rounding that cannot reach 127.5), so only the lower clamp
  // can act: a NaN converts to INT_MIN, which the saturating packs to int16 and int8 make
  // -128 and one byte maximum then -127, as QuantizeI8's clamp does. The packs leave 128-bit
  // lane L holding channels 16 j + 4 L .. + 3 in its dword j: one dword permutation puts the
  // channels in order.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 2
  for (int h = 0; h < kV / 4; ++h) {
    __m512i r[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 xs = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * (4 * h + j)), sc[4 * h + j]);
      r[j] = _mm512_cvtps_epi32(_mm512_mul_ps(xs, inv));
    }
    const __m512i bytes = _mm512_max_epi8(
        _mm512_packs_epi16(_mm512_packs_epi32(r[0], r[1]), _mm512_packs_epi32(r[2], r[3])),
        _mm512_set1_epi8(-127));
    q8[h] = _mm512_permutexvar_epi32(order, bytes);
  }
}

// Per query row of d = 64: QuantizeScaledRow, arranged as ArrangeQueryForPacked does (stored
// to qp, 64 bytes).
template <int kBits>
KVPACK_BLOCK_INLINE void ArrangedQuery(const float* x, const __m512 (&sc)[4], __m512 inv,
                                       int8_t* qp) {
  __m512i q8[1];
  QuantizeScaledRow<4>(x, sc, inv, q8);
  _mm512_store_si512(qp, Arranged<kBits>(q8[0]));
}

// The same for d = 128: the arrangement of the 128 bytes (ArrangeQueryForPacked: segment s
// holds q8[k p + s], p < 128 / k) by one byte shuffle per 128-bit lane (each lane's bytes
// grouped by s) and one dword permutation over the two halves per output vector, so that no
// VBMI is needed.
template <int kBits>
KVPACK_BLOCK_INLINE void ArrangedQuery128(const float* x, const __m512 (&sc)[8], __m512 inv,
                                          int8_t* qp) {
  __m512i half[2];  // q8 bytes 0-63, 64-127
  QuantizeScaledRow<8>(x, sc, inv, half);
  // 4 bits: lane L's even bytes (s = 0) go to dwords 4L, 4L + 1, its odd bytes to 4L + 2,
  // 4L + 3, and each output vector is one 64-byte segment. 2 bits: lane L's bytes of s = 0..3
  // go to dwords 4L + s, and each output vector holds two 32-byte segments.
  const __m512i shuffle = _mm512_broadcast_i32x4(
      kBits == 4 ? _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)
                 : _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  const __m512i first =
      kBits == 4 ? _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)
                 : _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(2));
  const __m512i a = _mm512_shuffle_epi8(half[0], shuffle);
  const __m512i b = _mm512_shuffle_epi8(half[1], shuffle);
  _mm512_store_si512(qp, _mm512_permutex2var_epi32(a, first, b));
  _mm512_store_si512(qp + 64, _mm512_permutex2var_epi32(a, second, b));
}

// Per query row of d = 64 and 8-bit codes: QuantizeI16's rule (given inv = 32767 /
// max|x * scale|) in ArrangeQueryI16's order (stored to qp, 64 int16). The order is applied
// to the floats before the rounding; only the lower clamp can act (a NaN converts to
// INT_MIN), and the saturating narrowing to int16 is then exact.
KVPACK_BLOCK_INLINE void ArrangedQueryI16(const float* x, const __m512 (&sc)[4], __m512 inv,
                                          int16_t* qp) {
  const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 xs = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * j), sc[j]);
    const __m512 t = _mm512_permutexvar_ps(order, _mm512_mul_ps(xs, inv));
    const __m512i r = _mm512_max_epi32(_mm512_cvtps_epi32(t), _mm512_set1_epi32(-32767));
    _mm256_store_si256(reinterpret_cast<__m256i*>(qp + 16 * j), _mm512_cvtsepi32_epi16(r));
  }
}

// Four bytes of an arranged query: the memory operand of a broadcast.
struct QueryDword {
  int8_t bytes[4];
};

// The four bytes at q in every 32-bit lane. Volatile, as DotQuads: the compiler keeps a
// group's broadcasts together, ahead of the dots that use them.
KVPACK_BLOCK_INLINE __m512i BroadcastQuery(const int8_t* q) {
  __m512i v;
  asm volatile("vpbroadcastd %1, %0" : "=v"(v) : "m"(*reinterpret_cast<const QueryDword*>(q)));
  return v;
}

// acc += four u8 (codes) x s8 products per 32-bit lane, the four s8 the bytes at q in every
// lane (an embedded broadcast: no register per query dword).
KVPACK_BLOCK_INLINE __m512i DotQuadsBroadcast(__m512i acc, __m512i codes, const int8_t* q) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(codes), "m"(*reinterpret_cast<const QueryDword*>(q)));
  return acc;
}

// acc += four u8 (codes) x s8 (q) products per 32-bit lane.
KVPACK_BLOCK_INLINE __m512i DotQuads(__m512i acc, __m512i codes, __m512i q) {
  asm volatile("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(codes), "v"(q));
  return acc;
}

// A query row's dot chains (ColumnDots, ColumnDotsI16), zeroed, and summed into acc[i][g]:
// group g's chains (kGroups = 2), or the even and the odd chains (kGroups = 1: the caller adds
// the two).
template <int NQ, int kChains>
KVPACK_BLOCK_INLINE void ZeroChains(__m512i (&part)[NQ][kChains]) {
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < kChains; ++c) part[i][c] = _mm512_setzero_si512();
  }
}
template <int NQ, int kChains, int kGroups>
KVPACK_BLOCK_INLINE void SumChains(const __m512i (&part)[NQ][kChains], __m512i (&acc)[NQ][2]) {
  static_assert(kChains == 2 || kChains == 4);
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
    if constexpr (kChains == 2) {
      acc[i][0] = part[i][0];
      acc[i][1] = part[i][1];
    } else if constexpr (kGroups == 1) {
      acc[i][0] = _mm512_add_epi32(part[i][0], part[i][2]);
      acc[i][1] = _mm512_add_epi32(part[i][1], part[i][3]);
    } else {
      acc[i][0] = _mm512_add_epi32(part[i][0], part[i][1]);
      acc[i][1] = _mm512_add_epi32(part[i][2], part[i][3]);
    }
  }
}

// Query dwords broadcast into registers per group (ColumnDots with kRegs).
constexpr int kGroupDwords = 12;

// The 16 rows of a tile (kW dwords each, in kW vectors) as columns: col[m] lane t = dword m
// of row t. Each round unzips the tile's 16 kW dwords (even ones first, then odd ones), which
// rotates the dword's index t kW + m right by one bit; log2(kW) rounds make it 16 m + t.
// kTail: only the first `bytes` bytes are rows (the rest load as zeros).
template <int kW, bool kTail>
KVPACK_BLOCK_INLINE void LoadColumns(const uint8_t* tile, size_t bytes, __m512i (&col)[kW]) {
#pragma GCC unroll 16
  for (int z = 0; z < kW; ++z) {
    if constexpr (kTail) {
      const size_t start = 64 * static_cast<size_t>(z);
      const size_t left = bytes > start ? bytes - start : 0;
      const __mmask64 m = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
      col[z] = _mm512_maskz_loadu_epi8(m, tile + start);
    } else {
      col[z] = _mm512_loadu_si512(tile + 64 * z);
    }
  }
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
#pragma GCC unroll 4
  for (int round = 1; round < kW; round *= 2) {
    __m512i next[kW];
#pragma GCC unroll 8
    for (int i = 0; i < kW / 2; ++i) {
      next[i] = _mm512_permutex2var_epi32(col[2 * i], even, col[2 * i + 1]);
      next[kW / 2 + i] = _mm512_permutex2var_epi32(col[2 * i], odd, col[2 * i + 1]);
    }
#pragma GCC unroll 16
    for (int z = 0; z < kW; ++z) col[z] = next[z];
  }
}

// The tile of 16 rows from `tile` (of which `left` exist, kRowBytes each) as columns; a whole
// tile also asks for the lines kPrefetchAheadBytes ahead (the rows stream from memory).
template <int kW, size_t kRowBytes>
KVPACK_BLOCK_INLINE void LoadTile(const uint8_t* tile, size_t left, __m512i (&col)[kW]) {
  if (left == 16) {
#pragma GCC unroll 16
    for (int z = 0; z < kW; ++z) {
      PrefetchCodeLine(tile + 64 * z + kPrefetchAheadBytes);
    }
    LoadColumns<kW, false>(tile, 0, col);
  } else {
    LoadColumns<kW, true>(tile, left * kRowBytes, col);
  }
}

// Query rows [0, NQ) (arranged, row i at qp + stride i) against a tile's columns: lane t of
// acc[i][g] sums code x query over row t's dwords m of group g (kGroups = 2: each half of a
// row's dwords is one group) or, kGroups = 1, over half of them (the caller adds the two).
// Dword m's byte j holds, in its slot s, channel 4 k m + k j + s (k = 8 / kBits codes per
// byte), which the arranged query's segment s (kSeg bytes) holds at byte 4 m + j.
// kRegs: the query dwords are broadcast into registers kGroupDwords at a time, ahead of the
// dots that use them, and a row's dots go to four chains where the registers allow (a
// vpdpbusd waits 4 cycles for its accumulator; with two chains a row's 16 dots per tile were
// 8 steps of that wait). Otherwise each vpdpbusd reads its dword as a broadcast memory
// operand, with two chains per row (by dword, or one per group). Both forms measured, with
// kv_codec_bench at 8192 tokens and 30 layers (session 29, alternating runs): with kRegs
// KIVI-2's keys took 26.3 instead of 27.6 us per layer in cache and q8_0's 1846 instead of
// 2057 us from memory; FlexGen's and q4_0's took 8-10% longer from memory, so they keep the
// memory operands. Why the forms differ is not established: a broadcast memory operand
// alone issues as fast as a register (bench/weights_bench's Vpdpbusd cases: 0.12 ns each).
// kTiles = 2 (kRegs, one group): two tiles' columns at once, each broadcast serving both, two
// chains per row and tile. For KIVI-2's 32-token blocks (2-bit rows of 64 channels) that
// took kv_codec_bench's Scores/kivi:bits=2/8192/1 from 36.5 to 32.0 us in cache, KCVT-2's
// from 21.7 to 18.9 (scripts/kernel-ab.sh, best of 12 alternating repetitions; from memory
// the host's spread hid it: docs/performance-history.md, session 46).
template <int kBits, int NQ, int kW, int kGroups, bool kRegs, int kTiles>
KVPACK_BLOCK_INLINE void ColumnDotsTiles(const __m512i (&col)[kTiles][kW], const int8_t* qp,
                                         size_t stride, __m512i (&acc)[kTiles][NQ][2]) {
  static_assert(kTiles == 1 || (kRegs && kGroups == 1));
  constexpr int kK = 8 / kBits;
  constexpr size_t kSeg = static_cast<size_t>(kW) * 4;
  // Slots per group of broadcasts: all of a dword's kK slots when they fit, else the largest
  // power of two (kK is 1, 2 or 4) that does. With two tiles both tiles' columns and chains
  // (and their codes and the mask) must fit next to the broadcasts too.
  constexpr int kSlots = [] {
    int n = kK;
    while (n > 1 && (n * NQ > kGroupDwords ||
                     (kTiles > 1 && kTiles * (kW + 2 * NQ) + n * NQ + kTiles + 1 > 32))) {
      n /= 2;
    }
    return n;
  }();
  // Chains per query row and group: four (kRegs, one group, one tile) where the columns, the
  // chains and a group's broadcasts fit in the 32 registers.
  constexpr int kChains =
      kTiles == 1 && kRegs && kGroups == 1 && NQ * 4 + kW + kSlots * NQ + 2 <= 32 ? 4 : 2;
  constexpr int kPerGroup = kChains / kGroups;
  __m512i part[kTiles][NQ][kChains];
#pragma GCC unroll 2
  for (int t = 0; t < kTiles; ++t) ZeroChains(part[t]);
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << kBits) - 1));
  // The query's NQ x kW x k dword addresses are fixed offsets from qp; hidden behind this
  // empty asm, qp is a register per tile and each operand its displacement. Without it GCC
  // kept the addresses as loop invariants and spilled most of them to the stack, one
  // reload per vpdpbusd.
  asm("" : "+r"(qp));
#pragma GCC unroll 16
  for (int m = 0; m < kW; ++m) {
    const int group = kGroups == 1 ? 0 : m / (kW / 2);
#pragma GCC unroll 4
    for (int s0 = 0; s0 < kK; s0 += kSlots) {
      __m512i qb[kSlots][NQ];
      if constexpr (kRegs) {
#pragma GCC unroll 4
        for (int s = 0; s < kSlots; ++s) {
#pragma GCC unroll 8
          for (int i = 0; i < NQ; ++i) {
            qb[s][i] = BroadcastQuery(qp + stride * i + kSeg * (s0 + s) + 4 * m);
          }
        }
      }
#pragma GCC unroll 4
      for (int s = 0; s < kSlots; ++s) {
        const int slot = s0 + s;
        const int c = !kRegs ? (kGroups == 1 ? m % 2 : group)
                             : group * kPerGroup + (m * kK + slot) % kPerGroup;
#pragma GCC unroll 2
        for (int t = 0; t < kTiles; ++t) {
          __m512i codes;
          if constexpr (kBits == 8) {
            // Signed bytes (q8_0) read as code + 128, the unsigned operand of vpdpbusd; the
            // caller takes 128 x (the query's sum) back off.
            codes = _mm512_xor_si512(col[t][m], _mm512_set1_epi8(static_cast<char>(0x80)));
          } else if (slot == 0) {
            codes = _mm512_and_si512(col[t][m], mask);
          } else {
            codes = _mm512_and_si512(_mm512_srli_epi16(col[t][m], kBits * slot), mask);
          }
#pragma GCC unroll 8
          for (int i = 0; i < NQ; ++i) {
            if constexpr (kRegs) {
              part[t][i][c] = DotQuads(part[t][i][c], codes, qb[s][i]);
            } else {
              const int8_t* q = qp + stride * i + kSeg * slot + 4 * m;
              part[t][i][c] = DotQuadsBroadcast(part[t][i][c], codes, q);
            }
          }
        }
      }
    }
  }
  // acc[t][i][g]: group g's sum (kGroups = 2), or the row's sum in two halves (kGroups = 1).
#pragma GCC unroll 2
  for (int t = 0; t < kTiles; ++t) SumChains<NQ, kChains, kGroups>(part[t], acc[t]);
}

// One tile: ColumnDotsTiles with kTiles = 1.
template <int kBits, int NQ, int kW, int kGroups, bool kRegs>
KVPACK_BLOCK_INLINE void ColumnDots(const __m512i (&col)[kW], const int8_t* qp, size_t stride,
                                    __m512i (&acc)[NQ][2]) {
  ColumnDotsTiles<kBits, NQ, kW, kGroups, kRegs, 1>(
      reinterpret_cast<const __m512i(&)[1][kW]>(col), qp, stride,
      reinterpret_cast<__m512i(&)[1][NQ][2]>(acc));
}

// acc += two int16 x int16 products per 32-bit lane, the two int16 the dword at q in every
// lane (an embedded broadcast, as DotQuadsBroadcast).
KVPACK_BLOCK_INLINE __m512i DotPairsBroadcast(__m512i acc, __m512i codes, const int16_t* q) {
  asm("vpdpwssd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(codes), "m"(*reinterpret_cast<const QueryDword*>(q)));
  return acc;
}

// ColumnDots for 8-bit codes (one unsigned byte per channel) and an int16 query
// (QuantizeI16), arranged by ArrangeQueryI16: in each run of four channels the middle two
// swap places, so that dword 2m of a query row holds channels 4m and 4m + 2 and dword 2m + 1
// channels 4m + 1 and 4m + 3. Column m's lanes hold 4 codes of one row; its even bytes
// (channels 4m, 4m + 2) and odd bytes (4m + 1, 4m + 3), each widened to 16 bits in place,
// meet those dwords in one vpdpwssd each. Four chains per query row (by column parity and
// byte parity) where the registers allow, else two. acc as ColumnDots'. Exact: |sum| <= d x
// 255 x 32767 < 2^31 for d <= 128.
template <int NQ, int kW, int kGroups>
KVPACK_BLOCK_INLINE void ColumnDotsI16(const __m512i (&col)[kW], const int16_t* qp, size_t stride,
                                       __m512i (&acc)[NQ][2]) {
  constexpr int kChains = NQ * 4 + kW + 2 <= 32 ? 4 : 2;
  constexpr int kPerGroup = kChains / kGroups;
  __m512i part[NQ][kChains];
  ZeroChains(part);
  const __m512i even_bytes = _mm512_set1_epi16(0x00FF);
  asm("" : "+r"(qp));  // as in ColumnDots: the query's addresses as displacements of one register
#pragma GCC unroll 16
  for (int m = 0; m < kW; ++m) {
    const int group = kGroups == 1 ? 0 : m / (kW / 2);
    const __m512i codes[2] = {_mm512_and_si512(col[m], even_bytes),
                              _mm512_srli_epi16(col[m], 8)};
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      const int c = group * kPerGroup + (2 * m + b) % kPerGroup;
#pragma GCC unroll 8
      for (int i = 0; i < NQ; ++i) {
        part[i][c] = DotPairsBroadcast(part[i][c], codes[b], qp + stride * i + 4 * m + 2 * b);
      }
    }
  }
  SumChains<NQ, kChains, kGroups>(part, acc);
}

// Blocks per phase: their arranged queries (d bytes per block and query) stay in L1.
constexpr size_t PhaseBlocks(int d) { return d == 64 ? 32 : 16; }
// Blocks ahead whose parameters are prefetched.
constexpr size_t kParamsAhead = 8;

// A block's per-channel scales (and mins) as kV vectors each.
template <int kV>
KVPACK_BLOCK_INLINE void LoadBlockParams(const uint16_t* pj, __m512 (&sc)[kV], __m512* mn) {
#pragma GCC unroll 8
  for (int c = 0; c < kV; ++c) {
    sc[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pj + 16 * c)));
    if (mn != nullptr) {
      mn[c] = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pj + 16 * kV + 16 * c)));
    }
  }
}

// The int8 queries (int16 for 8-bit codes: QueryOf) of blocks [0, n) (n <= 16, params at
// params + 2 kD j) for query rows [0, NQ): qp[j][i] arranged, alpha[i * kLd + j] and
// xmin[i * kLd + j]. First each block's lane-wise max |q * scale| and q . min, then their
// reductions 16 blocks at a time (ReduceEach16) and the divisions as vectors, then the
// rounding (q * scale recomputed). The same q8 (q16) and alpha as QuantizeI8Ref's
// (QuantizeI16Ref's); xmin sums in another order. Block j also asks for the lines
// [codes + j * code_step, codes + (j + 1) * code_step) into L2 (none when code_step is 0;
// see BlocksPass).
template <int kBits>
using QueryOf = std::conditional_t<kBits == 8, int16_t, int8_t>;
template <int kD, int kBits, int NQ, size_t kLd>
KVPACK_BLOCK_INLINE void PrepareQueries16(const uint16_t* params, size_t n, const float* q,
                                          QueryOf<kBits> (*qp)[NQ][kD], float* alpha,
                                          float* xmin, const char* codes, size_t code_step) {
  constexpr int kV = kD / 16;
  __m512 lane_max[NQ][16], lane_dot[NQ][16];
  for (size_t j = 0; j < 16; ++j) {
    if (j >= n) {
#pragma GCC unroll 8
      for (int i = 0; i < NQ; ++i) lane_max[i][j] = lane_dot[i][j] = _mm512_setzero_ps();
      continue;
    }
    const uint16_t* pj = params + j * 2 * kD;
    for (size_t b = 0; b < code_step; b += 64) {
      PrefetchCodeLine(codes + j * code_step + b);
    }
    // The parameters stream from memory too (4 d bytes per block): without this their
    // conversions were the kernel's hottest instructions on a 30-layer cache.
#pragma GCC unroll 8
    for (int c = 0; c < kD / 16; ++c) {
      PrefetchCodeLine(reinterpret_cast<const char*>(pj + 2 * kD * kParamsAhead) + 64 * c);
    }
    __m512 sc[kV], mn[kV];
    LoadBlockParams<kV>(pj, sc, mn);
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      ScaledRowLanes<kV>(q + kD * i, sc, mn, lane_max[i][j], lane_dot[i][j]);
    }
  }
  alignas(64) float amax[NQ][16], inv[NQ][16];
  const __m512 k127 = _mm512_set1_ps(kBits == 8 ? 32767.0f : 127.0f);  // the query's levels
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
    const __m512 m = ReduceEach16<false>(lane_max[i]);
    // QuantizeI8's zero rule: a row whose max is not > 0 (zero or NaN) quantizes to zeros
    // with alpha = 0.
    const __mmask16 live = _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_store_ps(amax[i], m);
    _mm512_store_ps(inv[i], _mm512_maskz_div_ps(live, k127, m));
    _mm512_storeu_ps(alpha + i * kLd, _mm512_maskz_div_ps(live, m, k127));
    _mm512_storeu_ps(xmin + i * kLd, ReduceEach16<true>(lane_dot[i]));
  }
  for (size_t j = 0; j < n; ++j) {
    __m512 sc[kV];
    LoadBlockParams<kV>(params + j * 2 * kD, sc, nullptr);
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      if (!(amax[i][j] > 0.0f)) {
        std::memset(qp[j][i], 0, sizeof(qp[j][i]));
        continue;
      }
      const __m512 vinv = _mm512_set1_ps(inv[i][j]);
      if constexpr (kBits == 8) {
        static_assert(kD == 64);
        ArrangedQueryI16(q + kD * i, sc, vinv, qp[j][i]);
      } else if constexpr (kD == 64) {
        ArrangedQuery<kBits>(q + kD * i, sc, vinv, qp[j][i]);
      } else {
        ArrangedQuery128<kBits>(q + kD * i, sc, vinv, qp[j][i]);
      }
    }
  }
}

// A tile's scores from its dot sums: alpha * dot, then + x . min (CombineCodeDots' two
// roundings), for query row i with alpha[i * a_ld] and xmin[i * a_ld]; the rows `live` of the
// tile stored at scores + i * ld.
template <int NQ>
KVPACK_BLOCK_INLINE void StoreBlockScores(const __m512i (&acc)[NQ][2], const float* alpha,
                                          const float* xmin, size_t a_ld, __mmask16 live,
                                          float* scores, size_t ld) {
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
    const __m512i dot = _mm512_add_epi32(acc[i][0], acc[i][1]);
    const __m512 v = _mm512_add_ps(
        _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(alpha[i * a_ld])),
        _mm512_set1_ps(xmin[i * a_ld]));
    _mm512_mask_storeu_ps(scores + i * ld, live, v);
  }
}

// Query rows [0, NQ) against blocks [0, n_blocks), kPhaseBlocks at a time in two phases: first
// every block's int8 query (PrepareQueries16: a chain of reductions and divisions per query
// with no work to overlap it inside one 32-token block), then every block's rows. Block j:
// rows [starts[j], starts[j + 1]), params at params + 2 kD j.
// The first phase reads a block's parameters every few dozen cycles, faster than memory
// answers the prefetches it issues kParamsAhead blocks ahead, so the second phase asks for
// the parameters of as many blocks as it scores, those that follow its own, up to n_blocks
// + n_next (the caller's next tile): attention calls a head's keys a tile of 1024 tokens at
// a time, 32 of KIVI's blocks, one phase per call (docs/performance-history.md, session 25).
// The first phase reads no codes: it asks for the phase's codes into L2, a block's share per
// block, so that memory works while it computes; the second phase then streams them from L2
// (with 8-bit codes it reads faster than memory answers; docs/performance-history.md,
// session 32). Only the first pass over the blocks asks (prefetch_codes): the passes for
// further query rows find the codes in the caches.
template <int kD, int kBits, int NQ>
KVPACK_BLOCK_ATTR void BlocksPass(const uint8_t* rows, const uint16_t* params,
                                  const int64_t* starts, size_t n_blocks, size_t n_next,
                                  const float* q, float* scores, size_t ld,
                                  bool prefetch_codes) {
  using S = RowShape<kD, kBits>;
  constexpr size_t kPhase = PhaseBlocks(kD);
  static_assert(kPhase % 16 == 0);
  alignas(64) QueryOf<kBits> qp[kPhase][NQ][kD];
  alignas(64) float alpha[NQ][kPhase], xmin[NQ][kPhase];
  for (size_t j0 = 0; j0 < n_blocks; j0 += kPhase) {
    const size_t jn = std::min(kPhase, n_blocks - j0);
    for (size_t g = 0; g < jn; g += 16) {
      const size_t n = std::min<size_t>(16, jn - g);
      const size_t first = static_cast<size_t>(starts[j0 + g]);
      const size_t bytes = (static_cast<size_t>(starts[j0 + g + n]) - first) * S::kRowBytes;
      const size_t code_step = prefetch_codes ? (bytes / n + 63) / 64 * 64 : 0;
      PrepareQueries16<kD, kBits, NQ, kPhase>(
          params + (j0 + g) * 2 * kD, n, q, qp + g, &alpha[0][g], &xmin[0][g],
          reinterpret_cast<const char*>(rows + first * S::kRowBytes), code_step);
    }
    for (size_t j = 0; j < jn; ++j) {
      if (j0 + jn + j < n_blocks + n_next) {
        const char* next = reinterpret_cast<const char*>(params + (j0 + jn + j) * 2 * kD);
#pragma GCC unroll 8
        for (int c = 0; c < kD / 16; ++c) PrefetchCodeLine(next + 64 * c);
      }
      const size_t r0 = static_cast<size_t>(starts[j0 + j]);
      const size_t r1 = static_cast<size_t>(starts[j0 + j + 1]);
      size_t t0 = r0;
      if constexpr (kBits == 2 && kD == 64) {
        // Two whole tiles at a time while the block has them (ColumnDotsTiles). Only rows of
        // 4 dwords: two tiles of 8 (4-bit, or d = 128) would need 16 registers of columns.
        for (; t0 + 32 <= r1; t0 += 32) {
          __m512i col[2][S::kW];
          LoadTile<S::kW, S::kRowBytes>(rows + t0 * S::kRowBytes, 16, col[0]);
          LoadTile<S::kW, S::kRowBytes>(rows + (t0 + 16) * S::kRowBytes, 16, col[1]);
          __m512i acc[2][NQ][2];
          ColumnDotsTiles<kBits, NQ, S::kW, 1, true, 2>(col, qp[j][0], kD, acc);
          StoreBlockScores<NQ>(acc[0], &alpha[0][j], &xmin[0][j], kPhase, 0xffff,
                               scores + t0, ld);
          StoreBlockScores<NQ>(acc[1], &alpha[0][j], &xmin[0][j], kPhase, 0xffff,
                               scores + t0 + 16, ld);
        }
      }
      for (; t0 < r1; t0 += 16) {
        const size_t left = std::min<size_t>(16, r1 - t0);
        __m512i col[S::kW];
        LoadTile<S::kW, S::kRowBytes>(rows + t0 * S::kRowBytes, left, col);
        __m512i acc[NQ][2];
        if constexpr (kBits == 8) {
          ColumnDotsI16<NQ, S::kW, 1>(col, qp[j][0], kD, acc);
        } else {
          ColumnDots<kBits, NQ, S::kW, 1, true>(col, qp[j][0], kD, acc);
        }
        StoreBlockScores<NQ>(acc, &alpha[0][j], &xmin[0][j], kPhase,
                             static_cast<__mmask16>((1u << left) - 1), scores + t0, ld);
      }
    }
  }
}

// Query rows in passes of at most kMaxQ (as ScoreTokenRowsFast's).
template <int kD, int kBits>
KVPACK_BLOCK_ATTR void ScoreBlocks(const uint8_t* rows, const uint16_t* params,
                                   const int64_t* starts, size_t n_blocks, size_t n_next,
                                   const float* q, size_t n_q, float* scores, size_t ld) {
  constexpr size_t kMaxQ = 4;
  ForEachQueryChunk<kMaxQ>(n_q, [&](auto m, size_t i) {
    BlocksPass<kD, kBits, m>(rows, params, starts, n_blocks, n_next, q + kD * i,
                             scores + i * ld, ld, i == 0);
  });
}
// How a token row's group parameters are stored: fp16 (scale, min) pairs, [n_rows, groups, 2]
// (FlexGen, HF), or a q4_0 / q8_0 plane of fp16 scales, [n_rows, 2], with min = -8 scale
// (q4_0) or none (q8_0's signed codes).
enum class RowParams { kPairs, kQ4_0Scales, kQ8_0Scales };

// The parameters of 16 rows from t0 (of which `live` exist) as float vectors by group.
template <int kGroups, RowParams kParams>
KVPACK_BLOCK_INLINE void LoadRowParams(const uint16_t* params, size_t t0, __mmask16 live,
                                       __m512 (&sc)[kGroups], __m512 (&mn)[kGroups]) {
  if constexpr (kParams != RowParams::kPairs) {
    static_assert(kGroups == 2);
    // Row r's word: group 0's scale in the low half, group 1's in the high half.
    const __m512i words = _mm512_maskz_loadu_epi32(live, params + 2 * t0);
    sc[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
    sc[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
    const float min_per_scale = kParams == RowParams::kQ4_0Scales ? -8.0f : 0.0f;
    mn[0] = _mm512_mul_ps(sc[0], _mm512_set1_ps(min_per_scale));
    mn[1] = _mm512_mul_ps(sc[1], _mm512_set1_ps(min_per_scale));
  } else {
    // Per row and group one word: scale in the low half, min in the high half.
    __m512i words[kGroups];
    if constexpr (kGroups == 1) {
      words[0] = _mm512_maskz_loadu_epi32(live, params + 2 * t0);
    } else {
      static_assert(kGroups == 2);
      // Rows are a prefix: rows 0-7 are words 0-15, rows 8-15 words 16-31.
      const int n = __builtin_popcount(live);
      const __mmask16 lo_live = static_cast<__mmask16>((1u << (2 * std::min(n, 8))) - 1);
      const __mmask16 hi_live = static_cast<__mmask16>((1u << (2 * std::max(n - 8, 0))) - 1);
      const __m512i a = _mm512_maskz_loadu_epi32(lo_live, params + 4 * t0);       // rows 0-7
      const __m512i b = _mm512_maskz_loadu_epi32(hi_live, params + 4 * t0 + 32);  // rows 8-15
      const __m512i even =
          _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
      const __m512i odd =
          _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
      words[0] = _mm512_permutex2var_epi32(a, even, b);
      words[1] = _mm512_permutex2var_epi32(a, odd, b);
    }
#pragma GCC unroll 2
    for (int g = 0; g < kGroups; ++g) {
      sc[g] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words[g]));
      mn[g] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words[g], 16)));
    }
  }
}

// Query rows [0, NQ) (arranged, qp [NQ, kD]) against consecutive rows with kGroups (1 or 2)
// groups each. Per 16 rows the tile's columns (LoadColumns) and their dots (ColumnDots: each
// half of a row's dwords is one group, so the groups' sums come out apart). Then
// CombineCodeDots' arithmetic, group by group:
//   acc = 0; for g: acc = fma(alpha_i * scale_g, dot_g, acc); acc = fma(min_g, qsum_ig, acc).
// Q: int8_t, or int16_t for 8-bit unsigned codes (ColumnDotsI16; q8_0's signed codes take
// the int8 query).
template <int kD, int kBits, int NQ, int kGroups, RowParams kParams, typename Q>
KVPACK_BLOCK_ATTR void TokenRowsPass(const uint8_t* rows, size_t n_rows, const uint16_t* params,
                                     const Q* qp, const float* alpha, const float* qsum,
                                     float* scores, size_t ld) {
  using S = RowShape<kD, kBits>;
  static_assert(kGroups == 1 || kGroups == 2);
  for (size_t t0 = 0; t0 < n_rows; t0 += 16) {
    const size_t left = std::min<size_t>(16, n_rows - t0);
    const __mmask16 live = static_cast<__mmask16>((1u << left) - 1);
    __m512i col[S::kW];
    LoadTile<S::kW, S::kRowBytes>(rows + t0 * S::kRowBytes, left, col);
    __m512i acc[NQ][2];
    if constexpr (std::is_same_v<Q, int16_t>) {
      ColumnDotsI16<NQ, S::kW, kGroups>(col, qp, kD, acc);
    } else {
      ColumnDots<kBits, NQ, S::kW, kGroups, kBits == 8>(col, qp, kD, acc);
    }
    __m512 dot[NQ][kGroups];
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      if constexpr (kGroups == 1) {
        dot[i][0] = _mm512_cvtepi32_ps(_mm512_add_epi32(acc[i][0], acc[i][1]));
      } else {
        dot[i][0] = _mm512_cvtepi32_ps(acc[i][0]);
        dot[i][1] = _mm512_cvtepi32_ps(acc[i][1]);
      }
    }
    __m512 sc[kGroups], mn[kGroups];
    LoadRowParams<kGroups, kParams>(params, t0, live, sc, mn);
    if constexpr (kParams == RowParams::kQ8_0Scales) {
      // The codes were read as code + 128: the signed dot is dot - 128 x sum(q8) (qsum holds
      // those offsets; both are integers below 2^24, so the float difference is exact), and
      // there is no min term.
#pragma GCC unroll 8
      for (int i = 0; i < NQ; ++i) {
        const __m512 a = _mm512_set1_ps(alpha[i]);
        const __m512 d0 = _mm512_sub_ps(dot[i][0], _mm512_set1_ps(qsum[2 * i]));
        const __m512 d1 = _mm512_sub_ps(dot[i][1], _mm512_set1_ps(qsum[2 * i + 1]));
        __m512 acc = _mm512_mul_ps(_mm512_mul_ps(a, sc[0]), d0);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(a, sc[1]), d1, acc);
        _mm512_mask_storeu_ps(scores + i * ld + t0, live, acc);
      }
      continue;
    }
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      const __m512 a = _mm512_set1_ps(alpha[i]);
      __m512 acc = _mm512_mul_ps(_mm512_mul_ps(a, sc[0]), dot[i][0]);
      acc = _mm512_fmadd_ps(mn[0], _mm512_set1_ps(qsum[kGroups * i]), acc);
      if constexpr (kGroups == 2) {
        acc = _mm512_fmadd_ps(_mm512_mul_ps(a, sc[1]), dot[i][1], acc);
        acc = _mm512_fmadd_ps(mn[1], _mm512_set1_ps(qsum[kGroups * i + 1]), acc);
      }
      _mm512_mask_storeu_ps(scores + i * ld + t0, live, acc);
    }
  }
}

// Query rows in passes of at most kMaxQ: two accumulators per query next to the tile's W <= 16
// columns within the 32 registers (a GQA group of 4, as Llama's and Mistral's, is one pass).
template <int kD, int kBits, int kGroups, RowParams kParams, typename Q = int8_t>
KVPACK_BLOCK_ATTR void ScoreTokenRowsFast(const uint8_t* rows, size_t n_rows,
                                          const uint16_t* params, const Q* qp,
                                          const float* alpha, const float* qsum, size_t n_q,
                                          float* scores, size_t ld) {
  constexpr size_t kMaxQ = 4;
  ForEachQueryChunk<kMaxQ>(n_q, [&](auto m, size_t i) {
    TokenRowsPass<kD, kBits, m, kGroups, kParams, Q>(rows, n_rows, params, qp + kD * i, alpha + i,
                                                  qsum + kGroups * i, scores + i * ld, ld);
  });
}
#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_BLOCK_KERNEL

}  // namespace

bool HasFastPackedScores(size_t row_bytes, size_t d, int bits) {
#if KVPACK_HAVE_BLOCK_KERNEL
  // CodeKernelsUseAvx512 asks Highway's dispatch (tests that pin a lower target take the
  // general path); hwy::SupportedTargets() would run CPUID on every call.
  const bool shape = bits == 8 ? d == 64 : (d == 64 || d == 128) && (bits == 2 || bits == 4);
  return shape && row_bytes == d * static_cast<size_t>(bits) / 8 && CpuHasBlockKernel() &&
         CodeKernelsUseAvx512();
#else
  (void)row_bytes;
  (void)d;
  (void)bits;
  return false;
#endif
}

bool HasVectorChannelBlockScores(size_t row_bytes, size_t d, int bits) {
  return HasFastPackedScores(row_bytes, d, bits) || HasAvx2ChannelBlockScores(row_bytes, d, bits);
}

void ScoreChannelBlocksI8(const uint8_t* rows, size_t row_bytes, size_t d, int bits,
                          const uint16_t* params, const int64_t* starts, size_t n_blocks,
                          const float* q, size_t n_q, float* scores, size_t ld,
                          size_t n_next_blocks) {
  if (n_blocks == 0 || n_q == 0) return;
#if KVPACK_HAVE_BLOCK_KERNEL
  if (HasFastPackedScores(row_bytes, d, bits)) {
    if (bits == 8) {
      ScoreBlocks<64, 8>(rows, params, starts, n_blocks, n_next_blocks, q, n_q, scores, ld);
    } else if (d == 64) {
      (bits == 2 ? ScoreBlocks<64, 2> : ScoreBlocks<64, 4>)(rows, params, starts, n_blocks,
                                                            n_next_blocks, q, n_q, scores, ld);
    } else {
      (bits == 2 ? ScoreBlocks<128, 2> : ScoreBlocks<128, 4>)(rows, params, starts, n_blocks,
                                                              n_next_blocks, q, n_q, scores, ld);
    }
    return;
  }
#endif
  (void)n_next_blocks;  // the paths below prefetch block by block
  if (HasAvx2ChannelBlockScores(row_bytes, d, bits)) {
    ScoreChannelBlocksAvx2(rows, d, bits, params, starts, n_blocks, q, n_q, scores, ld);
    return;
  }
  for (size_t j = 0; j < n_blocks; ++j) {
    const size_t r0 = static_cast<size_t>(starts[j]), r1 = static_cast<size_t>(starts[j + 1]);
    if (r1 <= r0) continue;
    // 8-bit codes: the twin itself (slow; the codecs take their float path there instead).
    (bits == 8 ? ScoreChannelBlockI8Ref : ScoreChannelBlockGeneral)(
        rows + r0 * row_bytes, r1 - r0, row_bytes, d, bits, params + j * 2 * d, q, n_q,
        scores + r0, ld);
  }
}

bool HasFastTokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups) {
#if KVPACK_HAVE_BLOCK_KERNEL
  return (d == 64 || d == 128) && (bits == 2 || bits == 4) &&
         row_bytes == d * static_cast<size_t>(bits) / 8 && (n_groups == 1 || n_groups == 2) &&
         CpuHasBlockKernel() && CodeKernelsUseAvx512();
#else
  (void)row_bytes;
  (void)d;
  (void)bits;
  (void)n_groups;
  return false;
#endif
}

namespace {

#if KVPACK_HAVE_BLOCK_KERNEL
// The single-pass kernel for a shape HasFastTokenRowScores accepts (q4_0: d = 64, 4 bits,
// two groups). The query is arranged once per call (ArrangeQueryForPacked).
template <RowParams kParams>
void ScoreTokenRowsDispatch(const uint8_t* rows, size_t n_rows, size_t d, int bits,
                            size_t n_groups, const uint16_t* params, const int8_t* q8,
                            const float* alpha, const float* qsum, size_t n_q, float* scores,
                            size_t ld) {
  thread_local std::vector<int8_t> qp;
  qp.resize(n_q * d + 64);
  if (bits == 8) {
    std::memcpy(qp.data(), q8, n_q * d);  // one code per byte: the query in channel order
  } else {
    ArrangeQueryForPacked(q8, n_q, d, bits, qp.data());
  }
  const auto run = [&](auto kd, auto kbits, auto kgroups) {
    ScoreTokenRowsFast<decltype(kd)::value, decltype(kbits)::value, decltype(kgroups)::value,
                       kParams>(rows, n_rows, params, qp.data(), alpha, qsum, n_q, scores, ld);
  };
  using I64 = std::integral_constant<int, 64>;
  using I128 = std::integral_constant<int, 128>;
  using B2 = std::integral_constant<int, 2>;
  using B4 = std::integral_constant<int, 4>;
  using G1 = std::integral_constant<int, 1>;
  using G2 = std::integral_constant<int, 2>;
  if constexpr (kParams == RowParams::kQ4_0Scales) {
    run(I64{}, B4{}, G2{});
  } else if constexpr (kParams == RowParams::kQ8_0Scales) {
    run(I64{}, std::integral_constant<int, 8>{}, G2{});
  } else {
    const int key = (d == 128) * 4 + (bits == 4) * 2 + (n_groups == 2);
    switch (key) {
      case 0: run(I64{}, B2{}, G1{}); break;
      case 1: run(I64{}, B2{}, G2{}); break;
      case 2: run(I64{}, B4{}, G1{}); break;
      case 3: run(I64{}, B4{}, G2{}); break;
      case 4: run(I128{}, B2{}, G1{}); break;
      case 5: run(I128{}, B2{}, G2{}); break;
      case 6: run(I128{}, B4{}, G1{}); break;
      default: run(I128{}, B4{}, G2{}); break;
    }
  }
}
#endif

// The general path for rows with several groups: a tile of kTile rows at a time, the codes
// unpacked to bytes, the parameters as float planes by group (fill(k0, m, scale, min, ld)),
// then the general integer dots and CombineCodeDots.
template <class FillParams>
void ScoreGroupedRowsGeneral(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                             int bits, size_t n_groups, const int8_t* q8, const float* alpha,
                             const float* qsum, size_t n_q, float* scores, size_t ld,
                             FillParams fill) {
  constexpr size_t kTile = 64;
  thread_local std::vector<uint8_t> tile;
  thread_local std::vector<float> scale, min;
  thread_local std::vector<int32_t> dots;
  tile.resize(kTile * d);
  scale.resize(n_groups * kTile);
  min.resize(n_groups * kTile);
  dots.resize(n_q * n_groups * kTile);
  for (size_t k0 = 0; k0 < n_rows; k0 += kTile) {
    const size_t m = std::min(kTile, n_rows - k0);
    UnpackCodeRows(rows + k0 * row_bytes, nullptr, m, row_bytes, 0, d, bits, tile.data());
    fill(k0, m, scale.data(), min.data(), kTile);
    DotCodeRowsI8(tile.data(), m, d, d, d / n_groups, q8, n_q, dots.data(), kTile);
    CombineCodeDots(dots.data(), scale.data(), min.data(), kTile, m, n_q, n_groups, alpha, qsum,
                    scores + k0, ld);
  }
}

// Code c of a packed LSB-first row, read bit by bit (the twins' definition).
int CodeAt(const uint8_t* row, size_t c, int bits) {
  int code = 0;
  for (int b = 0; b < bits; ++b) {
    const size_t bit = c * bits + b;
    code |= ((row[bit / 8] >> (bit % 8)) & 1) << b;
  }
  return code;
}

// The twins' parameters of rows with (scale, min) fp16 pairs, [n_rows, n_groups, 2].
auto PairParams(const uint16_t* params, size_t n_groups) {
  return [params, n_groups](size_t r, size_t g, float& scale, float& min) {
    scale = Fp16ToFp32(params[(r * n_groups + g) * 2]);
    min = Fp16ToFp32(params[(r * n_groups + g) * 2 + 1]);
  };
}

// The twins' arithmetic: exact group dots, then CombineCodeDots' steps in float. Q: int8_t,
// or int16_t (8-bit codes' query).
template <class Param, typename Q>
void ScoreGroupedRowsRef(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                         int bits, size_t n_groups, Param param, const Q* q8,
                         const float* alpha, const float* qsum, size_t n_q, float* scores,
                         size_t ld) {
  const size_t group = d / n_groups;
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t r = 0; r < n_rows; ++r) {
      float acc = 0.0f;
      for (size_t g = 0; g < n_groups; ++g) {
        int32_t dot = 0;
        for (size_t c = g * group; c < (g + 1) * group; ++c) {
          dot += CodeAt(rows + r * row_bytes, c, bits) * q8[i * d + c];
        }
        float scale, min;
        param(r, g, scale, min);
        acc = std::fma(alpha[i] * scale, static_cast<float>(dot), acc);
        acc = std::fma(min, qsum[i * n_groups + g], acc);
      }
      scores[i * ld + r] = acc;
    }
  }
}

}  // namespace

void ScoreTokenRowsI8(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                      size_t n_groups, const uint16_t* params, const int8_t* q8,
                      const float* alpha, const float* qsum, size_t n_q, float* scores,
                      size_t ld) {
  if (n_rows == 0 || n_q == 0) return;
#if KVPACK_HAVE_BLOCK_KERNEL
  if (HasFastTokenRowScores(row_bytes, d, bits, n_groups)) {
    ScoreTokenRowsDispatch<RowParams::kPairs>(rows, n_rows, d, bits, n_groups, params, q8, alpha,
                                              qsum, n_q, scores, ld);
    return;
  }
#endif
  if (HasAvx2TokenRowScores(row_bytes, d, bits, n_groups)) {
    ScoreTokenRowsI8Avx2(rows, n_rows, d, bits, n_groups, params, q8, alpha, qsum, n_q, scores,
                         ld);
    return;
  }
  if (n_groups == 1) {
    ScoreTokenRowsGeneral(rows, n_rows, row_bytes, d, bits, params, q8, alpha, qsum, n_q, scores,
                          ld);
    return;
  }
  ScoreGroupedRowsGeneral(rows, n_rows, row_bytes, d, bits, n_groups, q8, alpha, qsum, n_q,
                          scores, ld,
                          [&](size_t k0, size_t m, float* scale, float* min, size_t lds) {
                            SplitGroupParams(params + k0 * 2 * n_groups, m, n_groups, 0,
                                             n_groups, scale, min, lds);
                          });
}

void ScoreTokenRowsI8Ref(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                         int bits, size_t n_groups, const uint16_t* params, const int8_t* q8,
                         const float* alpha, const float* qsum, size_t n_q, float* scores,
                         size_t ld) {
  ScoreGroupedRowsRef(
      rows, n_rows, row_bytes, d, bits, n_groups,
      PairParams(params, n_groups),
      q8, alpha, qsum, n_q, scores, ld);
}

namespace {
// ScoreTokenRowsI16's AVX512-VNNI kernel (ColumnDotsI16 in the single-pass block kernel).
bool HasVnniTokenRowScoresI16(size_t d, size_t n_groups) {
  return HasFastPackedScores(d, d, 8) && (n_groups == 1 || n_groups == 2);
}
}  // namespace

bool HasFastTokenRowScoresI16(size_t d, size_t n_groups) {
  return HasVnniTokenRowScoresI16(d, n_groups) || HasAvx2TokenRowScoresI16(d, n_groups);
}

namespace {
// ColumnDotsI16's query order: in each run of four channels the middle two swap; n % 4 == 0.
void ArrangeQueryI16(const int16_t* q16, size_t n, int16_t* qp) {
  for (size_t c = 0; c + 4 <= n; c += 4) {
    qp[c] = q16[c];
    qp[c + 1] = q16[c + 2];
    qp[c + 2] = q16[c + 1];
    qp[c + 3] = q16[c + 3];
  }
}
}  // namespace

void ScoreTokenRowsI16(const uint8_t* rows, size_t n_rows, size_t d, size_t n_groups,
                       const uint16_t* params, const int16_t* q16, const float* alpha,
                       const float* qsum, size_t n_q, float* scores, size_t ld) {
  if (n_rows == 0 || n_q == 0) return;
#if KVPACK_HAVE_BLOCK_KERNEL
  if (HasVnniTokenRowScoresI16(d, n_groups)) {
    thread_local std::vector<int16_t> qp;
    qp.resize(n_q * d);
    ArrangeQueryI16(q16, n_q * d, qp.data());
    (n_groups == 1 ? ScoreTokenRowsFast<64, 8, 1, RowParams::kPairs, int16_t>
                   : ScoreTokenRowsFast<64, 8, 2, RowParams::kPairs, int16_t>)(
        rows, n_rows, params, qp.data(), alpha, qsum, n_q, scores, ld);
    return;
  }
#endif
  if (HasAvx2TokenRowScoresI16(d, n_groups)) {
    ScoreTokenRowsI16Avx2(rows, n_rows, d, n_groups, params, q16, alpha, qsum, n_q, scores, ld);
    return;
  }
  ScoreTokenRowsI16Ref(rows, n_rows, d, n_groups, params, q16, alpha, qsum, n_q, scores, ld);
}

void ScoreTokenRowsI16Ref(const uint8_t* rows, size_t n_rows, size_t d, size_t n_groups,
                          const uint16_t* params, const int16_t* q16, const float* alpha,
                          const float* qsum, size_t n_q, float* scores, size_t ld) {
  ScoreGroupedRowsRef(
      rows, n_rows, d, d, 8, n_groups,
      PairParams(params, n_groups),
      q16, alpha, qsum, n_q, scores, ld);
}

bool HasSinglePassTokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups) {
  return HasFastTokenRowScores(row_bytes, d, bits, n_groups) ||
         HasAvx2TokenRowScores(row_bytes, d, bits, n_groups);
}

bool HasFastQ4_0Scores(size_t d) { return d == 64 && HasFastTokenRowScores(32, 64, 4, 2); }

void ScoreQ4_0RowsI8(const uint8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                     const int8_t* q8, const float* alpha, const float* qsum, size_t n_q,
                     float* scores, size_t ld) {
  if (n_rows == 0 || n_q == 0) return;
#if KVPACK_HAVE_BLOCK_KERNEL
  if (HasFastQ4_0Scores(d)) {
    ScoreTokenRowsDispatch<RowParams::kQ4_0Scales>(codes, n_rows, d, 4, 2, scales, q8, alpha,
                                                   qsum, n_q, scores, ld);
    return;
  }
#endif
  if (HasAvx2Q4_0Scores(d)) {
    ScoreQ4_0RowsI8Avx2(codes, scales, n_rows, d, q8, alpha, qsum, n_q, scores, ld);
    return;
  }
  const size_t ng = d / 32;
  ScoreGroupedRowsGeneral(codes, n_rows, d / 2, d, 4, ng, q8, alpha, qsum, n_q, scores, ld,
                          [&](size_t k0, size_t m, float* scale, float* min, size_t lds) {
                            for (size_t k = 0; k < m; ++k) {
                              for (size_t g = 0; g < ng; ++g) {
                                scale[g * lds + k] = Fp16ToFp32(scales[(k0 + k) * ng + g]);
                                min[g * lds + k] = -8.0f * scale[g * lds + k];
                              }
                            }
                          });
}

void ScoreQ4_0RowsI8Ref(const uint8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                        const int8_t* q8, const float* alpha, const float* qsum, size_t n_q,
                        float* scores, size_t ld) {
  const size_t ng = d / 32;
  ScoreGroupedRowsRef(
      codes, n_rows, d / 2, d, 4, ng,
      [&](size_t r, size_t g, float& scale, float& min) {
        scale = Fp16ToFp32(scales[r * ng + g]);
        min = -8.0f * scale;
      },
      q8, alpha, qsum, n_q, scores, ld);
}

namespace {
bool HasVnniQ8_0Scores(size_t d) {
#if KVPACK_HAVE_BLOCK_KERNEL
  return d == 64 && CpuHasBlockKernel() && CodeKernelsUseAvx512();
#else
  (void)d;
  return false;
#endif
}
}  // namespace

bool HasFastQ8_0Scores(size_t d) { return HasVnniQ8_0Scores(d) || HasAvx2Q8_0Scores(d); }

void ScoreQ8_0RowsI8(const int8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                     const int8_t* q8, const float* alpha, size_t n_q, float* scores,
                     size_t ld) {
  if (n_rows == 0 || n_q == 0) return;
#if KVPACK_HAVE_BLOCK_KERNEL
  if (HasVnniQ8_0Scores(d)) {
    // Per query row and group, 128 x the sum of q8: what reading the codes as code + 128 adds.
    thread_local std::vector<float> offsets;
    offsets.resize(2 * n_q);
    for (size_t i = 0; i < 2 * n_q; ++i) {
      int32_t sum = 0;
      for (size_t c = 0; c < 32; ++c) sum += q8[32 * i + c];
      offsets[i] = static_cast<float>(128 * sum);
    }
    ScoreTokenRowsDispatch<RowParams::kQ8_0Scales>(reinterpret_cast<const uint8_t*>(codes),
                                                   n_rows, d, 8, 2, scales, q8, alpha,
                                                   offsets.data(), n_q, scores, ld);
    return;
  }
#endif
  if (HasAvx2Q8_0Scores(d)) {
    ScoreQ8_0RowsI8Avx2(codes, scales, n_rows, d, q8, alpha, n_q, scores, ld);
    return;
  }
  ScoreQ8_0RowsI8Ref(codes, scales, n_rows, d, q8, alpha, n_q, scores, ld);
}

void ScoreQ8_0RowsI8Ref(const int8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                        const int8_t* q8, const float* alpha, size_t n_q, float* scores,
                        size_t ld) {
  const size_t ng = d / 32;
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t r = 0; r < n_rows; ++r) {
      float acc = 0.0f;
      for (size_t g = 0; g < ng; ++g) {
        int32_t dot = 0;
        for (size_t c = 32 * g; c < 32 * g + 32; ++c) dot += codes[r * d + c] * q8[i * d + c];
        const float scale = Fp16ToFp32(scales[r * ng + g]);
        acc = g == 0 ? (alpha[i] * scale) * static_cast<float>(dot)
                     : std::fma(alpha[i] * scale, static_cast<float>(dot), acc);
      }
      scores[i * ld + r] = acc;
    }
  }
}

void ScoreChannelBlockI8Ref(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                            int bits, const uint16_t* params, const float* q, size_t n_q,
                            float* scores, size_t ld) {
  std::vector<float> xs(d);
  std::vector<int8_t> q8(n_q * d);
  std::vector<int16_t> q16(n_q * d);  // 8-bit codes
  std::vector<float> alpha(n_q), xmin(n_q);
  for (size_t i = 0; i < n_q; ++i) {
    float dot = 0.0f;
    for (size_t c = 0; c < d; ++c) {
      xs[c] = q[i * d + c] * Fp16ToFp32(params[c]);
      dot += q[i * d + c] * Fp16ToFp32(params[d + c]);
    }
    alpha[i] = bits == 8 ? QuantizeI16Ref(xs.data(), d, &q16[i * d])
                         : QuantizeI8Ref(xs.data(), d, &q8[i * d]);
    xmin[i] = dot;
  }
  std::vector<int32_t> dots(n_q * n_rows);
  if (bits == 8) {
    for (size_t i = 0; i < n_q; ++i) {
      for (size_t r = 0; r < n_rows; ++r) {
        int32_t acc = 0;
        for (size_t c = 0; c < d; ++c) acc += rows[r * row_bytes + c] * q16[i * d + c];
        dots[i * n_rows + r] = acc;
      }
    }
  } else {
    DotPackedRowsI8Ref(rows, n_rows, row_bytes, d, bits, q8.data(), n_q, dots.data(), n_rows);
  }
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t r = 0; r < n_rows; ++r) {
      const float a = alpha[i] * static_cast<float>(dots[i * n_rows + r]);
      scores[i * ld + r] = a + xmin[i];
    }
  }
}

}  // namespace kvpack
