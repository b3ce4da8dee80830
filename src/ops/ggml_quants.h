// Scalar reference (de)quantization of ggml block formats.
//
// Design goals: bit-exact with ggml's reference dequantizers and quantizers for the formats
// kvpack reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K) and writes (F32, F16, BF16, Q8_0,
// Q4_0); these are the oracles that SIMD kernels are tested against. Source pointers may be
// misaligned (blocks are copied before use).
// Non-goals: speed; quantizers for the K formats (importance-weighted search, not needed to
// run models converted elsewhere).
//
// Block layouts follow ggml's ggml-common.h (block_q8_0, block_q4_0, block_q4_K, block_q6_K);
// see also https://github.com/ggml-org/ggml/blob/master/docs/gguf.md.
#ifndef KVPACK_OPS_GGML_QUANTS_H_
#define KVPACK_OPS_GGML_QUANTS_H_

#include <cstdint>

#include "core/ggml_type.h"
#include "kvpack/status.h"

namespace kvpack {

constexpr int kQk8_0 = 32;   // elements per Q8_0 block
constexpr int kQk4_0 = 32;   // elements per Q4_0 block
constexpr int kQkK = 256;    // elements per K-quant super-block
constexpr int kKScaleSize = 12;

// x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;          // fp16 scale
  int8_t qs[kQk8_0];   // [32] quants
};
static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 is 34 bytes in ggml");

// x[i] = d * ((nibble i) - 8); qs[j] holds element j in its low nibble and element j + 16 in
// its high nibble.
struct BlockQ4_0 {
  uint16_t d;              // fp16 scale
  uint8_t qs[kQk4_0 / 2];  // [16] nibble pairs
};
static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 is 18 bytes in ggml");

// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], with 6-bit sc/m packed in `scales`
// (see GetScaleMinK4) and 4-bit q. Each 32-byte slice of qs holds sub-block 2k in its low
// nibbles and sub-block 2k + 1 in its high nibbles.
struct BlockQ4_K {
  uint16_t d;                  // fp16 super-block scale of the scales
  uint16_t dmin;               // fp16 super-block scale of the mins
  uint8_t scales[kKScaleSize]; // [12] 6-bit scales and mins
  uint8_t qs[kQkK / 2];        // [128] nibbles
};
static_assert(sizeof(BlockQ4_K) == 144, "block_q4_K is 144 bytes in ggml");

// 16 sub-blocks of 16: x = d * scales[s] * (q - 32), q 6-bit = 4 low bits in ql, 2 high bits
// in qh. Layout per 128-element half h (ql + 64h, qh + 32h, scales + 8h), for l in [0, 32):
//   element l      : ql[l] low nibble,      qh[l] bits 0-1, scale[l / 16]
//   element l + 32 : ql[l + 32] low nibble, qh[l] bits 2-3, scale[l / 16 + 2]
//   element l + 64 : ql[l] high nibble,     qh[l] bits 4-5, scale[l / 16 + 4]
//   element l + 96 : ql[l + 32] high nibble, qh[l] bits 6-7, scale[l / 16 + 6]
struct BlockQ6_K {
  uint8_t ql[kQkK / 2];      // [128] low 4 bits
  uint8_t qh[kQkK / 4];      // [64] high 2 bits
  int8_t scales[kQkK / 16];  // [16] 8-bit sub-block scales
  uint16_t d;                // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "block_q6_K is 210 bytes in ggml");

// Sub-block j (0..7) scale and min of a Q4_K block, as ggml's get_scale_min_k4: for j < 4
// the low 6 bits of bytes j and j + 4; for j >= 4 the nibbles of byte j + 4 extended by the
// top two bits of bytes j - 4 (scale) and j (min).
inline void GetScaleMinK4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Decodes n elements of `type` from src to dst (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K).
// n must be a non-negative multiple of the type's block size.
// src: [n / block_size] blocks, any alignment; dst: [n]
Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Reference quantizers, matching ggml's quantize_row_*_ref. n must be a multiple of the
// block size (32 for Q8_0/Q4_0; checked). src: [n]; dst: GgmlRowBytes(type, n) bytes.
void QuantizeRowQ8_0(const float* src, void* dst, int64_t n);
void QuantizeRowQ4_0(const float* src, void* dst, int64_t n);
void QuantizeRowF16(const float* src, void* dst, int64_t n);
void QuantizeRowBF16(const float* src, void* dst, int64_t n);

// Dispatches to the quantizers above (F32 copies). InvalidArgument for other types or an n
// that is not a multiple of the block size.
Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace kvpack

#endif  // KVPACK_OPS_GGML_QUANTS_H_
