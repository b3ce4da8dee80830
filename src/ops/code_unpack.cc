// Highway implementations of code_unpack.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/code_unpack.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"

#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "ops/code_unpack.h"
#include "ops/prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Byte-aligned 2/4/8-bit streams: each source byte is widened to a lane of as many bytes as
// it holds codes (u32 for 2-bit, u16 for 4-bit), shifted copies of it are ORed so that code
// i lands in byte i of the lane, and a mask keeps the code bits. With little-endian lanes
// byte i of lane j is output byte (8j/b + i): stream order, no shuffles. A 512-bit vector
// makes 64 codes per step. The loop asks for the line kPrefetchAheadBytes past its read
// position (the codecs' value tiles are long streams; see packed_dot_i8.cc).
void UnpackCodesU8Impl(const uint8_t* src, int64_t first, size_t n, int bits, uint8_t* dst) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const int64_t bit0 = first * bits;
  if ((bit0 & 7) == 0 && (bits == 2 || bits == 4 || bits == 8)) {
    const uint8_t* p = src + (bit0 >> 3);
    if (bits == 8) {
      std::memcpy(dst, p, n);
      return;
    }
    if (bits == 4) {
      const hn::ScalableTag<uint16_t> d16;
      const hn::Rebind<uint8_t, decltype(d16)> d8;  // one source byte per u16 lane
      const hn::Repartition<uint8_t, decltype(d16)> dout;
      const size_t step = 2 * hn::Lanes(d16);       // codes per step
      const auto mask = hn::Set(d16, 0x0F0F);
      for (; i + step <= n; i += step) {
        PrefetchCodeLine(p + i / 2 + kPrefetchAheadBytes);
        const auto x = hn::PromoteTo(d16, hn::LoadU(d8, p + i / 2));
        hn::StoreU(hn::BitCast(dout, hn::And(hn::Or(x, hn::ShiftLeft<4>(x)), mask)), dout,
                   dst + i);
      }
    } else {
      const hn::ScalableTag<uint32_t> d32;
      const hn::Rebind<uint8_t, decltype(d32)> d8;  // one source byte per u32 lane
      const hn::Repartition<uint8_t, decltype(d32)> dout;
      const size_t step = 4 * hn::Lanes(d32);
      const auto mask = hn::Set(d32, 0x03030303u);
      for (; i + step <= n; i += step) {
        PrefetchCodeLine(p + i / 4 + kPrefetchAheadBytes);
        const auto x = hn::PromoteTo(d32, hn::LoadU(d8, p + i / 4));
        const auto y = hn::Or(hn::Or(x, hn::ShiftLeft<6>(x)),
                              hn::Or(hn::ShiftLeft<12>(x), hn::ShiftLeft<18>(x)));
        hn::StoreU(hn::BitCast(dout, hn::And(y, mask)), dout, dst + i);
      }
    }
  }
#endif
  if (i < n) UnpackCodesU8Ref(src, first + static_cast<int64_t>(i), n - i, bits, dst + i);
}

void UnpackCodeRowsImpl(const uint8_t* src, const int64_t* rows, size_t n_rows,
                        size_t row_bytes, int64_t first, size_t n, int bits, uint8_t* dst) {
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t row = rows ? static_cast<size_t>(rows[r]) : r;
    UnpackCodesU8Impl(src + row * row_bytes, first, n, bits, dst + r * n);
  }
}

void DequantizeCodesImpl(const uint8_t* codes, size_t n, float scale, float min, float* out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  const auto vs = hn::Set(d, scale), vm = hn::Set(d, min);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto c = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, codes + i)));
    hn::StoreU(hn::MulAdd(c, vs, vm), d, out + i);
  }
  for (; i < n; ++i) out[i] = static_cast<float>(codes[i]) * scale + min;
}

