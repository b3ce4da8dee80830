// Highway-dispatched implementation of packed_dot_i8.h, compiled once per SIMD target
// (foreach_target). The AVX-512 targets use raw intrinsics (Highway 1.0.3 has no u8 x i8 dot
// product); every other target and shape unpacks the codes and calls DotCodeRowsI8.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/packed_dot_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <vector>

#include "ops/code_dot_i8.h"
#include "ops/code_unpack.h"
#include "ops/packed_dot_i8.h"
#include "ops/prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {

// Rows [t0, t1): unpack a chunk of rows to one byte per code, then the unpacked kernel with
// one group (the same integers as the fast path).
void DotUnpackedRows(const uint8_t* rows, size_t t0, size_t t1, size_t row_bytes, size_t d,
                     int bits, const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  constexpr size_t kChunk = 64;
  thread_local std::vector<uint8_t> codes;
  codes.resize(kChunk * d);
  for (size_t a = t0; a < t1; a += kChunk) {
    const size_t e = std::min(t1, a + kChunk);
    UnpackCodeRows(rows + a * row_bytes, nullptr, e - a, row_bytes, 0, d, bits, codes.data());
    DotCodeRowsI8(codes.data(), e - a, d, d, d, q, n_q, out + a, ld);
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// acc + four u8 x s8 products per 32-bit lane. vpmaddubsw's int16 pairs cannot saturate:
// codes <= 15 and |q| <= 127 give at most 2 * 15 * 127.
HWY_INLINE __m512i DotQuadsAdd(__m512i acc, __m512i codes, __m512i q) {
  return _mm512_add_epi32(
      acc, _mm512_madd_epi16(_mm512_maddubs_epi16(codes, q), _mm512_set1_epi16(1)));
}

// [a0 + a1, a2 + a3, ..., a14 + a15, b0 + b1, ..., b14 + b15]: adjacent lanes summed, order kept.
HWY_INLINE __m512i PairSums(__m512i a, __m512i b) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b),
                          _mm512_permutex2var_epi32(a, odd, b));
}

// The dots of vectors [Z0, Z0 + N) of a 16-row block (N a power of two) for NQ queries,
// reduced by the order-keeping pairwise tree as soon as both halves exist: out[i] lane u then
// sums lanes [u N, (u + 1) N) of the concatenated per-vector dots. Reducing early keeps
// about log2(W) + 1 live accumulators per query instead of W, so that more queries share
// one pass over the codes.
template <int kBits, int NQ, int Z0, int N>
HWY_INLINE void BlockDotTree(const uint8_t* block, const __m512i (&qv)[NQ][8 / kBits],
                             __m512i mask, __m512i (&out)[NQ]) {
  if constexpr (N == 1) {
    constexpr int k = 8 / kBits;  // codes per byte = shift steps
    const __m512i raw = _mm512_loadu_si512(block + 64 * Z0);
#pragma GCC unroll 16
    for (int i = 0; i < NQ; ++i) out[i] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int s = 0; s < k; ++s) {
      // Byte j of lane m now holds the code of channel 4 k m + k j + s (the bits shifted in
      // from the next byte are masked off).
      const __m512i codes =
          _mm512_and_si512(_mm512_srl_epi16(raw, _mm_cvtsi32_si128(kBits * s)), mask);
#pragma GCC unroll 16
      for (int i = 0; i < NQ; ++i) out[i] = DotQuadsAdd(out[i], codes, qv[i][s]);
    }
  } else {
    __m512i lo[NQ], hi[NQ];
    BlockDotTree<kBits, NQ, Z0, N / 2>(block, qv, mask, lo);
    BlockDotTree<kBits, NQ, Z0 + N / 2, N / 2>(block, qv, mask, hi);
#pragma GCC unroll 16
    for (int i = 0; i < NQ; ++i) out[i] = PairSums(lo[i], hi[i]);
  }
}

