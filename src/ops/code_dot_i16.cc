// The AVX512-VNNI kernel is compiled for that ISA with a function attribute and chosen at
// run time (Highway 1.0.3's targets do not include VNNI + VBMI at once: its AVX3_DL target
// must be enabled for the whole build); every other case calls the float kernel.
#include "ops/code_dot_i16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_VNNI_KERNEL 1
#define KVPACK_VNNI_ATTR \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vbmi,avx512vnni")))
#else
#define KVPACK_HAVE_VNNI_KERNEL 0
#endif

#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/code_dot_i16_avx2.h"
#include "ops/code_unpack.h"
#include "ops/prefetch.h"
#include "ops/value_tile_avx512.h"
#include "ops/query_chunks.h"

namespace kvpack {
namespace {

constexpr float kI16Max = 32767.0f;

// The weight quantizer of both paths, in scalar form: per (query row, group) row of m
// weights, s = max |w| / 32767 and wq = round-to-nearest-even(w * 32767 / max |w|) (zero
// weights and s = 0 when the row is all zero). wq: [m rounded up to even] with a zero pad.
float QuantizeWeightsI16Scalar(const float* w, size_t m, int16_t* wq) {
  float amax = 0.0f;
  for (size_t k = 0; k < m; ++k) amax = std::max(amax, std::fabs(w[k]));
  if (m % 2) wq[m] = 0;
  if (!(amax > 0.0f)) {
    std::fill(wq, wq + m, int16_t{0});
    return 0.0f;
  }
  const float inv = kI16Max / amax;
  for (size_t k = 0; k < m; ++k) {
    wq[k] = static_cast<int16_t>(std::clamp(std::nearbyint(w[k] * inv), -kI16Max, kI16Max));
  }
  return amax / kI16Max;
}

// The forms of code rows the chunk loops read (their kBits): 0, an unpacked tile (one byte per
// code, in cache); 2, 4 or 8, packed LSB-first rows streaming from memory (8: one unsigned byte
// per code, the rows of the 8-bit FlexGen, KIVI and KCVT values); kSignedBytes, q8_0's rows of
// signed bytes.
constexpr int kSignedBytes = kSignedByteCodes;
constexpr int CodeBitsOf(int form) { return form == 0 || form == kSignedBytes ? 8 : form; }

size_t GroupsOfWindow(size_t first, size_t d, size_t group) {
  return (first + d - 1) / group - first / group + 1;
}

#if KVPACK_HAVE_VNNI_KERNEL
// GCC 12's intrinsic headers build some results from `_mm512_undefined_*()` (a variable
// initialised from itself), which -Wuninitialized reports at every inlining site here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
bool CpuHasVnniKernel() {
  static const bool ok = __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vbmi") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

// The scalar quantizer's arithmetic 16 weights at a time (vcvtps2dq rounds to nearest even,
// as nearbyint does in the default mode; |w * inv| <= 32767 + rounding, so saturation to
// int16 equals the clamp).
KVPACK_VNNI_ATTR float QuantizeWeightsI16Avx512(const float* w, size_t m, int16_t* wq) {
  __m512 vmax = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 16 <= m; k += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(w + k)));
  float amax = _mm512_reduce_max_ps(vmax);
  for (size_t j = k; j < m; ++j) amax = std::max(amax, std::fabs(w[j]));
  if (m % 2) wq[m] = 0;
  if (!(amax > 0.0f)) {
    std::fill(wq, wq + m, int16_t{0});
    return 0.0f;
  }
  const float inv = kI16Max / amax;
  const __m512 vinv = _mm512_set1_ps(inv);
  for (k = 0; k + 16 <= m; k += 16) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(w + k), vinv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wq + k), _mm512_cvtsepi32_epi16(q));
  }
  for (; k < m; ++k) {
    wq[k] = static_cast<int16_t>(std::clamp(std::nearbyint(w[k] * inv), -kI16Max, kI16Max));
  }
  return amax / kI16Max;
}

// acc += the dot products of int16 pairs, in place. GCC 12 compiles the intrinsic
// (_mm512_dpwssd_epi32) as a three-operand value and then copies every accumulator between
// registers around it and spills some, which cost more than the instruction saves; the asm
// ties the accumulator to its register.
KVPACK_VNNI_ATTR inline __m512i DotPairsAdd(__m512i acc, __m512i pairs, __m512i w) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(pairs), "v"(w));
  return acc;
}