void DequantizeCodesPerChannelImpl(const uint8_t* codes, size_t n, const float* scale,
                                   const float* min, float* out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto c = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, codes + i)));
    hn::StoreU(hn::MulAdd(c, hn::LoadU(d, scale + i), hn::LoadU(d, min + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = static_cast<float>(codes[i]) * scale[i] + min[i];
}

// Rows of up to kMaxRowCodes codes go through a stack buffer of unpacked codes.
constexpr size_t kMaxRowCodes = 1024;

void DequantizeRowsPerChannelImpl(const uint8_t* codes, size_t n_rows, size_t row_bytes,
                                  int bits, size_t d, const float* scale, const float* min,
                                  float* out) {
  HWY_ALIGN uint8_t buf[kMaxRowCodes];
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    float* o = out + r * d;
    for (size_t c0 = 0; c0 < d; c0 += kMaxRowCodes) {
      const size_t n = std::min(kMaxRowCodes, d - c0);
      UnpackCodesU8Impl(row, static_cast<int64_t>(c0), n, bits, buf);
      DequantizeCodesPerChannelImpl(buf, n, scale + c0, min + c0, o + c0);
    }
  }
}

void DequantizeRowsPerTokenImpl(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                                size_t first, size_t n, size_t group, const uint16_t* params,
                                size_t n_groups, float* out) {
  HWY_ALIGN uint8_t buf[kMaxRowCodes];
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    const uint16_t* pr = params + r * n_groups * 2;
    float* o = out + r * n;
    for (size_t c = first; c < first + n;) {
      const size_t g = c / group;
      const size_t end = std::min({first + n, (g + 1) * group, c + kMaxRowCodes});
      UnpackCodesU8Impl(row, static_cast<int64_t>(c), end - c, bits, buf);
      DequantizeCodesImpl(buf, end - c, Fp16ToFp32(pr[2 * g]), Fp16ToFp32(pr[2 * g + 1]),
                          o + (c - first));
      c = end;
    }
  }
}

// The fp16 block scales first, 64 blocks at a time, gathered and converted as vectors (a
// software fp16 conversion per block took as long as the block's 32 values), then the values.
void DequantizeQ8_0BlocksImpl(const uint8_t* blocks, size_t n_blocks, float* out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  constexpr size_t kChunk = 64;
  HWY_ALIGN uint16_t bits[kChunk];
  HWY_ALIGN float scales[kChunk];
  for (size_t b0 = 0; b0 < n_blocks; b0 += kChunk) {
    const size_t nb = std::min(kChunk, n_blocks - b0);
    for (size_t b = 0; b < nb; ++b) std::memcpy(&bits[b], blocks + (b0 + b) * 34, 2);
    size_t b = 0;
    for (; b + N <= nb; b += N) {
      hn::Store(hn::PromoteTo(d, hn::Load(dh, reinterpret_cast<const hwy::float16_t*>(bits + b))),
                d, scales + b);
    }
    for (; b < nb; ++b) scales[b] = Fp16ToFp32(bits[b]);
    for (b = 0; b < nb; ++b) {
      const uint8_t* blk = blocks + (b0 + b) * 34;
      PrefetchCodeLine(blk + kPrefetchAheadBytes);
      const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
      float* o = out + (b0 + b) * 32;
      const auto scale = hn::Set(d, scales[b]);
      size_t j = 0;
      for (; j + N <= 32; j += N) {
        hn::StoreU(hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q + j))), scale), d,
                   o + j);
      }
      for (; j < 32; ++j) o[j] = static_cast<float>(q[j]) * scales[b];
    }
  }
}

void DequantizeQ4_0BlocksImpl(const uint8_t* blocks, size_t n_blocks, float* out) {
  HWY_ALIGN uint8_t codes[32];
  for (size_t b = 0; b < n_blocks; ++b, blocks += 18, out += 32) {
    uint16_t bits;
    std::memcpy(&bits, blocks, 2);
    const uint8_t* q = blocks + 2;
#if HWY_TARGET != HWY_SCALAR
    const hn::Full128<uint8_t> d8;
    const auto v = hn::LoadU(d8, q);
    hn::Store(hn::And(v, hn::Set(d8, 0x0F)), d8, codes);
    hn::Store(hn::ShiftRight<4>(v), d8, codes + 16);
#else
    for (int j = 0; j < 16; ++j) {
      codes[j] = q[j] & 15;
      codes[j + 16] = q[j] >> 4;
    }
#endif
    const float scale = Fp16ToFp32(bits);
    DequantizeCodesImpl(codes, 32, scale, -8.0f * scale, out);
  }
}

