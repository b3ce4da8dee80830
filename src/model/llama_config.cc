#include "model/llama_config.h"

namespace kvpack {
namespace {

Result<int> ReadPositive(const GgufFile& f, const std::string& key, int64_t max_value) {
  Result<int64_t> v = f.GetInt(key);
  if (!v.ok()) return v.status().WithContext(f.path());
  if (*v <= 0 || *v > max_value) {
    return InvalidArgument(f.path() + ": " + key + " = " + std::to_string(*v) +
                           " is out of range (1.." + std::to_string(max_value) + ")");
  }
  return static_cast<int>(*v);
}

}  // namespace

Result<LlamaConfig> ReadLlamaConfig(const GgufFile& f) {
  LlamaConfig c;
  Result<std::string> arch = f.GetString("general.architecture");
  if (!arch.ok()) return arch.status().WithContext(f.path());
  c.arch = *arch;
  if (c.arch != "llama" && c.arch != "qwen2") {
    return Unimplemented(f.path() + ": architecture '" + c.arch +
                         "' is not supported (supported: llama, qwen2)");
  }
  if (Result<std::string> name = f.GetString("general.name"); name.ok()) c.name = *name;
  const std::string a = c.arch + ".";
  KVPACK_ASSIGN_OR_RETURN(c.n_embd, ReadPositive(f, a + "embedding_length", 1 << 16));
  KVPACK_ASSIGN_OR_RETURN(c.n_layers, ReadPositive(f, a + "block_count", 1024));
  KVPACK_ASSIGN_OR_RETURN(c.n_heads, ReadPositive(f, a + "attention.head_count", 1024));
  c.n_kv_heads = c.n_heads;
  if (f.Find(a + "attention.head_count_kv")) {
    KVPACK_ASSIGN_OR_RETURN(c.n_kv_heads, ReadPositive(f, a + "attention.head_count_kv", 1024));
  }
  KVPACK_ASSIGN_OR_RETURN(c.n_ff, ReadPositive(f, a + "feed_forward_length", 1 << 20));
  c.n_ctx_train = 2048;
  if (f.Find(a + "context_length")) {
    KVPACK_ASSIGN_OR_RETURN(c.n_ctx_train, ReadPositive(f, a + "context_length", 1 << 24));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgument(f.path() + ": head_count " + std::to_string(c.n_heads) +
                           " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  }
  c.head_dim = c.n_embd / c.n_heads;
  if (f.Find(a + "attention.key_length")) {
    KVPACK_ASSIGN_OR_RETURN(c.head_dim, ReadPositive(f, a + "attention.key_length", 1 << 12));
  }
  if (c.head_dim % 2 != 0) {
    return InvalidArgument(f.path() + ": head_dim " + std::to_string(c.head_dim) + " is odd");
  }
  Result<double> eps = f.GetFloat(a + "attention.layer_norm_rms_epsilon");
  if (!eps.ok()) return eps.status().WithContext(f.path());
  if (!(*eps > 0.0 && *eps < 1.0)) {
    return InvalidArgument(f.path() + ": layer_norm_rms_epsilon out of range");
  }
  c.rms_eps = static_cast<float>(*eps);
  if (f.Find(a + "rope.freq_base")) {
    KVPACK_ASSIGN_OR_RETURN(double base, f.GetFloat(a + "rope.freq_base"));
    if (!(base > 1.0)) return InvalidArgument(f.path() + ": rope.freq_base must be > 1");
    c.rope_freq_base = static_cast<float>(base);
  }
  c.n_rot = c.head_dim;
  if (f.Find(a + "rope.dimension_count")) {
    KVPACK_ASSIGN_OR_RETURN(c.n_rot, ReadPositive(f, a + "rope.dimension_count", c.head_dim));
    if (c.n_rot % 2 != 0) return InvalidArgument(f.path() + ": rope.dimension_count is odd");
  }
  if (Result<std::string> scaling = f.GetString(a + "rope.scaling.type");
      scaling.ok() && *scaling != "none") {
    return Unimplemented(f.path() + ": rope scaling type '" + *scaling +
                         "' is not supported (Llama-3 frequency factors come from rope_freqs)");
  }
  // llama.cpp's llama_model_rope_type: qwen2 uses NeoX-style RoPE (its converter does not
  // permute Q/K), llama uses adjacent pairs.
  c.rope_layout = c.arch == "qwen2" ? RopeLayout::kHalves : RopeLayout::kAdjacent;
  c.qkv_bias = c.arch == "qwen2";
  if (Result<std::vector<std::string>> tokens = f.GetStringArray("tokenizer.ggml.tokens");
      tokens.ok()) {
    c.n_vocab = static_cast<int64_t>(tokens->size());
  }
  if (f.Find(a + "vocab_size")) {
    KVPACK_ASSIGN_OR_RETURN(c.n_vocab, f.GetInt(a + "vocab_size"));
  }
  return c;
}

}  // namespace kvpack
