// Highway implementations of code_dot.h, compiled once per SIMD target (foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/code_dot.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>

#include "ops/code_dot.h"
#include "ops/query_chunks.h"

HWY_BEFORE_NAMESPACE();
namespace kvpack {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Vector registers of the target: x86 below AVX-512 has 16. A register block of M query rows
// and V vectors needs M * V accumulators, V code vectors and a broadcast; one more and the
// compiler spills an accumulator, which chains every row through a store and a reload.
constexpr size_t kVecRegs = (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 16 : 32;
constexpr bool BlockFits(size_t m, size_t v) { return m * v + v + 1 <= kVecRegs; }

HWY_INLINE hn::Vec<DF> LoadCodes(DF d, const uint8_t* p) {
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, p)));
}

// M (1..4) query rows share one conversion of each code vector; one reduction per row
// and query.
template <size_t M>
HWY_INLINE void DotCodeRowsM(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t dim,
                             const float* q, float* scores, size_t ld) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t main = dim / N * N;
  for (size_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = codes + t * row_stride;
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (size_t c = 0; c < main; c += N) {
      const auto v = LoadCodes(d, row + c);
      a0 = hn::MulAdd(v, hn::LoadU(d, q + c), a0);
      if (M > 1) a1 = hn::MulAdd(v, hn::LoadU(d, q + dim + c), a1);
      if (M > 2) a2 = hn::MulAdd(v, hn::LoadU(d, q + 2 * dim + c), a2);
      if (M > 3) a3 = hn::MulAdd(v, hn::LoadU(d, q + 3 * dim + c), a3);
    }
    float s[4] = {hn::GetLane(hn::SumOfLanes(d, a0)), 0.0f, 0.0f, 0.0f};
    if (M > 1) s[1] = hn::GetLane(hn::SumOfLanes(d, a1));
    if (M > 2) s[2] = hn::GetLane(hn::SumOfLanes(d, a2));
    if (M > 3) s[3] = hn::GetLane(hn::SumOfLanes(d, a3));
    for (size_t c = main; c < dim; ++c) {
      for (size_t k = 0; k < M; ++k) s[k] += q[k * dim + c] * static_cast<float>(row[c]);
    }
    for (size_t k = 0; k < M; ++k) scores[k * ld + t] = s[k];
  }
}

void DotCodeRowsImpl(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t dim,
                     const float* q, size_t n_q, float* scores, size_t ld) {
  ForEachQueryChunk<4>(n_q, [&](auto m, size_t i0) {
    DotCodeRowsM<m>(codes, n_rows, row_stride, dim, q + i0 * dim, scores + i0 * ld, ld);
  });
}

// V (1, 2 or 4) vectors of columns from c, all in one group, for M (1..4) query rows: the
// M * V accumulators stay in registers over all rows; wm[m] is query m's weight row for that
// group (one broadcast per row and query, shared by the V vectors).
template <size_t M, size_t V>
HWY_INLINE void AxpyWeightedBlock(const float* const* wm, const uint8_t* codes, size_t n_rows,
                                  size_t row_stride, size_t c, float* out, size_t dim) {
  const DF d;
  const size_t N = hn::Lanes(d);
  hn::Vec<DF> acc[M * V];
  for (size_t m = 0; m < M; ++m) {
    for (size_t v = 0; v < V; ++v) acc[m * V + v] = hn::LoadU(d, out + m * dim + c + v * N);
  }
  for (size_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = codes + t * row_stride + c;
    hn::Vec<DF> x[V];
    for (size_t v = 0; v < V; ++v) x[v] = LoadCodes(d, row + v * N);
    for (size_t m = 0; m < M; ++m) {
      const auto wt = hn::Set(d, wm[m][t]);
      for (size_t v = 0; v < V; ++v) acc[m * V + v] = hn::MulAdd(wt, x[v], acc[m * V + v]);
    }
  }
  for (size_t m = 0; m < M; ++m) {
    for (size_t v = 0; v < V; ++v) hn::StoreU(acc[m * V + v], d, out + m * dim + c + v * N);
  }
}

template <size_t M>
HWY_INLINE void AxpyWeightedColumns(const float* w, size_t ld, size_t n_groups,
                                    const uint8_t* codes, size_t n_rows, size_t row_stride,
                                    size_t c, size_t n_vec, size_t group, float* out, size_t dim) {
  const float* wm[M];
  for (size_t m = 0; m < M; ++m) wm[m] = w + (m * n_groups + group) * ld;
  switch (n_vec) {
    case 4:
      AxpyWeightedBlock<M, 4>(wm, codes, n_rows, row_stride, c, out, dim);
      break;
    case 2:
      AxpyWeightedBlock<M, 2>(wm, codes, n_rows, row_stride, c, out, dim);
      break;
    default:
      AxpyWeightedBlock<M, 1>(wm, codes, n_rows, row_stride, c, out, dim);
      break;
  }
}

