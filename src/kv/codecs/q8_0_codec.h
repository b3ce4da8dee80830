// llama.cpp's q8_0 KV blocks (METHODS.md 1.3) in plane form. Per token and KV head, every
// 32-channel block is ggml's block_q8_0, quantized by ggml's reference quantizer
// (ops/ggml_quants.h: one fp16 scale d = max|x| / 127, value = d * code, code in [-127, 127]);
// the store keeps each head's blocks as two planes (kv/codecs/block_planes.h):
//   codes:  [n_tokens, head_dim] int8, the block's codes in channel order,
//   scales: [n_tokens, head_dim / 32] fp16, block g's d.
// The same bits (8.5 per value) and values as the interleaved 34-byte blocks, into which the
// planes convert both ways exactly (Q8_0BlocksToPlanes / Q8_0PlanesToBlocks, tested), so
// results compare with llama.cpp's `-ctk q8_0` at equal bits. Why planes: as for q4_0, rows
// then load as vectors, and the integer kernels read them directly (ops/packed_scores.h:
// ScoreQ8_0RowsI8, ops/code_dot_i16.h: AccumulateQ8_0RowsI16).
// Attention: where those kernels run (AVX512-VNNI or AVX2, head_dim 64) the query is quantized to
// int8 like the other integer key paths (llama.cpp's CPU backend likewise quantizes the query
// to q8_0 blocks to dot it with a q8_0 key cache) and the value weights to int16; elsewhere
// tiles are dequantized to floats for the float kernels. head_dim must be a multiple of 32.
#ifndef KVPACK_KV_CODECS_Q8_0_CODEC_H_
#define KVPACK_KV_CODECS_Q8_0_CODEC_H_

#include <cstdint>
#include <memory>

#include "kv/component_store.h"
#include "kvpack/status.h"
#include "ops/ggml_quants.h"

namespace kvpack {

Result<std::unique_ptr<ComponentStore>> MakeQ8_0Store(const StoreShape& shape);

// One row of n_blocks ggml blocks <-> its planes (codes [32 n_blocks], scales [n_blocks]).
void Q8_0BlocksToPlanes(const BlockQ8_0* blocks, int n_blocks, int8_t* codes, uint16_t* scales);
void Q8_0PlanesToBlocks(const int8_t* codes, const uint16_t* scales, int n_blocks,
                        BlockQ8_0* blocks);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_Q8_0_CODEC_H_
