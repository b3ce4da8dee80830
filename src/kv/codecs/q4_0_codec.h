// llama.cpp's q4_0 KV blocks (METHODS.md 1.3) in plane form. Per token and KV head, every
// 32-channel block is ggml's block_q4_0, quantized by ggml's reference quantizer
// (ops/ggml_quants.h: one fp16 scale d, value = d * (code - 8)); the store keeps each head's
// blocks as two planes instead of interleaved 18-byte blocks:
//   codes:  [n_tokens, head_dim / 2] bytes, the 4-bit codes packed LSB-first in channel
//           order (kvpack's stream order: channel c in bits 4 (c % 2) of byte c / 2),
//   scales: [n_tokens, head_dim / 32] fp16, block g's d.
// The same bits (4.5 per value) and the same values as the interleaved blocks, into which
// the planes convert both ways exactly (Q4_0BlocksToPlanes / Q4_0PlanesToBlocks, tested), so
// results still compare with llama.cpp's `-ctk q4_0` at equal bits. Why planes: a row's codes
// then lie as the other 4-bit codecs' do and are read by the packed-row kernels without an
// unpacking pass (ops/packed_scores.h, ops/code_dot_i16.h); 18-byte blocks cannot be loaded
// as vectors of rows. llama.cpp's CPU backend repacks q4_0 weights for the same reason
// (its interleaved Q4_0 x 4/8 layouts). head_dim must be a multiple of 32.
#ifndef KVPACK_KV_CODECS_Q4_0_CODEC_H_
#define KVPACK_KV_CODECS_Q4_0_CODEC_H_

#include <cstdint>
#include <memory>

#include "kv/component_store.h"
#include "kvpack/status.h"
#include "ops/ggml_quants.h"

namespace kvpack {

Result<std::unique_ptr<ComponentStore>> MakeQ4_0Store(const StoreShape& shape);

// One row of n_blocks ggml blocks <-> its planes (codes [16 n_blocks], scales [n_blocks]).
void Q4_0BlocksToPlanes(const BlockQ4_0* blocks, int n_blocks, uint8_t* codes,
                        uint16_t* scales);
void Q4_0PlanesToBlocks(const uint8_t* codes, const uint16_t* scales, int n_blocks,
                        BlockQ4_0* blocks);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_Q4_0_CODEC_H_
