// Typed views of a llama-family model's tensors inside a mapped GGUF file, validated
// against the hyper-parameters (shape mismatches are errors naming the tensor).
#ifndef KVPACK_MODEL_LLAMA_WEIGHTS_H_
#define KVPACK_MODEL_LLAMA_WEIGHTS_H_

#include <memory>
#include <vector>

#include "io/gguf.h"
#include "model/llama_config.h"
#include "ops/matmul.h"

namespace kvpack {

// A 1-D float tensor: a view into the file when it is F32, else an owned converted copy.
struct FloatVector {
  const float* data = nullptr;  // [n]
  int64_t n = 0;
  std::vector<float> owned;
};

struct LlamaLayerWeights {
  FloatVector attn_norm;          // [n_embd]
  WeightMatrix wq;                // [q_dim rows, n_embd]
  WeightMatrix wk;                // [kv_dim rows, n_embd]
  WeightMatrix wv;                // [kv_dim rows, n_embd]
  WeightMatrix wo;                // [n_embd rows, q_dim]
  FloatVector bq, bk, bv;         // [q_dim], [kv_dim], [kv_dim]; empty when absent
  FloatVector ffn_norm;           // [n_embd]
  WeightMatrix w_gate;            // [n_ff rows, n_embd]
  WeightMatrix w_up;              // [n_ff rows, n_embd]
  WeightMatrix w_down;            // [n_embd rows, n_ff]
};

struct LlamaWeights {
  WeightMatrix token_embd;        // [n_vocab rows, n_embd]
  FloatVector output_norm;        // [n_embd]
  WeightMatrix output;            // [n_vocab rows, n_embd]; token_embd when tied
  bool tied_output = false;
  FloatVector rope_freqs;         // [n_rot / 2]; empty unless Llama-3 frequency factors
  std::vector<LlamaLayerWeights> layers;

  // Bytes of weights read per decoded token (every matrix once, plus one embedding row).
  size_t DecodeBytesPerToken(const LlamaConfig& c) const;
  size_t TotalBytes() const;
};

Result<LlamaWeights> BindLlamaWeights(const GgufFile& file, const LlamaConfig& config);

}  // namespace kvpack

#endif  // KVPACK_MODEL_LLAMA_WEIGHTS_H_
