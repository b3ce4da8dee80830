// The AVX-512 kernels of a run of low-rank blocks (ops/lowrank_f16.h's LowRankRunAdd*;
// internal: callers use those, which choose these when LowRankRunKernelAvailable says so).
// Where the per-block kernels pay a call, a dispatch and a reduction chain per block, these
// form the projections of several blocks side by side and reduce 16 of them at once
// (ops/reduce_avx512.h):
//   - Scores: q_i . B_jk for up to 16 (block j, rank k, query row i) triples, one transposing
//     reduction, then each block's tokens take sum_k (q_i . B_jk) A_jk[t] as the per-block
//     kernel does (the same additions in the same order);
//   - Accumulate: p_i . A_jk over the block's tokens likewise, then out_i += sum_k
//     (p_i . A_jk) B_jk, block after block as the per-block kernel adds them, with out's
//     64-channel windows in registers across up to 16 groups of blocks.
// Only the projections' summation order differs from the per-block kernels (a pairwise tree
// after 16-lane partial sums), so both obey the same float bound (ops_lowrank_f16_test.cc).
#ifndef KVPACK_OPS_LOWRANK_RUNS_AVX512_H_
#define KVPACK_OPS_LOWRANK_RUNS_AVX512_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Ranks the kernels take: 1..kLowRankRunMaxRank (a block's projections fill at most one
// reduction of 16 with four query rows).
constexpr size_t kLowRankRunMaxRank = 4;

// The CPU has AVX-512 F/BW/DQ, Highway's dispatch runs at AVX3 or above (tests pin lower
// targets to run the per-block kernels), and the shape is one the kernels take: rank in
// [1, kLowRankRunMaxRank], d and n multiples of 16.
bool LowRankRunKernelAvailable(size_t rank, size_t d, size_t n);

// Arguments as LowRankRunAddScoresF16's and LowRankRunAddAccumulateF16's (ops/lowrank_f16.h).
void LowRankRunAddScoresAvx512(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                               size_t n, size_t rank, size_t d, const float* q, size_t n_q,
                               float* scores, size_t ld);
void LowRankRunAddAccumulateAvx512(const uint16_t* a_t, const uint16_t* b_t, size_t n_blocks,
                                   size_t n, size_t rank, size_t d, const float* p, size_t n_q,
                                   size_t ld, float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_LOWRANK_RUNS_AVX512_H_
