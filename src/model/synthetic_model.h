// Seeded random-weight GGUF models with exactly the shapes of named real models, for speed
// and memory measurements at realistic sizes (`kvpack make-model`). Speed does not depend on
// weight values; quality numbers never come from these files.
#ifndef KVPACK_MODEL_SYNTHETIC_MODEL_H_
#define KVPACK_MODEL_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "kvpack/status.h"

namespace kvpack {

struct SyntheticShape {
  std::string arch = "llama";  // "llama" or "qwen2"
  std::string name;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int n_ff = 0;
  int n_ctx = 8192;
  float rope_freq_base = 10000.0f;
  bool tied_output = true;
};

// Shapes of smollm2-135m, qwen2.5-0.5b, llama-3.2-1b (docs/evaluation.md), or an error
// listing the known names.
Result<SyntheticShape> NamedSyntheticShape(const std::string& name);
std::vector<std::string> SyntheticShapeNames();

// Writes the model with a byte-fallback SentencePiece-style vocabulary of n_vocab tokens.
// Weights ~ N(0, 1/sqrt(fan_in)) from `seed`; matrices stored as `type` (f32, f16, q8_0,
// q4_0), norms f32.
Status WriteSyntheticModel(const SyntheticShape& shape, GgmlType type, uint64_t seed,
                           const std::string& path);

}  // namespace kvpack

#endif  // KVPACK_MODEL_SYNTHETIC_MODEL_H_
