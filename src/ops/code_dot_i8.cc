// Highway-dispatched implementations of code_dot_i8.h, compiled once per SIMD target
// (foreach_target). The AVX-512 and AVX2 targets use raw intrinsics for the integer dot and
// the 16-row (AVX-512) or 8-row (AVX2) reduction tree (Highway 1.0.3 has no u8 x i8 dot
// product).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/code_dot_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/code_dot_i8.h"
#include "ops/vec.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The portable loop: the scalar twin's arithmetic (exact integers), also the tail of the
// SIMD path and the whole path on targets without one.
void DotCodeRowsI8Scalar(const uint8_t* codes, size_t t0, size_t t1, size_t row_stride, size_t d,
                         size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  const size_t n_groups = (d + group - 1) / group;
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t g = 0; g < n_groups; ++g) {
      const size_t c0 = g * group, c1 = std::min(d, c0 + group);
      const int8_t* qi = q + i * d;
      for (size_t t = t0; t < t1; ++t) {
        const uint8_t* row = codes + t * row_stride;
        int32_t acc = 0;
        for (size_t c = c0; c < c1; ++c) acc += static_cast<int32_t>(qi[c]) * row[c];
        out[(i * n_groups + g) * ld + t] = acc;
      }
    }
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Four code x query products per 32-bit lane. vpmaddubsw adds two u8 x s8 products into an
// int16 with saturation; codes <= 127 and |q| <= 127 keep each pair within 2 * 127 * 127.
HWY_INLINE __m512i DotQuads(__m512i codes, __m512i q) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(codes, q), _mm512_set1_epi16(1));
}

// Reduction tree over 16 rows v[0..15] (16 int32 lanes each, lane l = channels 4l..4l+3 of
// a 64-channel chunk). Returns the sums over channels 0..31 (lo) and 32..63 (hi), lane r =
// row r. Levels: pairs of lanes inside 128-bit blocks, then blocks.
HWY_INLINE void ReduceRows16(const __m512i* v, __m512i& lo, __m512i& hi) {
  __m512i b[4];
  for (int r = 0; r < 4; ++r) {
    const __m512i* w = v + 4 * r;
    // [w0 l0+l2, w1 l0+l2, w0 l1+l3, w1 l1+l3] per block
    const __m512i a01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(w[0], w[1]), _mm512_unpackhi_epi32(w[0], w[1]));
    const __m512i a23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(w[2], w[3]), _mm512_unpackhi_epi32(w[2], w[3]));
    // block k: sums of its 16 channels for rows 4r..4r+3
    b[r] = _mm512_add_epi32(_mm512_unpacklo_epi64(a01, a23), _mm512_unpackhi_epi64(a01, a23));
  }
  // [rows 0-3 ch 0-31, rows 0-3 ch 32-63, rows 4-7 ch 0-31, rows 4-7 ch 32-63]
  const __m512i c01 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i c23 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2], b[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(b[2], b[3], _MM_SHUFFLE(3, 1, 3, 1)));
  lo = _mm512_shuffle_i32x4(c01, c23, _MM_SHUFFLE(2, 0, 2, 0));
  hi = _mm512_shuffle_i32x4(c01, c23, _MM_SHUFFLE(3, 1, 3, 1));
}

// Rows [0, n_full) in batches of 16; d % 64 == 0, group divides d and is 32 or a multiple
// of 64.
void DotCodeRowsI8Avx512(const uint8_t* codes, size_t n_full, size_t row_stride, size_t d,
                         size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  const size_t n_chunks = d / 64, n_groups = d / group;
  for (size_t i = 0; i < n_q; ++i) {
    const int8_t* qi = q + i * d;
    for (size_t t0 = 0; t0 < n_full; t0 += 16) {
      const uint8_t* rows = codes + t0 * row_stride;
      __m512i v[16], lo, hi;
      if (group == 32) {
        for (size_t j = 0; j < n_chunks; ++j) {
          const __m512i qv = _mm512_loadu_si512(qi + 64 * j);
          for (int k = 0; k < 16; ++k) {
            v[k] = DotQuads(_mm512_loadu_si512(rows + k * row_stride + 64 * j), qv);
          }
          ReduceRows16(v, lo, hi);
          _mm512_storeu_si512(out + (i * n_groups + 2 * j) * ld + t0, lo);
          _mm512_storeu_si512(out + (i * n_groups + 2 * j + 1) * ld + t0, hi);
        }
        continue;
      }
      const size_t per_group = group / 64;
      for (size_t g = 0; g < n_groups; ++g) {
        for (int k = 0; k < 16; ++k) v[k] = _mm512_setzero_si512();
        for (size_t j = g * per_group; j < (g + 1) * per_group; ++j) {
          const __m512i qv = _mm512_loadu_si512(qi + 64 * j);
          for (int k = 0; k < 16; ++k) {
            v[k] = _mm512_add_epi32(
                v[k], DotQuads(_mm512_loadu_si512(rows + k * row_stride + 64 * j), qv));
          }
        }
        ReduceRows16(v, lo, hi);
        _mm512_storeu_si512(out + (i * n_groups + g) * ld + t0, _mm512_add_epi32(lo, hi));
      }
    }
  }
}
#endif

