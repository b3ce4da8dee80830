// Kernels that expand packed quantization codes (kv/codecs/quant_common.h's LSB-first bit
// streams) and dequantize them to floats, SIMD through Highway with runtime dispatch, each
// with a scalar twin (`...Ref`) that the tests compare against (tests/unit/ops_code_unpack_test.cc).
//
// Design goals: the quantized KV codecs expand one tile of cached rows at a time into a small
// L1-resident float buffer and hand it to the tile dot/axpy kernels of vec.h, so the cost of
// reading a compressed cache is its bytes plus a few vector instructions per value.
// Non-goals: arbitrary bit offsets on the SIMD path (only streams starting on a byte
// boundary with 2, 4 or 8 bits are vectorised; everything else takes the scalar path).
#ifndef KVPACK_OPS_CODE_UNPACK_H_
#define KVPACK_OPS_CODE_UNPACK_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// dst[i] = code first + i of the b-bit stream at src (bit (first + i) * b, LSB first), 1 <= b <= 8.
void UnpackCodesU8(const uint8_t* src, int64_t first, size_t n, int bits, uint8_t* dst);
void UnpackCodesU8Ref(const uint8_t* src, int64_t first, size_t n, int bits, uint8_t* dst);

// A window of rows in one call: dst[r * n + i] = code first + i of row r, the row at
// src + rows[r] * row_bytes (rows == null: row r). One dispatch per tile instead of one per
// row (a window that is not the whole row, e.g. one head of a row spanning all heads).
void UnpackCodeRows(const uint8_t* src, const int64_t* rows, size_t n_rows, size_t row_bytes,
                    int64_t first, size_t n, int bits, uint8_t* dst);
void UnpackCodeRowsRef(const uint8_t* src, const int64_t* rows, size_t n_rows, size_t row_bytes,
                       int64_t first, size_t n, int bits, uint8_t* dst);

// Per-(row, group) fp16 parameter pairs (params: [n_rows, n_groups, 2], (scale, min)) as
// float planes by group, for groups [g0, g0 + ng):
//   scale[g * ld + r] = params[r, g0 + g, 0],  min[g * ld + r] = params[r, g0 + g, 1].
// SIMD de-interleaving for one or two groups per row; other shapes take the scalar loop.
void SplitGroupParams(const uint16_t* params, size_t n_rows, size_t n_groups, size_t g0,
                      size_t ng, float* scale, float* min, size_t ld);
void SplitGroupParamsRef(const uint16_t* params, size_t n_rows, size_t n_groups, size_t g0,
                         size_t ng, float* scale, float* min, size_t ld);

// out[i] = codes[i] * scale + min
void DequantizeCodes(const uint8_t* codes, size_t n, float scale, float min, float* out);
void DequantizeCodesRef(const uint8_t* codes, size_t n, float scale, float min, float* out);

// out[i] = codes[i] * scale[i] + min[i]   (per-channel parameters)
void DequantizeCodesPerChannel(const uint8_t* codes, size_t n, const float* scale,
                               const float* min, float* out);
void DequantizeCodesPerChannelRef(const uint8_t* codes, size_t n, const float* scale,
                                  const float* min, float* out);

// Whole tiles in one dispatch (the codecs' hot path). Row r's packed codes start at
// codes + r * row_bytes.
//   Per-channel parameters shared by all rows (a KIVI key block):
//     out[r * d + c] = code(r, c) * scale[c] + min[c]                       out: [n_rows, d]
void DequantizeRowsPerChannel(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                              size_t d, const float* scale, const float* min, float* out);
void DequantizeRowsPerChannelRef(const uint8_t* codes, size_t n_rows, size_t row_bytes,
                                 int bits, size_t d, const float* scale, const float* min,
                                 float* out);
//   Per-token groups of `group` channels, fp16 (scale, min) pairs per row and group
//   (params: [n_rows, n_groups, 2]); channels [first, first + n) of every row:
//     out[r * n + j] = code(r, first + j) * scale(r, g) + min(r, g), g = (first + j) / group
void DequantizeRowsPerToken(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                            size_t first, size_t n, size_t group, const uint16_t* params,
                            size_t n_groups, float* out);
void DequantizeRowsPerTokenRef(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                               size_t first, size_t n, size_t group, const uint16_t* params,
                               size_t n_groups, float* out);

// ggml blocks of 32 values (ggml-common.h layouts): q8_0 = fp16 d + 32 int8 (x = d * q);
// q4_0 = fp16 d + 16 bytes, value j < 16 in the low nibble of byte j and value j + 16 in its
// high nibble (x = d * (nibble - 8)).  blocks: [n_blocks]; out: [n_blocks * 32].
void DequantizeQ8_0Blocks(const uint8_t* blocks, size_t n_blocks, float* out);
void DequantizeQ4_0Blocks(const uint8_t* blocks, size_t n_blocks, float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_CODE_UNPACK_H_
