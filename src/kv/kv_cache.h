// The KV cache of one session: per layer a key store and a value store (codecs), and per
// layer and KV head the original position of every cached token ("cells").
//
// Design goals: the cache is the only place that mutates stored tokens; codecs decide the
// representation, policies (later) decide which tokens stay and hand the cache a plan.
// Non-goals: sharing storage across sessions.
#ifndef KVPACK_KV_KV_CACHE_H_
#define KVPACK_KV_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/component_store.h"
#include "kv/spec.h"
#include "kvpack/status.h"

namespace kvpack {

struct KvCacheShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

class KvCache {
 public:
  // Parses nothing: takes an already parsed spec (see spec.h) and creates every store.
  static Result<std::unique_ptr<KvCache>> Create(const KvCacheShape& shape, const KvSpec& spec);
  static Result<std::unique_ptr<KvCache>> Create(const KvCacheShape& shape,
                                                 std::string_view spec_text);

  const KvCacheShape& shape() const { return shape_; }
  const KvSpec& spec() const { return spec_; }

  // Appends n tokens to `layer`, after they attended (see component_store.h).
  //   k, v: [n, n_kv_heads, head_dim] (keys already rotated); pos: [n].
  Status Append(int layer, const float* k, const float* v, const int32_t* pos, int64_t n);

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

  // Keeps only `keep` (ascending storage indices) of (layer, head) in both stores.
  Status Retain(int layer, int head, std::span<const int64_t> keep);

  // Drops every token (a new sequence); stores are recreated empty.
  Status Clear();

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
  void UpdatePeak();

  KvCacheShape shape_;
  KvSpec spec_;
  std::vector<Layer> layers_;
  size_t peak_bytes_ = 0;
};

}  // namespace kvpack

#endif  // KVPACK_KV_KV_CACHE_H_
