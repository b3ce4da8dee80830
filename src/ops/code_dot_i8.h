// Integer dot products of unpacked quantization codes with an int8-quantized query: the key
// side of attention over 2- and 4-bit caches. llama.cpp does the same for its quantized
// K cache on CPU (the query is quantized to q8 before vec_dot_q4_0_q8_0); here the query is
// quantized symmetrically per (query row, key block) and the codecs add the scale/min terms
// in float (kv/codecs/quant_common.cc, token_group_rows.cc, channel_blocks.cc).
//
// Design goals: no per-row horizontal sums in the hot loop. On AVX-512 each code row is
// multiplied with the query 64 bytes at a time (vpmaddubsw + vpmaddwd: four code x query
// products per 32-bit lane) and 16 rows are reduced together by a transpose-and-add tree, so
// one output vector holds 16 rows' sums; AVX2 does the same 32 bytes at a time with 8 rows
// per tree (group sizes that are multiples of 32). The result is exact integer arithmetic: the SIMD
// path, the scalar path and the scalar twin agree bit for bit, whatever the target.
// Non-goals: codes above 127 (8-bit codecs keep the float kernels of ops/code_dot.h: an int8
// query would add an error as large as their own); a fast path for non-x86 targets (they
// run the scalar loop, which the compiler vectorises as it can).
#ifndef KVPACK_OPS_CODE_DOT_I8_H_
#define KVPACK_OPS_CODE_DOT_I8_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Symmetric int8 quantization: alpha = max|x| / 127, q[i] = round(x[i] / alpha) in [-127, 127]
// (all zero and alpha = 0 when x is zero). |x[i] - alpha * q[i]| <= alpha * (1/2 + 2^-16).
//   x: [n]; q: [n]. Returns alpha.
float QuantizeI8(const float* x, size_t n, int8_t* q);
float QuantizeI8Ref(const float* x, size_t n, int8_t* q);

// The query of 8-bit codes (up to 255), where an int8 query's error would be as large as the
// codes' own: symmetric int16, alpha = max|x| / 32767, q[i] = round(x[i] / alpha) in
// [-32767, 32767] (all zero and alpha = 0 when x is zero); |x[i] - alpha * q[i]| <=
// alpha * (1/2 + 2^-7) (the half step, plus three float roundings, of 32767 / max|x|, of the
// product and of alpha, each below 2^-9 of alpha). 258 times finer than QuantizeI8; the dots take
// vpdpwssd over the codes widened to 16 bits (ops/packed_scores.h). x: [n]; q: [n].
float QuantizeI16(const float* x, size_t n, int16_t* q);
float QuantizeI16Ref(const float* x, size_t n, int16_t* q);

// QuantizeI8 of each row of x times scale (elementwise, the per-channel scales of a key
// block folded into the query), n_q rows in one call (their dependency chains, a horizontal
// max and a division each, overlap): alpha[i] = QuantizeI8(x_i * scale, q_i), and
// xmin[i] = dot(x_i, min).  x, q: [n_q, n]; scale, min: [n]; alpha, xmin: [n_q].
void ScaleQuantizeI8(const float* x, size_t n_q, const float* scale, const float* min, size_t n,
                     int8_t* q, float* alpha, float* xmin);
// The same with a key block's fp16 parameters (params: [2, n], the per-channel scales, then
// the mins; ops/packed_scores.h's ScoreChannelBlocksI8).
void ScaleQuantizeBlockQueryI8(const float* x, size_t n_q, const uint16_t* params, size_t n,
                               int8_t* q, float* alpha, float* xmin);

// Per query row i, group g of `group` consecutive channels (the last may be shorter) and row t:
//   out[(i * n_groups + g) * ld + t] = sum_{c in g} q[i * d + c] * codes[t * row_stride + c]
//   codes: [n_rows, row_stride] (first d used, every code <= 127); q: [n_q, d];
//   n_groups = ceil(d / group); out: [n_q, n_groups, ld].
// Exact (int32) while d * 127 * 127 < 2^31.
void DotCodeRowsI8(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                   size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld);
void DotCodeRowsI8Ref(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                      size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld);

// Scores from the integer dots of a tile of m rows with per-(row, group) scale and min:
//   scores[i * ld + k] = sum_g (alpha[i] * scale[g * pld + k]) * dots[(i * ng + g) * pld + k]
//                        + min[g * pld + k] * qsum[i * ng + g]
// (qsum: the float query summed over group g). Every row is computed by the same vector
// code whatever its position in the tile (rows past m are computed and dropped), so a
// score never depends on tiling. dots, scale and min hold pld >= m rounded up to the vector
// length entries per (query, group) / group; the entries past m may be anything finite or not.
void CombineCodeDots(const int32_t* dots, const float* scale, const float* min, size_t pld,
                     size_t m, size_t n_q, size_t ng, const float* alpha, const float* qsum,
                     float* scores, size_t ld);
void CombineCodeDotsRef(const int32_t* dots, const float* scale, const float* min, size_t pld,
                        size_t m, size_t n_q, size_t ng, const float* alpha, const float* qsum,
                        float* scores, size_t ld);
// Padding CombineCodeDots needs: pld must be a multiple of this (64 bytes of floats).
constexpr size_t kCombinePad = 16;

}  // namespace kvpack

#endif  // KVPACK_OPS_CODE_DOT_I8_H_
