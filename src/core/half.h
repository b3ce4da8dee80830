// IEEE fp16 and bfloat16 conversions, scalar and exact (round to nearest even).
// The SIMD paths convert with hardware instructions; these are their reference twins and
// serve the cold paths (GGUF metadata, scales).
#ifndef KVPACK_CORE_HALF_H_
#define KVPACK_CORE_HALF_H_

#include <cstdint>
#include <cstring>

namespace kvpack {

inline float Fp32FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline uint32_t BitsFromFp32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(f));
  return bits;
}

inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return Fp32FromBits(sign);
    // Subnormal: value = mant * 2^-24.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return Fp32FromBits(sign | 0x7f800000u | (mant << 13));
  return Fp32FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t Fp32ToFp16(float f) {
  const uint32_t x = BitsFromFp32(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // result is subnormal or zero: round abs * 2^24 to an integer
    const float v = Fp32FromBits(abs) * 16777216.0f;
    // v < 1024; round half to even via the float addition trick.
    const float r = (v + 8388608.0f) - 8388608.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even.
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

inline float Bf16ToFp32(uint16_t h) { return Fp32FromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t Fp32ToBf16(float f) {
  const uint32_t x = BitsFromFp32(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace kvpack

#endif  // KVPACK_CORE_HALF_H_
