// Highway implementations of vec.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/vec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "ops/prefetch.h"
#include "ops/query_chunks.h"
#include "ops/vec_ref.h"

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

// f16 weight rows stream like q8_0's (below): the line 4 KB ahead.
constexpr size_t kF16PrefetchElems = 2048;

float DotF16F32Impl(const uint16_t* a, const float* b, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  const auto* ah = reinterpret_cast<const hwy::float16_t*>(a);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    hwy::Prefetch(a + i + kF16PrefetchElems);
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

// One fp16 block scale: F16C where the target has it (the portable conversion is a dozen
// scalar instructions per 32-weight block).
HWY_INLINE float BlockScale(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
  return _cvtsh_ss(bits);
#else
  return Fp16ToFp32(bits);
#endif
}

// Decode's matrix-vector products stream every weight row once; the hardware prefetcher
// alone left the q8_0 product at 26 GB/s of this host's ~43 (depth-0 decode 182 tok/s); asking
// for the line 4 KB ahead of each block pair gave 217-222 tok/s. (Passes over 2 or 4 rows at
// once, sharing the loads of x, were slower: 152-161 tok/s, the streams of the rows
// interleaved.)
constexpr size_t kQ8PrefetchBytes = 4096;
// The fp16 cache rows of attention (DotRowsBy4, AxpyRowsBlock) ask for the line
// kPrefetchAheadBytes ahead (ops/prefetch.h), the same distance: they stream from memory once
// the cache outgrows the CPU's, and the quantized codecs' kernels prefetch too, so the f16
// baseline must. Float rows are the dequantized tiles of q8_0 (in L1 already; prefetching
// past them measured no different) and the f32 reference codec.
// bf16 rows (hwy::bfloat16_t below: the same 16 bits as fp16, another type so that the
// templates pick the conversion) stream like fp16's.
template <typename T>
constexpr bool kStreamsRows =
    std::is_same_v<T, uint16_t> || std::is_same_v<T, hwy::bfloat16_t>;

// bf16 rows are read a dword per pair of channels (2j, 2j + 1): since bf16 is the top half
// of an fp32, the dword shifted left by 16 is channel 2j's float and the dword masked to its
// high half channel 2j + 1's. One integer op per vector of floats, where widening bf16 to 32
// bits and shifting takes two (the keys meet a query in the same order, SplitPairs; the
// values' accumulators keep it until the end, AxpyRowsBlockSplit). Channel 2j in the low half
// is the little-endian layout.
static_assert(std::endian::native == std::endian::little, "bf16 pairs assume little-endian");
template <typename T>
constexpr bool kSplitsPairs = std::is_same_v<T, hwy::bfloat16_t>;

// The query order of split bf16 pairs: per 16 channels the 8 even ones, then the 8 odd ones.
// x, out: [n]; n % 16 == 0.
inline void SplitPairs(const float* x, size_t n, float* out) {
  for (size_t c = 0; c < n; c += 16) {
    for (size_t j = 0; j < 8; ++j) {
      out[c + j] = x[c + 2 * j];
      out[c + 8 + j] = x[c + 2 * j + 1];
    }
  }
}

// Per q8_0 block: promote 32 int8 codes to f32 in vectors of up to 16 lanes, multiply with
// x in two independent chains, then add the block's sum scaled by d into one of two running
// totals (even and odd blocks): no chain of dependent FMAs longer than half the blocks.
HWY_INLINE float DotQ8_0Row(const uint8_t* p, const float* b, size_t n) {
  const hn::CappedTag<float, 16> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  // The block's sum of code x x products, in two independent chains.
  auto block_sum = [&](const uint8_t* blk, const float* x) {
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
    for (size_t j = 0; j < 32; j += 2 * N) {
      acc0 = hn::MulAdd(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q + j))),
                        hn::LoadU(d, x + j), acc0);
      if (j + N < 32) {
        acc1 = hn::MulAdd(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q + j + N))),
                          hn::LoadU(d, x + j + N), acc1);
      }
    }
    return hn::Add(acc0, acc1);
  };
  auto even = hn::Zero(d), odd = hn::Zero(d);
  const size_t n_blocks = n / 32;
  size_t blk = 0;
  for (; blk + 2 <= n_blocks; blk += 2, p += 68) {
    hwy::Prefetch(p + kQ8PrefetchBytes);
    even = hn::MulAdd(block_sum(p, b + blk * 32), hn::Set(d, BlockScale(p)), even);
    odd = hn::MulAdd(block_sum(p + 34, b + blk * 32 + 32), hn::Set(d, BlockScale(p + 34)), odd);
  }
  if (blk < n_blocks) {
    even = hn::MulAdd(block_sum(p, b + blk * 32), hn::Set(d, BlockScale(p)), even);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(even, odd)));
}