// Rows k and k + 1 (zeros past n_rows) of a chunk: the bytes `live` from c_byte of each.
// Packed rows (kPrefetch) stream from memory and ask for the line kPrefetchAheadBytes ahead:
// without this the 30-layer benchmark ran ~60% slower than with the unpacking pass they
// replace (whose stream loop prefetches). Rows of a line or wider (kWide: q8_0's rows, a
// window of KCVT's all-head rows) ask for the second row's too, which lies in another line
// that the stride of two rows would otherwise skip.
template <bool kPrefetch, bool kWide>
KVPACK_VNNI_ATTR inline void LoadRowPair(const uint8_t* codes, size_t k, size_t n_rows,
                                         size_t row_stride, size_t c_byte, __mmask64 live,
                                         __m512i& r0, __m512i& r1) {
  const uint8_t* first = codes + k * row_stride + c_byte;
  if constexpr (kPrefetch) {
    PrefetchCodeLine(first + kPrefetchAheadBytes);
    if constexpr (kWide) {
      PrefetchCodeLine(first + row_stride + kPrefetchAheadBytes);
    }
  }
  r0 = _mm512_maskz_loadu_epi8(live, first);
  r1 = k + 1 < n_rows ? _mm512_maskz_loadu_epi8(live, first + row_stride)
                      : _mm512_setzero_si512();
}

// The int16 weights (wq_k, wq_k+1) of one (query row, group) row, broadcast to every lane.
KVPACK_VNNI_ATTR inline __m512i WeightPair(const int16_t* row, size_t k) {
  int32_t pair;
  std::memcpy(&pair, row + k, sizeof(pair));
  return _mm512_set1_epi32(pair);
}

// Channels [c, c + 16 * NB) of the window (one chunk, NB <= 4 blocks of 16) whose blocks
// come in runs of BPG with one group each (block b is in window group g0 + b / BPG), query
// rows [0, NQ): acc[i][b] += sum over row pairs of (code_k, code_k+1) . (wq_k, wq_k+1).
// wq rows [n_q * ng][ldq]; s [n_q * ng].
// The loops over query rows and blocks are unrolled before GCC decides where the arrays of
// accumulators live: otherwise they stay in memory and every accumulator is stored to the
// stack on every row pair (measured: the stores took half the kernel's time).
// kBits (a form, above) = 0: codes are one byte each (codes[k * row_stride + c]); 2, 4 or 8:
// codes are read from packed LSB-first rows (row k at codes + k * row_stride, window channel c
// in byte c * kBits / 8), so no unpacked tile is written; kSignedBytes: one signed byte each.
template <int NQ, int NB, int BPG, int kBits, bool kWide>
KVPACK_VNNI_ATTR void ChunkI16(const int16_t* wq, size_t ldq, size_t ng, size_t g0,
                               const float* s, const uint8_t* codes, size_t n_rows,
                               size_t row_stride, size_t c, float* out, size_t d) {
  constexpr int kGroups = (NB + BPG - 1) / BPG;
  // Byte 4j of a lane takes channel j of the block from the first row, byte 4j + 2 from the
  // second (index bit 6 selects the second source); bytes 4j + 1 and 4j + 3 are zeroed, so
  // each 16-bit half of the lane is one code as int16 (packed: the byte holding the code,
  // then shifted right by the code's bit offset, the same for both rows, and masked).
  // kSignedBytes: the byte goes to the high half of its 16 bits instead (bytes 4j + 1 and
  // 4j + 3) and an arithmetic shift by 8 sign-extends it.
  constexpr bool kSigned = kBits == kSignedBytes;
  constexpr __mmask64 kPairBytes = kSigned ? 0xAAAAAAAAAAAAAAAAull : 0x5555555555555555ull;
  constexpr int kCodeBits = CodeBitsOf(kBits);  // bits per code
  constexpr int kAt = kSigned ? 1 : 0;               // the code's byte within its 16 bits
  __m512i pick[NB];
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
    alignas(64) uint8_t idx[64] = {};
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      idx[4 * j + kAt] = static_cast<uint8_t>((16 * b + j) * kCodeBits / 8);
      idx[4 * j + 2 + kAt] = static_cast<uint8_t>(64 + (16 * b + j) * kCodeBits / 8);
    }
    pick[b] = _mm512_load_si512(idx);
  }
  __m512i shift = _mm512_setzero_si512(), code_mask = _mm512_setzero_si512();
  if constexpr (kBits == 2 || kBits == 4) {
    alignas(64) uint16_t sh[32];
#pragma GCC unroll 32
    for (int j = 0; j < 32; ++j) sh[j] = static_cast<uint16_t>((j / 2) * kBits % 8);
    shift = _mm512_load_si512(sh);
    code_mask = _mm512_set1_epi16((1 << kBits) - 1);
  }
  constexpr int kChunkBytes = 16 * NB * kCodeBits / 8;
  const __mmask64 live =
      kChunkBytes == 64 ? ~__mmask64{0} : ((__mmask64{1} << kChunkBytes) - 1);
  const size_t c_byte = c * kCodeBits / 8;
  const int16_t* wrow[NQ][kGroups];
#pragma GCC unroll 16
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 16
    for (int g = 0; g < kGroups; ++g) wrow[i][g] = wq + (i * ng + g0 + g) * ldq;
  }
  __m512i acc[NQ][NB];
