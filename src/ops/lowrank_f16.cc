// Highway implementations of lowrank_f16.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/lowrank_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"

#include <algorithm>
#include <cstdint>

#include "core/half.h"
#include "ops/lowrank_f16.h"
#include "ops/lowrank_runs_avx512.h"
#include "ops/prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

HWY_INLINE hn::Vec<DF> LoadF16(DF d, const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

// Up to kGroup query rows are handled together so that every fp16 vector of A and B is
// converted once per group of rows, not once per row.
constexpr size_t kGroup = 4;

// out[0..4) = the lane sums of a, b, c, e. One SumOfLanes per vector is a chain of about nine
// dependent shuffles and adds; here two interleaving levels leave each 128-bit block holding
// its share of all four sums, and the blocks are then added half by half: 13 operations for
// the four on 16 lanes, against 36. (The projections of a block are a few such sums each,
// and their reductions were over a third of these kernels' time, perf on
// gear_breakdown_bench.)
#if HWY_TARGET != HWY_SCALAR
template <class D>
HWY_INLINE void StoreBlockSums(D d, hn::Vec<D> v, float* out) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    StoreBlockSums(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
  } else {
    hn::StoreU(v, d, out);
  }
}
#endif

template <class D>
HWY_INLINE void StoreSumsOfFour(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c, hn::Vec<D> e,
                                float* out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a), out[1] = hn::GetLane(b), out[2] = hn::GetLane(c);
  out[3] = hn::GetLane(e);
#else
  // Per block, lanes (a0 + a2, b0 + b2, a1 + a3, b1 + b3), and likewise for c, e.
  const auto ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const auto ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  // Pairs of lanes as 64-bit words: per block (a, b, c, e), each the block's sum.
  const hn::Repartition<uint64_t, D> dw;
  const auto ab_w = hn::BitCast(dw, ab), ce_w = hn::BitCast(dw, ce);
  const auto sums = hn::Add(hn::BitCast(d, hn::InterleaveLower(dw, ab_w, ce_w)),
                            hn::BitCast(d, hn::InterleaveUpper(dw, ab_w, ce_w)));
  StoreBlockSums(d, sums, out);
#endif
}

// sums[m] = the lane sums of acc[m], m < M, four at a time (missing ones as zeros).
template <size_t M>
HWY_INLINE void StoreLaneSums(DF d, const hn::Vec<DF> (&acc)[M], float* sums) {
  const auto zero = hn::Zero(d);
  for (size_t m = 0; m < M; m += 4) {
    StoreSumsOfFour(d, acc[m], m + 1 < M ? acc[m + 1] : zero, m + 2 < M ? acc[m + 2] : zero,
                    m + 3 < M ? acc[m + 3] : zero, sums + m);
  }
}

// proj[ii * kLowRankMaxRank + k] = sum_j x[ii * ldx + j] * h[k * stride + j], j < n,
// for ii < NQ rows of x and the KR ranks k of h (fp16) from its first row: all NQ x KR
// products accumulate in registers along j and are reduced together.
template <size_t NQ, size_t KR>
HWY_INLINE void ProjectRanks(DF d, const uint16_t* h, size_t stride, size_t n, const float* x,
                             size_t ldx, float* proj) {
  const size_t N = hn::Lanes(d);
  hn::Vec<DF> acc[NQ * KR];
  for (auto& a : acc) a = hn::Zero(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    hn::Vec<DF> hv[KR];
    for (size_t k = 0; k < KR; ++k) hv[k] = LoadF16(d, h + k * stride + j);
    for (size_t ii = 0; ii < NQ; ++ii) {
      const auto xv = hn::LoadU(d, x + ii * ldx + j);
      for (size_t k = 0; k < KR; ++k) acc[ii * KR + k] = hn::MulAdd(hv[k], xv, acc[ii * KR + k]);
    }
  }
  float sums[(NQ * KR + 3) / 4 * 4];
  StoreLaneSums(d, acc, sums);
  for (size_t ii = 0; ii < NQ; ++ii) {
    for (size_t k = 0; k < KR; ++k) {
      float sum = sums[ii * KR + k];
      for (size_t jj = j; jj < n; ++jj) sum += Fp16ToFp32(h[k * stride + jj]) * x[ii * ldx + jj];
      proj[ii * kLowRankMaxRank + k] = sum;
    }
  }
}

