// Attention scores read straight from packed 2/4-bit key rows in one pass per call.
// Per-channel key blocks (KIVI's key groups, KCVT's key blocks: kv/codecs/channel_blocks.h's
// ChannelBlocks) fold the query into each block's scales and quantize it to int8 on the fly:
//   q . (code * scale + min) = (q * scale) . code + q . min
//                            ~ alpha * (q8 . code) + q . min,   (q8, alpha) = QuantizeI8(q * scale).
//
// Design goals: one call per run of blocks and query group does all of it (the query's int8
// quantization and arrangement, the integer dots, the float combination). A KIVI block is
// only 32 tokens, so the per-block query work of the general path (five kernel calls and
// their buffers) took about a quarter of KIVI's decode time; here the queries of 32 blocks
// are prepared first (their reduction chains overlap), then the blocks' rows are read. On
// CPUs with AVX512-VNNI one vpdpbusd adds four code x query products per 32-bit lane.
// 8-bit codes (0..255, FlexGen's, KIVI's and KCVT's 8-bit keys) take an int16 query instead
// (QuantizeI16, ops/code_dot_i8.h: an int8 query's error would be as large as the codes'
// own) and vpdpwssd over the code bytes widened to 16 bits, two products per lane.
// Non-goals: head sizes other than 64 and 128 and widths other than 2 and 4 bits (8 at
// d = 64, unsigned, and q8_0's signed codes) on the fast path;
// every other case (and every other CPU) runs the general path of ops/code_dot_i8.h and
// ops/packed_dot_i8.h, which computes the same q8, alpha and integer dots.
#ifndef KVPACK_OPS_PACKED_SCORES_H_
#define KVPACK_OPS_PACKED_SCORES_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Consecutive blocks j < n_blocks: block j is rows [starts[j], starts[j + 1]) of `rows`
// (starts ascending, starts[0] = 0) with its parameters at params + j * 2 * d. For each
// block's rows r:
//   scores[i * ld + r] = alpha_i * (q8_i . code_r) + xmin_i,
// where (q8_i, alpha_i) = QuantizeI8(q_i * scale) and xmin_i = q_i . min (a float sum) with
// the block's scale and min.
// With bits = 8, (q16_i, alpha_i) = QuantizeI16(q_i * scale) in place of the int8 query
// (vector kernels only where HasVectorChannelBlockScores says so; elsewhere the scalar twin,
// slow: the codecs check it and take their float path instead).
//   rows: [starts[n_blocks], row_bytes] packed LSB-first codes (bits 2, 4 or 8), row_bytes >=
//   ceil(d * bits / 8); params: [n_blocks, 2, d] fp16, per block the per-channel scales then
//   mins; q: [n_q, d]; scores: [n_q, ld].
// n_next_blocks: how many blocks' parameters follow the range's in memory (at params + 2 d
// n_blocks on) that the caller reads next (the next tile of the same head); the kernel asks
// for them while it reads the codes. It changes no result.
void ScoreChannelBlocksI8(const uint8_t* rows, size_t row_bytes, size_t d, int bits,
                          const uint16_t* params, const int64_t* starts, size_t n_blocks,
                          const float* q, size_t n_q, float* scores, size_t ld,
                          size_t n_next_blocks);
// The scalar twin of one block (n_rows rows, params [2, d]): QuantizeI8Ref (QuantizeI16Ref for
// 8-bit codes) of q * scale, exact integer dots, the same float combination. q8 (q16) and
// alpha are the same as the fast path's; xmin may differ in summation order.
void ScoreChannelBlockI8Ref(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                            int bits, const uint16_t* params, const float* q, size_t n_q, float* scores,
                            size_t ld);
