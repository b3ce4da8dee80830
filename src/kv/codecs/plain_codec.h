// Full-precision baselines `f32`, `f16`, `bf16` (METHODS.md 1.1): one row of head_dim
// elements per token and head, nothing else stored.
#ifndef KVPACK_KV_CODECS_PLAIN_CODEC_H_
#define KVPACK_KV_CODECS_PLAIN_CODEC_H_

#include <memory>

#include "kv/component_store.h"

namespace kvpack {

enum class PlainFormat { kF32, kF16, kBF16 };

std::unique_ptr<ComponentStore> MakePlainStore(PlainFormat format, const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_PLAIN_CODEC_H_
