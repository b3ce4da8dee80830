// Scalar reference (de)quantization of ggml blocks. The arithmetic follows ggml's
// dequantize_row_* and quantize_row_*_ref (ggml-quants.c) operation by operation, so results
// are bit-identical for finite inputs; layouts are documented in ggml_quants.h.
#include "ops/ggml_quants.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/half.h"

namespace kvpack {
namespace {

template <typename Block>
Block LoadBlock(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

// float -> int8 for values that ggml casts directly; identical for finite in-range inputs,
// defined (0 for NaN, saturated otherwise) where a plain cast would be undefined behaviour.
int8_t SafeToInt8(float v) {
  if (!(v == v)) return 0;
  if (v >= 127.0f) return 127;
  if (v <= -128.0f) return -128;
  return static_cast<int8_t>(v);
}

void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ8_0 blk = LoadBlock<BlockQ8_0>(src + b * sizeof(BlockQ8_0));
    const float d = Fp16ToFp32(blk.d);
    for (int j = 0; j < kQk8_0; ++j) dst[b * kQk8_0 + j] = blk.qs[j] * d;
  }
}

void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ4_0 blk = LoadBlock<BlockQ4_0>(src + b * sizeof(BlockQ4_0));
    const float d = Fp16ToFp32(blk.d);
    float* y = dst + b * kQk4_0;
    for (int j = 0; j < kQk4_0 / 2; ++j) {
      const int x0 = (blk.qs[j] & 0x0f) - 8;
      const int x1 = (blk.qs[j] >> 4) - 8;
      y[j] = x0 * d;
      y[j + kQk4_0 / 2] = x1 * d;
    }
  }
}

void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ4_K blk = LoadBlock<BlockQ4_K>(src + b * sizeof(BlockQ4_K));
    const float d = Fp16ToFp32(blk.d);
    const float dmin = Fp16ToFp32(blk.dmin);
    const uint8_t* q = blk.qs;
    float* y = dst + b * kQkK;
    for (int is = 0; is < 8; is += 2) {  // two 32-element sub-blocks per 32 bytes of qs
      uint8_t sc, m;
      GetScaleMinK4(is, blk.scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      GetScaleMinK4(is + 1, blk.scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K blk = LoadBlock<BlockQ6_K>(src + b * sizeof(BlockQ6_K));
    const float d = Fp16ToFp32(blk.d);
    float* y = dst + b * kQkK;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = blk.ql + 64 * half;
      const uint8_t* qh = blk.qh + 32 * half;
      const int8_t* sc = blk.scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
    }
  }
}

}  // namespace

Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeTraits traits = GetGgmlTypeTraits(type);
  if (traits.name == nullptr) {
    return InvalidArgument("DequantizeRow: unknown ggml type " +
                           std::to_string(static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % traits.block_size != 0) {
    return InvalidArgument("DequantizeRow: " + std::to_string(n) + " elements is not a multiple " +
                           "of the " + traits.name + " block size " +
                           std::to_string(traits.block_size));
  }
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t n_blocks = n / traits.block_size;
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
      return Status::Ok();
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Fp16ToFp32(h);
      }
      return Status::Ok();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Bf16ToFp32(h);
      }
      return Status::Ok();
    case GgmlType::kQ8_0: DequantizeQ8_0(s, dst, n_blocks); return Status::Ok();
    case GgmlType::kQ4_0: DequantizeQ4_0(s, dst, n_blocks); return Status::Ok();
    case GgmlType::kQ4_K: DequantizeQ4_K(s, dst, n_blocks); return Status::Ok();
    case GgmlType::kQ6_K: DequantizeQ6_K(s, dst, n_blocks); return Status::Ok();
    default:
      return Unimplemented(std::string("DequantizeRow: ggml type ") + traits.name +
                           " is not supported");
  }
}

void QuantizeRowQ8_0(const float* src, void* dst, int64_t n) {
  KVPACK_CHECK(n >= 0 && n % kQk8_0 == 0);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQk8_0; ++b) {
    const float* x = src + b * kQk8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQk8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 blk;
    blk.d = Fp32ToFp16(d);
    for (int j = 0; j < kQk8_0; ++j) blk.qs[j] = SafeToInt8(std::round(x[j] * id));
    std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

void QuantizeRowQ4_0(const float* src, void* dst, int64_t n) {
  KVPACK_CHECK(n >= 0 && n % kQk4_0 == 0);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQk4_0; ++b) {
    const float* x = src + b * kQk4_0;
    // The signed value of largest magnitude maps to -8, so the full range [-8, 7] is used on
    // its side (ggml's quantize_row_q4_0_ref).
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQk4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 blk;
    blk.d = Fp32ToFp16(d);
    for (int j = 0; j < kQk4_0 / 2; ++j) {
      const int8_t q0 = SafeToInt8(x[j] * id + 8.5f);
      const int8_t q1 = SafeToInt8(x[j + kQk4_0 / 2] * id + 8.5f);
      const uint8_t x0 = static_cast<uint8_t>(q0 < 0 ? 0 : (q0 > 15 ? 15 : q0));
      const uint8_t x1 = static_cast<uint8_t>(q1 < 0 ? 0 : (q1 > 15 ? 15 : q1));
      blk.qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
    std::memcpy(out + b * sizeof(BlockQ4_0), &blk, sizeof(blk));
  }
}

void QuantizeRowF16(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = Fp32ToFp16(src[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void QuantizeRowBF16(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = Fp32ToBf16(src[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  const GgmlTypeTraits traits = GetGgmlTypeTraits(type);
  if (traits.name == nullptr) {
    return InvalidArgument("QuantizeRow: unknown ggml type " +
                           std::to_string(static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % traits.block_size != 0) {
    return InvalidArgument("QuantizeRow: " + std::to_string(n) + " elements is not a multiple " +
                           "of the " + traits.name + " block size " +
                           std::to_string(traits.block_size));
  }
  switch (type) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return Status::Ok();
    case GgmlType::kF16: QuantizeRowF16(src, dst, n); return Status::Ok();
    case GgmlType::kBF16: QuantizeRowBF16(src, dst, n); return Status::Ok();
    case GgmlType::kQ8_0: QuantizeRowQ8_0(src, dst, n); return Status::Ok();
    case GgmlType::kQ4_0: QuantizeRowQ4_0(src, dst, n); return Status::Ok();
    default:
      return Unimplemented(std::string("QuantizeRow: writing ggml type ") + traits.name +
                           " is not supported");
  }
}

}  // namespace kvpack
