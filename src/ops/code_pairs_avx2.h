// The integer dots of packed 2/4-bit code rows with an int8 query on AVX2 (no VNNI), and of
// 8-bit rows with an int16 query (one `vpmaddwd` per 8 channels of two rows), shared by
// the AVX2 key kernels (ops/token_row_scores_avx2.h: per-token rows; ops/channel_block_scores_
// avx2.h: per-channel blocks). Internal to ops/; include only from code compiled for AVX2 (a
// function attribute on the caller).
//
// Two rows per register, 16 bytes of each (row t in the low 128-bit half, row t + 1 in the high
// one). A shift by `bits` s and a mask leave in byte j the code of channel k j + s (k = 8 /
// bits codes per byte); the query, arranged once (ArrangeQueryBySlot) so that its slot s holds
// those channels in the same bytes, meets them in one `vpmaddubsw` per slot and query row:
// int16 pairs of at most 2 x 15 x 127, added over a 16-byte chunk's slots in int16 (at most
// 4 x 2 x 3 x 127 or 2 x 2 x 15 x 127: exact) and widened by one `vpmaddwd`. Eight rows' lane
// sums are then reduced together. Every dot is exact (int32).
#ifndef KVPACK_OPS_CODE_PAIRS_AVX2_H_
#define KVPACK_OPS_CODE_PAIRS_AVX2_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace kvpack {

constexpr size_t kCodeChunkBytes = 16;  // bytes of a row per 128-bit half

// Storage of one arranged query vector (a std::vector of __m256i drops its attributes).
struct alignas(32) ArrangedQueryVec {
  int8_t bytes[32];
};

// acc += the int16 products of u (unsigned bytes) and s (signed bytes), pairs summed
// (`vpmaddubsw`, then `vpaddw`), the add kept next to its multiply by an empty asm that holds
// acc in a register there. Without it GCC 12 may compute all the products of a step before
// any add and keep most accumulators on the stack: in the 2-bit value kernel (ops/value_dot_i8_
// avx2.cc) ten of twelve, a load and a store each per row pair (docs/performance-history.md,
// session 42).
__attribute__((target("avx2"), always_inline)) inline void AddPairProducts(__m256i& acc, __m256i u,
                                                                           __m256i s) {
  acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
  asm volatile("" : "+x"(acc));
}

// Query row i's slot s of chunk c (32 bytes, both halves alike): byte j holds channel
// k (16 c + j) + s of q8 (k = 8 / bits), the channel whose code byte 16 c + j holds in slot s.
// q8: [n_q, d] (d a multiple of 64); qa: [n_q, d * bits / 8 / 16, k] vectors.
// 2 bits: a chunk is 64 channels, four 16-byte pieces; one byte shuffle per piece groups its
// bytes by slot (dword s: slot s), a 4 x 4 transpose of dwords gathers each slot. 4 bits: a
// chunk is 32 channels, two pieces; the shuffle puts slot 0 in the low 8 bytes, slot 1 in the
// high ones.
__attribute__((target("avx2"))) inline void ArrangeQueryBySlot(const int8_t* q8, size_t n_q,
                                                               size_t d, int bits, __m256i* qa) {
  const auto piece = [](const int8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  };
  for (size_t i = 0; i < n_q; ++i) {
    const int8_t* qi = q8 + i * d;
    if (bits == 2) {
      const __m128i by_slot = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      for (size_t c = 0; c < d / 64; ++c) {
        __m128i p[4];
        for (int m = 0; m < 4; ++m) p[m] = _mm_shuffle_epi8(piece(qi + 64 * c + 16 * m), by_slot);
        const __m128i t0 = _mm_unpacklo_epi32(p[0], p[1]), t1 = _mm_unpackhi_epi32(p[0], p[1]);
        const __m128i t2 = _mm_unpacklo_epi32(p[2], p[3]), t3 = _mm_unpackhi_epi32(p[2], p[3]);
        const __m128i slot[4] = {_mm_unpacklo_epi64(t0, t2), _mm_unpackhi_epi64(t0, t2),
                                 _mm_unpacklo_epi64(t1, t3), _mm_unpackhi_epi64(t1, t3)};
        for (int s = 0; s < 4; ++s) {
          _mm256_storeu_si256(&qa[(i * (d / 64) + c) * 4 + s],
                              _mm256_broadcastsi128_si256(slot[s]));
        }
      }
    } else {
      const __m128i by_slot = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
      for (size_t c = 0; c < d / 32; ++c) {
        const __m128i p0 = _mm_shuffle_epi8(piece(qi + 32 * c), by_slot);
        const __m128i p1 = _mm_shuffle_epi8(piece(qi + 32 * c + 16), by_slot);
        _mm256_storeu_si256(&qa[(i * (d / 32) + c) * 2],
                            _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(p0, p1)));
        _mm256_storeu_si256(&qa[(i * (d / 32) + c) * 2 + 1],
                            _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(p0, p1)));
      }
    }
  }
}

