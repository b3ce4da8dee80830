// Highway implementations of lowrank_f16.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/lowrank_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "core/half.h"
#include "ops/lowrank_f16.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

HWY_INLINE hn::Vec<DF> LoadF16(DF d, const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

// sum_j x[j] * h[j], j < n (h fp16).
HWY_INLINE float DotF16(DF d, const uint16_t* h, const float* x, size_t n) {
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    s0 = hn::MulAdd(LoadF16(d, h + j), hn::LoadU(d, x + j), s0);
    s1 = hn::MulAdd(LoadF16(d, h + j + N), hn::LoadU(d, x + j + N), s1);
  }
  for (; j + N <= n; j += N) s0 = hn::MulAdd(LoadF16(d, h + j), hn::LoadU(d, x + j), s0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; j < n; ++j) sum += Fp16ToFp32(h[j]) * x[j];
  return sum;
}

// y[j] += sum_k w[k] * h[k * stride + j], j < n (h fp16).
HWY_INLINE void AddCombination(DF d, const float* w, size_t rank, const uint16_t* h,
                               size_t stride, size_t n, float* y) {
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    auto acc = hn::LoadU(d, y + j);
    for (size_t k = 0; k < rank; ++k) acc = hn::MulAdd(hn::Set(d, w[k]), LoadF16(d, h + k * stride + j), acc);
    hn::StoreU(acc, d, y + j);
  }
  for (; j < n; ++j) {
    float acc = y[j];
    for (size_t k = 0; k < rank; ++k) acc += w[k] * Fp16ToFp32(h[k * stride + j]);
    y[j] = acc;
  }
}

void LowRankAddScoresF16Impl(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                             size_t rank, size_t d, size_t n, const float* q, size_t n_q,
                             float* scores, size_t ld) {
  const DF df;
  float qb[kLowRankMaxRank];  // one query row projected on B: [rank]
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t k = 0; k < rank; ++k) qb[k] = DotF16(df, b_t + k * d, q + i * d, d);
    AddCombination(df, qb, rank, a_t, a_stride, n, scores + i * ld);
  }
}

void LowRankAddAccumulateF16Impl(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                                 size_t rank, size_t d, size_t n, const float* p, size_t n_q,
                                 size_t ld, float* out) {
  const DF df;
  float pa[kLowRankMaxRank];  // one probability row projected on A: [rank]
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t k = 0; k < rank; ++k) pa[k] = DotF16(df, a_t + k * a_stride, p + i * ld, n);
    AddCombination(df, pa, rank, b_t, d, d, out + i * d);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvpack {
HWY_EXPORT(LowRankAddScoresF16Impl);
HWY_EXPORT(LowRankAddAccumulateF16Impl);

void LowRankAddScoresF16(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                         size_t rank, size_t d, size_t n, const float* q, size_t n_q,
                         float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(LowRankAddScoresF16Impl)(a_t, a_stride, b_t, rank, d, n, q, n_q, scores,
                                                ld);
}
void LowRankAddAccumulateF16(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                             size_t rank, size_t d, size_t n, const float* p, size_t n_q,
                             size_t ld, float* out) {
  HWY_DYNAMIC_DISPATCH(LowRankAddAccumulateF16Impl)(a_t, a_stride, b_t, rank, d, n, p, n_q, ld,
                                                    out);
}

void LowRankAddScoresF16Ref(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                            size_t rank, size_t d, size_t n, const float* q, size_t n_q,
                            float* scores, size_t ld) {
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double acc = scores[i * ld + j];
      for (size_t k = 0; k < rank; ++k) {
        double qb = 0.0;
        for (size_t c = 0; c < d; ++c) qb += static_cast<double>(q[i * d + c]) * Fp16ToFp32(b_t[k * d + c]);
        acc += qb * Fp16ToFp32(a_t[k * a_stride + j]);
      }
      scores[i * ld + j] = static_cast<float>(acc);
    }
  }
}
void LowRankAddAccumulateF16Ref(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                                size_t rank, size_t d, size_t n, const float* p, size_t n_q,
                                size_t ld, float* out) {
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t c = 0; c < d; ++c) {
      double acc = out[i * d + c];
      for (size_t k = 0; k < rank; ++k) {
        double pa = 0.0;
        for (size_t j = 0; j < n; ++j) pa += static_cast<double>(p[i * ld + j]) * Fp16ToFp32(a_t[k * a_stride + j]);
        acc += pa * Fp16ToFp32(b_t[k * d + c]);
      }
      out[i * d + c] = static_cast<float>(acc);
    }
  }
}
}  // namespace kvpack
#endif  // HWY_ONCE