float DotQ8_0F32Impl(const void* a, const float* b, size_t n) {
  return DotQ8_0Row(static_cast<const uint8_t*>(a), b, n);
}

void AxpyF32Impl(float s, const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vs = hn::Set(d, s);
  size_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::MulAdd(vs, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
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
#if !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)
  // Without F16C, Highway emulates DemoteTo by truncation; keep round-to-nearest-even.
  for (size_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
  return;
#endif
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

// Loads N row elements as floats.
HWY_INLINE hn::Vec<hn::ScalableTag<float>> LoadRow(hn::ScalableTag<float> d, const float* p) {
  return hn::LoadU(d, p);
}
HWY_INLINE hn::Vec<hn::ScalableTag<float>> LoadRow(hn::ScalableTag<float> d, const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}
HWY_INLINE hn::Vec<hn::ScalableTag<float>> LoadRow(hn::ScalableTag<float> d,
                                                   const hwy::bfloat16_t* p) {
  const hn::Rebind<hwy::bfloat16_t, decltype(d)> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, p));
}
HWY_INLINE float ScalarOf(float x) { return x; }
HWY_INLINE float ScalarOf(uint16_t x) { return Fp16ToFp32(x); }
HWY_INLINE float ScalarOf(hwy::bfloat16_t x) { return hwy::F32FromBF16(x); }

// Per-row kernels for the rows a tile kernel leaves over (and targets without one).
HWY_INLINE float DotRow(const float* row, const float* q, size_t n) {
  return DotF32Impl(row, q, n);
}
HWY_INLINE float DotRow(const uint16_t* row, const float* q, size_t n) {
  return DotF16F32Impl(row, q, n);
}
HWY_INLINE float DotRow(const hwy::bfloat16_t* row, const float* q, size_t n) {
  return DotBF16F32Impl(reinterpret_cast<const uint16_t*>(row), q, n);
}

template <typename T>
void DotRowsImpl(const T* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                 float* scores, size_t ld) {
  for (size_t t = 0; t < n_rows; ++t) {
    for (size_t i = 0; i < n_q; ++i) scores[i * ld + t] = DotRow(rows + t * dim, q + i * dim, dim);
  }
}

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Keys (fp16 or f32 rows), four rows at a time: each row is loaded once for all M query rows
// (the GQA group), the 4 * M dot products stay in registers, and a transpose-and-add tree turns the
// four rows' accumulators of a query into one vector of four sums (no per-row horizontal
// sum). 256-bit intrinsics, also on the AVX-512 targets (Highway 1.0.3 has no such tree).
HWY_INLINE __m128 SumLanesOf4(__m256 w0, __m256 w1, __m256 w2, __m256 w3) {
  // per 128-bit half: [w0 l0+l2, w1 l0+l2, w0 l1+l3, w1 l1+l3]
  const __m256 a01 = _mm256_add_ps(_mm256_unpacklo_ps(w0, w1), _mm256_unpackhi_ps(w0, w1));
  const __m256 a23 = _mm256_add_ps(_mm256_unpacklo_ps(w2, w3), _mm256_unpackhi_ps(w2, w3));
  // per half: [w0, w1, w2, w3] summed over the half's lanes
  const __m256 b = _mm256_add_ps(
      _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a01), _mm256_castps_pd(a23))),
      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a01), _mm256_castps_pd(a23))));
  return _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
}

