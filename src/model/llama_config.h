// Hyper-parameters of a llama-family model, read from GGUF metadata.
//
// Supported `general.architecture` values: `llama` (Llama 2/3, SmolLM/SmolLM2, Mistral
// without sliding window) and `qwen2` (QKV bias, NeoX-style RoPE). Anything else is refused
// by name.
#ifndef KVPACK_MODEL_LLAMA_CONFIG_H_
#define KVPACK_MODEL_LLAMA_CONFIG_H_

#include <cstdint>
#include <string>

#include "io/gguf.h"
#include "kvpack/status.h"
#include "ops/nn.h"

namespace kvpack {

struct LlamaConfig {
  std::string arch;             // "llama" or "qwen2"
  std::string name;             // general.name, informational
  int64_t n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  int n_rot = 0;
  RopeLayout rope_layout = RopeLayout::kAdjacent;
  bool qkv_bias = false;

  int n_rep() const { return n_heads / n_kv_heads; }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and validates the hyper-parameters; errors name the missing or bad key.
Result<LlamaConfig> ReadLlamaConfig(const GgufFile& file);

}  // namespace kvpack

#endif  // KVPACK_MODEL_LLAMA_CONFIG_H_
