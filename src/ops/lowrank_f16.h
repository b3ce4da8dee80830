// Fused attention terms of a low-rank factorisation L = A B^T stored as fp16 transposes
// (GEAR's error correction, kv/codecs/gear_parts.h), down-projection first so that L is
// never formed:
//   scores += (q B) A^T   (query projected on B: [n_q, rank], then along the tokens),
//   out    += (p A) B^T   (probabilities projected on A: [n_q, rank], then along channels).
// One call covers one block (all query rows, all ranks) so that the per-call cost is paid
// once per block, not once per (query row, rank); the projections of up to four ranks and
// four rows accumulate side by side and their lane sums are formed together. SIMD through Highway with runtime
// dispatch; each kernel has a scalar twin (`...Ref`, double accumulation) compared in
// tests/unit/ops_lowrank_f16_test.cc.
#ifndef KVPACK_OPS_LOWRANK_F16_H_
#define KVPACK_OPS_LOWRANK_F16_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Largest rank the kernels take (the projections live on the stack).
constexpr size_t kLowRankMaxRank = 64;

// scores[i * ld + j] += sum_k (sum_c q[i * d + c] * b_t[k * d + c]) * a_t[k * a_stride + j]
//   a_t: A^T [rank, a_stride] fp16 (columns j < n used); b_t: B^T [rank, d] fp16;
//   q: [n_q, d]; scores: [n_q, ld]; rank <= kLowRankMaxRank.
void LowRankAddScoresF16(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                         size_t rank, size_t d, size_t n, const float* q, size_t n_q,
                         float* scores, size_t ld);
void LowRankAddScoresF16Ref(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                            size_t rank, size_t d, size_t n, const float* q, size_t n_q,
                            float* scores, size_t ld);

// out[i * d + c] += sum_k (sum_j p[i * ld + j] * a_t[k * a_stride + j]) * b_t[k * d + c]
//   p: [n_q, ld] (columns j < n used); out: [n_q, d]; the rest as above.
void LowRankAddAccumulateF16(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                             size_t rank, size_t d, size_t n, const float* p, size_t n_q,
                             size_t ld, float* out);
void LowRankAddAccumulateF16Ref(const uint16_t* a_t, size_t a_stride, const uint16_t* b_t,
                                size_t rank, size_t d, size_t n, const float* p, size_t n_q,
                                size_t ld, float* out);

// A run of n_blocks blocks of n rows and rank `rank` each, stored one after another: block j's
// A^T [rank, n] at a_t + j * rank * n, its B^T [rank, d] at b_t + j * rank * d, its rows at
// columns [j n, (j + 1) n) of scores / p. The same sums as one call of the kernels above per
// block; where the shape allows (ops/lowrank_runs_avx512.h: rank <= 4, d and n multiples of
// 16, an AVX-512 CPU) several blocks' projections are formed and reduced together, and the
// per-block cost (a call, a dispatch, a reduction chain) is paid once per group of blocks.
// The twins (...Ref) are the per-block twins called block by block.
void LowRankRunAddScoresF16(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                            size_t n, size_t rank, size_t d, const float* q, size_t n_q,
                            float* scores, size_t ld);
void LowRankRunAddScoresF16Ref(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                               size_t n, size_t rank, size_t d, const float* q, size_t n_q,
                               float* scores, size_t ld);
void LowRankRunAddAccumulateF16(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                size_t n, size_t rank, size_t d, const float* p, size_t n_q,
                                size_t ld, float* out);
void LowRankRunAddAccumulateF16Ref(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                   size_t n, size_t rank, size_t d, const float* p, size_t n_q,
                                   size_t ld, float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_LOWRANK_F16_H_