#pragma GCC unroll 16
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[i][b] = _mm512_setzero_si512();
  }
  for (size_t k = 0; k < n_rows; k += 2) {
    __m512i r0, r1;
    LoadRowPair<kBits != 0, kWide>(codes, k, n_rows, row_stride, c_byte, live, r0, r1);
    __m512i pairs[NB];
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      pairs[b] = _mm512_maskz_permutex2var_epi8(kPairBytes, r0, pick[b], r1);
      if constexpr (kSigned) {
        pairs[b] = _mm512_srai_epi16(pairs[b], 8);
      } else if constexpr (kBits == 2 || kBits == 4) {
        pairs[b] = _mm512_and_si512(_mm512_srlv_epi16(pairs[b], shift), code_mask);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 16
      for (int g = 0; g < kGroups; ++g) {
        const __m512i wv = WeightPair(wrow[i][g], k);
#pragma GCC unroll 16
        for (int j = 0; j < BPG; ++j) {
          const int b = g * BPG + j;
          if (b < NB) acc[i][b] = DotPairsAdd(acc[i][b], pairs[b], wv);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      float* o = out + i * d + c + 16 * b;
      const __m512 sv = _mm512_set1_ps(s[i * ng + g0 + b / BPG]);
      _mm512_storeu_ps(o, _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(acc[i][b]), _mm512_loadu_ps(o)));
    }
  }
}

// ChunkI16<NQ, 4, BPG, 4, kWide>'s sums for 4-bit rows and a whole chunk of 64 channels (32
// bytes per row) in one group (BPG = 4) or two of 32 channels (BPG = 2), with the codes taken
// by byte instead of by channel: one two-source byte permutation per 16 bytes puts byte
// 16 h + q of rows k and k + 1 into the low bytes of lane q's two 16-bit halves; masked to its
// low nibble that is channel 32 h + 2 q's pair of codes, shifted right by 4 channel
// 32 h + 2 q + 1's. Accumulator (i, h, s) lane q then sums channel 32 h + 2 q + s, and two
// permutations per half put the channels back in order at the end. Per row pair: 2
// permutations and 2 shifts or masks, where ChunkI16 takes 4 permutations, 4 shifts and 4
// masks; the same integers per channel, so the same floats.
template <int NQ, int BPG, bool kWide>
KVPACK_VNNI_ATTR void ChunkI16Nibbles(const int16_t* wq, size_t ldq, size_t ng, size_t g0,
                                      const float* s, const uint8_t* codes, size_t n_rows,
                                      size_t row_stride, size_t c, float* out, size_t d) {
  static_assert(BPG == 4 || BPG == 2);
  constexpr int kGroups = 4 / BPG;  // half h is in group h * kGroups / 2
  constexpr __mmask64 kLowBytes = 0x5555555555555555ull;
  __m512i pick[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    alignas(64) uint8_t idx[64] = {};
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) {
      idx[4 * q] = static_cast<uint8_t>(16 * h + q);
      idx[4 * q + 2] = static_cast<uint8_t>(64 + 16 * h + q);
    }
    pick[h] = _mm512_load_si512(idx);
  }
  const __m512i nibble = _mm512_set1_epi16(0xF);
  constexpr __mmask64 kChunk = 0xFFFFFFFFull;  // the chunk's 32 bytes of a row
  const size_t c_byte = c / 2;
  const int16_t* wrow[NQ][kGroups];
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 2
    for (int g = 0; g < kGroups; ++g) wrow[i][g] = wq + (i * ng + g0 + g) * ldq;
  }
  __m512i acc[NQ][2][2];
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) acc[i][h][0] = acc[i][h][1] = _mm512_setzero_si512();
  }
  for (size_t k = 0; k < n_rows; k += 2) {
    __m512i r0, r1;
    LoadRowPair<true, kWide>(codes, k, n_rows, row_stride, c_byte, kChunk, r0, r1);
    __m512i pairs[2][2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i bytes = _mm512_maskz_permutex2var_epi8(kLowBytes, r0, pick[h], r1);
      pairs[h][0] = _mm512_and_si512(bytes, nibble);
      pairs[h][1] = _mm512_srli_epi16(bytes, 4);
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 2
      for (int g = 0; g < kGroups; ++g) {
        const __m512i wv = WeightPair(wrow[i][g], k);
        // Group g's weights meet the halves it covers: both when one group spans the chunk,
        // half g when two do. (No unroll pragma: with 1 or 2 trips the compiler unrolls it
        // anyway, and the sanitizer build warned that it ignored the pragma.)
        constexpr int kHalvesPerGroup = 2 / kGroups;
        for (int e = 0; e < kHalvesPerGroup; ++e) {
          const int h = g * kHalvesPerGroup + e;
          acc[i][h][0] = DotPairsAdd(acc[i][h][0], pairs[h][0], wv);
          acc[i][h][1] = DotPairsAdd(acc[i][h][1], pairs[h][1], wv);
        }
      }
    }
  }
  // Channel 16 b + j of the chunk (b = 2 h + half) is lane (16 half + j) / 2 of slot j % 2.
  alignas(64) static constexpr int32_t kOrder[2][16] = {
      {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
      {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const int b = 2 * h + half;
        const __m512i sums = _mm512_permutex2var_epi32(
            acc[i][h][0], _mm512_load_si512(kOrder[half]), acc[i][h][1]);
        float* o = out + i * d + c + 16 * b;
        const __m512 sv = _mm512_set1_ps(s[i * ng + g0 + b / BPG]);
        _mm512_storeu_ps(o, _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(sums), _mm512_loadu_ps(o)));
      }
    }
  }
}