void SplitGroupParamsImpl(const uint16_t* params, size_t n_rows, size_t n_groups, size_t g0,
                          size_t ng, float* scale, float* min, size_t ld) {
  size_t r = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du;  // one u16 per float lane
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  if (n_groups == 1) {
    for (; r + N <= n_rows; r += N) {
      hn::Vec<decltype(du)> s, m;
      hn::LoadInterleaved2(du, params + 2 * r, s, m);
      hn::StoreU(hn::PromoteTo(df, hn::BitCast(dh, s)), df, scale + r);
      hn::StoreU(hn::PromoteTo(df, hn::BitCast(dh, m)), df, min + r);
    }
  } else if (n_groups == 2) {
    for (; r + N <= n_rows; r += N) {
      hn::Vec<decltype(du)> v[4];
      hn::LoadInterleaved4(du, params + 4 * r, v[0], v[1], v[2], v[3]);
      for (size_t g = 0; g < ng; ++g) {
        hn::StoreU(hn::PromoteTo(df, hn::BitCast(dh, v[2 * (g0 + g)])), df, scale + g * ld + r);
        hn::StoreU(hn::PromoteTo(df, hn::BitCast(dh, v[2 * (g0 + g) + 1])), df, min + g * ld + r);
      }
    }
  }
#endif
  for (; r < n_rows; ++r) {
    for (size_t g = 0; g < ng; ++g) {
      const uint16_t* p = params + (r * n_groups + g0 + g) * 2;
      scale[g * ld + r] = Fp16ToFp32(p[0]);
      min[g * ld + r] = Fp16ToFp32(p[1]);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>
namespace kvpack {
HWY_EXPORT(UnpackCodesU8Impl);
HWY_EXPORT(UnpackCodeRowsImpl);
HWY_EXPORT(DequantizeCodesImpl);
HWY_EXPORT(DequantizeCodesPerChannelImpl);
HWY_EXPORT(DequantizeRowsPerChannelImpl);
HWY_EXPORT(DequantizeRowsPerTokenImpl);
HWY_EXPORT(DequantizeQ8_0BlocksImpl);
HWY_EXPORT(DequantizeQ4_0BlocksImpl);
HWY_EXPORT(SplitGroupParamsImpl);

void SplitGroupParams(const uint16_t* params, size_t n_rows, size_t n_groups, size_t g0,
                      size_t ng, float* scale, float* min, size_t ld) {
  HWY_DYNAMIC_DISPATCH(SplitGroupParamsImpl)(params, n_rows, n_groups, g0, ng, scale, min, ld);
}
void SplitGroupParamsRef(const uint16_t* params, size_t n_rows, size_t n_groups, size_t g0,
                         size_t ng, float* scale, float* min, size_t ld) {
  for (size_t g = 0; g < ng; ++g) {
    for (size_t r = 0; r < n_rows; ++r) {
      scale[g * ld + r] = Fp16ToFp32(params[(r * n_groups + g0 + g) * 2]);
      min[g * ld + r] = Fp16ToFp32(params[(r * n_groups + g0 + g) * 2 + 1]);
    }
  }
}

void DequantizeRowsPerChannel(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                              size_t d, const float* scale, const float* min, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowsPerChannelImpl)(codes, n_rows, row_bytes, bits, d, scale,
                                                     min, out);
}
void DequantizeRowsPerToken(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                            size_t first, size_t n, size_t group, const uint16_t* params,
                            size_t n_groups, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowsPerTokenImpl)(codes, n_rows, row_bytes, bits, first, n,
                                                   group, params, n_groups, out);
}
void DequantizeQ8_0Blocks(const uint8_t* blocks, size_t n_blocks, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeQ8_0BlocksImpl)(blocks, n_blocks, out);
}
void DequantizeQ4_0Blocks(const uint8_t* blocks, size_t n_blocks, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeQ4_0BlocksImpl)(blocks, n_blocks, out);
}