// Queries [i0, i0 + NQ) against rows [0, n_full) (a multiple of 16) whose packed form is W
// 32-bit lanes (row_bytes = 4 W, 16 / W rows per 64-byte vector).
template <int W, int kBits, int NQ>
void QueriesOverRows(const uint8_t* rows, size_t n_full, const int8_t* qp, size_t d, size_t i0,
                     int32_t* out, size_t ld) {
  constexpr int k = 8 / kBits;  // codes per byte = shift steps
  // The query of (i, s) repeated over the vector: lane u holds dword u % W of its segment.
  __m512i qv[NQ][k];
  const __m512i lane_of = _mm512_set_epi32(15 % W, 14 % W, 13 % W, 12 % W, 11 % W, 10 % W, 9 % W,
                                           8 % W, 7 % W, 6 % W, 5 % W, 4 % W, 3 % W, 2 % W, 1 % W,
                                           0);
#pragma GCC unroll 16
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 16
    for (int s = 0; s < k; ++s) {
      const int8_t* seg = qp + (i0 + i) * d + s * (d / k);
      const __m512i raw = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << W) - 1), seg);
      qv[i][s] = _mm512_permutexvar_epi32(lane_of, raw);
    }
  }
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << kBits) - 1));
  for (size_t t0 = 0; t0 < n_full; t0 += 16) {
    const uint8_t* block = rows + t0 * 4 * W;
    // The hardware prefetcher alone left a 30-layer cache (read from memory) about 8% slower
    // per token than a one-layer one (kv_codec_bench); kPrefetchAheadBytes ahead closes most of it.
#pragma GCC unroll 16
    for (int z = 0; z < W; ++z) {
      PrefetchCodeLine(block + 64 * z + kPrefetchAheadBytes);
    }
    __m512i acc[NQ];
    BlockDotTree<kBits, NQ, 0, W>(block, qv, mask, acc);
#pragma GCC unroll 16
    for (int i = 0; i < NQ; ++i) _mm512_storeu_si512(out + (i0 + i) * ld + t0, acc[i]);
  }
}

// As many queries per pass (at most 4) as keep the live accumulators (NQ x (log2 W + 1)) and
// the query vectors (NQ x k) within AVX-512's 32 registers with room for the codes and
// constants.
constexpr int Log2(int w) { return w <= 1 ? 0 : 1 + Log2(w / 2); }
constexpr int QueriesPerPass(int w, int bits) {
  const int q = 24 / (Log2(w) + 1 + 8 / bits);
  return q < 1 ? 1 : (q > 4 ? 4 : q);
}

template <int W, int kBits>
void DotPackedFast(const uint8_t* rows, size_t n_full, const int8_t* qp, size_t d, size_t n_q,
                   int32_t* out, size_t ld) {
  constexpr int kQ = QueriesPerPass(W, kBits);
  size_t i = 0;
  for (; i + kQ <= n_q; i += kQ) QueriesOverRows<W, kBits, kQ>(rows, n_full, qp, d, i, out, ld);
  // The rest (fewer than kQ) in one pass (a GQA group of 3 with kQ = 4 is one pass, not 3).
  switch (n_q - i) {
    case 3:
      if constexpr (kQ > 3) QueriesOverRows<W, kBits, 3>(rows, n_full, qp, d, i, out, ld);
      break;
    case 2:
      if constexpr (kQ > 2) QueriesOverRows<W, kBits, 2>(rows, n_full, qp, d, i, out, ld);
      break;
    case 1:
      QueriesOverRows<W, kBits, 1>(rows, n_full, qp, d, i, out, ld);
      break;
    default:
      break;
  }
}

// The fast path for rows [0, n_full) when the shape has one; returns the rows it did.
size_t DotPackedAvx512(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                       const int8_t* qp, size_t n_q, int32_t* out, size_t ld) {
  if ((bits != 2 && bits != 4) || row_bytes * 8 != d * static_cast<size_t>(bits)) return 0;
  const size_t n_full = n_rows / 16 * 16;
  if (n_full == 0) return 0;
  const bool two = bits == 2;
  switch (row_bytes) {
    case 16:
      two ? DotPackedFast<4, 2>(rows, n_full, qp, d, n_q, out, ld)
          : DotPackedFast<4, 4>(rows, n_full, qp, d, n_q, out, ld);
      return n_full;
    case 32:
      two ? DotPackedFast<8, 2>(rows, n_full, qp, d, n_q, out, ld)
          : DotPackedFast<8, 4>(rows, n_full, qp, d, n_q, out, ld);
      return n_full;
    case 64:
      two ? DotPackedFast<16, 2>(rows, n_full, qp, d, n_q, out, ld)
          : DotPackedFast<16, 4>(rows, n_full, qp, d, n_q, out, ld);
      return n_full;
    default:
      return 0;
  }
}
#endif

