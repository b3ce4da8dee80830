// The value side of attention over 2-bit token-group rows with int8 weights: the weights of a
// tile (probability x the row's group scale) are quantized to int8 per (query row, group) and
// multiplied with the codes by AVX512-VNNI `vpdpbusd` (four rows' codes of one channel per
// 32-bit lane, 64 products per instruction), against ops/code_dot_i16.h's int16 weights and
// `vpdpwssd` (two rows per lane, 32 products).
//
// Design goals: on a 2-bit cache the value kernel's multiplies were the largest share of the
// attention time (FlexGen-2 at depth 8192: about half of it), and `vpdpwssd` throughput was
// its limit; four rows per instruction halve that work. Four rows of a 64-channel 2-bit head
// are one 64-byte line (wider heads: 64 channels at a time, four 16-byte loads): a byte
// permutation, one shift per lane and a mask give every channel its four codes.
// The weights (probability x scale, quantized per tile) are formed for eight tiles at a time
// before any is multiplied, so that the maxima of all of them reduce together.
// The price is the weights' precision: per (query row i, group g) the step is
// s = max_k |w_k| / 127, each weight moves by at most s / 2, so an output moves by at most
//   s / 2 * sum_k code_k   (code_k <= 3)
// plus one float rounding, 258 times the int16 kernel's bound. Against a 2-bit code's own
// error (half of a step of range / 3 per value) that is small: measured on kvref-6m
// (wikitext-2, README's quality table), mean KLD against f32 moved by -0.5% to +2.5% for
// FlexGen-2, KIVI-2, HF-2 and GEAR-2. 4-bit codes keep int16 weights (KIVI-4 moved by +7%
// with int8 ones).
// Non-goals: widths other than 2 bits, windows of a row (KCVT's all-head rows), heads that
// are not a multiple of 64 channels: those use ops/code_dot_i16.h. CPUs with AVX2 but without
// AVX512-VNNI + VBMI + DQ run the same integer sums by ops/value_dot_i8_avx2.h.
#ifndef KVPACK_OPS_VALUE_DOT_I8_H_
#define KVPACK_OPS_VALUE_DOT_I8_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Rows per weight tile: the weights are quantized per (query row, group) over each run of
// this many rows.
constexpr size_t kI8ValueTileRowsMax = 64;

// Whether AccumulateTwoBitRowsI8 runs its integer kernel here: d a multiple of 64 channels
// (whole rows of d / 4 bytes), 1, 2 or 4 groups per row whose size is a multiple of 64 or is
// 32 or 16 (a 64-channel window then holds whole groups), a CPU with AVX512-VNNI, VBMI and DQ
// or one with AVX2 (ops/value_dot_i8_avx2.h), and those targets allowed for tests.
bool HasI8ValueKernel(size_t d, size_t n_groups);

// Consecutive 2-bit rows (LSB-first, d / 4 bytes each; codes [n_rows, d / 4]) with their fp16
// (scale, min) pairs (params [n_rows, n_groups, 2], group = d / n_groups channels) and the
// probabilities p [n_q, ldp], in tiles of kI8ValueTileRowsMax rows (tile j: rows
// [64 j, 64 j + 64) of n_rows), one tile after the other:
//   w[i, g, k] = p[i * ldp + k] * scale[k, g],
//   msum[i * n_groups + g] += sum_k p[i * ldp + k] * min[k, g],
//   (wq, s) = QuantizeWeightsI8Ref(w[i, g, k in the tile]) per (i, g),
//   out[i * d + c] = fma(s_ig, sum_{k in the tile} wq[k] * code[k, c], out[i * d + c])
//   (g = c / group).
// Where HasI8ValueKernel(d, n_groups) the integer kernel (64 channels at a time), out
// bit-identical to the twin's and msum a float sum in another order; elsewhere the twin.
void AccumulateTwoBitRowsI8(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                            size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                            float* out, float* msum);
// The twin, for any CPU and any n_groups dividing d: the same float weights and quantizer,
// codes read bit by bit, exact integer sums, one fused multiply-add per output and tile.
void AccumulateTwoBitRowsI8Ref(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                               size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                               float* out, float* msum);

// The weight quantizer of both: amax = max_k |w_k|; all zero (s = 0) when !(amax > 0);
// otherwise wq_k = round-to-nearest-even(w_k * (127 / amax)) (|wq_k| <= 127) and
// s = amax / 127. wq: [m].
float QuantizeWeightsI8Ref(const float* w, size_t m, int8_t* wq);

}  // namespace kvpack

#endif  // KVPACK_OPS_VALUE_DOT_I8_H_