void UnpackCodesU8(const uint8_t* src, int64_t first, size_t n, int bits, uint8_t* dst) {
  HWY_DYNAMIC_DISPATCH(UnpackCodesU8Impl)(src, first, n, bits, dst);
}
void UnpackCodeRows(const uint8_t* src, const int64_t* rows, size_t n_rows, size_t row_bytes,
                    int64_t first, size_t n, int bits, uint8_t* dst) {
  HWY_DYNAMIC_DISPATCH(UnpackCodeRowsImpl)(src, rows, n_rows, row_bytes, first, n, bits, dst);
}
void UnpackCodeRowsRef(const uint8_t* src, const int64_t* rows, size_t n_rows, size_t row_bytes,
                       int64_t first, size_t n, int bits, uint8_t* dst) {
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t row = rows ? static_cast<size_t>(rows[r]) : r;
    UnpackCodesU8Ref(src + row * row_bytes, first, n, bits, dst + r * n);
  }
}
void DequantizeCodes(const uint8_t* codes, size_t n, float scale, float min, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeCodesImpl)(codes, n, scale, min, out);
}
void DequantizeCodesPerChannel(const uint8_t* codes, size_t n, const float* scale,
                               const float* min, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeCodesPerChannelImpl)(codes, n, scale, min, out);
}

// Scalar twins: the bit-stream definition read literally.
void UnpackCodesU8Ref(const uint8_t* src, int64_t first, size_t n, int bits, uint8_t* dst) {
  const uint32_t mask = (1u << bits) - 1;
  int64_t pos = first * bits;
  for (size_t i = 0; i < n; ++i, pos += bits) {
    uint32_t v = src[pos >> 3] >> (pos & 7);
    if ((pos & 7) + bits > 8) v |= static_cast<uint32_t>(src[(pos >> 3) + 1]) << (8 - (pos & 7));
    dst[i] = static_cast<uint8_t>(v & mask);
  }
}
void DequantizeCodesRef(const uint8_t* codes, size_t n, float scale, float min, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(codes[i]) * scale + min;
}
void DequantizeCodesPerChannelRef(const uint8_t* codes, size_t n, const float* scale,
                                  const float* min, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(codes[i]) * scale[i] + min[i];
}
void DequantizeRowsPerChannelRef(const uint8_t* codes, size_t n_rows, size_t row_bytes,
                                 int bits, size_t d, const float* scale, const float* min,
                                 float* out) {
  std::vector<uint8_t> buf(d);
  for (size_t r = 0; r < n_rows; ++r) {
    UnpackCodesU8Ref(codes + r * row_bytes, 0, d, bits, buf.data());
    DequantizeCodesPerChannelRef(buf.data(), d, scale, min, out + r * d);
  }
}
void DequantizeRowsPerTokenRef(const uint8_t* codes, size_t n_rows, size_t row_bytes, int bits,
                               size_t first, size_t n, size_t group, const uint16_t* params,
                               size_t n_groups, float* out) {
  std::vector<uint8_t> buf(n);
  for (size_t r = 0; r < n_rows; ++r) {
    UnpackCodesU8Ref(codes + r * row_bytes, static_cast<int64_t>(first), n, bits, buf.data());
    for (size_t j = 0; j < n; ++j) {
      const size_t g = (first + j) / group;
      const uint16_t* p = params + (r * n_groups + g) * 2;
      out[r * n + j] = static_cast<float>(buf[j]) * Fp16ToFp32(p[0]) + Fp16ToFp32(p[1]);
    }
  }
}
}  // namespace kvpack
#endif  // HWY_ONCE