// One chunk of NB blocks: the run length of its groups (the chunk's first block starts a
// group or the chunk lies inside one).
template <int NQ, int NB, int kBits, bool kWide>
KVPACK_VNNI_ATTR void ChunkByGroups(const int16_t* wq, size_t ldq, size_t ng, size_t first,
                                    size_t group, const float* s, const uint8_t* codes,
                                    size_t n_rows, size_t row_stride, size_t c, float* out,
                                    size_t d) {
  const size_t g_first = first / group;
  const size_t a = first + c, g0 = a / group - g_first;
  const bool inside = a / group == (a + 16 * NB - 1) / group;
  if constexpr (kBits == 4 && NB == 4) {
    if (inside) {
      ChunkI16Nibbles<NQ, 4, kWide>(wq, ldq, ng, g0, s, codes, n_rows, row_stride, c, out, d);
      return;
    }
    if (a % group == 0 && group == 32) {
      ChunkI16Nibbles<NQ, 2, kWide>(wq, ldq, ng, g0, s, codes, n_rows, row_stride, c, out, d);
      return;
    }
  }
  if (inside) {
    ChunkI16<NQ, NB, 4, kBits, kWide>(wq, ldq, ng, g0, s, codes, n_rows, row_stride, c, out, d);
  } else if (a % group == 0 && group == 32) {
    ChunkI16<NQ, NB, 2, kBits, kWide>(wq, ldq, ng, g0, s, codes, n_rows, row_stride, c, out, d);
  } else if (a % group == 0 && group == 16) {
    ChunkI16<NQ, NB, 1, kBits, kWide>(wq, ldq, ng, g0, s, codes, n_rows, row_stride, c, out, d);
  } else {  // a group boundary inside the chunk, not at its start: one block at a time
    for (int b = 0; b < NB; ++b) {
      const size_t gb = (a + 16 * b) / group - g_first;
      ChunkI16<NQ, 1, 1, kBits, kWide>(wq, ldq, ng, gb, s, codes, n_rows, row_stride, c + 16 * b, out,
                                d);
    }
  }
}

template <int NQ, int kBits, bool kWide>
KVPACK_VNNI_ATTR void QueriesI16(const int16_t* wq, size_t ldq, size_t ng, const float* s,
                                 const uint8_t* codes, size_t n_rows, size_t row_stride,
                                 size_t d, size_t first, size_t group, float* out) {
  for (size_t c = 0; c < d; c += 64) {
    switch (std::min<size_t>(4, (d - c) / 16)) {
      case 1:
        ChunkByGroups<NQ, 1, kBits, kWide>(wq, ldq, ng, first, group, s, codes, n_rows, row_stride, c,
                                    out, d);
        break;
      case 2:
        ChunkByGroups<NQ, 2, kBits, kWide>(wq, ldq, ng, first, group, s, codes, n_rows, row_stride, c,
                                    out, d);
        break;
      case 3:
        ChunkByGroups<NQ, 3, kBits, kWide>(wq, ldq, ng, first, group, s, codes, n_rows, row_stride, c,
                                    out, d);
        break;
      default:
        ChunkByGroups<NQ, 4, kBits, kWide>(wq, ldq, ng, first, group, s, codes, n_rows, row_stride, c,
                                    out, d);
        break;
    }
  }
}

