// Highway implementation of q8_0_dot.h (foreach_target), the AVX512-VNNI kernel (compiled
// with a function attribute, chosen at run time) and the twin.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/q8_0_dot.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/q8_0_dot.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Per block: the codes widened to int16, multiplied in pairs into int32 lanes, summed
// exactly; then the twin's float step.
float DotRowImpl(const uint8_t* row, const BlockQ8_0* x, size_t n) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const size_t N = hn::Lanes(d16);
  float sumf = 0.0f;
  for (size_t b = 0; b < n / 32; ++b) {
    const auto* w = reinterpret_cast<const int8_t*>(row + b * sizeof(BlockQ8_0) + 2);
    auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
    for (size_t j = 0; j < 32; j += N) {
      const auto wv = hn::PromoteTo(d16, hn::LoadU(d8, w + j));
      const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, x[b].qs + j));
      sum0 = hn::ReorderWidenMulAccumulate(d32, wv, xv, sum0, sum1);
    }
    const int32_t sumi = hn::GetLane(hn::SumOfLanes(d32, hn::Add(sum0, sum1)));
    uint16_t dw;
    std::memcpy(&dw, row + b * sizeof(BlockQ8_0), sizeof(dw));
    sumf = std::fma(static_cast<float>(sumi), Fp16ToFp32(dw) * Fp16ToFp32(x[b].d), sumf);
  }
  return sumf;
}

void DotRowsImpl(const uint8_t* rows, size_t row_bytes, size_t n_rows, const BlockQ8_0* x,
                 size_t n, float* y) {
  for (size_t r = 0; r < n_rows; ++r) y[r] = DotRowImpl(rows + r * row_bytes, x, n);
}

// QuantizeRowQ8_0's rules vector by vector, bit for bit: amax ignores NaN as fmax does,
// d = amax / 127 and id = 1 / d (0 when d is 0), round half away from zero (std::round: the
// truncation plus one step away from zero where the dropped fraction is at least 1/2; the
// fraction v - trunc(v) is exact), then SafeToInt8 (NaN -> 0, clamp to [-128, 127]).
void QuantizeRowsImpl(const float* x, size_t n, BlockQ8_0* out) {
  const hn::CappedTag<float, 16> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  for (size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    auto vmax = hn::Zero(d);
    for (size_t j = 0; j < 32; j += N) {
      const auto a = hn::Abs(hn::LoadU(d, xb + j));
      vmax = hn::IfThenElse(hn::Gt(a, vmax), a, vmax);  // NaN compares false: ignored
    }
    const float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));
    const float dq = amax / 127.0f;
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    out[b].d = Fp32ToFp16(dq);
    const auto vid = hn::Set(d, id), half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
    const auto lo = hn::Set(d, -128.0f), hi = hn::Set(d, 127.0f);
    for (size_t j = 0; j < 32; j += N) {
      const auto v = hn::Mul(hn::LoadU(d, xb + j), vid);
      const auto t = hn::Trunc(v);
      const auto away = hn::Ge(hn::Abs(hn::Sub(v, t)), half);
      auto r = hn::Add(t, hn::IfThenElseZero(away, hn::CopySign(one, v)));
      r = hn::IfThenElseZero(hn::Eq(r, r), r);  // NaN -> 0
      r = hn::Min(hn::Max(r, lo), hi);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, out[b].qs + j);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_Q8_0_VNNI 1
#define KVPACK_Q8_0_VNNI_ATTR \
  __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KVPACK_Q8_0_AVX2_ATTR __attribute__((target("avx2,f16c,fma")))
#else
#define KVPACK_HAVE_Q8_0_VNNI 0
#endif

