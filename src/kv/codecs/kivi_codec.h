// KIVI (METHODS.md 1.4; Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for
// KV Cache", ICML 2024): keys quantized per channel in groups of G consecutive tokens, values
// per token in groups of G channels, both with a full-precision (fp16) residual of R tokens:
//   keys:   new keys collect in a buffer; when it holds R tokens the block is quantized as
//           R / G token groups per channel and the buffer is emptied;
//   values: the newest R values stay in full precision; the oldest leaves one at a time.
// Appending tokens one at a time or in chunks gives the same stored form (the rules are
// applied token by token; residual tokens are rounded to fp16 on arrival and quantized from
// that fp16 value, so a token's codes do not depend on when it was flushed).
// Spec `kivi:bits=2|4|8,group=32,residual=128` (defaults 2, 32, 128); R % G == 0.
#ifndef KVPACK_KV_CODECS_KIVI_CODEC_H_
#define KVPACK_KV_CODECS_KIVI_CODEC_H_

#include <memory>

#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {

Result<std::unique_ptr<ComponentStore>> MakeKiviStore(const MethodSpec& spec,
                                                      const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_KIVI_CODEC_H_
