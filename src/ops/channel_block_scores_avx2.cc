// Compiled for AVX2 + F16C with a function attribute (ops/packed_scores.cc chooses it at run
// time); the design is in the header. No FMA in the attribute: the twin's alpha * dot + xmin is
// a multiply and an add, which a contracted multiply-add would round once instead of twice.
#include "ops/channel_block_scores_avx2.h"

#include <cstring>

#include "ops/code_dot.h"
#include "ops/code_pairs_avx2.h"
#include "ops/cpu_features.h"
#include "ops/query_chunks.h"
#include "ops/reduce_avx2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVPACK_HAVE_CBS_AVX2 1
#define KVPACK_CBS_AVX2_ATTR __attribute__((target("avx2,f16c")))
#else
#define KVPACK_HAVE_CBS_AVX2 0
#endif

namespace kvpack {
namespace {

#if KVPACK_HAVE_CBS_AVX2
// GCC 12's intrinsic headers build some results from `_mm256_undefined_*()`, which
// -Wuninitialized reports at every inlining site (see ops/code_dot_i16.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr size_t kMaxQ = 3;           // query rows per pass
constexpr size_t kMaxRowBytes = 256;  // d = 256 at 8 bits
constexpr size_t kMaxD = 256;
// Arranged query vectors per row: d / 16 at 2 and 4 bits, d / 8 at 8 bits (int16).
constexpr size_t kMaxVecs = kMaxD / 8;

// Per-row query vectors and levels by code width (8 bits: the int16 query, QuantizeI16).
template <int kBits>
constexpr size_t QueryVecs(size_t d) {
  return kBits == 8 ? d / 8 : d / 16;
}
template <int kBits>
constexpr float QueryLevels() {
  return kBits == 8 ? 32767.0f : 127.0f;
}

KVPACK_CBS_AVX2_ATTR inline __m256 LoadHalves8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// The 32 bytes of a quantized query row's channels c .. c + 31 in order: xs * inv converted with
// rounding to nearest even (the saturating packs equal the twin's clamp, |xs * inv| being at
// most 127 plus a rounding). Packs work in 128-bit lanes; one dword permutation puts the bytes
// in order.
KVPACK_CBS_AVX2_ATTR inline __m256i QueryBytesAt(const float* xs, size_t c, __m256 inv) {
  __m256i r[4];
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(xs + c + 8 * k), inv));
  }
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// ScaleQuantizeBlockQueryI8 for NQ query rows x [NQ, d] of the block (scale, min: the block's
// parameters as floats, d a multiple of 64 up to kMaxD), its q8 written straight into the
// slot arrangement of ArrangeQueryBySlot (ops/code_pairs_avx2.h): xs = x * scale (the twin's
// products), amax = max |xs| (a NaN ignored, as the twin's std::max does), xmin = x . min (a
// float sum in another order), then alpha = amax / 127 and q8 = round-to-nearest-even(xs *
// (127 / amax)), all zero when amax is zero. qa: [NQ, d / 16] vectors. The rows are
// interleaved: one row's steps (the reductions, the divisions, the conversions) wait on each
// other.
// The arrangement from registers (the bytes of channels 32 h .. 32 h + 31 in order, lane L =
// 16-byte piece 2 h + L): 4 bits, one chunk of 32 channels per register: a byte shuffle puts
// each piece's even channels (slot 0) in its low 8 bytes and the odd ones (slot 1) in its high
// 8 bytes, and a 64-bit permutation gathers and repeats each slot. 2 bits, one chunk of 64
// channels per two registers: a byte shuffle groups each piece's bytes by slot (dword s:
// channels 4 j + s), an unpack of dwords pairs pieces 0/2 and 1/3 (unpacklo: slots 0 and 1),
// and one dword permutation per slot gathers pieces 0 .. 3 and repeats them.
// Per KIVI key block of 32 tokens this query work took about half as long as the block's dots
// when each row went alone and the arrangement was a second pass through memory (a profile of
// kv_codec_bench ScoresCold/kivi:bits=2/8192/30; docs/performance-history.md, session 38).
template <int kBits, size_t NQ>
KVPACK_CBS_AVX2_ATTR void QuantizeArrangeQueryRows(const float* x, const float* scale,
                                                   const float* min, size_t d, __m256i* qa,
                                                   float* alpha, float* xmin) {
  const size_t n_vecs = QueryVecs<kBits>(d);
  constexpr float kLevels = QueryLevels<kBits>();
  alignas(32) float xs[NQ][kMaxD];
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax[NQ], vdot[NQ];
  for (size_t i = 0; i < NQ; ++i) vmax[i] = vdot[i] = _mm256_setzero_ps();
  for (size_t c = 0; c < d; c += 8) {
    const __m256 sc = _mm256_load_ps(scale + c), mn = _mm256_load_ps(min + c);
    for (size_t i = 0; i < NQ; ++i) {
      const __m256 v = _mm256_loadu_ps(x + i * d + c);
      const __m256 vs = _mm256_mul_ps(v, sc);
      _mm256_store_ps(xs[i] + c, vs);
      vmax[i] = _mm256_max_ps(_mm256_andnot_ps(sign, vs), vmax[i]);  // a NaN |xs| yields vmax
      vdot[i] = _mm256_add_ps(vdot[i], _mm256_mul_ps(v, mn));
    }
  }
  __m256 inv[NQ];
  bool zero[NQ];
  for (size_t i = 0; i < NQ; ++i) {
    const float amax = HorizontalMax(vmax[i]);
    xmin[i] = HorizontalSum(vdot[i]);
    zero[i] = !(amax > 0.0f);
    alpha[i] = zero[i] ? 0.0f : amax / kLevels;
    inv[i] = _mm256_set1_ps(zero[i] ? 0.0f : kLevels / amax);
  }
  if constexpr (kBits == 8) {
    // Per 8 channels: the int32 levels (a NaN converts to INT_MIN, which the lower clamp
    // turns into -32767 as on the AVX-512 path), packed to int16 with themselves and the two
    // 64-bit halves of each lane gathered: channels 8 v .. 8 v + 7 in both halves.
    const __m256i low = _mm256_set1_epi32(-32767);
    for (size_t i = 0; i < NQ; ++i) {
      for (size_t v = 0; v < n_vecs; ++v) {
        const __m256i q32 = _mm256_max_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(xs[i] + 8 * v), inv[i])), low);
        qa[i * n_vecs + v] =
            _mm256_permute4x64_epi64(_mm256_packs_epi32(q32, q32), _MM_SHUFFLE(2, 0, 2, 0));
      }
    }
  } else if constexpr (kBits == 4) {
    const __m256i by_slot = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                             0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (size_t c = 0; c < d; c += 32) {
      for (size_t i = 0; i < NQ; ++i) {
        const __m256i p = _mm256_shuffle_epi8(QueryBytesAt(xs[i], c, inv[i]), by_slot);
        __m256i* slot = qa + i * n_vecs + c / 16;
        slot[0] = _mm256_permute4x64_epi64(p, _MM_SHUFFLE(2, 0, 2, 0));
        slot[1] = _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 3, 1));
      }
    }
  } else {
    static_assert(kBits == 2);
    const __m256i by_slot = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                             0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    // Dwords of an unpack: p0, p2, p0, p2 (low lane), p1, p3, p1, p3 (high lane), for the
    // slot pair in turn.
    const __m256i first = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);
    const __m256i second = _mm256_setr_epi32(2, 6, 3, 7, 2, 6, 3, 7);
    for (size_t c = 0; c < d; c += 64) {
      for (size_t i = 0; i < NQ; ++i) {
        const __m256i a = _mm256_shuffle_epi8(QueryBytesAt(xs[i], c, inv[i]), by_slot);
        const __m256i b = _mm256_shuffle_epi8(QueryBytesAt(xs[i], c + 32, inv[i]), by_slot);
        const __m256i lo = _mm256_unpacklo_epi32(a, b), hi = _mm256_unpackhi_epi32(a, b);
        __m256i* slot = qa + i * n_vecs + c / 16;
        slot[0] = _mm256_permutevar8x32_epi32(lo, first);
        slot[1] = _mm256_permutevar8x32_epi32(lo, second);
        slot[2] = _mm256_permutevar8x32_epi32(hi, first);
        slot[3] = _mm256_permutevar8x32_epi32(hi, second);
      }
    }
  }
  for (size_t i = 0; i < NQ; ++i) {  // all zero where amax is zero (xs * 0 can hold a NaN)
    if (!zero[i]) continue;
    for (size_t v = 0; v < n_vecs; ++v) qa[i * n_vecs + v] = _mm256_setzero_si256();
  }
}

