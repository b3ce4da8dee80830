#include "ops/vec_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"

namespace kvpack {

float DotF32Ref(const float* a, const float* b, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float DotF16F32Ref(const uint16_t* a, const float* b, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += Fp16ToFp32(a[i]) * b[i];
  return sum;
}

float DotBF16F32Ref(const uint16_t* a, const float* b, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += Bf16ToFp32(a[i]) * b[i];
  return sum;
}

float DotQ8_0F32Ref(const void* a, const float* b, size_t n) {
  // block_q8_0: fp16 d, then 32 int8 codes (ggml-common.h).
  const uint8_t* p = static_cast<const uint8_t*>(a);
  float sum = 0.0f;
  for (size_t blk = 0; blk < n / 32; ++blk, p += 34) {
    uint16_t d_bits;
    std::memcpy(&d_bits, p, 2);
    const int8_t* q = reinterpret_cast<const int8_t*>(p + 2);
    float block_sum = 0.0f;
    for (int j = 0; j < 32; ++j) block_sum += static_cast<float>(q[j]) * b[blk * 32 + j];
    sum += Fp16ToFp32(d_bits) * block_sum;
  }
  return sum;
}

void AxpyF32Ref(float s, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += s * x[i];
}

void AxpyF16Ref(float s, const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += s * Fp16ToFp32(x[i]);
}

void AxpyBF16Ref(float s, const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += s * Bf16ToFp32(x[i]);
}

void ConvertF32ToF16Ref(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

void ConvertF16ToF32Ref(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(src[i]);
}

bool AnyAbsAboveRef(const float* x, size_t n, float limit) {
  for (size_t i = 0; i < n; ++i) {
    if (!(std::fabs(x[i]) <= limit)) return true;
  }
  return false;
}

float MaxF32Ref(const float* x, size_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float ExpSubtractSumRef(float* x, size_t n, float shift) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

void SwiGluF32Ref(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace kvpack
