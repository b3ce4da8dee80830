#include "model/synthetic_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "io/gguf_writer.h"
#include "ops/ggml_quants.h"

namespace kvpack {

std::vector<std::string> SyntheticShapeNames() {
  return {"smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b"};
}

Result<SyntheticShape> NamedSyntheticShape(const std::string& name) {
  SyntheticShape s;
  s.name = name;
  if (name == "smollm2-135m") {
    s.n_vocab = 49152, s.n_embd = 576, s.n_layers = 30, s.n_heads = 9, s.n_kv_heads = 3;
    s.n_ff = 1536, s.rope_freq_base = 100000.0f;
  } else if (name == "qwen2.5-0.5b") {
    s.arch = "qwen2";
    s.n_vocab = 151936, s.n_embd = 896, s.n_layers = 24, s.n_heads = 14, s.n_kv_heads = 2;
    s.n_ff = 4864, s.rope_freq_base = 1000000.0f;
  } else if (name == "llama-3.2-1b") {
    s.n_vocab = 128256, s.n_embd = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8;
    s.n_ff = 8192, s.rope_freq_base = 500000.0f;
  } else {
    std::string names;
    for (const auto& n : SyntheticShapeNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown model shape '" + name + "'; known: " + names + ", custom");
  }
  return s;
}

namespace {

Status AddRandomTensor(GgufWriter& w, const std::string& name, std::vector<int64_t> ne,
                       GgmlType type, float stddev, std::mt19937_64& rng) {
  int64_t n_rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) n_rows *= ne[i];
  const int64_t n_in = ne[0];
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> row(n_in);
  const size_t row_bytes = GgmlRowBytes(type, n_in);
  std::vector<uint8_t> bytes(row_bytes * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (float& x : row) x = dist(rng);
    KVPACK_RETURN_IF_ERROR(QuantizeRow(type, row.data(), bytes.data() + r * row_bytes, n_in));
  }
  return w.AddTensor(name, std::move(ne), type, std::move(bytes));
}

Status AddOnes(GgufWriter& w, const std::string& name, int64_t n) {
  std::vector<uint8_t> bytes(n * sizeof(float));
  const float one = 1.0f;
  for (int64_t i = 0; i < n; ++i) std::memcpy(&bytes[i * sizeof(float)], &one, sizeof(float));
  return w.AddTensor(name, {n}, GgmlType::kF32, std::move(bytes));
}

}  // namespace

Status WriteSyntheticModel(const SyntheticShape& s, GgmlType type, uint64_t seed,
                           const std::string& path) {
  if (s.n_vocab < 259 || s.n_embd <= 0 || s.n_layers <= 0 || s.n_heads <= 0 ||
      s.n_kv_heads <= 0 || s.n_ff <= 0 || s.n_heads % s.n_kv_heads != 0 ||
      s.n_embd % s.n_heads != 0) {
    return InvalidArgument("synthetic model shape is inconsistent (n_vocab >= 259, n_heads a "
                           "multiple of n_kv_heads, n_embd a multiple of n_heads)");
  }
  const int64_t block = GetGgmlTypeTraits(type).block_size;
  if (s.n_embd % block != 0 || s.n_ff % block != 0) {
    return InvalidArgument("n_embd and n_ff must be multiples of " + std::to_string(block) +
                           " for " + GgmlTypeName(type) + " weights");
  }
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.SetString("general.architecture", s.arch);
  w.SetString("general.name", "kvpack synthetic " + s.name + " (random weights, seed " +
                                  std::to_string(seed) + ")");
  w.SetUint32(a + "context_length", s.n_ctx);
  w.SetUint32(a + "embedding_length", s.n_embd);
  w.SetUint32(a + "block_count", s.n_layers);
  w.SetUint32(a + "feed_forward_length", s.n_ff);
  w.SetUint32(a + "attention.head_count", s.n_heads);
  w.SetUint32(a + "attention.head_count_kv", s.n_kv_heads);
  w.SetFloat32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetFloat32(a + "rope.freq_base", s.rope_freq_base);
  // Vocabulary: <unk>, <s>, </s>, 256 byte tokens, then filler pieces.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  char buf[16];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  for (int i = static_cast<int>(tokens.size()); i < s.n_vocab; ++i) {
    tokens.push_back("\xE2\x96\x81tok" + std::to_string(i));
    types.push_back(1);
  }
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", std::vector<float>(tokens.size(), 0.0f));
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);

  std::mt19937_64 rng(seed);
  const int64_t E = s.n_embd, hd = s.n_embd / s.n_heads;
  const int64_t q_dim = hd * s.n_heads, kv_dim = hd * s.n_kv_heads;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(E));
  KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, "token_embd.weight", {E, s.n_vocab}, type, 1.0f, rng));
  KVPACK_RETURN_IF_ERROR(AddOnes(w, "output_norm.weight", E));
  if (!s.tied_output) {
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, "output.weight", {E, s.n_vocab}, type, in_std, rng));
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    KVPACK_RETURN_IF_ERROR(AddOnes(w, p + "attn_norm.weight", E));
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_q.weight", {E, q_dim}, type, in_std, rng));
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_k.weight", {E, kv_dim}, type, in_std, rng));
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_v.weight", {E, kv_dim}, type, in_std, rng));
    if (s.arch == "qwen2") {
      KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_q.bias", {q_dim}, GgmlType::kF32, 0.02f, rng));
      KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_k.bias", {kv_dim}, GgmlType::kF32, 0.02f, rng));
      KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_v.bias", {kv_dim}, GgmlType::kF32, 0.02f, rng));
    }
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "attn_output.weight", {q_dim, E}, type,
                                           1.0f / std::sqrt(static_cast<float>(q_dim)), rng));
    KVPACK_RETURN_IF_ERROR(AddOnes(w, p + "ffn_norm.weight", E));
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "ffn_gate.weight", {E, s.n_ff}, type, in_std, rng));
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "ffn_up.weight", {E, s.n_ff}, type, in_std, rng));
    KVPACK_RETURN_IF_ERROR(AddRandomTensor(w, p + "ffn_down.weight", {s.n_ff, E}, type,
                                           1.0f / std::sqrt(static_cast<float>(s.n_ff)), rng));
  }
  return w.WriteFile(path);
}

}  // namespace kvpack
