// KCVT, GEAR's coarse-grained variant of KIVI (METHODS.md 1.5; Kang et al., "GEAR: An
// Efficient KV Cache Compression Recipe for Near-Lossless Generative Inference of LLM",
// 2024, section 4): keys per channel with the whole compressed block as one group; values
// per token with the whole token vector across all KV heads (n_kv_heads * head_dim values)
// as one group. New tokens wait in an fp16 buffer of n_b tokens; at the end of an Append
// that leaves n_b or more tokens buffered, the whole buffer is compressed as one block. So
// decoding one token at a time gives blocks of n_b tokens, and a prefill (or prefill chunk)
// of T >= n_b tokens becomes one block, as GEAR compresses the prompt as one block.
// Spec `kcvt:bits=2|4|8,buffer=20` (defaults 4, 20).
//
// Value rows span heads, so per_head_retain() is false: Retain(head) still works (each head
// keeps a list of the shared rows it uses; a row is freed when no head uses it any more;
// when every head keeps the same tokens the lists collapse back to the identity).
#ifndef KVPACK_KV_CODECS_KCVT_CODEC_H_
#define KVPACK_KV_CODECS_KCVT_CODEC_H_

#include <memory>

#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {

Result<std::unique_ptr<ComponentStore>> MakeKcvtStore(const MethodSpec& spec,
                                                      const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_KCVT_CODEC_H_
