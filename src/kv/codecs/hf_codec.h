// Hugging Face transformers' `QuantizedCache` (METHODS.md 1.6; seed 003, the "KV cache
// quantization" blog post and transformers' cache_utils.QuantizedCache), spec
//   hf:nbits=4,q_group_size=64,residual_length=128,axis_key=0,axis_value=0,
//      backend=quanto|hqq,mode=append|hf
// - axis 0: groups of q_group_size channels of one token; axis -1 (quanto) / 1 (hqq): groups
//   of q_group_size tokens of one channel.
// - backend quanto: min-max Q_b, nbits 2 or 4; hqq: nbits 1, 2, 3, 4 or 8, the zero point
//   refined by half-quadratic optimisation (quant_common.cc).
// - mode=append (default): tokens collect in an fp16 residual; when it holds
//   residual_length tokens it is quantized as a block and emptied (KIVI-style, never
//   re-quantized; chunking-invariant; per-channel needs residual_length % q_group_size == 0).
// - mode=hf: what transformers does: the first Append (the prompt) is quantized at once;
//   later tokens go to the residual; when it reaches residual_length the whole cache is
//   dequantized, concatenated with the residual and re-quantized (compounding error, O(n)
//   per flush). Kept for comparison; the difference is measured in tests/unit/kv_hf_test.cc.
#ifndef KVPACK_KV_CODECS_HF_CODEC_H_
#define KVPACK_KV_CODECS_HF_CODEC_H_

#include <memory>

#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {

Result<std::unique_ptr<ComponentStore>> MakeHfStore(const MethodSpec& spec,
                                                    const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_HF_CODEC_H_