// Query rows [0, NQ) against the block's rows: scores = alpha_i * dot + xmin_i (the twin's
// multiply, then its add). The rows past the last multiple of eight (a KCVT block holds 20 by
// default) are copied into eight zero-padded rows and take the same kernel; their extra
// scores are dropped.
// Rows r .. r + 7 (row_bytes apart): out[i * out_ld + t] = alpha_i * dot + xmin_i.
template <size_t NQ, int kBits>
KVPACK_CBS_AVX2_ATTR inline void EightRowScores(const uint8_t* r, size_t row_bytes,
                                                const __m256i* qa, const float* alpha,
                                                const float* xmin, float* out, size_t out_ld) {
  __m256i dots[NQ];
  const size_t n_chunks = row_bytes / kCodeChunkBytes;
  const size_t q_stride = kBits == 8 ? 2 * n_chunks : n_chunks * (8 / kBits);
  EightRowDots<NQ, kBits>(r, row_bytes, qa, n_chunks, q_stride, dots);
  for (size_t i = 0; i < NQ; ++i) {
    const __m256 a = _mm256_mul_ps(_mm256_set1_ps(alpha[i]), _mm256_cvtepi32_ps(dots[i]));
    _mm256_storeu_ps(out + i * out_ld, _mm256_add_ps(a, _mm256_set1_ps(xmin[i])));
  }
}

