#include "kv/codec_registry.h"

#include "kv/codecs/flexgen_codec.h"
#include "kv/codecs/gear_codec.h"
#include "kv/codecs/hf_codec.h"
#include "kv/codecs/kcvt_codec.h"
#include "kv/codecs/kivi_codec.h"
#include "kv/codecs/plain_codec.h"
#include "kv/codecs/q4_0_codec.h"
#include "kv/codecs/q8_0_codec.h"

namespace kvpack {
namespace {

CodecInfo Plain(const char* name, const char* summary, PlainFormat format) {
  return {name, summary, {},
          [format](const MethodSpec& spec, const StoreShape& shape)
              -> Result<std::unique_ptr<ComponentStore>> {
            KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {}));
            return MakePlainStore(format, shape);
          }};
}

// llama.cpp's KV blocks (METHODS.md 1.3): no parameters.
CodecInfo GgmlBlock(const char* name, const char* summary,
                    Result<std::unique_ptr<ComponentStore>> (*make)(const StoreShape&)) {
  return {name, summary, {},
          [make](const MethodSpec& spec, const StoreShape& shape)
              -> Result<std::unique_ptr<ComponentStore>> {
            KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {}));
            return make(shape);
          }};
}

std::vector<CodecInfo> BuildRegistry() {
  std::vector<CodecInfo> codecs;
  codecs.push_back(Plain("f32", "full precision, 32-bit floats (reference)", PlainFormat::kF32));
  codecs.push_back(Plain("f16", "IEEE half precision", PlainFormat::kF16));
  codecs.push_back(Plain("bf16", "bfloat16", PlainFormat::kBF16));
  codecs.push_back(GgmlBlock("q8_0", "llama.cpp block_q8_0: 32 channels, int8, fp16 scale",
                             MakeQ8_0Store));
  codecs.push_back(GgmlBlock("q4_0", "llama.cpp block_q4_0: 32 channels, 4-bit, fp16 scale",
                             MakeQ4_0Store));
  codecs.push_back({"flexgen", "per-token groups of channels, asymmetric b-bit (FlexGen)",
                    {"bits", "group"}, MakeFlexGenStore});
  codecs.push_back({"kivi", "KIVI: per-channel keys, per-token values, fp16 residual",
                    {"bits", "group", "residual"}, MakeKiviStore});
  codecs.push_back({"kcvt", "KCVT (GEAR): per-channel key blocks, per-token values across heads",
                    {"bits", "buffer"}, MakeKcvtStore});
  codecs.push_back({"hf", "Hugging Face QuantizedCache (quanto/hqq), append or hf mode",
                    {"nbits", "q_group_size", "residual_length", "axis_key", "axis_value",
                     "backend", "mode"},
                    MakeHfStore});
  codecs.push_back({"gear", "GEAR: quantization backbone + per-head low-rank error + outliers",
                    {"bits", "backbone", "group", "sparsity", "rank_prefill", "rank_decode",
                     "iters", "buffer"},
                    MakeGearStore});
  codecs.push_back({"gear-l", "GEAR-L: quantization backbone + per-head low-rank error",
                    {"bits", "backbone", "group", "rank_prefill", "rank_decode", "iters",
                     "buffer"},
                    MakeGearStore});
  return codecs;
}

}  // namespace

const std::vector<CodecInfo>& RegisteredCodecs() {
  static const std::vector<CodecInfo> codecs = BuildRegistry();
  return codecs;
}

Result<std::unique_ptr<ComponentStore>> CreateStore(const MethodSpec& spec,
                                                    const StoreShape& shape) {
  std::string names;
  for (const CodecInfo& info : RegisteredCodecs()) {
    if (info.name == spec.name) {
      Result<std::unique_ptr<ComponentStore>> store = info.create(spec, shape);
      if (!store.ok()) return store.status();
      return store;
    }
    names += (names.empty() ? "" : ", ") + info.name;
  }
  return InvalidArgument("unknown KV codec '" + spec.name + "'; valid codecs: " + names);
}

}  // namespace kvpack