#if HWY_TARGET == HWY_AVX2
// The AVX2 form of the same algebra: 32 channels per 256-bit step, four code x query
// products per 32-bit lane (vpmaddubsw then vpmaddwd; codes <= 127 and |q| <= 127 keep each
// int16 pair within 2 * 127 * 127), and eight rows reduced together.
HWY_INLINE __m256i DotQuads256(__m256i codes, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, q), _mm256_set1_epi16(1));
}

// Reduction tree over 8 rows v[0..7] (8 int32 lanes each, lane l = channels 4l..4l+3 of a
// 32-channel chunk). Returns lane r = the sum of row r's lanes. Levels: pairs of lanes inside
// each 128-bit half, then the two halves.
HWY_INLINE __m256i ReduceRows8(const __m256i* v) {
  __m256i b[2];
  for (int r = 0; r < 2; ++r) {
    const __m256i* w = v + 4 * r;
    // per half: [w0 l0+l2, w1 l0+l2, w0 l1+l3, w1 l1+l3]
    const __m256i a01 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(w[0], w[1]), _mm256_unpackhi_epi32(w[0], w[1]));
    const __m256i a23 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(w[2], w[3]), _mm256_unpackhi_epi32(w[2], w[3]));
    // per half: the sums of its 16 channels for rows 4r..4r+3
    b[r] = _mm256_add_epi32(_mm256_unpacklo_epi64(a01, a23), _mm256_unpackhi_epi64(a01, a23));
  }
  return _mm256_add_epi32(_mm256_permute2x128_si256(b[0], b[1], 0x20),
                          _mm256_permute2x128_si256(b[0], b[1], 0x31));
}

// Rows [0, n_full) in batches of 8; d % 32 == 0 and group is a multiple of 32 dividing d.
void DotCodeRowsI8Avx2(const uint8_t* codes, size_t n_full, size_t row_stride, size_t d,
                       size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  const size_t n_groups = d / group, per_group = group / 32;
  for (size_t i = 0; i < n_q; ++i) {
    const int8_t* qi = q + i * d;
    for (size_t t0 = 0; t0 < n_full; t0 += 8) {
      const uint8_t* rows = codes + t0 * row_stride;
      for (size_t g = 0; g < n_groups; ++g) {
        __m256i v[8];
        size_t j = g * per_group;
        const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi + 32 * j));
        for (int k = 0; k < 8; ++k) {
          v[k] = DotQuads256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + k * row_stride + 32 * j)),
              q0);
        }
        for (++j; j < (g + 1) * per_group; ++j) {
          const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi + 32 * j));
          for (int k = 0; k < 8; ++k) {
            v[k] = _mm256_add_epi32(v[k],
                                    DotQuads256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                                    rows + k * row_stride + 32 * j)),
                                                qv));
          }
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (i * n_groups + g) * ld + t0),
                            ReduceRows8(v));
      }
    }
  }
}
#endif

void DotCodeRowsI8Impl(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                       size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  group = std::min(group, d);
  size_t done = 0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (d % 64 == 0 && d % group == 0 && (group == 32 || group % 64 == 0)) {
    done = n_rows / 16 * 16;
    DotCodeRowsI8Avx512(codes, done, row_stride, d, group, q, n_q, out, ld);
  }
#elif HWY_TARGET == HWY_AVX2
  if (d % 32 == 0 && group % 32 == 0 && d % group == 0) {
    done = n_rows / 8 * 8;
    DotCodeRowsI8Avx2(codes, done, row_stride, d, group, q, n_q, out, ld);
  }
#endif
  DotCodeRowsI8Scalar(codes, done, n_rows, row_stride, d, group, q, n_q, out, ld);
}

