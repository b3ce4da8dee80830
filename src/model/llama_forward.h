// The optimized llama-family forward pass: a chunk of tokens (prefill, batched matrix
// products) or one token (decode) through every layer, reading and extending a KvCache.
//
// Design goals: the same code path serves prefill and decode; attention goes through the
// cache's codecs (kv/attention.h); scratch memory lives in the caller-owned ForwardScratch
// so that a session allocates once.
#ifndef KVPACK_MODEL_LLAMA_FORWARD_H_
#define KVPACK_MODEL_LLAMA_FORWARD_H_

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/llama_model.h"

namespace kvpack {

struct ForwardScratch {
  std::vector<float> x;      // [n, n_embd] residual stream
  std::vector<float> xn;     // [n, n_embd] normalised
  std::vector<float> q;      // [n, q_dim]
  std::vector<float> k;      // [n, kv_dim]
  std::vector<float> v;      // [n, kv_dim]
  std::vector<float> att;    // [n, q_dim]
  std::vector<float> gate;   // [n, n_ff]
  std::vector<float> up;     // [n, n_ff]
  std::vector<float> tmp;    // [n, n_embd]
  std::vector<float> rope_cos, rope_sin;  // [n, n_rot / 2] each, shared by every layer
};

enum class LogitsFor { kLastToken, kEveryToken };

// Runs tokens[0..n) at positions pos[0..n) (ascending, after everything cached; with a
// positions=compact policy, from cache.NextPosition()). With an eviction policy, every layer
// applies its plan right after appending the chunk (kv/kv_cache.h).
// logits: [1, n_vocab] for kLastToken, [n, n_vocab] for kEveryToken.
Status LlamaForward(const LlamaModel& model, const int32_t* tokens, const int32_t* pos, int64_t n,
                    KvCache& cache, LogitsFor which, float* logits, ForwardScratch& scratch,
                    ThreadPool* pool);

}  // namespace kvpack

#endif  // KVPACK_MODEL_LLAMA_FORWARD_H_