// Consecutive rows with n_groups (scale, min) groups each, of d / n_groups channels (FlexGen
// and HF per-token groups), for a query already quantized by the caller (QuantizeI8: q8_i,
// alpha_i) with qsum[i * n_groups + g] the sum of q_i over group g: CombineCodeDots' sequence
//   acc = 0; for g: acc = fma(alpha_i * scale_rg, q8_i . code_rg, acc);
//                   acc = fma(min_rg, qsum_ig, acc);
//   scores[i * ld + r] = acc   (with one group: fma(min_r, qsum_i, (alpha_i * scale_r) * dot)).
//   rows: [n_rows, row_bytes] packed codes (bits 2 or 4); params: [n_rows, n_groups, 2] fp16
//   (scale, min); q8: [n_q, d]; alpha: [n_q]; qsum: [n_q, n_groups]; scores: [n_q, ld].
// Fast path (AVX512-VNNI; d 64 or 128; one or two groups; row_bytes = d * bits / 8): per 16
// rows the rows' dwords transposed into columns (a lane per row), one vpdpbusd per column,
// code slot and query row with the query's dword broadcast from memory, each group's sums in
// their own accumulator; the rows' parameters in one or two 64-byte loads. Elsewhere the
// general kernels (the same integers and floats where the target has FMA).
void ScoreTokenRowsI8(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d, int bits,
                      size_t n_groups, const uint16_t* params, const int8_t* q8,
                      const float* alpha, const float* qsum, size_t n_q, float* scores,
                      size_t ld);
// Its scalar twin (codes read bit by bit, exact dots, the same float steps; bit-identical).
void ScoreTokenRowsI8Ref(const uint8_t* rows, size_t n_rows, size_t row_bytes, size_t d,
                         int bits, size_t n_groups, const uint16_t* params, const int8_t* q8,
                         const float* alpha, const float* qsum, size_t n_q, float* scores,
                         size_t ld);
// Whether ScoreTokenRowsI8 takes its AVX512-VNNI kernel for this shape on this CPU.
bool HasFastTokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups);
// Whether it reads the rows in one pass here: that kernel or the AVX2 one
// (ops/token_row_scores_avx2.h); elsewhere it unpacks tiles.
bool HasSinglePassTokenRowScores(size_t row_bytes, size_t d, int bits, size_t n_groups);

// ScoreTokenRowsI8's contract for rows of 8-bit codes (one unsigned byte per channel, row_bytes
// = d: FlexGen's 8-bit keys) and an int16 query (QuantizeI16: q16_i, alpha_i):
//   acc = 0; for g: acc = fma(alpha_i * scale_rg, q16_i . code_rg, acc);
//                   acc = fma(min_rg, qsum_ig, acc);
//   scores[i * ld + r] = acc   (with one group: fma(min_r, qsum_i, (alpha_i * scale_r) * dot)).
// Fast path (AVX512-VNNI, d = 64, one or two groups): ScoreTokenRowsI8's with ColumnDotsI16;
// on AVX2 without it, ops/token_row_scores_avx2.h's (codes widened to int16, vpmaddwd, exact).
// Elsewhere the twin itself (slow: the codecs check HasFastTokenRowScoresI16 and take their
// float path instead). The twin: exact dots, the same float steps (bit-identical).
void ScoreTokenRowsI16(const uint8_t* rows, size_t n_rows, size_t d, size_t n_groups,
                       const uint16_t* params, const int16_t* q16, const float* alpha,
                       const float* qsum, size_t n_q, float* scores, size_t ld);
void ScoreTokenRowsI16Ref(const uint8_t* rows, size_t n_rows, size_t d, size_t n_groups,
                          const uint16_t* params, const int16_t* q16, const float* alpha,
                          const float* qsum, size_t n_q, float* scores, size_t ld);
