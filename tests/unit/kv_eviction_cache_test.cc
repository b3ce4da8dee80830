// How the KvCache applies eviction plans: exactly the kept tokens stay visible to
// attention, evicted storage is freed with every registered codec, KV bytes follow the
// budget formula (steady state and peak), a budget above the sequence changes nothing, and
// positions=compact re-rotates the survivors (plain key codecs only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kv/codec_registry.h"
#include "unit/kv_eviction_test_driver.h"

namespace kvpack {
namespace {

constexpr int kLayers = 2, kKv = 2, kHeads = 4;

std::unique_ptr<KvCache> MakeCache(const std::string& spec, int d) {
  Result<std::unique_ptr<KvCache>> cache = KvCache::Create({kLayers, kKv, d}, spec);
  EXPECT_TRUE(cache.ok()) << spec << ": " << cache.status().message();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

TEST(EvictionCacheTest, PlansLeaveExactlyTheKeptTokensVisibleToAttention) {
  const int d = 16;
  for (const char* spec :
       {"h2o:budget=24 + f32", "keyformer:budget=24 + f32", "sink:n=4,window=20 + f32"}) {
    std::unique_ptr<KvCache> cache = MakeCache(spec, d);
    CacheDriver driver(*cache, kHeads, 21);
    for (int64_t n : {40, 1, 1, 7, 1, 1}) ASSERT_TRUE(driver.Step(n).ok());
    // A cache that never held the evicted tokens: the kept ones, appended head by head in
    // a one-head layout (heads keep different tokens).
    std::mt19937 rng(5);
    std::normal_distribution<float> dist;
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kKv; ++h) {
        const std::vector<int32_t>& kept = cache->positions(l, h);
        ASSERT_EQ(kept.size(), 24u);
        auto fresh = KvCache::Create({1, 1, d}, "f32");
        ASSERT_TRUE(fresh.ok());
        for (int32_t p : kept) {
          ASSERT_TRUE((*fresh)->Append(0, driver.key(l, h, p), driver.value(l, h, p), &p, 1).ok());
        }
        // The same 2 query heads of the group, 3 rows, against both caches.
        const int n_rows = 3, n_rep = kHeads / kKv;
        std::vector<float> q(n_rows * n_rep * d), k(n_rows * d), v(n_rows * d);
        for (auto* x : {&q, &k, &v}) {
          for (float& f : *x) f = dist(rng);
        }
        // Full-cache query layout: [rows, kHeads, d] with head group h at heads h*n_rep...
        std::vector<float> q_full(n_rows * kHeads * d, 0.0f), k_full(n_rows * kKv * d, 0.0f),
            v_full(n_rows * kKv * d, 0.0f);
        for (int r = 0; r < n_rows; ++r) {
          for (int j = 0; j < n_rep; ++j) {
            std::copy_n(&q[(r * n_rep + j) * d], d, &q_full[(r * kHeads + h * n_rep + j) * d]);
          }
          std::copy_n(&k[r * d], d, &k_full[(r * kKv + h) * d]);
          std::copy_n(&v[r * d], d, &v_full[(r * kKv + h) * d]);
        }
        std::vector<float> out_full(n_rows * kHeads * d), out_fresh(n_rows * n_rep * d);
        Attend(*cache, l, {q_full.data(), k_full.data(), v_full.data(), n_rows, kHeads, 0.25f},
               out_full.data(), &driver.pool());
        Attend(**fresh, 0, {q.data(), k.data(), v.data(), n_rows, n_rep, 0.25f}, out_fresh.data(),
               &driver.pool());
        for (int r = 0; r < n_rows; ++r) {
          for (int j = 0; j < n_rep; ++j) {
            for (int c = 0; c < d; ++c) {
              ASSERT_EQ(out_full[(r * kHeads + h * n_rep + j) * d + c],
                        out_fresh[(r * n_rep + j) * d + c])
                  << spec << " layer " << l << " head " << h;
            }
          }
        }
      }
    }
  }
}

// Every registered codec under a policy: survivors decode exactly as before the eviction
// (no re-quantization), the store holds exactly the budget, and bytes drop.
TEST(EvictionCacheTest, EveryCodecFreesEvictedStorageAndKeepsSurvivorsExact) {
  const int d = 32, budget = 24;
  for (const CodecInfo& codec : RegisteredCodecs()) {
    const std::string spec = "h2o:budget=" + std::to_string(budget) + " + " + codec.name;
    Result<std::unique_ptr<KvCache>> made = KvCache::Create({kLayers, kKv, d}, spec);
    if (!made.ok()) {
      ADD_FAILURE() << spec << ": " << made.status().message();
      continue;
    }
    KvCache& cache = **made;
    ASSERT_TRUE(cache.BeginSequence({.n_prompt = 40}).ok());
    // Drive by hand to look at the stores between Append and ApplyPolicy.
    std::mt19937 rng(2);
    std::normal_distribution<float> dist;
    ThreadPool pool(1);
    int32_t next = 0;
    for (int64_t n : {40, 1, 1, 1, 30, 1}) {
      std::vector<int32_t> pos(n);
      for (auto& p : pos) p = next++;
      for (int l = 0; l < kLayers; ++l) {
        std::vector<float> q(n * kHeads * d), k(n * kKv * d), v(n * kKv * d);
        for (auto* x : {&q, &k, &v}) {
          for (float& f : *x) f = dist(rng);
        }
        AttentionStats stats;
        AccumulateAttentionStats(cache, l, {q.data(), k.data(), v.data(), n, kHeads, 0.2f},
                                 pos.data(), cache.StatsRequest(l, n), &stats, &pool);
        ASSERT_TRUE(cache.Append(l, k.data(), v.data(), pos.data(), n).ok());
        cache.ObserveAttention(l, stats);
        // Snapshot every head's decoded K and V by position, then evict.
        std::vector<std::vector<float>> before_k(kKv), before_v(kKv);
        std::vector<std::vector<int32_t>> before_pos(kKv);
        for (int h = 0; h < kKv; ++h) {
          const int64_t held = cache.n_tokens(l, h);
          before_k[h].resize(held * d);
          before_v[h].resize(held * d);
          cache.keys(l).Decode(h, 0, held, before_k[h].data());
          cache.values(l).Decode(h, 0, held, before_v[h].data());
          before_pos[h] = cache.positions(l, h);
        }
        const size_t bytes_before = cache.MemoryOf(l, KvComponent::kKey).payload_bytes() +
                                    cache.MemoryOf(l, KvComponent::kValue).payload_bytes();
        const bool evicts = cache.n_tokens(l, 0) > budget;
        ASSERT_TRUE(cache.ApplyPolicy(l).ok()) << spec;
        const size_t bytes_after = cache.MemoryOf(l, KvComponent::kKey).payload_bytes() +
                                   cache.MemoryOf(l, KvComponent::kValue).payload_bytes();
        if (evicts) {
          EXPECT_LT(bytes_after, bytes_before) << spec;
        }
        for (int h = 0; h < kKv; ++h) {
          const std::vector<int32_t>& kept = cache.positions(l, h);
          ASSERT_EQ(cache.keys(l).n_tokens(h), static_cast<int64_t>(kept.size())) << spec;
          ASSERT_EQ(cache.values(l).n_tokens(h), static_cast<int64_t>(kept.size())) << spec;
          std::vector<float> kd(kept.size() * d), vd(kept.size() * d);
          cache.keys(l).Decode(h, 0, kept.size(), kd.data());
          cache.values(l).Decode(h, 0, kept.size(), vd.data());
          for (size_t t = 0; t < kept.size(); ++t) {
            const size_t src = std::find(before_pos[h].begin(), before_pos[h].end(), kept[t]) -
                               before_pos[h].begin();
            ASSERT_LT(src, before_pos[h].size());
            ASSERT_EQ(0, std::memcmp(&kd[t * d], &before_k[h][src * d], d * sizeof(float)))
                << spec << " key of position " << kept[t];
            ASSERT_EQ(0, std::memcmp(&vd[t * d], &before_v[h][src * d], d * sizeof(float)))
                << spec << " value of position " << kept[t];
          }
        }
      }
    }
    const MemoryUsage m = cache.Memory();
    EXPECT_EQ(m.n_values, int64_t{2} * kLayers * kKv * budget * d) << spec;
  }
}

// f16 cache, budget B, L layers: steady state 2 (K and V) * L * n_kv * B * d * 2 bytes; the
// peak is reached when one layer has appended a chunk and not yet evicted.
TEST(EvictionCacheTest, KvBytesFollowTheBudgetFormula) {
  const int d = 16;
  const int64_t n_prompt = 100, chunk = 25;
  size_t previous = SIZE_MAX;
  for (double fraction : {0.75, 0.5, 0.25}) {
    char spec[64];
    std::snprintf(spec, sizeof(spec), "window:budget=%.2f + f16", fraction);
    std::unique_ptr<KvCache> cache = MakeCache(spec, d);
    ASSERT_TRUE(cache->BeginSequence({.n_prompt = n_prompt}).ok());
    CacheDriver driver(*cache, kHeads, 4);
    for (int64_t i = 0; i < n_prompt; i += chunk) ASSERT_TRUE(driver.Step(chunk).ok());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(driver.Step(1).ok());
    const int64_t budget = static_cast<int64_t>(fraction * n_prompt);
    const size_t per_token = size_t{2} * kKv * d * sizeof(uint16_t);  // K and V, one layer
    const size_t steady = static_cast<size_t>(kLayers * budget) * per_token;
    EXPECT_EQ(cache->Memory().payload_bytes(), steady) << spec;
    // The first chunk that overflows the budget: one layer at held + chunk, the others at
    // min(held, budget) (budget 75: 75 + 25 in layer 0 while layer 1 still holds 75).
    const int64_t held_before = (budget / chunk) * chunk;  // tokens held when it arrives
    const size_t peak = static_cast<size_t>(held_before + chunk +
                                            (kLayers - 1) * std::min(budget, held_before + chunk)) *
                        per_token;
    EXPECT_EQ(cache->peak_bytes(), peak) << spec;
    EXPECT_LT(steady, previous);
    previous = steady;
  }
}

TEST(EvictionCacheTest, BudgetAboveTheSequenceChangesNothing) {
  const int d = 16;
  for (const char* spec : {"h2o:budget=500 + f32", "keyformer:budget=1000 + f32",
                           "sink:n=4,window=600,positions=compact + f32"}) {
    std::unique_ptr<KvCache> plain = MakeCache("f32", d), policy = MakeCache(spec, d);
    const RopeParams rope{RopeLayout::kAdjacent, d, 10000.0f, nullptr};
    CacheDriver a(*plain, kHeads, 9, &rope), b(*policy, kHeads, 9, &rope);
    for (int64_t n : {30, 1, 1, 12, 1}) {
      ASSERT_TRUE(a.Step(n).ok());
      ASSERT_TRUE(b.Step(n).ok());
    }
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kKv; ++h) {
        ASSERT_EQ(plain->positions(l, h), policy->positions(l, h));
        const int64_t n = plain->n_tokens(l, h);
        std::vector<float> x(n * d), y(n * d);
        plain->keys(l).Decode(h, 0, n, x.data());
        policy->keys(l).Decode(h, 0, n, y.data());
        ASSERT_EQ(x, y) << spec;
      }
    }
  }
}

