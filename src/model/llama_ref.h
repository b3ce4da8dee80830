// The slow scalar reference forward pass: one token at a time, weights dequantized row by
// row, dot products and attention in double precision, a plain float KV cache. It shares
// no code with the optimized path except the tiny ops of ops/nn.h and the GGUF binding, so
// that it can serve as the test oracle (tests/unit/model_forward_test.cc).
#ifndef KVPACK_MODEL_LLAMA_REF_H_
#define KVPACK_MODEL_LLAMA_REF_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "model/llama_model.h"

namespace kvpack {

class LlamaRef {
 public:
  explicit LlamaRef(const LlamaModel& model);

  // Feeds one token at the next position; returns its logits [n_vocab] (empty when
  // want_logits is false: the output projection is skipped).
  std::vector<float> Step(int32_t token, bool want_logits = true);
  int64_t n_past() const { return n_past_; }

  // Called in every layer of every Step with the token's rotated queries
  // q: [n_heads, head_dim], rotated keys k and values v: [n_kv_heads, head_dim] (kvstat
  // captures real Q/K/V this way).
  using QkvObserver = std::function<void(int layer, const float* q, const float* k, const float* v)>;
  void set_qkv_observer(QkvObserver observer) { observer_ = std::move(observer); }

 private:
  const LlamaModel& model_;
  int64_t n_past_ = 0;
  QkvObserver observer_;
  std::vector<std::vector<float>> k_cache_;  // per layer: [n_past, kv_dim]
  std::vector<std::vector<float>> v_cache_;  // per layer: [n_past, kv_dim]
};

}  // namespace kvpack

#endif  // KVPACK_MODEL_LLAMA_REF_H_