HWY_INLINE __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
HWY_INLINE __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows [0, n_rows / 4 * 4); dim % 8 == 0 (bf16: dim % 16 == 0 and q in SplitPairs order).
// Returns the rows done.
template <size_t M, typename T>
size_t DotRowsBy4(const T* rows, size_t n_rows, size_t dim, const float* q, float* scores,
                  size_t ld) {
  size_t t = 0;
  for (; t + 4 <= n_rows; t += 4) {
    if constexpr (kStreamsRows<T>) {
      const char* next = reinterpret_cast<const char*>(rows + t * dim) + kPrefetchAheadBytes;
      for (size_t b = 0; b < 4 * dim * sizeof(T); b += 64) hwy::Prefetch(next + b);
    }
    __m256 acc[4 * M];
    for (size_t k = 0; k < 4 * M; ++k) acc[k] = _mm256_setzero_ps();
    if constexpr (kSplitsPairs<T>) {
      const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
      for (size_t c = 0; c < dim; c += 16) {
        for (size_t k = 0; k < 4; ++k) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + (t + k) * dim + c));
          const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
          const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(v, high));
          for (size_t m = 0; m < M; ++m) {
            const float* qm = q + m * dim + c;
            acc[m * 4 + k] = _mm256_fmadd_ps(even, _mm256_loadu_ps(qm), acc[m * 4 + k]);
            acc[m * 4 + k] = _mm256_fmadd_ps(odd, _mm256_loadu_ps(qm + 8), acc[m * 4 + k]);
          }
        }
      }
    } else {
      for (size_t c = 0; c < dim; c += 8) {
        for (size_t k = 0; k < 4; ++k) {
          const __m256 x = Load8(rows + (t + k) * dim + c);
          for (size_t m = 0; m < M; ++m) {
            acc[m * 4 + k] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q + m * dim + c), acc[m * 4 + k]);
          }
        }
      }
    }
    for (size_t m = 0; m < M; ++m) {
      _mm_storeu_ps(scores + m * ld + t,
                    SumLanesOf4(acc[m * 4], acc[m * 4 + 1], acc[m * 4 + 2], acc[m * 4 + 3]));
    }
  }
  return t;
}

template <typename T>
void DotRowsTiled(const T* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                  float* scores, size_t ld) {
  if (dim % (kSplitsPairs<T> ? 16 : 8) != 0) {
    return DotRowsImpl(rows, n_rows, dim, q, n_q, scores, ld);
  }
  const float* q_tile = q;
  if constexpr (kSplitsPairs<T>) {
    thread_local std::vector<float> split;
    split.resize(n_q * dim);
    SplitPairs(q, n_q * dim, split.data());
    q_tile = split.data();
  }
  size_t done = 0;
  // Three query rows: 12 accumulators in 16 ymm.
  ForEachQueryChunk<3>(n_q, [&](auto m, size_t i0) {
    done = DotRowsBy4<m>(rows, n_rows, dim, q_tile + i0 * dim, scores + i0 * ld, ld);
  });
  for (size_t t = done; t < n_rows; ++t) {
    for (size_t i = 0; i < n_q; ++i) scores[i * ld + t] = DotRow(rows + t * dim, q + i * dim, dim);
  }
}
#else
template <typename T>
void DotRowsTiled(const T* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                  float* scores, size_t ld) {
  DotRowsImpl(rows, n_rows, dim, q, n_q, scores, ld);
}
#endif

// Values: V vectors of columns from c for M query rows; the M * V accumulators stay in
// registers over all rows (each row is converted once for the whole GQA group). Row-outer
// (kByVector false): per row the V row vectors, then per query row one broadcast into its V
// accumulators; live: M * V accumulators, V row vectors and a broadcast. Vector-outer: per row
// the M broadcasts, then each row vector into its M accumulators; live: M * V accumulators, M
// broadcasts and one row vector, which with three query rows fits 32 columns into 16 registers
// where the row-outer form fits 16. Each accumulator takes the same multiply-adds in the same
// order either way, so the two give the same floats.
template <size_t M, size_t V, bool kByVector, typename T>
HWY_INLINE void AxpyRowsBlock(const float* p, size_t ld, const T* rows, size_t n_rows, size_t dim,
                              size_t c, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> acc[M * V];
  for (size_t m = 0; m < M; ++m) {
    for (size_t v = 0; v < V; ++v) acc[m * V + v] = hn::LoadU(d, out + m * dim + c + v * N);
  }
  for (size_t t = 0; t < n_rows; ++t) {
    const T* row = rows + t * dim + c;
    if constexpr (kStreamsRows<T>) {
      for (size_t b = 0; b < V * N * sizeof(T); b += 64) {
        hwy::Prefetch(reinterpret_cast<const char*>(row) + kPrefetchAheadBytes + b);
      }
    }
    if constexpr (kByVector) {
      hn::Vec<decltype(d)> pm[M];
      for (size_t m = 0; m < M; ++m) pm[m] = hn::Set(d, p[m * ld + t]);
      for (size_t v = 0; v < V; ++v) {
        const auto x = LoadRow(d, row + v * N);
        for (size_t m = 0; m < M; ++m) acc[m * V + v] = hn::MulAdd(pm[m], x, acc[m * V + v]);
      }
    } else {
      hn::Vec<decltype(d)> x[V];
      for (size_t v = 0; v < V; ++v) x[v] = LoadRow(d, row + v * N);
      for (size_t m = 0; m < M; ++m) {
        const auto pm = hn::Set(d, p[m * ld + t]);
        for (size_t v = 0; v < V; ++v) acc[m * V + v] = hn::MulAdd(pm, x[v], acc[m * V + v]);
      }
    }
  }
  for (size_t m = 0; m < M; ++m) {
    for (size_t v = 0; v < V; ++v) hn::StoreU(acc[m * V + v], d, out + m * dim + c + v * N);
  }
}

