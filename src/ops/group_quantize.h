// The uniform quantizer's two passes over its input (kv/codecs/quant_common.h: QuantizeGroup
// for a group of one row, ChannelBlocks for the per-channel groups of a block of rows): the
// range of each group, then the codes. SIMD through Highway with runtime dispatch; each
// kernel has a scalar twin (`...Ref`) that gives the same bits on every target
// (tests/unit/ops_group_quantize_test.cc).
//
// Design goals: the caches' appends quantize every new value row and every flushed key block;
// scalar loops of dependent min/max steps and one code at a time were a third of an 8-bit
// cache's per-token append (docs/performance-history.md, sessions 48 and 49).
// Non-goals: the parameter rule (scale, min, their fp16 rounding: quant_common.cc) and HQQ's
// refinement, which stay scalar; non-finite input (the caches reject it before).
#ifndef KVPACK_OPS_GROUP_QUANTIZE_H_
#define KVPACK_OPS_GROUP_QUANTIZE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kvpack {

// The code of x: round-half-even(min(max((x - min) * inv, 0), top)), top <= 255, in the
// default rounding mode, by adding and taking away 1.5 * 2^23 (exact below 2^22; inline and
// vectorisable where a libm call of nearbyint per code is neither: with that call the
// quantizer was a third of an 8-bit cache's per-token append, kv_codec_bench
// AppendToken/flexgen:bits=8 1.07 -> 0.57 us).
inline uint8_t QuantizeCode(float x, float min, float inv, float top) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float v = std::min(std::max((x - min) * inv, 0.0f), top);
  return static_cast<uint8_t>((v + kRound) - kRound);
}

// *mn, *mx: the smallest and largest of x[0..n), n >= 1, finite. A zero extreme is +0 (a -0
// comes back as +0: vector min/max instructions do not agree on which zero wins).
void MinMaxF32(const float* x, size_t n, float* mn, float* mx);
void MinMaxF32Ref(const float* x, size_t n, float* mn, float* mx);

// codes[i] = QuantizeCode(x[i], min, inv, top), i < n.
void QuantizeCodesU8(const float* x, size_t n, float min, float inv, float top, uint8_t* codes);
void QuantizeCodesU8Ref(const float* x, size_t n, float min, float inv, float top,
                        uint8_t* codes);

// Per column c < d of the n >= 1 rows x[r * ld + c]: mn[c] and mx[c] as MinMaxF32 gives them.
void ColumnMinMaxF32(const float* x, size_t n, size_t ld, size_t d, float* mn, float* mx);
void ColumnMinMaxF32Ref(const float* x, size_t n, size_t ld, size_t d, float* mn, float* mx);

// codes[r * d + c] = QuantizeCode(x[r * ld + c], min[c], inv[c], top), r < n, c < d.
void QuantizeColumnsU8(const float* x, size_t n, size_t ld, size_t d, const float* min,
                       const float* inv, float top, uint8_t* codes);
void QuantizeColumnsU8Ref(const float* x, size_t n, size_t ld, size_t d, const float* min,
                          const float* inv, float top, uint8_t* codes);

}  // namespace kvpack

#endif  // KVPACK_OPS_GROUP_QUANTIZE_H_