namespace kvpack {
HWY_EXPORT(DotRowsImpl);
HWY_EXPORT(QuantizeRowsImpl);

namespace {

#if KVPACK_HAVE_Q8_0_VNNI
// GCC 12's intrinsic headers build some results from `_mm*_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Weight rows stream from memory: the loop asks for the line this far ahead. 4096 bytes (the
// KV kernels' distance, ops/prefetch.h) left weights_bench's Q8_0Rows/1536/87381 (136 MiB
// from memory) at 17.8-20.2 GB/s against 20.6-21.4 at 12288, three alternating pairs on
// session 33's Zen 4 host (docs/performance-history.md).
constexpr size_t kPrefetchBytes = 12288;

// The AVX2 kernel reads its rows as this many streams at once, a row from each in turn (row i
// of the first half, then row i of the second); each row's result is the one it has in row
// order. One core of session 41's Zen 3 host reads memory faster from two or more streams
// than from one (weights_bench's ReadStreams/<k>, 136 MiB: medians 13.2-13.8 GB/s from one,
// 17.8-19.6 from two, 20.4-20.9 from four), and its Q8_0Rows/1536/87381 (136 MiB from memory)
// took 8480 -> 7368 us, the medians of 18 runs of each build alternated
// (docs/performance-history.md, session 41). In this kernel four streams measured slower than
// two. The AVX512-VNNI kernel keeps row order: it was not measured.
constexpr size_t kRowStreams = 2;

// acc += four u8 x s8 products per 32-bit lane (the asm keeps GCC from copying the
// accumulator around the intrinsic; ops/code_dot_i16.cc).
KVPACK_Q8_0_VNNI_ATTR inline __m256i DotQuads(__m256i acc, __m256i u, __m256i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// A row's two chains added lane by lane, then lanes l and l + 4, l and l + 2, 0 and 1.
KVPACK_Q8_0_AVX2_ATTR inline float SumOfChains(__m256 even, __m256 odd) {
  const __m256 s = _mm256_add_ps(even, odd);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// One block b of a row: its exact integer lane sums as floats, times d_w * d_x, into acc.
KVPACK_Q8_0_VNNI_ATTR inline __m256 Block(const uint8_t* blk, const BlockQ8_0& xb,
                                         const int32_t* offsets, float dx, __m256 acc) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i w = _mm256_xor_si256(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), flip);
  __m256i dot = DotQuads(_mm256_setzero_si256(), w,
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs)));
  dot = _mm256_sub_epi32(dot, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets)));
  uint16_t dw;
  std::memcpy(&dw, blk, sizeof(dw));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(_cvtsh_ss(dw) * dx), acc);
}

KVPACK_Q8_0_VNNI_ATTR void DotRowsVnni(const uint8_t* rows, size_t row_bytes, size_t n_rows,
                                       const Q8_0Activations& x, size_t t, float* y) {
  const size_t n_blocks = x.n() / 32;
  const BlockQ8_0* xb = x.blocks(t);
  const int32_t* off = x.lane_offsets(t);
  const float* dx = x.scales(t);
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows + r * row_bytes;
    // Even and odd blocks in two chains.
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    size_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {
      const uint8_t* blk = row + b * sizeof(BlockQ8_0);
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes), _MM_HINT_T0);
      even = Block(blk, xb[b], off + 8 * b, dx[b], even);
      odd = Block(blk + sizeof(BlockQ8_0), xb[b + 1], off + 8 * (b + 1), dx[b + 1], odd);
    }
    if (b < n_blocks) even = Block(row + b * sizeof(BlockQ8_0), xb[b], off + 8 * b, dx[b], even);
    y[r] = SumOfChains(even, odd);
  }
}

// AVX2 without VNNI: the same lanes as Block's, by vpmaddubsw (unsigned x signed bytes, pairs
// added into int16) and vpmaddwd by ones (pairs of those into int32), as ggml's AVX2
// mul_sum_i8_pairs does: |w| as the unsigned bytes (0..128) and x with w's sign as the signed
// ones. Exact: x is ggml's quantization (QuantizeRowQ8_0Fast), in [-127, 127], so a pair is at
// most 2 x 128 x 127 < 2^15 and no int16 saturates; w = -128 is |w| = 128 as an unsigned byte.
// Lane l is then the exact sum of codes 4 l .. 4 l + 3, as vpdpbusd's, and the float steps are
// Block's: the results are DotRowsVnni's bit for bit. (Only a block whose fp16 d_x is 0, of
// values below fp16's range, can hold -128, whose sign vpsignb cannot flip; its lanes are then
// multiplied by d_w * 0, and the sum is unchanged.)
KVPACK_Q8_0_AVX2_ATTR inline __m256 BlockAvx2(const uint8_t* blk, const BlockQ8_0& xb, float dx,
                                              __m256 acc) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
  const __m256i dot = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  uint16_t dw;
  std::memcpy(&dw, blk, sizeof(dw));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(_cvtsh_ss(dw) * dx), acc);
}