// q[i] = clamp(round(x[i] * inv), -L, L) with L the largest Q (127 or 32767): the codes of
// QuantizeI8 (QuantizeI16) once the scale is known.
template <typename Q>
void QuantizeWithInverse(const float* x, size_t n, float inv, Q* q) {
  constexpr int kLevels = std::numeric_limits<Q>::max();
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<Q, decltype(df)> dq;
  const size_t N = hn::Lanes(df);
  const auto vinv = hn::Set(df, inv);
  const auto lo = hn::Set(di, -kLevels), hi = hn::Set(di, kLevels);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto r = hn::Min(hn::Max(hn::NearestInt(hn::Mul(hn::LoadU(df, x + i), vinv)), lo), hi);
    hn::StoreU(hn::DemoteTo(dq, r), dq, q + i);
  }
  for (; i < n; ++i) {
    q[i] = static_cast<Q>(std::clamp(std::nearbyint(x[i] * inv), float{-kLevels}, float{kLevels}));
  }
}

// Phase by phase over the rows, so that one row's reductions overlap the next row's loads:
// x * scale, dot(x, min) and max |x * scale| per row, then the scales, then the codes (the
// arithmetic of QuantizeI8Impl, so the codes and alpha equal it bit for bit).
void ScaleQuantizeI8Impl(const float* x, size_t n_q, const float* scale, const float* min,
                         size_t n, int8_t* q, float* alpha, float* xmin) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  constexpr size_t kStackFloats = 1024;
  HWY_ALIGN float stack[kStackFloats];
  thread_local std::vector<float> heap;
  float* xs = stack;  // [n_q, n] x * scale
  if (n_q * n > kStackFloats) {
    if (heap.size() < n_q * n) heap.resize(n_q * n);
    xs = heap.data();
  }
  constexpr size_t kMaxRows = 16;
  float inv[kMaxRows];
  for (size_t r0 = 0; r0 < n_q; r0 += kMaxRows) {
    const size_t r1 = std::min(n_q, r0 + kMaxRows);
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* xsr = xs + r * n;
      auto vdot = hn::Zero(df), vmax = hn::Zero(df);
      size_t i = 0;
      for (; i + N <= n; i += N) {
        const auto v = hn::LoadU(df, xr + i);
        const auto vs = hn::Mul(v, hn::LoadU(df, scale + i));
        hn::StoreU(vs, df, xsr + i);
        vmax = hn::Max(vmax, hn::Abs(vs));
        vdot = hn::MulAdd(v, hn::LoadU(df, min + i), vdot);
      }
      float dot = hn::GetLane(hn::SumOfLanes(df, vdot));
      float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
      for (; i < n; ++i) {
        xsr[i] = xr[i] * scale[i];
        amax = std::max(amax, std::fabs(xsr[i]));
        dot += xr[i] * min[i];
      }
      xmin[r] = dot;
      alpha[r] = amax > 0.0f ? amax / 127.0f : 0.0f;
      inv[r - r0] = amax > 0.0f ? 127.0f / amax : 0.0f;
    }
    for (size_t r = r0; r < r1; ++r) {
      const float* xsr = xs + r * n;
      int8_t* qr = q + r * n;
      if (!(inv[r - r0] > 0.0f)) {  // max |x * scale| is 0 (or NaN)
        std::fill(qr, qr + n, int8_t{0});
        continue;
      }
      QuantizeWithInverse(xsr, n, inv[r - r0], qr);
    }
  }
}

// QuantizeI8 and QuantizeI16: the largest magnitude, then the codes; levels L = 127 or 32767.
template <typename Q>
float QuantizeSymmetric(const float* x, size_t n, Q* q) {
  constexpr float kLevels = std::numeric_limits<Q>::max();
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  auto vmax = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= n; i += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, x + i)));
  float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (size_t k = i; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
  if (!(amax > 0.0f)) {
    std::fill(q, q + n, Q{0});
    return 0.0f;
  }
  QuantizeWithInverse(x, n, kLevels / amax, q);
  return amax / kLevels;
}

float QuantizeI8Impl(const float* x, size_t n, int8_t* q) { return QuantizeSymmetric(x, n, q); }

float QuantizeI16Impl(const float* x, size_t n, int16_t* q) {
  return QuantizeSymmetric(x, n, q);
}