// ProjectRanks over every rank, four ranks at a time.
template <size_t NQ>
HWY_INLINE void Project(DF d, const uint16_t* h, size_t stride, size_t rank, size_t n,
                        const float* x, size_t ldx, float* proj) {
  for (size_t k = 0; k < rank; k += 4) {
    const uint16_t* hk = h + k * stride;
    switch (std::min<size_t>(rank - k, 4)) {
      case 1: ProjectRanks<NQ, 1>(d, hk, stride, n, x, ldx, proj + k); break;
      case 2: ProjectRanks<NQ, 2>(d, hk, stride, n, x, ldx, proj + k); break;
      case 3: ProjectRanks<NQ, 3>(d, hk, stride, n, x, ldx, proj + k); break;
      default: ProjectRanks<NQ, 4>(d, hk, stride, n, x, ldx, proj + k); break;
    }
  }
}

// y[ii * ldy + j] += sum_k w[ii * kLowRankMaxRank + k] * h[k * stride + j], j < n, ii < NQ.
template <size_t NQ>
HWY_INLINE void AddCombinations(DF d, const float* w, size_t rank, const uint16_t* h,
                                size_t stride, size_t n, float* y, size_t ldy) {
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    hn::Vec<DF> acc[NQ];
    for (size_t ii = 0; ii < NQ; ++ii) acc[ii] = hn::LoadU(d, y + ii * ldy + j);
    for (size_t k = 0; k < rank; ++k) {
      const auto hv = LoadF16(d, h + k * stride + j);
      for (size_t ii = 0; ii < NQ; ++ii) {
        acc[ii] = hn::MulAdd(hn::Set(d, w[ii * kLowRankMaxRank + k]), hv, acc[ii]);
      }
    }
    for (size_t ii = 0; ii < NQ; ++ii) hn::StoreU(acc[ii], d, y + ii * ldy + j);
  }
  for (; j < n; ++j) {
    for (size_t ii = 0; ii < NQ; ++ii) {
      float acc = y[ii * ldy + j];
      for (size_t k = 0; k < rank; ++k) acc += w[ii * kLowRankMaxRank + k] * Fp16ToFp32(h[k * stride + j]);
      y[ii * ldy + j] = acc;
    }
  }
}

template <size_t NQ>
void ScoresGroup(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t, size_t rank,
                 size_t d, size_t n, const float* q, float* scores, size_t ld) {
  const DF df;
  float qb[kGroup * kLowRankMaxRank];  // the rows' projections on B: [NQ, rank]
  Project<NQ>(df, b_t, d, rank, d, q, d, qb);
  AddCombinations<NQ>(df, qb, rank, a_t, a_stride, n, scores, ld);
}

template <size_t NQ>
void AccumulateGroup(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t, size_t rank,
                     size_t d, size_t n, const float* p, size_t ld, float* out) {
  const DF df;
  float pa[kGroup * kLowRankMaxRank];  // the rows' projections on A: [NQ, rank]
  Project<NQ>(df, a_t, a_stride, rank, n, p, ld, pa);
  AddCombinations<NQ>(df, pa, rank, b_t, d, d, out, d);
}

// The factors of consecutive blocks lie one after another (kv/codecs/gear_parts.h's arenas),
// and a block's are only a few hundred bytes: without software prefetching every block's
// first lines missed the cache once the cache outgrew it (in kv_codec_bench's 30-layer runs
// the loads of A and B took over half of these kernels' time). Each call asks for the lines
// kPrefetchAheadBytes past those it reads (of A^T only the columns it reads: a call covers a
// tile of a block, and a prompt block's rows are thousands of tokens long).
void PrefetchAhead(const uint16_t* p, size_t n) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p + n);
  for (uintptr_t a = begin; a < end; a += 64) {
    hwy::Prefetch(reinterpret_cast<const uint8_t*>(a + kPrefetchAheadBytes));
  }
}

