// The slow scalar reference forward pass: one token at a time, weights dequantized row by
// row, dot products and attention in double precision, a plain float KV cache. It shares
// no code with the optimized path except the tiny ops of ops/nn.h and the GGUF binding, so
// that it can serve as the test oracle (tests/unit/model_forward_test.cc).
#ifndef KVPACK_MODEL_LLAMA_REF_H_
#define KVPACK_MODEL_LLAMA_REF_H_

#include <cstdint>
#include <vector>

#include "model/llama_model.h"

namespace kvpack {

class LlamaRef {
 public:
  explicit LlamaRef(const LlamaModel& model);

  // Feeds one token at the next position; returns its logits [n_vocab].
  std::vector<float> Step(int32_t token);
  int64_t n_past() const { return n_past_; }

 private:
  const LlamaModel& model_;
  int64_t n_past_ = 0;
  std::vector<std::vector<float>> k_cache_;  // per layer: [n_past, kv_dim]
  std::vector<std::vector<float>> v_cache_;  // per layer: [n_past, kv_dim]
};

}  // namespace kvpack

#endif  // KVPACK_MODEL_LLAMA_REF_H_
