// Products of q8_0 weight rows with activations quantized to q8_0 blocks: ggml's CPU
// numerics for q8_0 weights (ggml-cpu's type traits give GGML_TYPE_Q8_0 the vec_dot_type
// Q8_0: the activation row is quantized by quantize_row_q8_0, then ggml_vec_dot_q8_0_q8_0):
//   y = sum_b (d_w,b * d_x,b) * sum_{j < 32} qw_b,j * qx_b,j
// with the fp16 block scales d as floats and each block's integer sum exact.
//
// Design goals: decode's weight products are the largest share of a decode step (54% at
// depth 8192 on SmolLM2-135M's shape). With float activations every int8 weight was
// widened and converted to float before its multiply; with int8 activations one vpdpbusd
// multiplies 32 weight bytes by the activation's and adds them in fours.
// Non-goals: other weight types (they keep float activations, ops/matmul.h).
#ifndef KVPACK_OPS_Q8_0_DOT_H_
#define KVPACK_OPS_Q8_0_DOT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/ggml_quants.h"

namespace kvpack {

// n values (n % 32 == 0) as n / 32 q8_0 blocks by ggml's reference quantizer's rules
// (QuantizeRowQ8_0, the twin; here vectorized on every Highway target, the same blocks bit for
// bit: round half away from zero, NaN ignored by the max and coded 0). The scalar twin calls
// std::round per value, which is not inlined: a `q8_0` KV cache appending one token (3 heads
// x 64, keys and values) took 3.2 us with it, twice `f16`'s append.
void QuantizeRowQ8_0Fast(const float* x, size_t n, BlockQ8_0* out);

// Activations of n_tok tokens (n values each, n % 32 == 0) quantized to q8_0 blocks by
// QuantizeRowQ8_0Fast, with what the AVX512-VNNI kernel reads besides the codes: per block,
// 128 x the sums of each 4-byte group of codes and d_x as a float.
class Q8_0Activations {
 public:
  void Quantize(const float* x, size_t n_tok, size_t n);
  size_t n() const { return n_; }
  const BlockQ8_0* blocks(size_t t) const { return &blocks_[t * (n_ / 32)]; }
  const int32_t* lane_offsets(size_t t) const { return &offsets_[t * (n_ / 32) * 8]; }
  const float* scales(size_t t) const { return &scales_[t * (n_ / 32)]; }

 private:
  size_t n_ = 0;
  std::vector<BlockQ8_0> blocks_;  // [n_tok, n / 32]
  std::vector<int32_t> offsets_;   // [n_tok, n / 32, 8]
  std::vector<float> scales_;      // [n_tok, n / 32]
};

// y[r] = the product above of row r (rows + r * row_bytes: n / 32 ggml block_q8_0) with token
// t of x.
//   AVX512-VNNI: 32 weight bytes per instruction, read as code + 128 (vpdpbusd multiplies
//   unsigned by signed bytes) with the lane offsets taken back off exactly; the blocks'
//   float terms are summed in another order than the twin's.
//   AVX2 without VNNI: the same lanes by vpmaddubsw and vpmaddwd, in the same order as the
//   AVX512-VNNI kernel's: its results bit for bit.
//   Elsewhere (Highway, every target): the twin's integers and floats in the twin's order.
void DotQ8_0Q8_0Rows(const uint8_t* rows, size_t row_bytes, size_t n_rows,
                     const Q8_0Activations& x, size_t t, float* y);
// The twin: ggml_vec_dot_q8_0_q8_0's reference loop, sumf += sumi * (d_w * d_x), with that
// step as one fused multiply-add (so that no compiler contracts it differently).
float DotQ8_0Q8_0Ref(const uint8_t* row, const BlockQ8_0* x, size_t n);
// Whether DotQ8_0Q8_0Rows takes the AVX512-VNNI kernel here.
bool HasVnniQ8_0Dot();
// Whether it takes the AVX2 kernel (an AVX2 CPU without AVX512-VNNI).
bool HasAvx2Q8_0Dot();

}  // namespace kvpack

#endif  // KVPACK_OPS_Q8_0_DOT_H_
