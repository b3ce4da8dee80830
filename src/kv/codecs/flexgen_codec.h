// FlexGen's per-token group quantization (METHODS.md 1.2; Sheng et al., "FlexGen:
// High-Throughput Generative Inference of Large Language Models with a Single GPU", 2023,
// section 5): for every token and KV head, runs of `group` consecutive channels (clipped to
// head_dim) quantized with Q_b, fp16 scale and min per group. Spec
// `flexgen:bits=2|4|8,group=64` (defaults bits=4, group=64). No full-precision residual.
#ifndef KVPACK_KV_CODECS_FLEXGEN_CODEC_H_
#define KVPACK_KV_CODECS_FLEXGEN_CODEC_H_

#include <memory>

#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {

Result<std::unique_ptr<ComponentStore>> MakeFlexGenStore(const MethodSpec& spec,
                                                         const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_FLEXGEN_CODEC_H_
