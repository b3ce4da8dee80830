// AVX-512 kernels of a run of low-rank blocks (ops/lowrank_runs_avx512.h), compiled with a
// function attribute and chosen at run time, as ops/outlier_cells_avx512.cc's are.
#include "ops/lowrank_runs_avx512.h"

#include <algorithm>

#include "ops/code_dot.h"
#include "ops/prefetch.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "ops/reduce_avx512.h"
#define KVPACK_HAVE_LOWRANK_RUN_KERNEL 1
#define KVPACK_LOWRANK_ATTR __attribute__((target("avx512f,avx512bw,avx512dq")))
#define KVPACK_LOWRANK_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq"), always_inline)) inline
#else
#define KVPACK_HAVE_LOWRANK_RUN_KERNEL 0
#endif

namespace kvpack {

#if KVPACK_HAVE_LOWRANK_RUN_KERNEL
// GCC 12's intrinsic headers build some results from `_mm512_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

constexpr size_t kMaxQ = 4;  // query rows per pass: rank x rows <= 16 projections per block

KVPACK_LOWRANK_INLINE __m512 LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The factors of a run lie one after another (kv/codecs/gear_parts.h's arenas); each group
// of blocks asks for the lines kPrefetchAheadBytes past its own, as the per-block kernels do.
KVPACK_LOWRANK_INLINE void PrefetchAhead(const uint16_t* p, size_t halves) {
  const char* ahead = reinterpret_cast<const char*>(p) + kPrefetchAheadBytes;
  for (size_t off = 0; off < 2 * halves; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
}

// Blocks whose projections share one reduction.
template <size_t NQ, size_t R>
constexpr size_t kGroupBlocks = 16 / (NQ * R);

// The projections of blocks [0, g) (g <= kGroupBlocks) of a group, into sums[(j R + k) NQ + i]
// (the rest of the 16 are zeros):
//   sums[(j R + k) NQ + i] = sum_{c < len} x[i * ldx + j * x_step + c] * h[(j R + k) len + c]
// with h the blocks' factor rows (fp16, [g, R, len]). len: a multiple of 16.
template <size_t NQ, size_t R>
KVPACK_LOWRANK_INLINE void ProjectBlocks(const uint16_t* h, size_t len, size_t g,
                                         const float* x, size_t ldx, size_t x_step,
                                         float* sums) {
  constexpr size_t kG = kGroupBlocks<NQ, R>;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int e = 0; e < 16; ++e) acc[e] = _mm512_setzero_ps();
  for (size_t c = 0; c < len; c += 16) {
#pragma GCC unroll 16
    for (size_t j = 0; j < kG; ++j) {
      if (j >= g) break;
#pragma GCC unroll 4
      for (size_t k = 0; k < R; ++k) {
        const __m512 hv = LoadF16(h + (j * R + k) * len + c);
#pragma GCC unroll 4
        for (size_t i = 0; i < NQ; ++i) {
          const size_t e = (j * R + k) * NQ + i;
          acc[e] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * ldx + j * x_step + c), hv, acc[e]);
        }
      }
    }
  }
  _mm512_store_ps(sums, ReduceEach16<true>(acc));
}

// y[i * ldy + c] += sum_k proj[k * NQ + i] * h[k * len + c] for query rows i < NQ and
// c < len (a multiple of 16): one block's rank terms along its tokens (scores, h = A^T),
// added rank by rank as the per-block kernels add them.
template <size_t NQ, size_t R>
KVPACK_LOWRANK_INLINE void AddRankTerms(const float* proj, const uint16_t* h, size_t len,
                                        float* y, size_t ldy) {
  for (size_t c = 0; c < len; c += 16) {
    __m512 hv[R];
#pragma GCC unroll 4
    for (size_t k = 0; k < R; ++k) hv[k] = LoadF16(h + k * len + c);
#pragma GCC unroll 4
    for (size_t i = 0; i < NQ; ++i) {
      __m512 acc = _mm512_loadu_ps(y + i * ldy + c);
#pragma GCC unroll 4
      for (size_t k = 0; k < R; ++k) {
        acc = _mm512_fmadd_ps(_mm512_set1_ps(proj[k * NQ + i]), hv[k], acc);
      }
      _mm512_storeu_ps(y + i * ldy + c, acc);
    }
  }
}

