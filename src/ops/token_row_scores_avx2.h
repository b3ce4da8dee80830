// The AVX2 form of ops/packed_scores.h's ScoreTokenRowsI8 and ScoreTokenRowsI16 (FlexGen's and
// HF's per-token key groups), ScoreQ4_0RowsI8 and ScoreQ8_0RowsI8 (llama.cpp's blocks) for
// CPUs with AVX2 but without AVX512-VNNI (Zen 3, most laptops), chosen at run time by those.
// Internal to ops/.
//
// Design: the integer dots of ops/code_pairs_avx2.h (two rows per register, one vpmaddubsw per
// code slot, exact), eight rows at a time and per group, then the twin's float steps with the
// eight rows' (scale, min) pairs: the scores are the twins' bit for bit.
#ifndef KVPACK_OPS_TOKEN_ROW_SCORES_AVX2_H_
#define KVPACK_OPS_TOKEN_ROW_SCORES_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Whether ScoreTokenRowsI8Avx2 applies: 2- or 4-bit codes, d a multiple of 64 up to 256, rows
// without padding, one group per row or two of one 16-byte chunk each (4-bit rows of 64
// channels in groups of 32, 2-bit rows of 128 in groups of 64), an AVX2 CPU (and that target
// allowed for tests).
bool HasAvx2TokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups);

// ScoreTokenRowsI8's contract (ops/packed_scores.h) for a shape HasAvx2TokenRowScores accepts.
void ScoreTokenRowsI8Avx2(const uint8_t* rows, size_t n_rows, size_t d, int bits,
                          size_t n_groups, const uint16_t* params, const int8_t* q8,
                          const float* alpha, const float* qsum, size_t n_q, float* scores,
                          size_t ld);

// ScoreQ4_0RowsI8's contract (ops/packed_scores.h) for d = 64 (two groups of 32 channels, one
// fp16 scale each, min = -8 scale), where HasAvx2Q4_0Scores.
bool HasAvx2Q4_0Scores(size_t d);
void ScoreQ4_0RowsI8Avx2(const uint8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                         const int8_t* q8, const float* alpha, const float* qsum, size_t n_q,
                         float* scores, size_t ld);

// ScoreQ8_0RowsI8's contract (ops/packed_scores.h) for d = 64 (two groups of 32 signed codes,
// one fp16 scale each), where HasAvx2Q8_0Scores.
bool HasAvx2Q8_0Scores(size_t d);
void ScoreQ8_0RowsI8Avx2(const int8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                         const int8_t* q8, const float* alpha, size_t n_q, float* scores,
                         size_t ld);

// ScoreTokenRowsI16's contract (ops/packed_scores.h: 8-bit rows, an int16 query) for d = 64 and
// one or two groups, where HasAvx2TokenRowScoresI16.
bool HasAvx2TokenRowScoresI16(size_t d, size_t n_groups);
void ScoreTokenRowsI16Avx2(const uint8_t* rows, size_t n_rows, size_t d, size_t n_groups,
                           const uint16_t* params, const int16_t* q16, const float* alpha,
                           const float* qsum, size_t n_q, float* scores, size_t ld);

}  // namespace kvpack

#endif  // KVPACK_OPS_TOKEN_ROW_SCORES_AVX2_H_
