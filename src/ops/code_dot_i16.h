// The value side of attention over 2-, 4- and 8-bit caches with integer weights: the weights of
// a tile (probability x the row's group scale) are quantized to int16 per (query row, group)
// and multiplied with the codes by AVX512-VNNI `vpdpwssd` (two rows' codes of one channel
// per 32-bit lane, 32 products per instruction against 16 per float FMA, and no conversion
// of the codes to floats). Compare ops/code_dot.h's AxpyCodeRowsWeighted, whose contract
// this keeps up to the bound below.
//
// Design goals: the float value path was the largest share of a 2-bit codec's attention
// (12 FMAs per cached token and KV head for three query rows, as many as `f16`'s); this
// halves the multiply work and drops the conversions. The error is bounded and small: per
// (query row i, group g) the step is s = max_k |w_k| / 32767, each weight moves by at most
// s / 2, so an output moves by at most s / 2 * sum_k code_k (2^-16 of the tile's largest
// weight per unit of code), plus one float rounding of the result. Against the codes' own
// error (up to half a step, |w_k| / 2 in these units, per term) that is small even for 8-bit
// codes (up to 255): with the weight on one row, per term at most 255 / 65534 of the largest
// weight, 1/128 of that row's own bound; with the weight spread evenly over a tile of 64 rows,
// a root-mean-square error ~200 times below the codes'.
// CPUs with AVX2 but without AVX512-VNNI + VBMI run the same integer sums with `vpmaddwd`
// (ops/code_dot_i16_avx2.h; 16 products per multiply, 4- and 8-bit packed rows and bytes).
// Non-goals: CPUs without either, windows not aligned to 16 channels, or groups not a multiple
// of 16: those run AxpyCodeRowsWeighted (float weights, no such error).
#ifndef KVPACK_OPS_CODE_DOT_I16_H_
#define KVPACK_OPS_CODE_DOT_I16_H_

#include <cstddef>

#include <cstdint>

namespace kvpack {

// Whether AxpyCodeRowsWeightedI16 has its integer path here (CPU features and the SIMD
// targets allowed; tests restrict those with hwy::SetSupportedTargetsForTest).
bool HasInt16ValueKernel();

// AxpyCodeRowsWeighted's contract (ops/code_dot.h: w [n_q, n_groups, ld], codes [n_rows,
// row_stride], window [first, first + d), out [n_q, d]) with the weights quantized as above,
// where the integer path applies; codes <= 255, n_rows <= 256.
void AxpyCodeRowsWeightedI16(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                             size_t n_rows, size_t row_stride, size_t d, size_t first,
                             size_t group, float* out);
// The integer path's scalar twin (bit-identical to it: same quantized weights, exact integer
// sums, one fused multiply-add per output); any shape.
void AxpyCodeRowsWeightedI16Ref(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                                size_t n_rows, size_t row_stride, size_t d, size_t first,
                                size_t group, float* out);

// The same with the codes read straight from packed LSB-first rows (row k at
// rows + k * row_bytes, `bits` 2, 4 or 8; window [first, first + d) of each row), so that no
// unpacked tile is written: the pair of two rows' bytes is picked as before, then each code
// of 2 or 4 bits is shifted down by its bit offset and masked (8-bit codes are the bytes
// themselves; the packed form adds the prefetch of rows that stream from memory). Other
// widths and shapes (and 2-bit rows on the AVX2 kernel) unpack the window and call
// AxpyCodeRowsWeightedI16.
bool HasPackedInt16ValueKernel(int bits, size_t d, size_t first, size_t group);
void AxpyPackedRowsWeightedI16(const float* w, size_t n_q, size_t ld, const uint8_t* rows,
                               size_t n_rows, size_t row_bytes, int bits, size_t d,
                               size_t first, size_t group, float* out);
// Its twin: the scalar unpacking twin, then AxpyCodeRowsWeightedI16Ref (bit-identical).
void AxpyPackedRowsWeightedI16Ref(const float* w, size_t n_q, size_t ld, const uint8_t* rows,
                                  size_t n_rows, size_t row_bytes, int bits, size_t d,
                                  size_t first, size_t group, float* out);

// A whole tile of consecutive packed rows from the probabilities and the rows' fp16
// (scale, min) pairs, in one call:
//   w[i, g, k] = p[i * ldp + k] * scale[k, g0 + g],
//   msum[i * ng + g] += sum_k p[i * ldp + k] * min[k, g0 + g],
//   out += AxpyPackedRowsWeightedI16(w, ...)   (the window's groups are g0 .. g0 + ng - 1).
// params: [n_rows, n_groups, 2] fp16 (SplitGroupParams' layout); p: [n_q, ldp]; out: [n_q, d];
// msum: [n_q, ng]. On the fused path (the integer kernel, n_groups 1, 2 or 4, at most
// kPackedTileRowsMax rows) the float weights stay in registers; elsewhere it composes the
// twins. The twin: SplitGroupParamsRef, GroupWeightsAndMinSumsRef and
// AxpyPackedRowsWeightedI16Ref; out is bit-identical (the same weights and quantization),
// msum is a float sum in a different order.
constexpr size_t kPackedTileRowsMax = 64;
bool HasFusedPackedValueKernel(int bits, size_t d, size_t first, size_t group, size_t n_groups,
                               size_t n_rows);
void AccumulatePackedRowsI16(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                             size_t n_groups, size_t g0, size_t ng, const uint8_t* rows,
                             size_t n_rows, size_t row_bytes, int bits, size_t d, size_t first,
                             size_t group, float* out, float* msum);
void AccumulatePackedRowsI16Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                                size_t n_groups, size_t g0, size_t ng, const uint8_t* rows,
                                size_t n_rows, size_t row_bytes, int bits, size_t d,
                                size_t first, size_t group, float* out, float* msum);