KVPACK_Q8_0_AVX2_ATTR inline float RowAvx2(const uint8_t* row, const BlockQ8_0* xb, const float* dx,
                                           size_t n_blocks) {
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const uint8_t* blk = row + b * sizeof(BlockQ8_0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBytes), _MM_HINT_T0);
    even = BlockAvx2(blk, xb[b], dx[b], even);
    odd = BlockAvx2(blk + sizeof(BlockQ8_0), xb[b + 1], dx[b + 1], odd);
  }
  if (b < n_blocks) even = BlockAvx2(row + b * sizeof(BlockQ8_0), xb[b], dx[b], even);
  return SumOfChains(even, odd);
}

KVPACK_Q8_0_AVX2_ATTR void DotRowsAvx2(const uint8_t* rows, size_t row_bytes, size_t n_rows,
                                       const Q8_0Activations& x, size_t t, float* y) {
  const size_t n_blocks = x.n() / 32;
  const BlockQ8_0* xb = x.blocks(t);
  const float* dx = x.scales(t);
  const size_t per_stream = n_rows / kRowStreams;
  for (size_t i = 0; i < per_stream; ++i) {
    for (size_t s = 0; s < kRowStreams; ++s) {
      const size_t r = s * per_stream + i;
      y[r] = RowAvx2(rows + r * row_bytes, xb, dx, n_blocks);
    }
  }
  for (size_t r = kRowStreams * per_stream; r < n_rows; ++r) {
    y[r] = RowAvx2(rows + r * row_bytes, xb, dx, n_blocks);
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_Q8_0_VNNI

}  // namespace

bool HasVnniQ8_0Dot() {
#if KVPACK_HAVE_Q8_0_VNNI
  static const bool cpu = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  // Tests that pin a lower Highway target take the Highway path.
  return cpu && CodeKernelsUseAvx512();
#else
  return false;
#endif
}

bool HasAvx2Q8_0Dot() {
#if KVPACK_HAVE_Q8_0_VNNI
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  // Tests that pin a target below AVX2 take the Highway path.
  return cpu && !HasVnniQ8_0Dot() && CodeKernelsUseAvx2();
#else
  return false;
#endif
}

void QuantizeRowQ8_0Fast(const float* x, size_t n, BlockQ8_0* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowsImpl)(x, n, out);
}

void Q8_0Activations::Quantize(const float* x, size_t n_tok, size_t n) {
  const size_t nb = n / 32;
  n_ = n;
  blocks_.resize(n_tok * nb);
  offsets_.resize(n_tok * nb * 8);
  scales_.resize(n_tok * nb);
  for (size_t t = 0; t < n_tok; ++t) {
    QuantizeRowQ8_0Fast(x + t * n, n, &blocks_[t * nb]);
  }
  for (size_t b = 0; b < n_tok * nb; ++b) {
    const int8_t* q = blocks_[b].qs;
    for (int l = 0; l < 8; ++l) {
      offsets_[b * 8 + l] = 128 * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
    }
    scales_[b] = Fp16ToFp32(blocks_[b].d);
  }
}

void DotQ8_0Q8_0Rows(const uint8_t* rows, size_t row_bytes, size_t n_rows,
                     const Q8_0Activations& x, size_t t, float* y) {
  if (n_rows == 0) return;
#if KVPACK_HAVE_Q8_0_VNNI
  if (HasVnniQ8_0Dot()) {
    DotRowsVnni(rows, row_bytes, n_rows, x, t, y);
    return;
  }
  if (HasAvx2Q8_0Dot()) {
    DotRowsAvx2(rows, row_bytes, n_rows, x, t, y);
    return;
  }
#endif
  HWY_DYNAMIC_DISPATCH(DotRowsImpl)(rows, row_bytes, n_rows, x.blocks(t), x.n(), y);
}

float DotQ8_0Q8_0Ref(const uint8_t* row, const BlockQ8_0* x, size_t n) {
  float sumf = 0.0f;
  for (size_t b = 0; b < n / 32; ++b) {
    BlockQ8_0 w;
    std::memcpy(&w, row + b * sizeof(BlockQ8_0), sizeof(w));
    int32_t sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += w.qs[j] * x[b].qs[j];
    sumf = std::fma(static_cast<float>(sumi), Fp16ToFp32(w.d) * Fp16ToFp32(x[b].d), sumf);
  }
  return sumf;
}

}  // namespace kvpack
#endif  // HWY_ONCE