TEST(EvictionCacheTest, CompactPositionsReRotateTheSurvivors) {
  const int d = 32;  // q8_0 values need a multiple of 32
  const RopeParams rope{RopeLayout::kAdjacent, d, 10000.0f, nullptr};
  // Relative rounding per K-shift: f32 ~1e-7, f16 2^-11, bf16 2^-8; each survivor has been
  // shifted at most a handful of times here.
  const std::vector<std::pair<std::string, double>> cases = {
      {"f32", 1e-5}, {"f16", 5e-3}, {"k=bf16 v=q8_0", 4e-2}};
  for (const auto& [codec, tol] : cases) {
    const std::string spec = "sink:n=3,window=9,positions=compact + " + codec;
    std::unique_ptr<KvCache> cache = MakeCache(spec, d);
    CacheDriver driver(*cache, kHeads, 13, &rope);
    for (int64_t n : {20, 1, 1, 1, 5, 1}) ASSERT_TRUE(driver.Step(n).ok());
    const int64_t seen = driver.n_seen();
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kKv; ++h) {
        ASSERT_EQ(cache->n_tokens(l, h), 12);
        std::vector<float> stored(12 * d);
        cache->keys(l).Decode(h, 0, 12, stored.data());
        for (int64_t t = 0; t < 12; ++t) {
          EXPECT_EQ(cache->positions(l, h)[t], t);
          // Storage t holds sink t, or recent token seen - 9 + (t - 3), rotated to t.
          const int64_t token = t < 3 ? t : seen - 9 + (t - 3);
          std::vector<float> want(driver.key(l, h, token), driver.key(l, h, token) + d);
          ApplyRope(want.data(), 1, d, t, rope);
          for (int c = 0; c < d; ++c) {
            ASSERT_NEAR(stored[t * d + c], want[c], tol * (1 + std::fabs(want[c])))
                << codec << " layer " << l << " token " << t;
          }
        }
      }
    }
  }
}