// q4_0 plane rows (kv/codecs/q4_0_codec.h: codes [n_rows, d / 2] packed LSB-first, scales
// [n_rows, d / 32] fp16, value = s * (code - 8)): AccumulatePackedRowsI16's contract with
// scale-only parameters and min = -8 s, over all d / 32 groups of 32 channels:
//   w[i, g, k] = p[i * ldp + k] * s[k, g],
//   msum[i * ng + g] += sum_k p[i * ldp + k] * (-8 s[k, g]),
//   out += AxpyPackedRowsWeightedI16(w, ..., bits 4, group 32).
// Fused path (the integer kernel, d = 64, at most kPackedTileRowsMax rows): the same register
// pass as AccumulatePackedRowsI16 with the scales read as one 32-bit word per row. Elsewhere
// the dispatched kernels composed. The twin: GroupWeightsAndMinSumsRef and
// AxpyPackedRowsWeightedI16Ref (out bit-identical to the fused path, msum in another order).
bool HasFusedQ4_0ValueKernel(size_t d, size_t n_rows);
void AccumulateQ4_0RowsI16(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                           const uint8_t* codes, size_t n_rows, size_t d, float* out,
                           float* msum);
void AccumulateQ4_0RowsI16Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                              const uint8_t* codes, size_t n_rows, size_t d, float* out,
                              float* msum);

// q8_0 plane rows (kv/codecs/q8_0_codec.h: codes [n_rows, d] signed int8, scales
// [n_rows, d / 32] fp16, value = s * code), over all d / 32 groups of 32 channels:
//   w[i, g, k] = p[i * ldp + k] * s[k, g],
//   out += AxpyCodeRowsWeightedI16's sum with the signed codes (no min term).
// The bound above holds with |code| <= 127 in place of code.
// Fused path (the integer kernel, d = 64, at most kPackedTileRowsMax rows): the register pass
// of AccumulatePackedRowsI16, each code byte sign-extended to 16 bits. Elsewhere the twin
// itself (slow; the q8_0 codec takes its float path there instead). The twin: the same
// float weights and quantizer, exact integer sums, one fused multiply-add per output
// (bit-identical).
bool HasFusedQ8_0ValueKernel(size_t d, size_t n_rows);
void AccumulateQ8_0RowsI16(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                           const int8_t* codes, size_t n_rows, size_t d, float* out);
void AccumulateQ8_0RowsI16Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* scales,
                              const int8_t* codes, size_t n_rows, size_t d, float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_CODE_DOT_I16_H_