void CombineCodeDotsImpl(const int32_t* dots, const float* scale, const float* min, size_t pld,
                         size_t m, size_t n_q, size_t ng, const float* alpha, const float* qsum,
                         float* scores, size_t ld) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < n_q; ++i) {
    float* out = scores + i * ld;
    for (size_t k = 0; k < m; k += N) {
      auto acc = hn::Zero(df);
      for (size_t g = 0; g < ng; ++g) {
        const auto s = hn::Mul(hn::Set(df, alpha[i]), hn::LoadU(df, scale + g * pld + k));
        const auto dot = hn::ConvertTo(df, hn::LoadU(di, dots + (i * ng + g) * pld + k));
        acc = hn::MulAdd(s, dot, acc);
        acc = hn::MulAdd(hn::LoadU(df, min + g * pld + k), hn::Set(df, qsum[i * ng + g]), acc);
      }
      if (k + N <= m) {
        hn::StoreU(acc, df, out + k);
      } else {
        HWY_ALIGN float tail[hn::MaxLanes(df)];
        hn::Store(acc, df, tail);
        for (size_t j = 0; k + j < m; ++j) out[k + j] = tail[j];
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvpack {
namespace {
// The twins' QuantizeI8 / QuantizeI16: levels L = 127 or 32767.
template <typename Q>
float QuantizeSymmetricRef(const float* x, size_t n, Q* q) {
  constexpr float kLevels = std::numeric_limits<Q>::max();
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (!(amax > 0.0f)) {
    for (size_t i = 0; i < n; ++i) q[i] = 0;
    return 0.0f;
  }
  const float inv = kLevels / amax;
  for (size_t i = 0; i < n; ++i) {
    q[i] = static_cast<Q>(std::clamp(std::nearbyint(x[i] * inv), -kLevels, kLevels));
  }
  return amax / kLevels;
}
}  // namespace

HWY_EXPORT(DotCodeRowsI8Impl);
HWY_EXPORT(QuantizeI8Impl);
HWY_EXPORT(QuantizeI16Impl);
HWY_EXPORT(ScaleQuantizeI8Impl);

void ScaleQuantizeI8(const float* x, size_t n_q, const float* scale, const float* min, size_t n,
                     int8_t* q, float* alpha, float* xmin) {
  HWY_DYNAMIC_DISPATCH(ScaleQuantizeI8Impl)(x, n_q, scale, min, n, q, alpha, xmin);
}
void ScaleQuantizeBlockQueryI8(const float* x, size_t n_q, const uint16_t* params, size_t n,
                               int8_t* q, float* alpha, float* xmin) {
  thread_local std::vector<float> scale, min;
  scale.resize(n);
  min.resize(n);
  ConvertF16ToF32(params, scale.data(), n);
  ConvertF16ToF32(params + n, min.data(), n);
  ScaleQuantizeI8(x, n_q, scale.data(), min.data(), n, q, alpha, xmin);
}
HWY_EXPORT(CombineCodeDotsImpl);

void CombineCodeDots(const int32_t* dots, const float* scale, const float* min, size_t pld,
                     size_t m, size_t n_q, size_t ng, const float* alpha, const float* qsum,
                     float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(CombineCodeDotsImpl)
  (dots, scale, min, pld, m, n_q, ng, alpha, qsum, scores, ld);
}

void CombineCodeDotsRef(const int32_t* dots, const float* scale, const float* min, size_t pld,
                        size_t m, size_t n_q, size_t ng, const float* alpha, const float* qsum,
                        float* scores, size_t ld) {
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t k = 0; k < m; ++k) {
      double acc = 0.0;
      for (size_t g = 0; g < ng; ++g) {
        acc += static_cast<double>(alpha[i]) * scale[g * pld + k] * dots[(i * ng + g) * pld + k] +
               static_cast<double>(min[g * pld + k]) * qsum[i * ng + g];
      }
      scores[i * ld + k] = static_cast<float>(acc);
    }
  }
}

void DotCodeRowsI8(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d, size_t group,
                   const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotCodeRowsI8Impl)(codes, n_rows, row_stride, d, group, q, n_q, out, ld);
}

float QuantizeI8(const float* x, size_t n, int8_t* q) {
  return HWY_DYNAMIC_DISPATCH(QuantizeI8Impl)(x, n, q);
}

float QuantizeI16(const float* x, size_t n, int16_t* q) {
  return HWY_DYNAMIC_DISPATCH(QuantizeI16Impl)(x, n, q);
}

float QuantizeI16Ref(const float* x, size_t n, int16_t* q) { return QuantizeSymmetricRef(x, n, q); }

void DotCodeRowsI8Ref(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                      size_t group, const int8_t* q, size_t n_q, int32_t* out, size_t ld) {
  const size_t n_groups = (d + group - 1) / group;
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t t = 0; t < n_rows; ++t) {
      for (size_t g = 0; g < n_groups; ++g) {
        int64_t acc = 0;
        for (size_t c = g * group; c < std::min(d, (g + 1) * group); ++c) {
          acc += static_cast<int64_t>(q[i * d + c]) * codes[t * row_stride + c];
        }
        out[(i * n_groups + g) * ld + t] = static_cast<int32_t>(acc);
      }
    }
  }
}

float QuantizeI8Ref(const float* x, size_t n, int8_t* q) { return QuantizeSymmetricRef(x, n, q); }
}  // namespace kvpack
#endif  // HWY_ONCE
