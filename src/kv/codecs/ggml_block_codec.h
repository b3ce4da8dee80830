// llama.cpp-compatible KV blocks `q8_0` and `q4_0` (METHODS.md 1.3): per token and head,
// blocks of 32 consecutive channels with one fp16 scale d, symmetric codes (int8, or 4-bit
// with an offset of 8), ggml's block_q8_0 / block_q4_0 and their reference quantizers
// (ops/ggml_quants.h), so results compare with llama.cpp's `-ctk q8_0` at equal bits. q8_0
// is stored byte-for-byte as ggml's blocks; q4_0 as the same blocks split into a code plane
// and a scale plane (kv/codecs/q4_0_codec.h). head_dim must be a multiple of 32.
#ifndef KVPACK_KV_CODECS_GGML_BLOCK_CODEC_H_
#define KVPACK_KV_CODECS_GGML_BLOCK_CODEC_H_

#include <memory>

#include "kv/component_store.h"
#include "kvpack/status.h"

namespace kvpack {

enum class GgmlBlockFormat { kQ8_0, kQ4_0 };

Result<std::unique_ptr<ComponentStore>> MakeGgmlBlockStore(GgmlBlockFormat format,
                                                           const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_GGML_BLOCK_CODEC_H_