bool HasFastTokenRowScoresI16(size_t d, size_t n_groups);
// Whether ScoreChannelBlocksI8 takes its single-pass kernel for this shape on this CPU (d 64
// or 128 for 2 and 4 bits, 64 for 8 bits; rows without padding).
bool HasFastPackedScores(size_t row_bytes, size_t d, int bits);
// Whether it runs a vector kernel for this shape here: that one or the AVX2 one
// (ops/channel_block_scores_avx2.h: d a multiple of 64 up to 256, 2, 4 or 8 bits); elsewhere
// 8-bit codes take the slow scalar twin.
bool HasVectorChannelBlockScores(size_t row_bytes, size_t d, int bits);

// Consecutive q4_0 rows in plane form (kv/codecs/q4_0_codec.h): ng = d / 32 groups of 32
// channels per row, each with one fp16 scale s (value = s * (code - 8), ggml's block_q4_0)
// and 4-bit codes packed LSB-first, d / 2 bytes per row. For a query quantized by the caller
// (QuantizeI8: q8_i, alpha_i) with qsum[i * ng + g] the float sum of q_i over group g, the
// score is CombineCodeDots' sequence over the groups with (scale, min) = (s, -8 s):
//   acc = 0; for g: acc = fma(alpha_i * s_rg, q8_i . code_rg, acc); acc = fma(-8 s_rg, qsum_ig, acc)
//   scores[i * ld + r] = acc.
//   codes: [n_rows, d / 2]; scales: [n_rows, ng] fp16; q8: [n_q, d]; scores: [n_q, ld].
// Fast path (AVX512-VNNI, d = 64): ScoreTokenRowsI8's two-group kernel with the scales read
// as one 32-bit word per row; on AVX2 without it, ops/token_row_scores_avx2.h's. Elsewhere:
// unpack a tile, DotCodeRowsI8 and CombineCodeDots (the same integers and floats).
void ScoreQ4_0RowsI8(const uint8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                     const int8_t* q8, const float* alpha, const float* qsum, size_t n_q,
                     float* scores, size_t ld);
// Its scalar twin: codes read bit by bit, exact integer dots, the same float steps.
void ScoreQ4_0RowsI8Ref(const uint8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                        const int8_t* q8, const float* alpha, const float* qsum, size_t n_q,
                        float* scores, size_t ld);
// Whether ScoreQ4_0RowsI8 takes its single-pass kernel for head size d on this CPU.
bool HasFastQ4_0Scores(size_t d);

// Consecutive q8_0 rows in plane form (kv/codecs/q8_0_codec.h): d / 32 groups of 32 signed
// int8 codes per row, each with one fp16 scale s (value = s * code, ggml's block_q8_0). For a
// query quantized by the caller (QuantizeI8: q8_i, alpha_i):
//   acc = (alpha_i * s_r0) * (q8_i . code_r0); for g >= 1: acc = fma(alpha_i * s_rg, q8_i . code_rg, acc)
//   scores[i * ld + r] = acc.
//   codes: [n_rows, d]; scales: [n_rows, d / 32] fp16; q8: [n_q, d]; scores: [n_q, ld].
// Fast path (AVX512-VNNI, d = 64): ScoreTokenRowsI8's two-group kernel with one code per byte,
// read as code + 128 (vpdpbusd multiplies unsigned by signed bytes) and 128 x the group's sum
// of q8 taken off each integer dot, so the result is exact and equals the twin bit for bit.
// On AVX2 without it: ops/token_row_scores_avx2.h's (|code| times the query byte with code's
// sign, exact too). Elsewhere the twin itself (slow; the q8_0 codec takes its float path there
// instead).
void ScoreQ8_0RowsI8(const int8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                     const int8_t* q8, const float* alpha, size_t n_q, float* scores,
                     size_t ld);
void ScoreQ8_0RowsI8Ref(const int8_t* codes, const uint16_t* scales, size_t n_rows, size_t d,
                        const int8_t* q8, const float* alpha, size_t n_q, float* scores,
                        size_t ld);
bool HasFastQ8_0Scores(size_t d);

}  // namespace kvpack

#endif  // KVPACK_OPS_PACKED_SCORES_H_