void LowRankAddScoresF16Impl(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                             size_t rank, size_t d, size_t n, const float* q, size_t n_q,
                             float* scores, size_t ld) {
  for (size_t k = 0; k < rank; ++k) PrefetchAhead(a_t + k * a_stride, n);
  PrefetchAhead(b_t, rank * d);
  // By the number of rows in the group (index 0 unused).
  static constexpr decltype(&ScoresGroup<1>) kByRows[] = {nullptr, &ScoresGroup<1>,
                                                          &ScoresGroup<2>, &ScoresGroup<3>,
                                                          &ScoresGroup<4>};
  static_assert(kGroup == 4);
  for (size_t i = 0; i < n_q; i += kGroup) {
    kByRows[std::min(kGroup, n_q - i)](a_t, a_stride, b_t, rank, d, n, q + i * d, scores + i * ld,
                                       ld);
  }
}

void LowRankAddAccumulateF16Impl(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                                 size_t rank, size_t d, size_t n, const float* p, size_t n_q,
                                 size_t ld, float* out) {
  for (size_t k = 0; k < rank; ++k) PrefetchAhead(a_t + k * a_stride, n);
  PrefetchAhead(b_t, rank * d);
  static constexpr decltype(&AccumulateGroup<1>) kByRows[] = {
      nullptr, &AccumulateGroup<1>, &AccumulateGroup<2>, &AccumulateGroup<3>,
      &AccumulateGroup<4>};
  static_assert(kGroup == 4);
  for (size_t i = 0; i < n_q; i += kGroup) {
    kByRows[std::min(kGroup, n_q - i)](a_t, a_stride, b_t, rank, d, n, p + i * ld, ld,
                                       out + i * d);
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

void LowRankRunAddScoresF16(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                            size_t n, size_t rank, size_t d, const float* q, size_t n_q,
                            float* scores, size_t ld) {
  if (LowRankRunKernelAvailable(rank, d, n)) {
    LowRankRunAddScoresAvx512(a_t, b_t, n_blocks, n, rank, d, q, n_q, scores, ld);
    return;
  }
  for (size_t j = 0; j < n_blocks; ++j) {
    LowRankAddScoresF16(a_t + j * rank * n, n, b_t + j * rank * d, rank, d, n, q, n_q,
                        scores + j * n, ld);
  }
}
void LowRankRunAddScoresF16Ref(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                               size_t n, size_t rank, size_t d, const float* q, size_t n_q,
                               float* scores, size_t ld) {
  for (size_t j = 0; j < n_blocks; ++j) {
    LowRankAddScoresF16Ref(a_t + j * rank * n, n, b_t + j * rank * d, rank, d, n, q, n_q,
                           scores + j * n, ld);
  }
}

void LowRankRunAddAccumulateF16(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                size_t n, size_t rank, size_t d, const float* p, size_t n_q,
                                size_t ld, float* out) {
  if (LowRankRunKernelAvailable(rank, d, n)) {
    LowRankRunAddAccumulateAvx512(a_t, b_t, n_blocks, n, rank, d, p, n_q, ld, out);
    return;
  }
  for (size_t j = 0; j < n_blocks; ++j) {
    LowRankAddAccumulateF16(a_t + j * rank * n, n, b_t + j * rank * d, rank, d, n, p + j * n,
                            n_q, ld, out);
  }
}
void LowRankRunAddAccumulateF16Ref(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                   size_t n, size_t rank, size_t d, const float* p, size_t n_q,
                                   size_t ld, float* out) {
  for (size_t j = 0; j < n_blocks; ++j) {
    LowRankAddAccumulateF16Ref(a_t + j * rank * n, n, b_t + j * rank * d, rank, d, n,
                               p + j * n, n_q, ld, out);
  }
}
}  // namespace kvpack
#endif  // HWY_ONCE