template <size_t NQ, int kBits>
KVPACK_CBS_AVX2_ATTR void BlockRows(const uint8_t* rows, size_t n_rows, size_t d,
                                    const __m256i* qa, const float* alpha, const float* xmin,
                                    float* scores, size_t ld) {
  const size_t row_bytes = d * kBits / 8;
  size_t t0 = 0;
  for (; t0 + 8 <= n_rows; t0 += 8) {
    EightRowScores<NQ, kBits>(rows + t0 * row_bytes, row_bytes, qa, alpha, xmin, scores + t0, ld);
  }
  if (t0 == n_rows) return;
  const size_t rem = n_rows - t0;
  alignas(32) uint8_t padded[8 * kMaxRowBytes];
  std::memcpy(padded, rows + t0 * row_bytes, rem * row_bytes);
  std::memset(padded + rem * row_bytes, 0, (8 - rem) * row_bytes);
  float tail[NQ][8];
  EightRowScores<NQ, kBits>(padded, row_bytes, qa, alpha, xmin, &tail[0][0], 8);
  for (size_t i = 0; i < NQ; ++i) std::memcpy(scores + i * ld + t0, tail[i], rem * sizeof(float));
}

// Every block in turn (ScoreChannelBlocksI8's contract): its parameters converted once, then
// per chunk of up to three query rows the arranged query and the rows' scores. Blocks without
// rows are skipped. No prefetch here beyond the caller's (ChannelBlocks::PrefetchRange): asking
// for the lines kPrefetchAheadBytes past each block as it starts made KCVT-4's keys slower
// (ScoresCold/kcvt:bits=4/8192/30, best of 15: 2714 -> 3135 us).
template <int kBits>
KVPACK_CBS_AVX2_ATTR void ScoreBlocks(const uint8_t* rows, size_t d, const uint16_t* params,
                                      const int64_t* starts, size_t n_blocks, const float* q,
                                      size_t n_q, float* scores, size_t ld) {
  const size_t row_bytes = d * kBits / 8;
  alignas(32) float scale[kMaxD], min[kMaxD];
  __m256i qa[kMaxQ * kMaxVecs];
  float alpha[kMaxQ], xmin[kMaxQ];
  for (size_t j = 0; j < n_blocks; ++j) {
    const size_t r0 = static_cast<size_t>(starts[j]), r1 = static_cast<size_t>(starts[j + 1]);
    if (r1 <= r0) continue;
    const uint8_t* block = rows + r0 * row_bytes;
    const uint16_t* bp = params + j * 2 * d;
    for (size_t c = 0; c < d; c += 8) {
      _mm256_store_ps(scale + c, LoadHalves8(bp + c));
      _mm256_store_ps(min + c, LoadHalves8(bp + d + c));
    }
    ForEachQueryChunk<kMaxQ>(n_q, [&](auto nq, size_t i0) {
      QuantizeArrangeQueryRows<kBits, nq>(q + i0 * d, scale, min, d, qa, alpha, xmin);
      BlockRows<nq, kBits>(block, r1 - r0, d, qa, alpha, xmin, scores + i0 * ld + r0, ld);
    });
  }
}

#pragma GCC diagnostic pop
#endif  // KVPACK_HAVE_CBS_AVX2

}  // namespace

bool HasAvx2ChannelBlockScores(size_t row_bytes, size_t d, int bits) {
#if KVPACK_HAVE_CBS_AVX2
  const bool cpu = CpuHasAvx2FmaF16c();
  return (bits == 2 || bits == 4 || bits == 8) && d % 64 == 0 && d <= 256 &&
         row_bytes == d * static_cast<size_t>(bits) / 8 && cpu && CodeKernelsUseAvx2();
#else
  (void)row_bytes, (void)d, (void)bits;
  return false;
#endif
}

void ScoreChannelBlocksAvx2(const uint8_t* rows, size_t d, int bits, const uint16_t* params,
                            const int64_t* starts, size_t n_blocks, const float* q, size_t n_q,
                            float* scores, size_t ld) {
#if KVPACK_HAVE_CBS_AVX2
  (bits == 2   ? ScoreBlocks<2>
   : bits == 4 ? ScoreBlocks<4>
               : ScoreBlocks<8>)(rows, d, params, starts, n_blocks, q, n_q, scores, ld);
#else
  (void)rows, (void)d, (void)bits, (void)params, (void)starts, (void)n_blocks, (void)q, (void)n_q,
      (void)scores, (void)ld;
#endif
}

}  // namespace kvpack