// AxpyRowsBlock for bf16 rows with V units of 2N channels, each split into its even and odd
// channels as the key kernel's pairs (kSplitsPairs): 2V float vectors per row from V loads
// and 2V integer ops. The accumulators hold the split order and are added to out at the end.
template <size_t M, size_t V>
HWY_INLINE void AxpyRowsBlockSplit(const float* p, size_t ld, const hwy::bfloat16_t* rows,
                                   size_t n_rows, size_t dim, size_t c, float* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const size_t N = hn::Lanes(d);
  const auto high = hn::Set(du, 0xFFFF0000u);
  hn::Vec<decltype(d)> even[M * V], odd[M * V];
  for (size_t k = 0; k < M * V; ++k) even[k] = odd[k] = hn::Zero(d);
  for (size_t t = 0; t < n_rows; ++t) {
    const hwy::bfloat16_t* row = rows + t * dim + c;
    for (size_t b = 0; b < V * 2 * N * sizeof(*row); b += 64) {
      hwy::Prefetch(reinterpret_cast<const char*>(row) + kPrefetchAheadBytes + b);
    }
    hn::Vec<decltype(d)> xe[V], xo[V];
    for (size_t v = 0; v < V; ++v) {
      const auto w = hn::LoadU(du, reinterpret_cast<const uint32_t*>(row + v * 2 * N));
      xe[v] = hn::BitCast(d, hn::ShiftLeft<16>(w));
      xo[v] = hn::BitCast(d, hn::And(w, high));
    }
    for (size_t m = 0; m < M; ++m) {
      const auto pm = hn::Set(d, p[m * ld + t]);
      for (size_t v = 0; v < V; ++v) {
        even[m * V + v] = hn::MulAdd(pm, xe[v], even[m * V + v]);
        odd[m * V + v] = hn::MulAdd(pm, xo[v], odd[m * V + v]);
      }
    }
  }
  HWY_ALIGN float e[hn::MaxLanes(d)];
  HWY_ALIGN float o[hn::MaxLanes(d)];
  for (size_t m = 0; m < M; ++m) {
    for (size_t v = 0; v < V; ++v) {
      hn::Store(even[m * V + v], d, e);
      hn::Store(odd[m * V + v], d, o);
      float* dst = out + m * dim + c + v * 2 * N;
      for (size_t j = 0; j < N; ++j) {
        dst[2 * j] += e[j];
        dst[2 * j + 1] += o[j];
      }
    }
  }
}