void AxpyCodeRowsWeightedImpl(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                              size_t n_rows, size_t row_stride, size_t dim, size_t first,
                              size_t group, float* out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t g_first = first / group;
  const size_t n_groups = (first + dim - 1) / group - g_first + 1;
  auto group_of = [&](size_t c) { return (first + c) / group - g_first; };
  auto vector_ok = [&](size_t c) { return c + N <= dim && group_of(c) == group_of(c + N - 1); };
  size_t c = 0;
  while (c < dim) {
    if (!vector_ok(c)) {  // straddles two groups, or the tail: one column at a time
      const size_t g = group_of(c);
      for (size_t t = 0; t < n_rows; ++t) {
        const float v = static_cast<float>(codes[t * row_stride + c]);
        for (size_t i = 0; i < n_q; ++i) out[i * dim + c] += w[(i * n_groups + g) * ld + t] * v;
      }
      ++c;
      continue;
    }
    // Up to four vectors of the same group: one weight broadcast per row and query.
    const size_t g = group_of(c);
    size_t n_vec = 1;
    while (n_vec < 4 && vector_ok(c + n_vec * N) && group_of(c + n_vec * N) == g) ++n_vec;
    if (n_vec == 3) n_vec = 2;
    if (n_vec == 4 && !BlockFits(std::min<size_t>(4, n_q), 4)) n_vec = 2;
    ForEachQueryChunk<4>(n_q, [&](auto m, size_t i0) {
      AxpyWeightedColumns<m>(w + i0 * n_groups * ld, ld, n_groups, codes, n_rows, row_stride, c,
                             n_vec, g, out + i0 * dim, dim);
    });
    c += n_vec * N;
  }
}

bool UsesAvx512Impl() { return HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL; }
bool UsesAvx2Impl() {
  return HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL;
}

void GroupWeightsAndMinSumsImpl(const float* p, size_t ldp, size_t n_q, const float* scale,
                                const float* min, size_t lds, size_t ng, size_t m, float* w,
                                size_t ldw, float* msum) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i < n_q; ++i) {
    const float* pi = p + i * ldp;
    for (size_t g = 0; g < ng; ++g) {
      const float* sc = scale + g * lds;
      const float* mn = min + g * lds;
      float* wi = w + (i * ng + g) * ldw;
      auto acc = hn::Zero(d);
      size_t k = 0;
      for (; k + N <= m; k += N) {
        const auto pk = hn::LoadU(d, pi + k);
        hn::StoreU(hn::Mul(pk, hn::LoadU(d, sc + k)), d, wi + k);
        acc = hn::MulAdd(pk, hn::LoadU(d, mn + k), acc);
      }
      float tail = 0.0f;
      for (; k < m; ++k) {
        wi[k] = pi[k] * sc[k];
        tail += pi[k] * mn[k];
      }
      msum[i * ng + g] += hn::GetLane(hn::SumOfLanes(d, acc)) + tail;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvpack
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvpack {
HWY_EXPORT(DotCodeRowsImpl);
HWY_EXPORT(AxpyCodeRowsWeightedImpl);
HWY_EXPORT(GroupWeightsAndMinSumsImpl);
HWY_EXPORT(UsesAvx512Impl);
HWY_EXPORT(UsesAvx2Impl);

bool CodeKernelsUseAvx512() { return HWY_DYNAMIC_DISPATCH(UsesAvx512Impl)(); }
bool CodeKernelsUseAvx2() { return HWY_DYNAMIC_DISPATCH(UsesAvx2Impl)(); }

void GroupWeightsAndMinSums(const float* p, size_t ldp, size_t n_q, const float* scale,
                            const float* min, size_t lds, size_t ng, size_t m, float* w,
                            size_t ldw, float* msum) {
  HWY_DYNAMIC_DISPATCH(GroupWeightsAndMinSumsImpl)
  (p, ldp, n_q, scale, min, lds, ng, m, w, ldw, msum);
}
void GroupWeightsAndMinSumsRef(const float* p, size_t ldp, size_t n_q, const float* scale,
                               const float* min, size_t lds, size_t ng, size_t m, float* w,
                               size_t ldw, float* msum) {
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t g = 0; g < ng; ++g) {
      double acc = 0.0;
      for (size_t k = 0; k < m; ++k) {
        w[(i * ng + g) * ldw + k] = p[i * ldp + k] * scale[g * lds + k];
        acc += static_cast<double>(p[i * ldp + k]) * min[g * lds + k];
      }
      msum[i * ng + g] += static_cast<float>(acc);
    }
  }
}

void AxpyCodeRowsWeighted(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                          size_t n_rows, size_t row_stride, size_t d, size_t first, size_t group,
                          float* out) {
  HWY_DYNAMIC_DISPATCH(AxpyCodeRowsWeightedImpl)
  (w, n_q, ld, codes, n_rows, row_stride, d, first, group, out);
}
void AxpyCodeRowsWeightedRef(const float* w, size_t n_q, size_t ld, const uint8_t* codes,
                             size_t n_rows, size_t row_stride, size_t d, size_t first, size_t group,
                             float* out) {
  const size_t g_first = first / group;
  const size_t n_groups = (first + d - 1) / group - g_first + 1;
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t c = 0; c < d; ++c) {
      const size_t g = (first + c) / group - g_first;
      double acc = out[i * d + c];
      for (size_t t = 0; t < n_rows; ++t) {
        acc += static_cast<double>(w[(i * n_groups + g) * ld + t]) * codes[t * row_stride + c];
      }
      out[i * d + c] = static_cast<float>(acc);
    }
  }
}

void DotCodeRows(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d, const float* q,
                 size_t n_q, float* scores, size_t ld) {
  HWY_DYNAMIC_DISPATCH(DotCodeRowsImpl)(codes, n_rows, row_stride, d, q, n_q, scores, ld);
}
void DotCodeRowsRef(const uint8_t* codes, size_t n_rows, size_t row_stride, size_t d,
                    const float* q, size_t n_q, float* scores, size_t ld) {
  for (size_t t = 0; t < n_rows; ++t) {
    for (size_t i = 0; i < n_q; ++i) {
      double acc = 0.0;
      for (size_t c = 0; c < d; ++c)
        acc += static_cast<double>(q[i * d + c]) * codes[t * row_stride + c];
      scores[i * ld + t] = static_cast<float>(acc);
    }
  }
}
}  // namespace kvpack
#endif  // HWY_ONCE