// Groups whose projections a values pass forms before it adds their rank terms.
constexpr size_t kChunkGroups = 16;

// out[i * d + c0 + c] += sum_j sum_k proj_j[k * NQ + i] * B_jk[c0 + c] for c < 16 V, block
// after block and rank by rank as AddRankTerms adds them (the same floats), with the V output
// vectors of each query row in registers across the blocks instead of a load and store per
// block, whose chain through memory bound the values pass. Block j's projections are
// proj + 16 (j / kG) + R NQ (j % kG) (ProjectBlocks' layout, one 16-float set per group).
template <size_t NQ, size_t R, int V>
KVPACK_LOWRANK_INLINE void AddValueTerms(const float* proj, const uint16_t* b, size_t n_blocks,
                                         size_t d, size_t c0, float* out) {
  constexpr size_t kG = kGroupBlocks<NQ, R>;
  __m512 acc[NQ][V];
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_loadu_ps(out + i * d + c0 + 16 * v);
  }
  for (size_t j = 0; j < n_blocks; ++j) {
    const float* pj = proj + 16 * (j / kG) + R * NQ * (j % kG);
#pragma GCC unroll 4
    for (size_t k = 0; k < R; ++k) {
      __m512 hv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) hv[v] = LoadF16(b + (j * R + k) * d + c0 + 16 * v);
#pragma GCC unroll 4
      for (size_t i = 0; i < NQ; ++i) {
        const __m512 pk = _mm512_set1_ps(pj[k * NQ + i]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(pk, hv[v], acc[i][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (size_t i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + i * d + c0 + 16 * v, acc[i][v]);
  }
}

// One pass over a run for query rows i < NQ, kGroupBlocks blocks at a time:
//   keys (kValues false): scores[i * ld + j n + t] += sum_k (q_i . B_jk) A_jk[t], t < n;
//   values (true): out[i * d + c] += sum_j sum_k (p_i . A_jk) B_jk[c], block after block,
//   kChunkGroups groups' projections first, then their terms 64 channels at a time.
// x: q [NQ, d] or p [NQ, ld]; y: scores [NQ, ld] or out [NQ, d].
template <size_t NQ, size_t R, bool kValues>
KVPACK_LOWRANK_ATTR void RunBlocks(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                   size_t n, size_t d, const float* x, float* y, size_t ld) {
  constexpr size_t kG = kGroupBlocks<NQ, R>;
  if constexpr (kValues) {
    alignas(64) float proj[kChunkGroups][16];
    for (size_t j0 = 0; j0 < n_blocks; j0 += kChunkGroups * kG) {
      const size_t m = std::min(kChunkGroups * kG, n_blocks - j0);
      for (size_t u = 0; u * kG < m; ++u) {
        const size_t first = j0 + u * kG, g = std::min(kG, m - u * kG);
        const uint16_t* a = a_t + first * R * n;
        PrefetchAhead(a, g * R * n);
        PrefetchAhead(b_t + first * R * d, g * R * d);
        ProjectBlocks<NQ, R>(a, n, g, x + first * n, ld, n, proj[u]);
      }
      const uint16_t* b = b_t + j0 * R * d;
      size_t c = 0;
      for (; c + 64 <= d; c += 64) AddValueTerms<NQ, R, 4>(proj[0], b, m, d, c, y);
      switch ((d - c) / 16) {
        case 3: AddValueTerms<NQ, R, 3>(proj[0], b, m, d, c, y); break;
        case 2: AddValueTerms<NQ, R, 2>(proj[0], b, m, d, c, y); break;
        case 1: AddValueTerms<NQ, R, 1>(proj[0], b, m, d, c, y); break;
        default: break;
      }
    }
    return;
  }
  alignas(64) float proj[16];
  for (size_t j0 = 0; j0 < n_blocks; j0 += kG) {
    const size_t g = std::min(kG, n_blocks - j0);
    const uint16_t* a = a_t + j0 * R * n;
    const uint16_t* b = b_t + j0 * R * d;
    PrefetchAhead(a, g * R * n);
    PrefetchAhead(b, g * R * d);
    ProjectBlocks<NQ, R>(b, d, g, x, d, 0, proj);
    for (size_t j = 0; j < g; ++j) {
      AddRankTerms<NQ, R>(proj + j * R * NQ, a + j * R * n, n, y + (j0 + j) * n, ld);
    }
  }
}

// RunBlocks<NQ, R, kValues> by [kValues][NQ - 1][R - 1], NQ and R in [1, 4].
#define KVPACK_LOWRANK_ROW(nq, v) \
  {&RunBlocks<nq, 1, v>, &RunBlocks<nq, 2, v>, &RunBlocks<nq, 3, v>, &RunBlocks<nq, 4, v>}
#define KVPACK_LOWRANK_TABLE(v)                                                    \
  {KVPACK_LOWRANK_ROW(1, v), KVPACK_LOWRANK_ROW(2, v), KVPACK_LOWRANK_ROW(3, v), \
   KVPACK_LOWRANK_ROW(4, v)}
constexpr decltype(&RunBlocks<1, 1, false>) kRunBlocks[2][kMaxQ][kLowRankRunMaxRank] = {
    KVPACK_LOWRANK_TABLE(false), KVPACK_LOWRANK_TABLE(true)};
#undef KVPACK_LOWRANK_TABLE
#undef KVPACK_LOWRANK_ROW

}  // namespace

bool LowRankRunKernelAvailable(size_t rank, size_t d, size_t n) {
  static const bool cpu = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq");
  return rank >= 1 && rank <= kLowRankRunMaxRank && d > 0 && d % 16 == 0 && n > 0 &&
         n % 16 == 0 && cpu && CodeKernelsUseAvx512();
}

void LowRankRunAddScoresAvx512(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                               size_t n, size_t rank, size_t d, const float* q, size_t n_q,
                               float* scores, size_t ld) {
  for (size_t i0 = 0; i0 < n_q; i0 += kMaxQ) {
    const size_t nq = std::min(kMaxQ, n_q - i0);
    kRunBlocks[0][nq - 1][rank - 1](a_t, b_t, n_blocks, n, d, q + i0 * d, scores + i0 * ld,
                                    ld);
  }
}

void LowRankRunAddAccumulateAvx512(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                   size_t n, size_t rank, size_t d, const float* p, size_t n_q,
                                   size_t ld, float* out) {
  for (size_t i0 = 0; i0 < n_q; i0 += kMaxQ) {
    const size_t nq = std::min(kMaxQ, n_q - i0);
    kRunBlocks[1][nq - 1][rank - 1](a_t, b_t, n_blocks, n, d, p + i0 * ld, out + i0 * d, ld);
  }
}

#pragma GCC diagnostic pop
#else  // !KVPACK_HAVE_LOWRANK_RUN_KERNEL

bool LowRankRunKernelAvailable(size_t, size_t, size_t) { return false; }
void LowRankRunAddScoresAvx512(const uint16_t*, const uint16_t*, size_t, size_t, size_t, size_t,
                               const float*, size_t, float*, size_t) {}
void LowRankRunAddAccumulateAvx512(const uint16_t*, const uint16_t*, size_t, size_t, size_t,
                                   size_t, const float*, size_t, size_t, float*) {}

#endif  // KVPACK_HAVE_LOWRANK_RUN_KERNEL

}  // namespace kvpack
