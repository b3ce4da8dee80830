// Integer dot products of an int8 query with 2- or 4-bit codes read straight from their packed
// rows (kv/codecs/quant_common.h's LSB-first bit streams): the key side of attention over the
// KIVI / KCVT / FlexGen / HF caches when one (scale, min) group covers the whole row window.
// The result is exactly ops/code_dot_i8.h's DotCodeRowsI8 of the unpacked codes (one group),
// so the codecs may use either; this one never writes the byte-per-code tile.
//
// Design goals: no unpacking pass and no per-row horizontal sums. A 32-bit lane of a packed
// row holds 4k codes (k = 8 / bits per byte). Shifting the lane right by bits * s and masking
// each byte to its low `bits` bits leaves, in byte j, the code of channel 4k m + k j + s (m =
// the lane's index in the row), so a u8 x s8 four-product dot (vpmaddubsw + vpmaddwd, or one
// vpdpbusd where the CPU has AVX512-VNNI) against the query rearranged in the same order
// (ArrangeQueryForPacked, once per query) adds that lane's share of the row's dot. Rows are
// loaded 64 bytes at a time as they lie in memory and the W = row_bytes / 4 lanes of each
// row are summed by an order-keeping pairwise tree, 16 rows per output vector.
// Non-goals: windows narrower than a row, several groups per row, rows with padding bits, or
// row widths other than 16, 32 or 64 bytes on the SIMD path: those unpack the codes and call
// DotCodeRowsI8 (same integers). Only the AVX-512 targets have a fast path.
#ifndef KVPACK_OPS_PACKED_DOT_I8_H_
#define KVPACK_OPS_PACKED_DOT_I8_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// The int8 query in the order DotPackedRowsI8 reads it, k = 8 / bits, d % (4k) == 0:
//   qp[i * d + s * (d / k) + 4 m + j] = q[i * d + 4 k m + k j + s]     q, qp: [n_q, d].
// Any other d (or bits other than 2 and 4) copies q unchanged (the fallback reads q).
void ArrangeQueryForPacked(const int8_t* q, size_t n_q, size_t d, int bits, int8_t* qp);

// out[i * ld + t] = sum_{c < d} q[i * d + c] * code(t, c), code(t, c) = the c-th `bits`-bit
// code of the packed row at rows + t * row_bytes (every code <= 127).
//   rows: [n_rows, row_bytes] with row_bytes >= ceil(d * bits / 8); q, qp: [n_q, d] (qp from
//   ArrangeQueryForPacked); out: [n_q, ld]. Exact (int32) while d * 127 * 127 < 2^31.
void DotPackedRowsI8(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                     const int8_t* q, const int8_t* qp, size_t n_q, int32_t* out, size_t ld);
// The scalar twin: reads each code's bits one by one.
void DotPackedRowsI8Ref(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                        const int8_t* q, size_t n_q, int32_t* out, size_t ld);

}  // namespace kvpack

#endif  // KVPACK_OPS_PACKED_DOT_I8_H_
