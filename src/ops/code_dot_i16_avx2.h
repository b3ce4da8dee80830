// The AVX2 form of ops/code_dot_i16.h's integer value kernels (int16 weights), for CPUs with
// AVX2, FMA and F16C but without AVX512-VNNI + VBMI (Zen 3, most laptops), chosen at run time
// by the dispatchers there. Internal to ops/.
//
// Design: `vpmaddwd` in place of VNNI's `vpdpwssd`. Each 32-bit lane holds two rows' codes of
// one channel as int16 and meets the pair (wq_k, wq_k+1) of the rows' quantized weights; a
// `vpaddd` adds the two products to the lane's int32 sum. That is 16 products per multiply
// and add, against 8 per float FMA, and the codes are widened in registers: the two rows'
// bytes interleaved, zero- or sign-extended to 16 bits, and for 4-bit rows masked to the low
// nibble or shifted to the high one (the even and the odd channels, put back in order once
// per tile), where the float path unpacks a tile to bytes and converts every code to a float.
// A pass takes up to three query rows and 16 channels (6 accumulators; with 32, GCC spilled
// some). The integers are the twins' and each output gets the same one fused multiply-add, so
// the results are bit for bit the twins' (ops/code_dot_i16.h).
// Non-goals: 2-bit packed rows (the 2-bit heads take ops/value_dot_i8_avx2.h; other 2-bit
// windows are unpacked and take the byte form here), windows or groups not aligned to 16
// channels.
#ifndef KVPACK_OPS_CODE_DOT_I16_AVX2_H_
#define KVPACK_OPS_CODE_DOT_I16_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// The forms of code rows: kUnsignedByteCodes, one byte per code (an unpacked tile, or 8-bit
// packed rows); kNibbleCodes, two 4-bit codes per byte, LSB first; kSignedByteCodes, q8_0's
// signed bytes.
constexpr int kUnsignedByteCodes = 8;
constexpr int kNibbleCodes = 4;
constexpr int kSignedByteCodes = -8;

// Whether the CPU has what the kernels need (AVX2, FMA, F16C).
bool CpuHasAvx2Int16ValueKernel();

// AxpyCodeRowsWeightedI16's contract (ops/code_dot_i16.h) for one of the forms above, d,
// first and group multiples of 16, n_rows <= 256: the weights w [n_q, ng, ld] quantized per
// (query row, group), then the integer sums. codes: the window's first byte of row 0.
void AxpyWeightedI16Avx2(const float* w, size_t n_q, size_t ld, const uint8_t* codes, int form,
                         size_t n_rows, size_t row_stride, size_t d, size_t first, size_t group,
                         float* out);

// The fused tile of AccumulatePackedRowsI16 (n_rows <= 64, n_groups <= 4; params: fp16
// (scale, min) pairs [n_rows, n_groups, 2]) and of AccumulateQ4_0RowsI16 / AccumulateQ8_0RowsI16
// (params: two fp16 scales per row, groups of 32 channels of a 64-channel head; min = -8
// scale, or none: msum may then be null). codes: row 0's first byte (of the row, not the
// window).
enum class TileScales { kPairs, kQ4_0, kQ8_0 };
void AccumulateTileI16Avx2(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                           TileScales scales, size_t n_groups, size_t g0, size_t ng,
                           const uint8_t* codes, int form, size_t n_rows, size_t row_bytes,
                           size_t d, size_t first, size_t group, float* out, float* msum);

}  // namespace kvpack

#endif  // KVPACK_OPS_CODE_DOT_I16_AVX2_H_
