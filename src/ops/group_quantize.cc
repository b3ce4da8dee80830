// Highway implementations of group_quantize.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/group_quantize.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>

#include "ops/group_quantize.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Two running minima and maxima per vector of lanes, reduced once; the tail scalar. Adding
// +0 turns a -0 extreme into +0, the twin's rule.
void MinMaxF32Impl(const float* x, size_t n, float* mn, float* mx) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  float lo = x[0], hi = x[0];
  size_t i = 0;
  if (n >= 2 * N) {
    auto lo0 = hn::LoadU(d, x), lo1 = hn::LoadU(d, x + N);
    auto hi0 = lo0, hi1 = lo1;
    for (i = 2 * N; i + 2 * N <= n; i += 2 * N) {
      const auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + i + N);
      lo0 = hn::Min(lo0, a);
      hi0 = hn::Max(hi0, a);
      lo1 = hn::Min(lo1, b);
      hi1 = hn::Max(hi1, b);
    }
    lo = hn::GetLane(hn::MinOfLanes(d, hn::Min(lo0, lo1)));
    hi = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hi0, hi1)));
  }
  for (; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *mn = lo + 0.0f;
  *mx = hi + 0.0f;
}

// The code rule of QuantizeCode on a vector of lanes: the same operations in the same order,
// so the same bits.
template <class D, class V>
HWY_INLINE hn::Vec<hn::Rebind<int32_t, D>> CodesOf(D d, V x, V min, V inv, V top) {
  const auto round = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
  const auto v = hn::Min(hn::Max(hn::Mul(hn::Sub(x, min), inv), hn::Zero(d)), top);
  return hn::ConvertTo(hn::Rebind<int32_t, D>(), hn::Sub(hn::Add(v, round), round));
}

void QuantizeCodesU8Impl(const float* x, size_t n, float min, float inv, float top,
                         uint8_t* codes) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  const auto vmin = hn::Set(d, min), vinv = hn::Set(d, inv), vtop = hn::Set(d, top);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto c = CodesOf(d, hn::LoadU(d, x + i), vmin, vinv, vtop);
    hn::StoreU(hn::DemoteTo(d8, c), d8, codes + i);
  }
  for (; i < n; ++i) codes[i] = QuantizeCode(x[i], min, inv, top);
}

// Columns in vectors of lanes, rows one after another: each row's lanes are next to each
// other in memory, the running extremes stay in registers.
void ColumnMinMaxF32Impl(const float* x, size_t n, size_t ld, size_t dim, float* mn,
                         float* mx) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  size_t c = 0;
  for (; c + N <= dim; c += N) {
    auto lo = hn::LoadU(d, x + c), hi = lo;
    for (size_t r = 1; r < n; ++r) {
      const auto v = hn::LoadU(d, x + r * ld + c);
      lo = hn::Min(lo, v);
      hi = hn::Max(hi, v);
    }
    hn::StoreU(hn::Add(lo, zero), d, mn + c);
    hn::StoreU(hn::Add(hi, zero), d, mx + c);
  }
  if (c < dim) ColumnMinMaxF32Ref(x + c, n, ld, dim - c, mn + c, mx + c);
}

void QuantizeColumnsU8Impl(const float* x, size_t n, size_t ld, size_t dim, const float* min,
                           const float* inv, float top, uint8_t* codes) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  const auto vtop = hn::Set(d, top);
  size_t c = 0;
  for (; c + N <= dim; c += N) {
    const auto vmin = hn::LoadU(d, min + c), vinv = hn::LoadU(d, inv + c);
    for (size_t r = 0; r < n; ++r) {
      const auto q = CodesOf(d, hn::LoadU(d, x + r * ld + c), vmin, vinv, vtop);
      hn::StoreU(hn::DemoteTo(d8, q), d8, codes + r * dim + c);
    }
  }
  for (; c < dim; ++c) {
    for (size_t r = 0; r < n; ++r) {
      codes[r * dim + c] = QuantizeCode(x[r * ld + c], min[c], inv[c], top);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvpack {
HWY_EXPORT(MinMaxF32Impl);
HWY_EXPORT(QuantizeCodesU8Impl);
HWY_EXPORT(ColumnMinMaxF32Impl);
HWY_EXPORT(QuantizeColumnsU8Impl);

void MinMaxF32(const float* x, size_t n, float* mn, float* mx) {
  HWY_DYNAMIC_DISPATCH(MinMaxF32Impl)(x, n, mn, mx);
}
void MinMaxF32Ref(const float* x, size_t n, float* mn, float* mx) {
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *mn = lo + 0.0f;
  *mx = hi + 0.0f;
}

void QuantizeCodesU8(const float* x, size_t n, float min, float inv, float top,
                     uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(QuantizeCodesU8Impl)(x, n, min, inv, top, codes);
}
void QuantizeCodesU8Ref(const float* x, size_t n, float min, float inv, float top,
                        uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) codes[i] = QuantizeCode(x[i], min, inv, top);
}

void ColumnMinMaxF32(const float* x, size_t n, size_t ld, size_t d, float* mn, float* mx) {
  HWY_DYNAMIC_DISPATCH(ColumnMinMaxF32Impl)(x, n, ld, d, mn, mx);
}
void ColumnMinMaxF32Ref(const float* x, size_t n, size_t ld, size_t d, float* mn, float* mx) {
  for (size_t c = 0; c < d; ++c) {
    float lo = x[c], hi = x[c];
    for (size_t r = 1; r < n; ++r) {
      lo = std::min(lo, x[r * ld + c]);
      hi = std::max(hi, x[r * ld + c]);
    }
    mn[c] = lo + 0.0f;
    mx[c] = hi + 0.0f;
  }
}

void QuantizeColumnsU8(const float* x, size_t n, size_t ld, size_t d, const float* min,
                       const float* inv, float top, uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(QuantizeColumnsU8Impl)(x, n, ld, d, min, inv, top, codes);
}
void QuantizeColumnsU8Ref(const float* x, size_t n, size_t ld, size_t d, const float* min,
                          const float* inv, float top, uint8_t* codes) {
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < d; ++c) {
      codes[r * d + c] = QuantizeCode(x[r * ld + c], min[c], inv[c], top);
    }
  }
}

}  // namespace kvpack
#endif  // HWY_ONCE
