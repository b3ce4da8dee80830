// The AVX2 form of ops/packed_scores.h's ScoreTokenRowsI8 (FlexGen's and HF's per-token key
// groups) for CPUs with AVX2 but without AVX512-VNNI (Zen 3, most laptops), chosen at run time
// by ScoreTokenRowsI8. Internal to ops/.
//
// Design: the integer dots of ops/code_pairs_avx2.h (two rows per register, one vpmaddubsw per
// code slot, exact), eight rows at a time, then the twin's float steps with the eight rows'
// (scale, min) pairs: the scores are ScoreTokenRowsI8Ref's bit for bit.
#ifndef KVPACK_OPS_TOKEN_ROW_SCORES_AVX2_H_
#define KVPACK_OPS_TOKEN_ROW_SCORES_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Whether ScoreTokenRowsI8Avx2 applies: 2- or 4-bit codes, d a multiple of 64 up to 256, rows
// without padding, one group per row, an AVX2 CPU (and that target allowed for tests).
bool HasAvx2TokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups);

// ScoreTokenRowsI8's contract (ops/packed_scores.h) with one group per row, for a shape
// HasAvx2TokenRowScores accepts.
void ScoreTokenRowsI8Avx2(const uint8_t* rows, size_t n_rows, size_t d, int bits,
                          const uint16_t* params, const int8_t* q8, const float* alpha,
                          const float* qsum, size_t n_q, float* scores, size_t ld);

}  // namespace kvpack

#endif  // KVPACK_OPS_TOKEN_ROW_SCORES_AVX2_H_