// The chunk loops over quantized weights wq [n_q * ng][ldq] with steps s [n_q * ng].
// bits: a form (above); packed rows' codes point at the window's first byte.
KVPACK_VNNI_ATTR void AxpyQuantizedI16(const int16_t* wq, size_t ldq, const float* s, size_t n_q,
                                       const uint8_t* codes, int bits, size_t n_rows,
                                       size_t row_stride, size_t d, size_t first, size_t group,
                                       float* out) {
  const size_t ng = GroupsOfWindow(first, d, group);
  // Up to three query rows per pass: 3 x 4 accumulators, 4 code pairs, 4 byte selectors.
  ForEachQueryChunk<3>(n_q, [&](auto m, size_t i0) {
    const int16_t* wq_i = wq + i0 * ng * ldq;
    const float* s_i = s + i0 * ng;
    float* out_i = out + i0 * d;
    // Rows of a line or more (q8_0's 64-byte rows, a window of KCVT's all-head rows) prefetch
    // both rows of a pair; a run-time test inside the row loop cost 10% of KIVI-4's value
    // kernel. (q8_0 took the narrow form until session 30: every second line of its codes
    // then came from memory on demand, and its values took 233 instead of 156-170 us over 30
    // layers at 512 tokens from memory; kv_codec_bench AccumulateCold/q8_0/512/30.)
    const bool wide = row_stride >= 64;
    const auto run = [&](auto kbits, auto kwide) {
      QueriesI16<m, decltype(kbits)::value, decltype(kwide)::value>(
          wq_i, ldq, ng, s_i, codes, n_rows, row_stride, d, first, group, out_i);
    };
    using B0 = std::integral_constant<int, 0>;
    using B2 = std::integral_constant<int, 2>;
    using B4 = std::integral_constant<int, 4>;
    using Narrow = std::false_type;
    using Wide = std::true_type;
    if (bits == 2) {
      wide ? run(B2{}, Wide{}) : run(B2{}, Narrow{});
    } else if (bits == 4) {
      wide ? run(B4{}, Wide{}) : run(B4{}, Narrow{});
    } else if (bits == 8) {
      using B8 = std::integral_constant<int, 8>;
      wide ? run(B8{}, Wide{}) : run(B8{}, Narrow{});
    } else if (bits == kSignedBytes) {
      using Signed = std::integral_constant<int, kSignedBytes>;
      wide ? run(Signed{}, Wide{}) : run(Signed{}, Narrow{});
    } else {
      run(B0{}, Narrow{});
    }
  });
}

KVPACK_VNNI_ATTR void AxpyI16Avx512(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                                    int bits, size_t n_rows, size_t row_stride, size_t d,
                                    size_t first, size_t group, float* out) {
  const size_t ng = GroupsOfWindow(first, d, group);
  const size_t ldq = n_rows + n_rows % 2;
  thread_local std::vector<int16_t> wq;
  thread_local std::vector<float> s;
  wq.resize(n_q * ng * ldq);
  s.resize(n_q * ng);
  for (size_t r = 0; r < n_q * ng; ++r) {
    s[r] = QuantizeWeightsI16Avx512(w + r * ld, n_rows, &wq[r * ldq]);
  }
  AxpyQuantizedI16(wq.data(), ldq, s.data(), n_q, codes, bits, n_rows, row_stride, d, first,
                   group, out);
}

constexpr size_t kTileLdq = kPackedTileRowsMax;
constexpr int kTileBlocks = kPackedTileRowsMax / 16;
static_assert(kTileBlocks == 4, "TileWeights4 takes a tile of 4 blocks of 16 rows");

// Query rows [0, NQ) and window groups [gb, gb + NG) of a tile (of ng groups, the row's groups
// g0 + g): weights p * scale, their largest magnitude, their int16 quantization (rows of wq
// [NQ * ng][kTileLdq], steps s) and the sums of p * min (msum) in registers. Everything is
// unrolled so that the NQ x NG reduction chains overlap. live[b]: the rows of block b
// (16 rows) that exist; the others' probabilities and parameters load as 0.
// kParams: kPairs, or params are q4_0 / q8_0 plane scales instead, [n_rows, 2] fp16 (one
// 32-bit word per row, group 0 in the low half), with min = -8 scale (q4_0, exact in float)
// or no min (q8_0: msum is not touched).
enum class TileParams { kPairs, kQ4_0Scales, kQ8_0Scales };
template <size_t NQ, size_t NG, TileParams kParams = TileParams::kPairs>
KVPACK_VNNI_ATTR void TileWeights(const float* p, size_t ldp, const uint16_t* params,
                                  size_t n_groups, size_t g0, size_t gb, size_t ng,
                                  size_t n_rows, const __mmask16* live, int16_t* wq, float* s,
                                  float* msum) {
  __m512 scale[NG][kTileBlocks], min[NG][kTileBlocks];
#pragma GCC unroll 4
  for (size_t g = 0; g < NG; ++g) {
#pragma GCC unroll 4
    for (int b = 0; b < kTileBlocks; ++b) {
      const int64_t n = static_cast<int64_t>(n_rows) - 16 * b;
      if constexpr (kParams != TileParams::kPairs) {
        const __m512i x = LoadWords(reinterpret_cast<const uint32_t*>(params) + 16 * b, n);
        const __m512i half = g0 + gb + g == 0 ? x : _mm512_srli_epi32(x, 16);
        scale[g][b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(half));
        min[g][b] = _mm512_mul_ps(scale[g][b], _mm512_set1_ps(-8.0f));
      } else {
        const __m512i x = GroupParamWords(params, n_groups, g0 + gb + g, 16 * b, n);
        scale[g][b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
        min[g][b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
      }
    }
  }
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
    __m512 pb[kTileBlocks];
#pragma GCC unroll 4
    for (int b = 0; b < kTileBlocks; ++b) pb[b] = _mm512_maskz_loadu_ps(live[b], p + i * ldp + 16 * b);
#pragma GCC unroll 4
    for (size_t g = 0; g < NG; ++g) {
      __m512 w[kTileBlocks];
      float min_sum;
      const float amax = TileWeights4(pb, scale[g], min[g], w, min_sum);
      const size_t r = i * ng + gb + g;
      if constexpr (kParams != TileParams::kQ8_0Scales) msum[r] += min_sum;
      int16_t* row = wq + r * kTileLdq;
      if (!(amax > 0.0f)) {
        std::fill(row, row + kTileLdq, int16_t{0});
        s[r] = 0.0f;
        continue;
      }
      const __m512 vinv = _mm512_set1_ps(kI16Max / amax);
#pragma GCC unroll 4
      for (int b = 0; b < kTileBlocks; ++b) {
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(w[b], vinv));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 16 * b), _mm512_cvtsepi32_epi16(q));
      }
      s[r] = amax / kI16Max;
    }
  }
}

