// Vector kernels on the hot paths (dot products, scaled accumulation, format conversion),
// SIMD through Highway with runtime dispatch. Every kernel has a scalar twin in vec_ref.h
// and a test comparing the two on odd sizes and misaligned pointers (tests/unit/ops_vec_test.cc).
//
// Design goals: a handful of kernels that the matmul, the KV codecs and the attention share;
// pointers need no alignment; sizes need not be multiples of the vector width.
// Non-goals: bit-exact agreement with the scalar twins (summation order differs; tests use
// derived tolerances).
#ifndef KVPACK_OPS_VEC_H_
#define KVPACK_OPS_VEC_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// sum_i a[i] * b[i]
float DotF32(const float* a, const float* b, size_t n);
// a: fp16 bits
float DotF16F32(const uint16_t* a, const float* b, size_t n);
// a: bf16 bits
float DotBF16F32(const uint16_t* a, const float* b, size_t n);
// a: n / 32 ggml block_q8_0 (fp16 d + 32 int8); n % 32 == 0
float DotQ8_0F32(const void* a, const float* b, size_t n);

// y[i] += s * x[i]
void AxpyF32(float s, const float* x, float* y, size_t n);
// x: fp16 bits
void AxpyF16(float s, const uint16_t* x, float* y, size_t n);

// Tile kernels for attention over a block of cached rows (one dispatch per tile):
//   scores[i * ld + t] = dot(rows[t], q[i])           rows: [n_rows, d], q: [n_q, d]
//   out[i] += sum_t p[i * ld + t] * rows[t]           p: [n_q, ld], out: [n_q, d]
// The F16 and BF16 forms take fp16 and bf16 bits (the bf16 cache's rows).
// DotRowsF32 gives exactly DotF32 per row (the f32 cache is the bit-exact reference path);
// DotTileF32 is the faster form for scratch tiles (dequantized q8_0 rows), summing in
// another order (four rows and up to three query rows per register block on x86).
void DotRowsF32(const float* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                float* scores, size_t ld);
void DotTileF32(const float* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                float* scores, size_t ld);
void DotRowsF16(const uint16_t* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                float* scores, size_t ld);
void DotRowsBF16(const uint16_t* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                 float* scores, size_t ld);
void AxpyRowsF32(const float* p, size_t n_q, size_t ld, const float* rows, size_t n_rows,
                 size_t d, float* out);
void AxpyRowsF16(const float* p, size_t n_q, size_t ld, const uint16_t* rows, size_t n_rows,
                 size_t d, float* out);
void AxpyRowsBF16(const float* p, size_t n_q, size_t ld, const uint16_t* rows, size_t n_rows,
                  size_t d, float* out);

// Conversions: dst[i] = src[i]
void ConvertF32ToF16(const float* src, uint16_t* dst, size_t n);
void ConvertF16ToF32(const uint16_t* src, float* dst, size_t n);

// Whether some x[i] (i < n) fails |x[i]| <= limit: NaN always does, +-inf does below an
// infinite limit. Input validation (the caches' Append): one pass of vector loads, all in
// flight at once, where a scalar loop that stops at the first bad value had K/V rows come in
// a few lines at a time (docs/performance-history.md, session 48).
bool AnyAbsAbove(const float* x, size_t n, float limit);

// Softmax pieces: the largest of x[0..n) (-inf when n == 0), and x[i] = exp(x[i] - shift)
// in place returning the sum of the results, within 4 ulp where e^-87 <= the result <= e^88;
// below that 0 (-inf inputs give 0), above it +inf, NaN stays NaN.
float MaxF32(const float* x, size_t n);
float ExpSubtractSum(float* x, size_t n, float shift);

// SwiGLU's gating: out[i] = gate[i] / (1 + exp(-gate[i])) * up[i] with ExpSubtractSum's exp;
// within 8 ulp of the twin where exp(-gate[i]) <= e^88, and -0 (the twin: at most 1e-38 in
// magnitude) beyond; NaN stays NaN. out may alias gate or up.
void SwiGluF32(const float* gate, const float* up, size_t n, float* out);

// Name of the SIMD target chosen at run time ("AVX3", "AVX2", ...).
const char* SimdTargetName();

}  // namespace kvpack

#endif  // KVPACK_OPS_VEC_H_