// Rows r and r + 1 (row_bytes apart, n_chunks chunks each from r) against query rows [0, NQ)
// (qa as ArrangeQueryBySlot's, from the same chunk, q_stride vectors from one query row to the
// next): lane l of acc[i] sums the products of row r's (l < 4) or row r + 1's (l >= 4) bytes
// 4 (l % 4) .. + 3 of every chunk.
// 8-bit codes (one unsigned byte per channel) take an int16 query instead, two vectors per
// chunk: channels 16 c .. 16 c + 7, then 16 c + 8 .. 16 c + 15, each repeated in both halves;
// lane l of acc[i] then sums row r's (l < 4) or row r + 1's (l >= 4) channel pairs 2 (l % 4)
// and 8 + 2 (l % 4) (+ 1) of every chunk, exact for d <= 256 (d x 255 x 32767 < 2^31).
template <size_t NQ, int kBits>
__attribute__((target("avx2"), always_inline)) inline void PairDots(
    const uint8_t* r, size_t row_bytes, const __m256i* qa, size_t n_chunks, size_t q_stride,
    __m256i (&acc)[NQ]) {
  constexpr int k = 8 / kBits;
  const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << kBits) - 1));
  const __m256i ones = _mm256_set1_epi16(1);
  for (size_t i = 0; i < NQ; ++i) acc[i] = _mm256_setzero_si256();
  for (size_t c = 0; c < n_chunks; ++c) {
    const __m256i x = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + kCodeChunkBytes * c))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + row_bytes + kCodeChunkBytes * c)), 1);
    if constexpr (kBits == 8) {
      // Bytes 0-7 and 8-15 of each half widened to 16 bits, against the int16 query's
      // channels 16 c .. 16 c + 7 and 16 c + 8 .. 16 c + 15 (both halves alike).
      const __m256i lo = _mm256_unpacklo_epi8(x, _mm256_setzero_si256());
      const __m256i hi = _mm256_unpackhi_epi8(x, _mm256_setzero_si256());
      for (size_t i = 0; i < NQ; ++i) {
        const __m256i* q = qa + i * q_stride + 2 * c;
        acc[i] = _mm256_add_epi32(
            acc[i], _mm256_add_epi32(_mm256_madd_epi16(lo, q[0]), _mm256_madd_epi16(hi, q[1])));
      }
      continue;
    }
    __m256i m16[NQ];
    for (size_t i = 0; i < NQ; ++i) m16[i] = _mm256_setzero_si256();
    for (int s = 0; s < k; ++s) {
      const __m256i v = _mm256_and_si256(_mm256_srli_epi16(x, kBits * s), mask);
      for (size_t i = 0; i < NQ; ++i) {
        AddPairProducts(m16[i], v, qa[i * q_stride + c * k + s]);
      }
    }
    for (size_t i = 0; i < NQ; ++i) {
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(m16[i], ones));
    }
  }
}

// The exact dots of rows r .. r + 7 with query rows [0, NQ) over n_chunks chunks (PairDots'
// arguments): dots[i] lane t = row r + t.
template <size_t NQ, int kBits>
__attribute__((target("avx2"), always_inline)) inline void EightRowDots(
    const uint8_t* r, size_t row_bytes, const __m256i* qa, size_t n_chunks, size_t q_stride,
    __m256i (&dots)[NQ]) {
  __m256i p0[NQ], p1[NQ], h01[NQ];
  PairDots<NQ, kBits>(r, row_bytes, qa, n_chunks, q_stride, p0);
  PairDots<NQ, kBits>(r + 2 * row_bytes, row_bytes, qa, n_chunks, q_stride, p1);
  for (size_t i = 0; i < NQ; ++i) h01[i] = _mm256_hadd_epi32(p0[i], p1[i]);
  PairDots<NQ, kBits>(r + 4 * row_bytes, row_bytes, qa, n_chunks, q_stride, p0);
  PairDots<NQ, kBits>(r + 6 * row_bytes, row_bytes, qa, n_chunks, q_stride, p1);
  // Two rounds of pairwise sums leave rows 0, 2, 4, 6 in the low half and 1, 3, 5, 7 in the
  // high one; one dword permutation puts them in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t i = 0; i < NQ; ++i) {
    dots[i] = _mm256_permutevar8x32_epi32(
        _mm256_hadd_epi32(h01[i], _mm256_hadd_epi32(p0[i], p1[i])), order);
  }
}

}  // namespace kvpack

#endif
#endif  // KVPACK_OPS_CODE_PAIRS_AVX2_H_