// AccumulatePackedRowsI16 (and, with plane scales, AccumulateQ4_0RowsI16 and
// AccumulateQ8_0RowsI16) on this path: the weights of the tile never go through memory as
// floats (TileWeights), then the chunk loops.
template <TileParams kParams = TileParams::kPairs>
KVPACK_VNNI_ATTR void AccumulatePackedRowsAvx512(const float* p, size_t ldp, size_t n_q,
                                                 const uint16_t* params, size_t n_groups,
                                                 size_t g0, size_t ng, const uint8_t* rows,
                                                 size_t n_rows, size_t row_bytes, int bits,
                                                 size_t d, size_t first, size_t group,
                                                 float* out, float* msum) {
  thread_local std::vector<int16_t> wq;
  thread_local std::vector<float> s;
  wq.resize(n_q * ng * kTileLdq);
  s.resize(n_q * ng);
  __mmask16 live[kTileBlocks];
  for (int b = 0; b < kTileBlocks; ++b) {
    const int64_t left = static_cast<int64_t>(n_rows) - 16 * b;
    live[b] = left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  }
  ForEachQueryChunk<3>(n_q, [&](auto m, size_t i0) {
    const float* p_i = p + i0 * ldp;
    int16_t* wq_i = &wq[i0 * ng * kTileLdq];
    float* s_i = &s[i0 * ng];
    float* msum_i = msum + i0 * ng;
    size_t gb = 0;
    for (; gb + 2 <= ng; gb += 2) {
      TileWeights<m, 2, kParams>(p_i, ldp, params, n_groups, g0, gb, ng, n_rows, live, wq_i, s_i,
                               msum_i);
    }
    if (gb < ng) {
      TileWeights<m, 1, kParams>(p_i, ldp, params, n_groups, g0, gb, ng, n_rows, live, wq_i, s_i,
                               msum_i);
    }
  });
  AxpyQuantizedI16(wq.data(), kTileLdq, s.data(), n_q, rows + first * CodeBitsOf(bits) / 8, bits,
                   n_rows, row_bytes, d, first, group, out);
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_VNNI_KERNEL

// q4_0 plane scales [n_rows, ng] fp16 as float planes by group: scale[g * n_rows + k] = s,
// min[g * n_rows + k] = -8 s.
void Q4_0ScalePlanes(const uint16_t* scales, size_t n_rows, size_t ng, float* scale, float* min) {
  for (size_t k = 0; k < n_rows; ++k) {
    for (size_t g = 0; g < ng; ++g) {
      scale[g * n_rows + k] = Fp16ToFp32(scales[k * ng + g]);
      min[g * n_rows + k] = -8.0f * scale[g * n_rows + k];
    }
  }
}

// Which integer kernel runs here: AVX512-VNNI + VBMI where the CPU has them and the AVX-512
// target is allowed, else the AVX2 one (ops/code_dot_i16_avx2.h) where AVX2 is. Neither
// runs CPUID on a call (hwy::SupportedTargets() would: a VM exit under a hypervisor).
bool UseVnniKernel() {
#if KVPACK_HAVE_VNNI_KERNEL
  return CpuHasVnniKernel() && CodeKernelsUseAvx512();
#else
  return false;
#endif
}
bool UseAvx2Kernel() {
  return !UseVnniKernel() && CpuHasAvx2Int16ValueKernel() && CodeKernelsUseAvx2();
}

bool IntegerPathApplies(size_t d, size_t first, size_t group) {
  return HasInt16ValueKernel() && d % 16 == 0 && first % 16 == 0 && group % 16 == 0;
}

}  // namespace

bool HasInt16ValueKernel() { return UseVnniKernel() || UseAvx2Kernel(); }

void AxpyCodeRowsWeightedI16(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                             size_t n_rows, size_t row_stride, size_t d, size_t first,
                             size_t group, float* out) {
  if (n_rows > 0 && IntegerPathApplies(d, first, group)) {
#if KVPACK_HAVE_VNNI_KERNEL
    if (UseVnniKernel()) {
      AxpyI16Avx512(w, n_q, ld, codes, 0, n_rows, row_stride, d, first, group, out);
      return;
    }
#endif
    AxpyWeightedI16Avx2(w, n_q, ld, codes, kUnsignedByteCodes, n_rows, row_stride, d, first,
                        group, out);
    return;
  }
  AxpyCodeRowsWeighted(w, n_q, ld, codes, n_rows, row_stride, d, first, group, out);
}

