// The KV cache of one session: per layer a key store and a value store (codecs), and per
// layer and KV head the original position of every cached token ("cells").
//
// Design goals: the cache is the only place that mutates stored tokens; codecs decide the
// representation, an eviction policy (eviction_policy.h) decides which tokens stay and hands
// the cache a plan per (layer, KV head), which the cache applies with Retain on both stores.
// The forward pass drives a policy per layer (model/llama_forward.cc): StatsRequest before
// the chunk's Append, ObserveAttention and ApplyPolicy after it, so that every (layer, head)
// holds at most budget + chunk tokens at any time and at most the budget between chunks.
// Non-goals: sharing storage across sessions.
#ifndef KVPACK_KV_KV_CACHE_H_
#define KVPACK_KV_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/component_store.h"
#include "kv/eviction_policy.h"
#include "kv/spec.h"
#include "kvpack/status.h"
#include "ops/nn.h"

namespace kvpack {

class ThreadPool;

struct KvCacheShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

class KvCache {
 public:
  // Parses nothing: takes an already parsed spec (see spec.h) and creates every store and
  // the policy, if the spec names one (policy_registry.h).
  static Result<std::unique_ptr<KvCache>> Create(const KvCacheShape& shape, const KvSpec& spec);
  static Result<std::unique_ptr<KvCache>> Create(const KvCacheShape& shape,
                                                 std::string_view spec_text);

  const KvCacheShape& shape() const { return shape_; }
  const KvSpec& spec() const { return spec_; }

  // Appends n tokens to `layer`, after they attended (see component_store.h). With a policy
  // and no sequence begun, begins one whose prompt is these n tokens. Input that a store
  // refuses (non-finite, or beyond the fp16 range for a quantized store) changes nothing.
  // With a pool of two or more threads the keys and the values may be appended at once; the
  // stores hold the same bits either way.
  //   k, v: [n, n_kv_heads, head_dim] (keys already rotated); pos: [n].
  Status Append(int layer, const float* k, const float* v, const int32_t* pos, int64_t n,
                ThreadPool* pool = nullptr);

  const ComponentStore& keys(int layer) const { return *layers_[layer].keys; }
  const ComponentStore& values(int layer) const { return *layers_[layer].values; }
  // Positions of the tokens held for (layer, head), in storage order.
  const std::vector<int32_t>& positions(int layer, int head) const {
    return layers_[layer].positions[head];
  }
  int64_t n_tokens(int layer, int head) const {
    return static_cast<int64_t>(layers_[layer].positions[head].size());
  }
  // Largest number of tokens any (layer, head) holds.
  int64_t max_tokens() const;

  // Keeps only `keep` (ascending storage indices) of (layer, head) in both stores; the
  // policy's per-token state follows.
  Status Retain(int layer, int head, std::span<const int64_t> keep);

  // Drops every token (a new sequence); stores are recreated empty, the policy waits for
  // the next BeginSequence.
  Status Clear();

  // --- Eviction (eviction_policy.h) -------------------------------------------------------
  const EvictionPolicy* policy() const { return policy_.get(); }
  PolicyNeeds policy_needs() const { return policy_ ? policy_->needs() : PolicyNeeds{}; }
  PositionMode position_mode() const {
    return policy_ ? policy_->positions() : PositionMode::kOriginal;
  }
  // Installs a policy built outside the registry (one that needs external data, tests);
  // only while the cache holds no token.
  Status SetPolicy(std::unique_ptr<EvictionPolicy> policy);
  // Starts a sequence on an empty cache: resolves the policy's budget.
  Status BeginSequence(const SequencePlan& plan);
  bool sequence_begun() const { return sequence_begun_; }
  // How the stored keys were rotated; positions=compact re-rotates with it. The forward
  // pass, which rotates the keys it appends, sets it.
  void set_rope(const RopeParams& rope) {
    rope_ = rope;
    has_rope_ = true;
  }
  // Position of the next token of a sequence that has seen n_past tokens: n_past, or with
  // positions=compact the number of tokens the cache holds (equal in every layer and head).
  int64_t NextPosition(int64_t n_past) const;

  // A chunk of n_rows about to enter `layer` (before its Append).
  ChunkContext PendingChunk(int layer, int64_t n_rows) const;
  AttentionStatsRequest StatsRequest(int layer, int64_t n_rows) const;
  void ObservePreRope(int layer, const PreRopeChunk& chunk);
  // After the chunk's Append: hands the statistics of `layer` to the policy.
  void ObserveAttention(int layer, const AttentionStats& stats);
  // After the chunk's Append (and ObserveAttention): asks the policy for a plan per head of
  // `layer` and applies it; with positions=compact, re-rotates the survivors' keys. A policy
  // that needs statistics refuses to plan (InvalidArgument) when an Append was not followed
  // by ObserveAttention: its scores would not match the stored tokens.
  Status ApplyPolicy(int layer);

  // Totals over layers; `keys_only`/`values_only` for the per-component breakdown.
  MemoryUsage Memory() const;
  MemoryUsage MemoryOf(int layer, KvComponent component) const;
  // Largest payload seen since creation or Clear (peak).
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  struct Layer {
    std::unique_ptr<ComponentStore> keys;
    std::unique_ptr<ComponentStore> values;
    std::vector<std::vector<int32_t>> positions;  // [n_kv_heads][n_tokens]
  };
  KvCache(const KvCacheShape& shape, KvSpec spec) : shape_(shape), spec_(std::move(spec)) {}
  Status CreateStores();
  // Re-reads one layer's payload into layer_payload_ / payload_ after a change to it, so
  // that tracking the peak costs one layer's Memory() per Append, not the whole cache's.
  void RefreshPayload(int layer);
  ChunkContext LastChunk(int layer) const;
  Status ShiftToCompactPositions(int layer);

  KvCacheShape shape_;
  KvSpec spec_;
  std::vector<Layer> layers_;
  size_t peak_bytes_ = 0;
  std::vector<size_t> layer_payload_;  // [n_layers] payload bytes of keys + values
  size_t payload_ = 0;                 // sum of layer_payload_
  std::unique_ptr<EvictionPolicy> policy_;
  bool sequence_begun_ = false;
  std::vector<int64_t> n_seen_;      // [n_layers] tokens appended since the sequence began
  std::vector<int64_t> last_rows_;   // [n_layers] tokens of the latest Append
  std::vector<bool> unobserved_;     // [n_layers] an Append still awaits its ObserveAttention
  RopeParams rope_;
  bool has_rope_ = false;
};

}  // namespace kvpack

#endif  // KVPACK_KV_KV_CACHE_H_
