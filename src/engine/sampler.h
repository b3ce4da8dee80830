// Token sampling: greedy, temperature, top-k, top-p and repetition penalty, seeded.
// The order of transformations follows llama.cpp's common default chain: repetition
// penalty, top-k, top-p, temperature, then a draw.
#ifndef KVPACK_ENGINE_SAMPLER_H_
#define KVPACK_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "kvpack/status.h"

namespace kvpack {

struct SamplerOptions {
  float temperature = 0.8f;       // <= 0 means greedy (argmax)
  int top_k = 40;                 // <= 0 disables
  float top_p = 0.95f;            // >= 1 disables
  float repeat_penalty = 1.0f;    // 1 disables; > 1 discourages repeats (CTRL-style)
  int repeat_last_n = 64;         // how many recent tokens the penalty looks at
  uint64_t seed = 0;
};

Status ValidateSamplerOptions(const SamplerOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  // Picks the next token from logits [n_vocab] (modified in place by the penalty).
  int32_t Sample(float* logits, int64_t n_vocab);
  // Records a token of the context (prompt or generated) for the repetition penalty.
  void Accept(int32_t token);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<int32_t> recent_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(const float* logits, int64_t n);

}  // namespace kvpack

#endif  // KVPACK_ENGINE_SAMPLER_H_