bool HasFusedPackedValueKernel(int bits, size_t d, size_t first, size_t group, size_t n_groups,
                               size_t n_rows) {
  return HasPackedInt16ValueKernel(bits, d, first, group) &&
         (n_groups == 1 || n_groups == 2 || n_groups == 4) && n_rows <= kPackedTileRowsMax;
}

void AccumulatePackedRowsI16(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                             size_t n_groups, size_t g0, size_t ng, const uint8_t* rows,
                             size_t n_rows, size_t row_bytes, int bits, size_t d, size_t first,
                             size_t group, float* out, float* msum) {
  if (n_rows == 0 || n_q == 0) return;
  if (HasFusedPackedValueKernel(bits, d, first, group, n_groups, n_rows)) {
#if KVPACK_HAVE_VNNI_KERNEL
    if (UseVnniKernel()) {
      AccumulatePackedRowsAvx512(p, ldp, n_q, params, n_groups, g0, ng, rows, n_rows, row_bytes,
                                 bits, d, first, group, out, msum);
      return;
    }
#endif
    AccumulateTileI16Avx2(p, ldp, n_q, params, TileScales::kPairs, n_groups, g0, ng, rows, bits,
                          n_rows, row_bytes, d, first, group, out, msum);
    return;
  }
  AccumulatePackedRowsI16Ref(p, ldp, n_q, params, n_groups, g0, ng, rows, n_rows, row_bytes, bits,
                             d, first, group, out, msum);
}

void AccumulatePackedRowsI16Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                                size_t n_groups, size_t g0, size_t ng, const uint8_t* rows,
                                size_t n_rows, size_t row_bytes, int bits, size_t d,
                                size_t first, size_t group, float* out, float* msum) {
  std::vector<float> scale(ng * n_rows), min(ng * n_rows), w(n_q * ng * n_rows);
  SplitGroupParamsRef(params, n_rows, n_groups, g0, ng, scale.data(), min.data(), n_rows);
  GroupWeightsAndMinSumsRef(p, ldp, n_q, scale.data(), min.data(), n_rows, ng, n_rows, w.data(),
                            n_rows, msum);
  AxpyPackedRowsWeightedI16Ref(w.data(), n_q, n_rows, rows, n_rows, row_bytes, bits, d, first,
                               group, out);
}

bool HasFusedQ4_0ValueKernel(size_t d, size_t n_rows) {
  return d == 64 && HasFusedPackedValueKernel(4, d, 0, 32, 2, n_rows);
}

void AccumulateQ4_0RowsI16(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                           const uint8_t* codes, size_t n_rows, size_t d, float* out,
                           float* msum) {
  if (n_rows == 0 || n_q == 0) return;
  if (HasFusedQ4_0ValueKernel(d, n_rows)) {
#if KVPACK_HAVE_VNNI_KERNEL
    if (UseVnniKernel()) {
      AccumulatePackedRowsAvx512<TileParams::kQ4_0Scales>(p, ldp, n_q, scales, 2, 0, 2, codes,
                                                          n_rows, d / 2, 4, d, 0, 32, out, msum);
      return;
    }
#endif
    AccumulateTileI16Avx2(p, ldp, n_q, scales, TileScales::kQ4_0, 2, 0, 2, codes, kNibbleCodes,
                          n_rows, d / 2, d, 0, 32, out, msum);
    return;
  }
  // The composition of the dispatched kernels (float weights where the integer path is absent).
  const size_t ng = d / 32;
  thread_local std::vector<float> scale, min, w;
  scale.resize(ng * n_rows);
  min.resize(ng * n_rows);
  w.resize(n_q * ng * n_rows);
  Q4_0ScalePlanes(scales, n_rows, ng, scale.data(), min.data());
  GroupWeightsAndMinSums(p, ldp, n_q, scale.data(), min.data(), n_rows, ng, n_rows, w.data(),
                         n_rows, msum);
  AxpyPackedRowsWeightedI16(w.data(), n_q, n_rows, codes, n_rows, d / 2, 4, d, 0, 32, out);
}

void AccumulateQ4_0RowsI16Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                              const uint8_t* codes, size_t n_rows, size_t d, float* out,
                              float* msum) {
  const size_t ng = d / 32;
  std::vector<float> scale(ng * n_rows), min(ng * n_rows), w(n_q * ng * n_rows);
  Q4_0ScalePlanes(scales, n_rows, ng, scale.data(), min.data());
  GroupWeightsAndMinSumsRef(p, ldp, n_q, scale.data(), min.data(), n_rows, ng, n_rows, w.data(),
                            n_rows, msum);
  AxpyPackedRowsWeightedI16Ref(w.data(), n_q, n_rows, codes, n_rows, d / 2, 4, d, 0, 32, out);
}

