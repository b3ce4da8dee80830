// Per-step cost of eviction policies, one layer of a SmolLM2-135M-shaped cache (9 query
// heads, 3 KV heads, head_dim 64, f16), one decode row, one thread:
//  - BM_Attend: the attention itself at cache depth D (the reference cost);
//  - BM_Stats/noise: the statistics pass (attention_stats.h) at depth D, plain softmax
//    (H2O) or Gumbel noise (Keyformer), i.e. what a policy's needs() add per layer;
//  - BM_DecodeStep/spec: a whole decode step of the layer as the forward pass runs it
//    (attend, statistics if needed, append, plan, retain) with the cache held at its budget
//    of 1024 by the policy; compare with BM_Attend/1024 (a step without a policy is that
//    plus an amortised O(1) append). The plain codecs' Retain releases capacity every time
//    (ShrinkToFit), so the next Append reallocates: that copy is part of what is measured.
// Multiply by n_layers (30 for SmolLM2-135M) for a model step.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "kv/attention.h"
#include "kv/attention_stats.h"
#include "kv/kv_cache.h"

namespace kvpack {
namespace {

constexpr int kKv = 3, kHeads = 9, kDim = 64;

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A cache at `depth` tokens, prefilled as the forward pass would (statistics for the
// policy included, so that its scores match the cache).
std::unique_ptr<KvCache> Filled(const std::string& spec, int64_t depth, std::mt19937& rng) {
  std::unique_ptr<KvCache> cache = std::move(KvCache::Create({1, kKv, kDim}, spec)).value();
  (void)cache->BeginSequence({.n_prompt = depth});
  ThreadPool pool(1);
  AttentionStats stats;
  for (int64_t done = 0; done < depth;) {
    const int64_t n = std::min<int64_t>(256, depth - done);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(done + i);
    const auto q = Random(n * kHeads * kDim, rng), k = Random(n * kKv * kDim, rng),
               v = Random(n * kKv * kDim, rng);
    const AttentionChunk chunk{q.data(), k.data(), v.data(), n, kHeads, 0.125f};
    if (cache->policy_needs().attention) {
      AccumulateAttentionStats(*cache, 0, chunk, pos.data(), cache->StatsRequest(0, n), &stats,
                               &pool);
    }
    (void)cache->Append(0, k.data(), v.data(), pos.data(), n);
    if (cache->policy_needs().attention) cache->ObserveAttention(0, stats);
    (void)cache->ApplyPolicy(0);
    done += n;
  }
  return cache;
}

struct Row {
  std::vector<float> q, k, v;
  AttentionChunk chunk;
  explicit Row(std::mt19937& rng)
      : q(Random(kHeads * kDim, rng)), k(Random(kKv * kDim, rng)), v(Random(kKv * kDim, rng)) {
    chunk = {q.data(), k.data(), v.data(), 1, kHeads, 0.125f};
  }
};

void BM_Attend(benchmark::State& state) {
  std::mt19937 rng(1);
  std::unique_ptr<KvCache> cache = Filled("f16", state.range(0), rng);
  Row row(rng);
  std::vector<float> out(kHeads * kDim);
  ThreadPool pool(1);
  for (auto _ : state) {
    Attend(*cache, 0, row.chunk, out.data(), &pool);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_Attend)->Arg(1024)->Arg(8192)->Unit(benchmark::kMicrosecond);

void BM_Stats(benchmark::State& state) {
  std::mt19937 rng(1);
  std::unique_ptr<KvCache> cache = Filled("f16", state.range(0), rng);
  Row row(rng);
  AttentionStatsRequest req;
  req.noise = state.range(1) ? ScoreNoise::kGumbel : ScoreNoise::kNone;
  req.tau = state.range(1) ? 1.5 : 1.0;
  const int32_t pos = static_cast<int32_t>(state.range(0));
  AttentionStats stats;
  ThreadPool pool(1);
  for (auto _ : state) {
    AccumulateAttentionStats(*cache, 0, row.chunk, &pos, req, &stats, &pool);
    benchmark::DoNotOptimize(stats.per_head.data());
  }
  state.SetLabel(state.range(1) ? "gumbel" : "plain");
}
BENCHMARK(BM_Stats)->Args({1024, 0})->Args({1024, 1})->Args({8192, 0})->Args({8192, 1})->Unit(
    benchmark::kMicrosecond);

// One decode step of one layer, as model/llama_forward.cc runs it.
void DecodeStep(benchmark::State& state, const std::string& spec, int64_t depth) {
  std::mt19937 rng(1);
  std::unique_ptr<KvCache> cache = Filled(spec, depth, rng);
  Row row(rng);
  std::vector<float> out(kHeads * kDim);
  AttentionStats stats;
  ThreadPool pool(1);
  int32_t pos = static_cast<int32_t>(depth);
  for (auto _ : state) {
    Attend(*cache, 0, row.chunk, out.data(), &pool);
    if (cache->policy_needs().attention) {
      AccumulateAttentionStats(*cache, 0, row.chunk, &pos, cache->StatsRequest(0, 1), &stats,
                               &pool);
    }
    (void)cache->Append(0, row.k.data(), row.v.data(), &pos, 1);
    if (cache->policy_needs().attention) cache->ObserveAttention(0, stats);
    (void)cache->ApplyPolicy(0);
    ++pos;
  }
  state.SetLabel(spec + " @" + std::to_string(cache->n_tokens(0, 0)));
}

void BM_DecodeStep(benchmark::State& state) {
  static const char* kSpecs[] = {"window:budget=1024 + f16", "sink:n=4,budget=1024 + f16",
                                 "h2o:budget=1024 + f16",
                                 "keyformer:budget=1024,gen=1000000 + f16"};
  DecodeStep(state, kSpecs[state.range(0)], 1024);
}
BENCHMARK(BM_DecodeStep)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvpack

BENCHMARK_MAIN();
