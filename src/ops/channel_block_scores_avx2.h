// The AVX2 form of ops/packed_scores.h's per-channel key blocks (KIVI's key groups, KCVT's key
// blocks) for CPUs with AVX2 but without AVX512-VNNI (Zen 3, most laptops), chosen at run time
// by ScoreChannelBlocksI8. Internal to ops/.
//
// Design: per block and query row, the query folded into the block's scales and quantized in
// one pass (the same q8 and alpha as the twin's ScaleQuantizeI8) and arranged by code slot
// from registers, then the exact integer dots of ops/code_pairs_avx2.h eight rows at a time
// (the rows left over zero-padded to eight) and the twin's float steps, alpha * dot + xmin.
// xmin = q . min is a float sum in another order than the twin's, as on the general path.
// 8-bit codes take the twin's int16 query (QuantizeI16) and widen the code bytes to 16 bits
// (ops/code_pairs_avx2.h); before session 39 the codecs scored them with float kernels here.
#ifndef KVPACK_OPS_CHANNEL_BLOCK_SCORES_AVX2_H_
#define KVPACK_OPS_CHANNEL_BLOCK_SCORES_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Whether ScoreChannelBlocksAvx2 applies: 2-, 4- or 8-bit codes, d a multiple of 64 up to 256,
// rows without padding, an AVX2 CPU with FMA and F16C (and that target allowed for tests).
bool HasAvx2ChannelBlockScores(size_t row_bytes, size_t d, int bits);

// ScoreChannelBlocksI8's contract (ops/packed_scores.h) for rows without padding: blocks
// [starts[j], starts[j + 1]) of rows, params [n_blocks, 2, d] (per block the per-channel
// scales, then the mins), q [n_q, d], scores [n_q, ld].
void ScoreChannelBlocksAvx2(const uint8_t* rows, size_t d, int bits, const uint16_t* params,
                            const int64_t* starts, size_t n_blocks, const float* q, size_t n_q,
                            float* scores, size_t ld);

}  // namespace kvpack

#endif  // KVPACK_OPS_CHANNEL_BLOCK_SCORES_AVX2_H_