bool HasFusedQ8_0ValueKernel(size_t d, size_t n_rows) {
  return d == 64 && IntegerPathApplies(d, 0, 32) && n_rows <= kPackedTileRowsMax;
}

void AccumulateQ8_0RowsI16(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                           const int8_t* codes, size_t n_rows, size_t d, float* out) {
  if (n_rows == 0 || n_q == 0) return;
  if (HasFusedQ8_0ValueKernel(d, n_rows)) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(codes);
#if KVPACK_HAVE_VNNI_KERNEL
    if (UseVnniKernel()) {
      AccumulatePackedRowsAvx512<TileParams::kQ8_0Scales>(p, ldp, n_q, scales, 2, 0, 2, bytes,
                                                          n_rows, d, kSignedBytes, d, 0, 32, out,
                                                          nullptr);
      return;
    }
#endif
    AccumulateTileI16Avx2(p, ldp, n_q, scales, TileScales::kQ8_0, 2, 0, 2, bytes,
                          kSignedByteCodes, n_rows, d, d, 0, 32, out, nullptr);
    return;
  }
  AccumulateQ8_0RowsI16Ref(p, ldp, n_q, scales, codes, n_rows, d, out);
}

void AccumulateQ8_0RowsI16Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                              const int8_t* codes, size_t n_rows, size_t d, float* out) {
  const size_t ng = d / 32;
  std::vector<float> w(n_rows);
  std::vector<int16_t> wq(n_rows + 1);
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t g = 0; g < ng; ++g) {
      for (size_t k = 0; k < n_rows; ++k) w[k] = p[i * ldp + k] * Fp16ToFp32(scales[k * ng + g]);
      const float s = QuantizeWeightsI16Scalar(w.data(), n_rows, wq.data());
      for (size_t c = 32 * g; c < 32 * g + 32; ++c) {
        int64_t acc = 0;
        for (size_t k = 0; k < n_rows; ++k) acc += int64_t{wq[k]} * codes[k * d + c];
        out[i * d + c] = std::fma(s, static_cast<float>(acc), out[i * d + c]);
      }
    }
  }
}

bool HasPackedInt16ValueKernel(int bits, size_t d, size_t first, size_t group) {
  // The AVX2 kernel reads 4- and 8-bit rows (2-bit windows are unpacked for its byte form).
  const bool width = bits == 4 || bits == 8 || (bits == 2 && UseVnniKernel());
  return width && IntegerPathApplies(d, first, group);
}

void AxpyPackedRowsWeightedI16(const float* w, size_t n_q, size_t ld, const uint8_t* rows,
                               size_t n_rows, size_t row_bytes, int bits, size_t d,
                               size_t first, size_t group, float* out) {
  if (n_rows > 0 && HasPackedInt16ValueKernel(bits, d, first, group)) {
#if KVPACK_HAVE_VNNI_KERNEL
    if (UseVnniKernel()) {
      AxpyI16Avx512(w, n_q, ld, rows + first * bits / 8, bits, n_rows, row_bytes, d, first,
                    group, out);
      return;
    }
#endif
    AxpyWeightedI16Avx2(w, n_q, ld, rows + first * bits / 8, bits, n_rows, row_bytes, d, first,
                        group, out);
    return;
  }
  thread_local std::vector<uint8_t> codes;
  codes.resize(n_rows * d);
  UnpackCodeRows(rows, nullptr, n_rows, row_bytes, static_cast<int64_t>(first), d, bits,
                 codes.data());
  AxpyCodeRowsWeightedI16(w, n_q, ld, codes.data(), n_rows, d, d, first, group, out);
}

void AxpyPackedRowsWeightedI16Ref(const float* w, size_t n_q, size_t ld, const uint8_t* rows,
                                  size_t n_rows, size_t row_bytes, int bits, size_t d,
                                  size_t first, size_t group, float* out) {
  std::vector<uint8_t> codes(n_rows * d);
  UnpackCodeRowsRef(rows, nullptr, n_rows, row_bytes, static_cast<int64_t>(first), d, bits,
                    codes.data());
  AxpyCodeRowsWeightedI16Ref(w, n_q, ld, codes.data(), n_rows, d, d, first, group, out);
}

void AxpyCodeRowsWeightedI16Ref(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                                size_t n_rows, size_t row_stride, size_t d, size_t first,
                                size_t group, float* out) {
  const size_t ng = GroupsOfWindow(first, d, group), g_first = first / group;
  std::vector<int16_t> wq(n_rows + 1);
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t g = 0; g < ng; ++g) {
      const float s = QuantizeWeightsI16Scalar(w + (i * ng + g) * ld, n_rows, wq.data());
      for (size_t c = 0; c < d; ++c) {
        if ((first + c) / group - g_first != g) continue;
        int64_t acc = 0;
        for (size_t k = 0; k < n_rows; ++k) acc += int64_t{wq[k]} * codes[k * row_stride + c];
        out[i * d + c] = std::fma(s, static_cast<float>(acc), out[i * d + c]);
      }
    }
  }
}

}  // namespace kvpack
