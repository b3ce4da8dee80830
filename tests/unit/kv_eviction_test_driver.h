// Test helper: feeds seeded random chunks through every layer of a KvCache exactly the way
// model/llama_forward.cc drives an eviction policy (statistics when needed, Append,
// ObserveAttention, ApplyPolicy), and remembers every token's K/V so that tests can check
// what the cache kept.
#ifndef KVPACK_TESTS_UNIT_KV_EVICTION_TEST_DRIVER_H_
#define KVPACK_TESTS_UNIT_KV_EVICTION_TEST_DRIVER_H_

#include <random>
#include <vector>

#include "kv/attention.h"
#include "kv/attention_stats.h"
#include "kv/kv_cache.h"
#include "ops/nn.h"

namespace kvpack {

class CacheDriver {
 public:
  // With `rope`, keys and queries are rotated to their positions and the cache may use
  // positions=compact; history keeps the keys before rotation.
  CacheDriver(KvCache& cache, int n_heads, uint32_t seed, const RopeParams* rope = nullptr,
              int threads = 1)
      : cache_(cache), n_heads_(n_heads), rng_(seed), pool_(threads) {
    const KvCacheShape& s = cache.shape();
    k_hist_.resize(s.n_layers);
    v_hist_.resize(s.n_layers);
    if (rope) {
      rope_ = *rope;
      has_rope_ = true;
      cache.set_rope(*rope);
    }
  }

  // One chunk of n tokens through every layer.
  Status Step(int64_t n) {
    const KvCacheShape& s = cache_.shape();
    const int d = s.head_dim, n_kv = s.n_kv_heads;
    if (cache_.policy() && !cache_.sequence_begun()) {
      Status st = cache_.BeginSequence({.n_prompt = n});
      if (!st.ok()) return st;
    }
    std::vector<int32_t> pos(n);
    const int64_t first = cache_.NextPosition(n_seen_);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(first + i);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    AttentionStats stats;
    for (int l = 0; l < s.n_layers; ++l) {
      std::vector<float> q(n * n_heads_ * d), k(n * n_kv * d), v(n * n_kv * d);
      for (auto& x : q) x = 2.0f * dist(rng_);
      for (auto& x : k) x = dist(rng_);
      for (auto& x : v) x = dist(rng_);
      k_hist_[l].insert(k_hist_[l].end(), k.begin(), k.end());
      v_hist_[l].insert(v_hist_[l].end(), v.begin(), v.end());
      if (has_rope_) {
        for (int64_t i = 0; i < n; ++i) {
          ApplyRope(&q[i * n_heads_ * d], n_heads_, d, pos[i], rope_);
          ApplyRope(&k[i * n_kv * d], n_kv, d, pos[i], rope_);
        }
      }
      const AttentionChunk chunk{q.data(), k.data(), v.data(), n, n_heads_, 0.25f};
      if (cache_.policy_needs().attention) {
        AccumulateAttentionStats(cache_, l, chunk, pos.data(), cache_.StatsRequest(l, n), &stats,
                                 &pool_);
      }
      Status st = cache_.Append(l, k.data(), v.data(), pos.data(), n);
      if (!st.ok()) return st;
      if (cache_.policy_needs().attention) cache_.ObserveAttention(l, stats);
      st = cache_.ApplyPolicy(l);
      if (!st.ok()) return st;
    }
    n_seen_ += n;
    return Status::Ok();
  }

  int64_t n_seen() const { return n_seen_; }
  // The key (before rotation) and value of sequence token i at (layer, head): [head_dim].
  const float* key(int layer, int head, int64_t i) const {
    return &k_hist_[layer][(i * cache_.shape().n_kv_heads + head) * cache_.shape().head_dim];
  }
  const float* value(int layer, int head, int64_t i) const {
    return &v_hist_[layer][(i * cache_.shape().n_kv_heads + head) * cache_.shape().head_dim];
  }
  ThreadPool& pool() { return pool_; }

 private:
  KvCache& cache_;
  int n_heads_;
  std::mt19937 rng_;
  ThreadPool pool_;
  RopeParams rope_;
  bool has_rope_ = false;
  int64_t n_seen_ = 0;
  std::vector<std::vector<float>> k_hist_, v_hist_;  // [n_layers][n_seen, n_kv_heads, head_dim]
};

}  // namespace kvpack

#endif  // KVPACK_TESTS_UNIT_KV_EVICTION_TEST_DRIVER_H_