// x86 below AVX-512 has 16 vector registers: M * V accumulators and the row vectors and
// broadcasts of a block's form (AxpyRowsBlock) must fit, or an accumulator is spilled and
// every row chains through memory.
constexpr size_t kVecRegs = (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 16 : 32;

template <size_t M, typename T>
void AxpyRowsM(const float* p, size_t ld, const T* rows, size_t n_rows, size_t dim, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kV = M * 4 + 4 + 1 <= kVecRegs ? 4 : 2;
  // Where four row-outer vectors do not fit (three query rows below AVX-512), four vector-outer
  // ones do: 32 columns per pass over the rows instead of 16. An fp16 value tile at head_dim 64
  // was read in four passes of 32 bytes per row, two of them from memory through every other
  // line; now two of 64 bytes (docs/performance-history.md, session 44: kv_codec_bench's
  // AccumulateCold/f16/8192/30 9298 -> 7817 us, best of 9; f16 decode at 8192 about 10% faster).
  constexpr bool kByVector = kV < 4 && M * 4 + M + 1 <= kVecRegs;
  size_t c = 0;
  if constexpr (kSplitsPairs<T>) {  // the same kV float vectors per row, from kV / 2 loads
    for (; c + kV * N <= dim; c += kV * N) {
      AxpyRowsBlockSplit<M, kV / 2>(p, ld, rows, n_rows, dim, c, out);
    }
  }
  if constexpr (kByVector) {
    for (; c + 4 * N <= dim; c += 4 * N) {
      AxpyRowsBlock<M, 4, true>(p, ld, rows, n_rows, dim, c, out);
    }
  }
  for (; c + kV * N <= dim; c += kV * N) {
    AxpyRowsBlock<M, kV, false>(p, ld, rows, n_rows, dim, c, out);
  }
  for (; c + N <= dim; c += N) AxpyRowsBlock<M, 1, false>(p, ld, rows, n_rows, dim, c, out);
  for (; c < dim; ++c) {
    for (size_t t = 0; t < n_rows; ++t) {
      const float v = ScalarOf(rows[t * dim + c]);
      for (size_t m = 0; m < M; ++m) out[m * dim + c] += p[m * ld + t] * v;
    }
  }
}

template <typename T>
void AxpyRowsTiled(const float* p, size_t n_q, size_t ld, const T* rows, size_t n_rows, size_t dim,
                   float* out) {
  ForEachQueryChunk<3>(n_q, [&](auto m, size_t i0) {
    AxpyRowsM<m>(p + i0 * ld, ld, rows, n_rows, dim, out + i0 * dim);
  });
}

void DotRowsF32Impl(const float* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                    float* scores, size_t ld) {
  DotRowsImpl(rows, n_rows, dim, q, n_q, scores, ld);
}
void DotTileF32Impl(const float* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                    float* scores, size_t ld) {
  DotRowsTiled(rows, n_rows, dim, q, n_q, scores, ld);
}
void DotRowsF16Impl(const uint16_t* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                    float* scores, size_t ld) {
  DotRowsTiled(rows, n_rows, dim, q, n_q, scores, ld);
}
void DotRowsBF16Impl(const uint16_t* rows, size_t n_rows, size_t dim, const float* q, size_t n_q,
                     float* scores, size_t ld) {
  DotRowsTiled(reinterpret_cast<const hwy::bfloat16_t*>(rows), n_rows, dim, q, n_q, scores, ld);
}
void AxpyRowsF32Impl(const float* p, size_t n_q, size_t ld, const float* rows, size_t n_rows,
                     size_t dim, float* out) {
  AxpyRowsTiled(p, n_q, ld, rows, n_rows, dim, out);
}
void AxpyRowsF16Impl(const float* p, size_t n_q, size_t ld, const uint16_t* rows, size_t n_rows,
                     size_t dim, float* out) {
  AxpyRowsTiled(p, n_q, ld, rows, n_rows, dim, out);
}

void AxpyRowsBF16Impl(const float* p, size_t n_q, size_t ld, const uint16_t* rows,
                      size_t n_rows, size_t dim, float* out) {
  AxpyRowsTiled(p, n_q, ld, reinterpret_cast<const hwy::bfloat16_t*>(rows), n_rows, dim, out);
}

// One or-ed mask of the failing lanes, tested once at the end (input validation: no early
// exit, so every load is issued at once).
bool AnyAbsAboveImpl(const float* x, size_t n, float limit) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vlimit = hn::Set(d, limit);
  // Lanes where !(|x| <= limit), or-ed; NaN compares false.
  auto bad = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto ok = hn::Le(hn::Abs(hn::LoadU(d, x + i)), vlimit);
    bad = hn::Or(bad, hn::IfThenZeroElse(ok, hn::Set(d, 1.0f)));
  }
  if (!hn::AllTrue(d, hn::Eq(bad, hn::Zero(d)))) return true;
  return AnyAbsAboveRef(x + i, n - i, limit);  // the tail, by the twin's loop
}

