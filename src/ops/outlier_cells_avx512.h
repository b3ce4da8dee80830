// The AVX-512 kernels of ops/outlier_cells.h (internal: callers use OutlierScores and
// OutlierAccumulate, which choose them). Same arguments and, per the header's arithmetic
// rule, the same floats as the twins.
//   - Scores: the query rows live in registers as bf16 (64 channels per register pair: one
//     16-bit permute picks a lane's q[channel], straight from the entry word's high half,
//     into the high half of a float); one masked multiply-add per round and query row; the
//     cell's sums are put back in row order by one permute and added to 16 consecutive
//     scores.
//   - Accumulate: the 64 weights of a slice live in one register pair as bf16 (one permute
//     picks a lane's p[row]); the cell's sums are put back in channel order by one permute.
//   - Both run the rounds of two (or four) cells in one loop, so that the loop's exit is
//     paid once per group and the cells' multiply-add chains overlap.
#ifndef KVPACK_OPS_OUTLIER_CELLS_AVX512_H_
#define KVPACK_OPS_OUTLIER_CELLS_AVX512_H_

#include <cstdint>

namespace kvpack {

constexpr int kOutlierFastMaxScoreDim = 128;
constexpr int kOutlierFastMaxAccumulateDim = 256;

// AVX512-F/BW on this CPU and Highway's dispatch at AVX3 or above (tests pin lower targets
// to run the twins).
bool OutlierKernelsAvailable();

// d <= kOutlierFastMaxScoreDim; r0 < r1; n_q > 0.
void OutlierScoresAvx512(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                         int64_t r1, int d, const float* q, int n_q, float* scores, int64_t ld);
// d <= kOutlierFastMaxAccumulateDim; r0 < r1; n_q > 0.
void OutlierAccumulateAvx512(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                             int64_t r1, int d, const float* p, int n_q, int64_t ld,
                             float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_OUTLIER_CELLS_AVX512_H_
