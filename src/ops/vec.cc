// Highway implementations of vec.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/vec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstring>

#include "core/half.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Four accumulators hide FMA latency; the tail runs scalar.
float DotF32Impl(const float* a, const float* b, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float DotF16F32Impl(const uint16_t* a, const float* b, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  const auto* ah = reinterpret_cast<const hwy::float16_t*>(a);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, ah + i)), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, ah + i + N)), hn::LoadU(d, b + i + N), s1);
  }
  for (; i + N <= n; i += N) {
    s0 = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, ah + i)), hn::LoadU(d, b + i), s0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) sum += Fp16ToFp32(a[i]) * b[i];
  return sum;
}

float DotBF16F32Impl(const uint16_t* a, const float* b, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::bfloat16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  const auto* ah = reinterpret_cast<const hwy::bfloat16_t*>(a);
  auto s0 = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    s0 = hn::MulAdd(hn::PromoteTo(d, hn::LoadU(dh, ah + i)), hn::LoadU(d, b + i), s0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, s0));
  for (; i < n; ++i) sum += Bf16ToFp32(a[i]) * b[i];
  return sum;
}

// Per q8_0 block: promote 32 int8 codes to f32 in vectors of up to 16 lanes, FMA with x,
// then scale the block's partial sum by d.
float DotQ8_0F32Impl(const void* a, const float* b, size_t n) {
  const hn::CappedTag<float, 16> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  const uint8_t* p = static_cast<const uint8_t*>(a);
  auto total = hn::Zero(d);
  for (size_t blk = 0; blk < n / 32; ++blk, p += 34) {
    uint16_t d_bits;
    std::memcpy(&d_bits, p, 2);
    const int8_t* q = reinterpret_cast<const int8_t*>(p + 2);
    const float* x = b + blk * 32;
    auto acc = hn::Zero(d);
    for (size_t j = 0; j < 32; j += N) {
      const auto codes = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q + j)));
      acc = hn::MulAdd(codes, hn::LoadU(d, x + j), acc);
    }
    total = hn::MulAdd(acc, hn::Set(d, Fp16ToFp32(d_bits)), total);
  }
  return hn::GetLane(hn::SumOfLanes(d, total));
}

void AxpyF32Impl(float s, const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vs = hn::Set(d, s);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(vs, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += s * x[i];
}

void AxpyF16Impl(float s, const uint16_t* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  const auto* xh = reinterpret_cast<const hwy::float16_t*>(x);
  const auto vs = hn::Set(d, s);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(vs, hn::PromoteTo(d, hn::LoadU(dh, xh + i)), hn::LoadU(d, y + i)), d,
               y + i);
  }
  for (; i < n; ++i) y[i] += s * Fp16ToFp32(x[i]);
}

void ConvertF32ToF16Impl(const float* src, uint16_t* dst, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  auto* out = reinterpret_cast<hwy::float16_t*>(dst);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, src + i)), dh, out + i);
  for (; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

void ConvertF16ToF32Impl(const uint16_t* src, float* dst, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  const auto* in = reinterpret_cast<const hwy::float16_t*>(src);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, in + i)), d, dst + i);
  for (; i < n; ++i) dst[i] = Fp16ToFp32(src[i]);
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ops/vec.h"

namespace kvpack {
HWY_EXPORT(DotF32Impl);
HWY_EXPORT(DotF16F32Impl);
HWY_EXPORT(DotBF16F32Impl);
HWY_EXPORT(DotQ8_0F32Impl);
HWY_EXPORT(AxpyF32Impl);
HWY_EXPORT(AxpyF16Impl);
HWY_EXPORT(ConvertF32ToF16Impl);
HWY_EXPORT(ConvertF16ToF32Impl);
HWY_EXPORT(TargetNameImpl);

float DotF32(const float* a, const float* b, size_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF32Impl)(a, b, n);
}
float DotF16F32(const uint16_t* a, const float* b, size_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF16F32Impl)(a, b, n);
}
float DotBF16F32(const uint16_t* a, const float* b, size_t n) {
  return HWY_DYNAMIC_DISPATCH(DotBF16F32Impl)(a, b, n);
}
float DotQ8_0F32(const void* a, const float* b, size_t n) {
  return HWY_DYNAMIC_DISPATCH(DotQ8_0F32Impl)(a, b, n);
}
void AxpyF32(float s, const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyF32Impl)(s, x, y, n);
}
void AxpyF16(float s, const uint16_t* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyF16Impl)(s, x, y, n);
}
void ConvertF32ToF16(const float* src, uint16_t* dst, size_t n) {
  HWY_DYNAMIC_DISPATCH(ConvertF32ToF16Impl)(src, dst, n);
}
void ConvertF16ToF32(const uint16_t* src, float* dst, size_t n) {
  HWY_DYNAMIC_DISPATCH(ConvertF16ToF32Impl)(src, dst, n);
}
const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
}  // namespace kvpack
#endif  // HWY_ONCE