TEST(EvictionCacheTest, CompactPositionsRefuseQuantizedKeys) {
  Result<std::unique_ptr<KvCache>> c =
      KvCache::Create({1, 2, 32}, "h2o:budget=8,positions=compact + kivi:bits=4");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("positions=original"), std::string::npos);
  EXPECT_TRUE(KvCache::Create({1, 2, 32}, "h2o:budget=8,positions=compact + k=f16 v=kivi").ok());
  EXPECT_TRUE(KvCache::Create({1, 2, 32}, "h2o:budget=8 + kivi:bits=4").ok());
}

TEST(EvictionCacheTest, PolicyAndSequenceOnlyOnAnEmptyCache) {
  std::unique_ptr<KvCache> cache = MakeCache("window:budget=4 + f32", 8);
  CacheDriver driver(*cache, kHeads, 1);
  ASSERT_TRUE(driver.Step(3).ok());
  EXPECT_TRUE(cache->sequence_begun());
  EXPECT_FALSE(cache->BeginSequence({.n_prompt = 3}).ok());
  EXPECT_FALSE(cache->SetPolicy(nullptr).ok());
  ASSERT_TRUE(cache->Clear().ok());
  EXPECT_TRUE(cache->BeginSequence({.n_prompt = 3}).ok());
  // A statistics policy refuses to plan over tokens whose statistics it never saw.
  std::unique_ptr<KvCache> h2o = MakeCache("h2o:budget=4 + f32", 8);
  std::vector<float> kv(10 * kKv * 8, 0.5f);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(h2o->Append(0, kv.data(), kv.data(), pos.data(), 10).ok());
  const Status s = h2o->ApplyPolicy(0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ObserveAttention"), std::string::npos);
  // A sink budget smaller than its sinks is refused when it resolves.
  std::unique_ptr<KvCache> sink = MakeCache("sink:n=4,budget=0.1 + f32", 8);
  EXPECT_FALSE(sink->BeginSequence({.n_prompt = 20}).ok());
}

}  // namespace
}  // namespace kvpack
