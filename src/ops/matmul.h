// Matrix products against GGUF weight matrices of any supported ggml type.
//
// Design goals: one entry point for prefill (many tokens: dequantize a tile of weight rows
// once and reuse it for every token; q8_0 rows are read as they are) and decode (one token: dot products straight on the
// packed rows, memory-bandwidth bound); parallel over output rows; deterministic for a given
// thread count.
#ifndef KVPACK_OPS_MATMUL_H_
#define KVPACK_OPS_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/ggml_type.h"
#include "core/thread_pool.h"

namespace kvpack {

// A weight matrix as GGUF stores it: n_out rows of n_in contiguous elements (ne = {n_in, n_out}).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;  // [n_out, row_bytes]
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;
};

// y[t, o] = sum_i x[t, i] * W[o, i]
//   x: [n_tok, n_in] row-major; y: [n_tok, n_out] row-major.
void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool);

// y_i[t, o] = sum_k x[t, k] * W_i[o, k] for several matrices of one input (a layer's Q, K
// and V products, or its gate and up): q8_0 matrices share one quantization of x and one
// parallel pass over all their rows, so that a decode step pays one fork-join for the group
// instead of one per matrix (other types: MatMul per matrix). Every y_i is bit for bit what
// MatMul gives it: a row's product does not depend on which rows share its call.
//   ws[i]: n_in columns each; x: [n_tok, n_in]; ys[i]: [n_tok, ws[i]->n_out].
void MatMulShared(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tok,
                  std::span<float* const> ys, ThreadPool* pool);

// q8_0 weights take ggml's numerics: each token's activations are quantized to q8_0 blocks
// and multiplied block by block in integers (ops/q8_0_dot.h), in prefill and decode alike.
//
// Scalar oracle: dequantizes each row (ggml_quants.h) and accumulates in double; for q8_0,
// the same activation quantization and exact block sums, then double.
void MatMulRef(const WeightMatrix& w, const float* x, int64_t n_tok, float* y);

// One output element: dot of weight row `row` with x[n_in] (decode and tests).
float DotWeightRow(const WeightMatrix& w, int64_t row, const float* x, float* scratch);

// Row `row` of the matrix as floats (token embedding lookup). out: [n_in]
void DequantizeWeightRow(const WeightMatrix& w, int64_t row, float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_MATMUL_H_
