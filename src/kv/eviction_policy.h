// The eviction-policy seam (METHODS.md 2): a policy decides which cached tokens stay; only
// the KvCache applies its decisions (llama.cpp's "plan, then apply").
//
// Design goals:
//  - Statistics on demand: a policy declares what it needs (`PolicyNeeds`): accumulated
//    attention of some softmax variant (attention_stats.h computes it in a separate pass
//    over the cache, never inside Attend's online softmax), or the chunk's Q/K/V before
//    RoPE (Locret's retaining heads). Nothing is computed for a policy that needs nothing.
//  - Per (layer, KV head) decisions: `Plan` returns the storage indices to keep; the cache
//    calls ComponentStore::Retain on keys and values (storage really freed, whatever the
//    codec) and then `OnRetain`, so that per-token score arrays move with the tokens.
//  - A sequence has a prompt and a planned generation (`SequencePlan`): fraction budgets
//    resolve against the prompt when the sequence begins (before its first chunk, so that
//    chunked prefill already evicts and the cache never holds more than budget + chunk
//    tokens per head); Keyformer's temperature schedule runs over the planned generation.
//  - Deterministic: policies that draw noise take a seed; the noise of a (query, key) pair
//    does not depend on threads or chunking (attention_stats.h).
// Non-goals: policies that bring evicted tokens back; budgets that differ across layers.
#ifndef KVPACK_KV_EVICTION_POLICY_H_
#define KVPACK_KV_EVICTION_POLICY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/spec.h"
#include "kvpack/status.h"

namespace kvpack {

// Where surviving keys sit in RoPE's frame (METHODS.md 0): `original` keeps every token's
// own position; `compact` renumbers the survivors 0..n-1 after every eviction (StreamingLLM)
// by re-rotating their keys (llama.cpp's K-shift; see KvCache::ApplyPolicy).
enum class PositionMode { kOriginal, kCompact };

// What a policy asks the forward pass to compute for it.
struct PolicyNeeds {
  bool attention = false;     // per-chunk attention statistics (AttentionStatsRequest)
  bool pre_rope_qkv = false;  // the chunk's Q/K/V before RoPE (ObservePreRope)
};

// Noise added to the logits before the scoring softmax (Keyformer and its ablations).
enum class ScoreNoise { kNone, kConstant, kGaussian, kGumbel };
// How scores are combined over the query rows of a chunk and the query heads of a KV-head
// group: sum (accumulated-attention methods) or max (Locret's labels).
enum class ScoreReduce { kSum, kMax };

// One scoring softmax: f_i = softmax((x_i + z_i) / tau) with x_i = q.k_i * scale over the
// tokens a query row can see (cached tokens plus the chunk's own keys, causally).
struct AttentionStatsRequest {
  ScoreNoise noise = ScoreNoise::kNone;
  double tau = 1.0;
  uint64_t noise_stream = 0;  // identity of the noise draw (seed mixed with the layer)
  ScoreReduce reduce = ScoreReduce::kSum;
};

// The result of one statistics pass over one layer: per KV head, one score per token the
// chunk could see, the cached tokens in storage order followed by the chunk's own tokens.
struct AttentionStats {
  std::vector<std::vector<float>> per_head;  // [n_kv_heads][n_cached(head) + n_rows]
};

struct SequencePlan {
  int64_t n_prompt = 0;     // tokens of the prompt; later tokens are decode steps
  int64_t n_generate = 0;   // planned decode steps (Keyformer's tau schedule); 0: unknown
  int64_t budget_base = 0;  // length that fraction budgets resolve against; 0: n_prompt
};

// Where the sequence stands when a chunk reaches a layer.
struct ChunkContext {
  int layer = 0;
  int64_t n_before = 0;  // tokens of the sequence appended to this layer before the chunk
  int64_t n_rows = 0;    // tokens in the chunk
};

// The chunk's projections before RoPE (Locret scores tokens from them).
struct PreRopeChunk {
  const float* q = nullptr;  // [n_rows, n_heads, head_dim]
  const float* k = nullptr;  // [n_rows, n_kv_heads, head_dim]
  const float* v = nullptr;  // [n_rows, n_kv_heads, head_dim]
  int64_t n_rows = 0;
  int n_heads = 0;
};

// A token budget: absolute (`budget=1024`, an integer) or a fraction of the prompt
// (`budget=0.5`, a number with a decimal point in (0, 1]).
struct Budget {
  bool is_fraction = false;
  double value = 0.0;

  // Tokens for a sequence whose reference length is `base` (floor, at least 1).
  int64_t Resolve(int64_t base) const;
  std::string ToString() const;
};
// Reads `key` of `spec`; `fallback` (may be null) when absent. Errors name the policy.
Result<Budget> ParseBudget(const MethodSpec& spec, const std::string& key, const Budget* fallback);
// Reads `positions=original|compact` (default original).
Result<PositionMode> ParsePositionMode(const MethodSpec& spec);
// A share in (0, 1) for `key` (e.g. the recent window's share of the budget).
Result<double> ParseShare(const MethodSpec& spec, const std::string& key, double fallback);

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // Canonical spec with every parameter ("h2o:budget=0.5,recent=0.5,positions=original").
  virtual std::string spec() const = 0;
  virtual PolicyNeeds needs() const = 0;
  virtual PositionMode positions() const = 0;

  // A new sequence on a cache of n_layers x n_kv_heads: resolves the budget, drops any
  // state of the previous sequence. Fails when the budget cannot be met (e.g. a sink
  // budget smaller than its sinks).
  virtual Status Begin(int n_layers, int n_kv_heads, const SequencePlan& plan) = 0;
  // Tokens every (layer, head) holds at most after a plan is applied (after Begin).
  virtual int64_t token_budget() const = 0;

  // The statistics the chunk entering `ctx.layer` must produce (when needs().attention).
  virtual AttentionStatsRequest StatsRequest(const ChunkContext& ctx) const { return {}; }
  // Before RoPE, before the chunk attends (when needs().pre_rope_qkv).
  virtual void ObservePreRope(const ChunkContext& ctx, const PreRopeChunk& chunk) {}
  // After the chunk was appended: the statistics of (ctx.layer, head), one score per token
  // the head now holds (storage order; the chunk's tokens last).
  virtual void ObserveAttention(const ChunkContext& ctx, int head, std::span<const float> scores) {}

  // Decides what (ctx.layer, head) keeps after the chunk was appended. `positions` are the
  // held tokens' positions in storage order. Returns false when nothing is evicted;
  // otherwise fills `keep` with ascending storage indices (at most token_budget()).
  virtual bool Plan(const ChunkContext& ctx, int head, std::span<const int32_t> positions,
                    std::vector<int64_t>* keep) const = 0;
  // The cache applied `keep` to (layer, head): per-token state must follow.
  virtual void OnRetain(int layer, int head, std::span<const int64_t> keep) {}
};

}  // namespace kvpack

#endif  // KVPACK_KV_EVICTION_POLICY_H_
