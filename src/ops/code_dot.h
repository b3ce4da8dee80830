// Dot products and scaled accumulation directly on unpacked integer codes (one byte per
// code, ops/code_unpack.h), SIMD through Highway with runtime dispatch, each with a scalar
// twin (`...Ref`) compared in tests/unit/ops_code_dot_test.cc.
//
// Design goals: the quantized KV codecs use the algebraic form of their formats, so the
// float values of the cache are never formed: for per-channel groups
//   q . (code * scale + min) = (q * scale) . code + q . min,
//   sum_t p_t (code_t * scale + min) = scale * (sum_t p_t code_t) + min * sum_t p_t,
// and for per-token groups the per-(row, group) scale multiplies p_t before the codes are
// accumulated (the caller forms those weights once per tile). The kernels below do the code
// part; the codecs add the scale/min parts. 2/4-bit key scores use ops/code_dot_i8.h.
#ifndef KVPACK_OPS_CODE_DOT_H_
#define KVPACK_OPS_CODE_DOT_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// scores[i * ld + t] = sum_c q[i * d + c] * codes[t * row_stride + c]
//   codes: [n_rows, row_stride] (first d used); q: [n_q, d]; scores: [n_q, ld].
void DotCodeRows(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                 const float* q, size_t n_q, float* scores, size_t ld);
void DotCodeRowsRef(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                    const float* q, size_t n_q, float* scores, size_t ld);

// Weights per (query row, row, group), e.g. probability x the row's group scale, formed once
// per tile by the caller so that the inner loop is one FMA per code and query row:
//   out[i * d + c] += sum_t w[(i * n_groups + g(c)) * ld + t] * codes[t * row_stride + c],
//   g(c) = (first + c) / group - first / group (groups of the window [first, first + d)),
//   n_groups = g(d - 1) + 1.   w: [n_q, n_groups, ld]; codes: [n_rows, row_stride]; out: [n_q, d].
void AxpyCodeRowsWeighted(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                          size_t n_rows, size_t row_stride, size_t d, size_t first,
                          size_t group, float* out);
void AxpyCodeRowsWeightedRef(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                             size_t n_rows, size_t row_stride, size_t d, size_t first,
                             size_t group, float* out);

// Whether runtime dispatch runs these kernels on an AVX-512 target (as the CPU and any
// hwy::SetSupportedTargetsForTest allow): the kernels outside Highway's targets (the
// AVX512-VNNI value kernel of ops/code_dot_i16.h) follow the same choice. One indirect call,
// no CPUID.
bool CodeKernelsUseAvx512();
// The same for AVX2 or better (the AVX2 kernels outside Highway, e.g. ops/q8_0_dot.h's).
bool CodeKernelsUseAvx2();

// The weights and min sums of one tile of per-token groups (kv/codecs/quant_common.h), for
// query row i, group g and row k < m:
//   w[(i * ng + g) * ldw + k] = p[i * ldp + k] * scale[g * lds + k],
//   msum[i * ng + g] += sum_k p[i * ldp + k] * min[g * lds + k].
//   p: [n_q, ldp]; scale, min: [ng, lds]; w: [n_q, ng, ldw]; msum: [n_q, ng].
void GroupWeightsAndMinSums(const float* p, size_t ldp, size_t n_q, const float* scale,
                            const float* min, size_t lds, size_t ng, size_t m, float* w,
                            size_t ldw, float* msum);
void GroupWeightsAndMinSumsRef(const float* p, size_t ldp, size_t n_q, const float* scale,
                               const float* min, size_t lds, size_t ng, size_t m, float* w,
                               size_t ldw, float* msum);

}  // namespace kvpack

#endif  // KVPACK_OPS_CODE_DOT_H_
