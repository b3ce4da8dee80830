// Per-layer, per-KV-head reconstruction error of a KV-cache configuration on real keys,
// values and queries (METHODS.md 4: "per-layer relative error of K, V and of the attention
// output"), plus its exact memory. The queries, keys and values come from the scalar
// reference forward pass (model/llama_ref.h) over a prompt, so the baseline is exact.
//
// Protocol: the captured K/V of every layer are appended to a fresh cache of the spec in
// chunks of `n_batch` tokens (as a prefill would), then decoded; the attention output of
// the last `n_queries` prompt positions (each over the tokens up to itself, causal) is
// computed in double once with the captured K/V and once with the decoded ones. Errors are
// relative Frobenius norms ||X - X^||_F / ||X||_F per (layer, KV head); the attention error
// of a KV head covers all query heads of its group.
// Non-goals: eviction policies (which tokens stay is not a reconstruction question; specs
// with a policy are refused).
#ifndef KVPACK_EVAL_KV_STAT_H_
#define KVPACK_EVAL_KV_STAT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/component_store.h"
#include "model/llama_model.h"

namespace kvpack {

// Rotated queries and keys and the values of every prompt token, per layer.
struct CapturedQkv {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_tokens = 0;
  std::vector<std::vector<float>> q;  // [n_layers][n_tokens, n_heads, head_dim]
  std::vector<std::vector<float>> k;  // [n_layers][n_tokens, n_kv_heads, head_dim]
  std::vector<std::vector<float>> v;  // [n_layers][n_tokens, n_kv_heads, head_dim]
  int n_layers() const { return static_cast<int>(k.size()); }
};

Result<CapturedQkv> CaptureQkv(const LlamaModel& model, std::span<const int32_t> tokens);

struct HeadError {
  double keys = 0.0, values = 0.0, attention = 0.0;  // relative Frobenius errors
};

struct KvStat {
  std::string spec;
  std::vector<std::vector<HeadError>> heads;  // [n_layers][n_kv_heads]
  std::vector<HeadError> layers;              // [n_layers], over all heads of the layer
  HeadError total;                            // over all layers and heads
  MemoryUsage keys, values;                   // payload of the whole cache
};

struct KvStatOptions {
  int64_t n_batch = 0;     // append chunk; 0: the whole prompt at once
  int64_t n_queries = 32;  // attention output measured at the last n prompt positions
};

Result<KvStat> MeasureKvStat(const CapturedQkv& qkv, const std::string& spec,
                             const KvStatOptions& options);

}  // namespace kvpack

#endif  // KVPACK_EVAL_KV_STAT_H_