// Four running maxima: one waited for the last max at every vector (attention's 1024-score
// tiles, 9 query rows x 30 layers a decode step of the 135M model, were 1% of a KIVI-2 step).
float MaxF32Impl(const float* x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto lowest = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto m0 = lowest, m1 = lowest, m2 = lowest, m3 = lowest;
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    m0 = hn::Max(m0, hn::LoadU(d, x + i));
    m1 = hn::Max(m1, hn::LoadU(d, x + i + N));
    m2 = hn::Max(m2, hn::LoadU(d, x + i + 2 * N));
    m3 = hn::Max(m3, hn::LoadU(d, x + i + 3 * N));
  }
  for (; i + N <= n; i += N) m0 = hn::Max(m0, hn::LoadU(d, x + i));
  const auto m = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  float r = hn::GetLane(hn::MaxOfLanes(d, m));
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// exp(z) for the softmax, leaner than Highway's Exp (contrib/math: about 33 instructions per
// vector on AVX3 here, 0.53 ns per score, a sixth of a 2-bit codec's attention at depth
// 8192) because it gives up the range the softmax never uses:
//   z = n ln2 + r,  n = round(z log2(e)),  r = (z - n ln2_hi) - n ln2_lo,  |r| <= ln2 / 2 (+ tiny)
//   exp(z) = 2^n * sum_{k <= 7} r^k / k!     (Taylor, evaluated by Estrin's scheme for a short
//            dependency chain; the first term left out, (ln2 / 2)^8 / 8! = 5e-9 relative, is
//            below the float ulp).
// n comes from adding 1.5 * 2^23 (the sum's low mantissa bits are then round-to-nearest-even
// of z log2(e), which is also 2^n's exponent field shifted into place). ln2_hi is ln 2 rounded
// to 15 significant bits (the Cody-Waite split Cephes' expf uses), so n * ln2_hi is exact for
// |n| < 512. Range: results below e^-87 (1.6e-38) flush to 0 (-inf gives 0), above e^88 they
// are +inf (the softmax always has z <= 0); NaN stays NaN.
template <class D, class V>
HWY_INLINE V SoftmaxExp(D d, V z) {
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
  const V t = hn::MulAdd(z, hn::Set(d, 1.44269504088896341f), magic);
  const V n = hn::Sub(t, magic);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), z);
  r = hn::NegMulAdd(n, hn::Set(d, 1.428606820286227e-06f), r);
  const V r2 = hn::Mul(r, r), r4 = hn::Mul(r2, r2);
  const V c01 = hn::MulAdd(r, hn::Set(d, 1.0f), hn::Set(d, 1.0f));
  const V c23 = hn::MulAdd(r, hn::Set(d, 1.0f / 6.0f), hn::Set(d, 0.5f));
  const V c45 = hn::MulAdd(r, hn::Set(d, 1.0f / 120.0f), hn::Set(d, 1.0f / 24.0f));
  const V c67 = hn::MulAdd(r, hn::Set(d, 1.0f / 5040.0f), hn::Set(d, 1.0f / 720.0f));
  const V p = hn::MulAdd(hn::MulAdd(c67, r2, c45), r4, hn::MulAdd(c23, r2, c01));
  // n in [-126, 127] wherever the result is kept: bits(t) << 23 is n << 23 (mod 2^32).
  const V pow2n = hn::BitCast(
      d, hn::Add(hn::ShiftLeft<23>(hn::BitCast(di, t)), hn::Set(di, 127 << 23)));
  const V e = hn::Mul(p, pow2n);
  const V big = hn::IfThenElse(hn::Gt(z, hn::Set(d, 88.0f)),
                               hn::Set(d, std::numeric_limits<float>::infinity()), e);
  return hn::IfThenZeroElse(hn::Lt(z, hn::Set(d, -87.0f)), big);
}