void ArrangeQueryScalar(const int8_t* q, size_t n_q, size_t d, int bits, int8_t* qp) {
  const size_t k = bits > 0 ? 8 / static_cast<size_t>(bits) : 0;
  if ((bits != 2 && bits != 4) || d % (4 * k) != 0) {
    std::copy_n(q, n_q * d, qp);
    return;
  }
  // The source channel of each position, built once per (d, bits) and thread (KIVI arranges
  // a query for every key block of R tokens, so the index arithmetic must not be redone).
  thread_local std::vector<uint16_t> from;
  thread_local size_t from_d = 0;
  thread_local int from_bits = 0;
  if (from_d != d || from_bits != bits) {
    from.resize(d);
    for (size_t m = 0; m < d / (4 * k); ++m) {
      for (size_t j = 0; j < 4; ++j) {
        for (size_t s = 0; s < k; ++s) {
          from[s * (d / k) + 4 * m + j] = static_cast<uint16_t>(4 * k * m + k * j + s);
        }
      }
    }
    from_d = d;
    from_bits = bits;
  }
  for (size_t i = 0; i < n_q; ++i) {
    const int8_t* src = q + i * d;
    int8_t* dst = qp + i * d;
    for (size_t c = 0; c < d; ++c) dst[c] = src[from[c]];
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// d = 64: one vector per query row. A byte shuffle inside each 128-bit block puts the four
// bytes of each (m, s) dword together (block L, dword s' of it), then a dword permutation
// moves them to their segment; see ArrangeQueryForPacked for the order.
void ArrangeQuery64(const int8_t* q, size_t n_q, int bits, int8_t* qp) {
  __m512i shuffle, order;
  if (bits == 2) {  // block m holds channels 16m..16m+15; dword s of it = (m, s)
    shuffle = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  } else {  // block L holds m = 2L, 2L + 1; dword 2s + h of it = (2L + h, s)
    shuffle = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    order = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  }
  for (size_t i = 0; i < n_q; ++i) {
    const __m512i v = _mm512_shuffle_epi8(_mm512_loadu_si512(q + i * 64), shuffle);
    _mm512_storeu_si512(qp + i * 64, _mm512_permutexvar_epi32(order, v));
  }
}
#endif

void ArrangeQueryForPackedImpl(const int8_t* q, size_t n_q, size_t d, int bits, int8_t* qp) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (d == 64 && (bits == 2 || bits == 4)) {
    ArrangeQuery64(q, n_q, bits, qp);
    return;
  }
#endif
  ArrangeQueryScalar(q, n_q, d, bits, qp);
}

void DotPackedRowsI8Impl(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                         const int8_t* q, const int8_t* qp, size_t n_q, int32_t* out, size_t ld) {
  size_t done = 0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  done = DotPackedAvx512(rows, n_rows, row_bytes, d, bits, qp, n_q, out, ld);
#else
  (void)qp;
#endif
  if (done < n_rows) DotUnpackedRows(rows, done, n_rows, row_bytes, d, bits, q, n_q, out, ld);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvpack {
HWY_EXPORT(DotPackedRowsI8Impl);
HWY_EXPORT(ArrangeQueryForPackedImpl);

void ArrangeQueryForPacked(const int8_t* q, size_t n_q, size_t d, int bits, int8_t* qp) {
  HWY_DYNAMIC_DISPATCH(ArrangeQueryForPackedImpl)(q, n_q, d, bits, qp);
}

void DotPackedRowsI8(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                     const int8_t* q, const int8_t* qp, size_t n_q, int32_t* out, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotPackedRowsI8Impl)(rows, n_rows, row_bytes, d, bits, q, qp, n_q, out, ld);
}

void DotPackedRowsI8Ref(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                        const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t t = 0; t < n_rows; ++t) {
      const uint8_t* row = rows + t * row_bytes;
      int64_t acc = 0;
      for (size_t c = 0; c < d; ++c) {
        int code = 0;
        for (int b = 0; b < bits; ++b) {
          const size_t bit = c * bits + b;
          code |= ((row[bit / 8] >> (bit % 8)) & 1) << b;
        }
        acc += static_cast<int64_t>(q[i * d + c]) * code;
      }
      out[i * ld + t] = static_cast<int32_t>(acc);
    }
  }
}

}  // namespace kvpack
#endif  // HWY_ONCE