float ExpSubtractSumImpl(float* x, size_t n, float shift) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vs = hn::Set(d, shift);
  auto sum = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto e = SoftmaxExp(d, hn::Sub(hn::LoadU(d, x + i), vs));
    hn::StoreU(e, d, x + i);
    sum = hn::Add(sum, e);
  }
  if (i < n) {
    // Tail through a padded buffer (Highway 1.0.3 has no LoadN/StoreN).
    HWY_ALIGN float tail[hn::MaxLanes(d)];
    const size_t rest = n - i;
    for (size_t k = 0; k < N; ++k) tail[k] = k < rest ? x[i + k] : shift - 1000.0f;
    const auto e = SoftmaxExp(d, hn::Sub(hn::Load(d, tail), vs));  // padding gives 0
    hn::Store(e, d, tail);
    for (size_t k = 0; k < rest; ++k) x[i + k] = tail[k];
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// out = gate / (1 + exp(-gate)) * up, the scalar twin's formula with SoftmaxExp: -gate above
// 88 gives +inf (out = -0 where the twin's std::exp is still finite up to 88.7), below -87
// 0 (out = gate * up, as the twin's 1 + tiny rounds to 1).
void SwiGluImpl(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto e = SoftmaxExp(d, hn::Neg(g));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, up + i)), d, out + i);
  }
  if (i < n) {
    HWY_ALIGN float g_tail[hn::MaxLanes(d)];
    HWY_ALIGN float u_tail[hn::MaxLanes(d)];
    const size_t rest = n - i;
    for (size_t k = 0; k < N; ++k) {
      g_tail[k] = k < rest ? gate[i + k] : 0.0f;
      u_tail[k] = k < rest ? up[i + k] : 0.0f;
    }
    const auto g = hn::Load(d, g_tail);
    const auto e = SoftmaxExp(d, hn::Neg(g));
    hn::Store(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::Load(d, u_tail)), d, g_tail);
    for (size_t k = 0; k < rest; ++k) out[i + k] = g_tail[k];
  }
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
HWY_EXPORT(AnyAbsAboveImpl);
HWY_EXPORT(MaxF32Impl);
HWY_EXPORT(ExpSubtractSumImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(DotRowsF32Impl);
HWY_EXPORT(DotTileF32Impl);
HWY_EXPORT(DotRowsF16Impl);
HWY_EXPORT(AxpyRowsF32Impl);
HWY_EXPORT(AxpyRowsF16Impl);
HWY_EXPORT(DotRowsBF16Impl);
HWY_EXPORT(AxpyRowsBF16Impl);

void DotRowsF32(const float* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotRowsF32Impl)(rows, n_rows, d, q, n_q, scores, ld);
}
void DotTileF32(const float* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotTileF32Impl)(rows, n_rows, d, q, n_q, scores, ld);
}
void DotRowsF16(const uint16_t* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotRowsF16Impl)(rows, n_rows, d, q, n_q, scores, ld);
}
void AxpyRowsF32(const float* p, size_t n_q, size_t ld, const float* rows, size_t n_rows, size_t d,
                 float* out) {
  HWY_DYNAMIC_DISPATCH(AxpyRowsF32Impl)(p, n_q, ld, rows, n_rows, d, out);
}
void AxpyRowsF16(const float* p, size_t n_q, size_t ld, const uint16_t* rows, size_t n_rows,
                 size_t d, float* out) {
  HWY_DYNAMIC_DISPATCH(AxpyRowsF16Impl)(p, n_q, ld, rows, n_rows, d, out);
}

void DotRowsBF16(const uint16_t* rows, size_t n_rows, size_t d, const float* q, size_t n_q,
                 float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotRowsBF16Impl)(rows, n_rows, d, q, n_q, scores, ld);
}
void AxpyRowsBF16(const float* p, size_t n_q, size_t ld, const uint16_t* rows, size_t n_rows,
                  size_t d, float* out) {
  HWY_DYNAMIC_DISPATCH(AxpyRowsBF16Impl)(p, n_q, ld, rows, n_rows, d, out);
}

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
bool AnyAbsAbove(const float* x, size_t n, float limit) {
  return HWY_DYNAMIC_DISPATCH(AnyAbsAboveImpl)(x, n, limit);
}
float MaxF32(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(MaxF32Impl)(x, n); }
float ExpSubtractSum(float* x, size_t n, float shift) {
  return HWY_DYNAMIC_DISPATCH(ExpSubtractSumImpl)(x, n, shift);
}
void SwiGluF32(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(gate, up, n, out);
}
const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
}  // namespace kvpack
#endif  // HWY_ONCE
