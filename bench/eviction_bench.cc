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
//  - BM_ModelDecode/spec/threads: whole decode steps of a synthetic SmolLM2-135M (q8_0
//    weights, written once to the temp directory) at context depth 8192: the full f16 cache
//    holds 8192 tokens; a policy with a 1024-token budget holds 1024 (positions 7168..8191,
//    as after streaming 8192 tokens: a decode step's cost depends on what is held, not on
//    how it got there). The caches are filled with random K/V instead of an 8192-token
//    prefill, which would take minutes per spec. Counter tok_s = decode tokens per second.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kv/attention.h"
#include "kv/attention_stats.h"
#include "kv/kv_cache.h"
#include "model/llama_forward.h"
#include "model/synthetic_model.h"

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

std::shared_ptr<const LlamaModel> SmolModel() {
  static std::shared_ptr<const LlamaModel> model = [] {
    const std::string path =
        (std::filesystem::temp_directory_path() / "kvpack_eviction_bench_smollm2_q8_0.gguf")
            .string();
    SyntheticShape shape = NamedSyntheticShape("smollm2-135m").value();
    shape.n_ctx = 16384;
    if (!std::filesystem::exists(path)) {
      if (!WriteSyntheticModel(shape, GgmlType::kQ8_0, 1, path).ok()) std::abort();
    }
    return LlamaModel::Load(path).value();
  }();
  return model;
}

// Random K/V for n tokens of every layer at positions first.., through the policy.
void FillModelCache(KvCache& cache, int n_heads, int64_t first, int64_t n, ThreadPool& pool) {
  const KvCacheShape& s = cache.shape();
  (void)cache.BeginSequence({.n_prompt = n});
  uint32_t x = 12345;
  auto next = [&x] {
    return static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
  };
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(first + i);
  std::vector<float> k(n * s.n_kv_heads * s.head_dim), v(k.size()), q;
  if (cache.policy_needs().attention) q.resize(n * n_heads * s.head_dim);
  AttentionStats stats;
  for (int l = 0; l < s.n_layers; ++l) {
    for (auto* buf : {&k, &v, &q}) {
      for (float& f : *buf) f = next();
    }
    if (cache.policy_needs().attention) {
      const AttentionChunk chunk{q.data(), k.data(), v.data(), n, n_heads, 0.125f};
      AccumulateAttentionStats(cache, l, chunk, pos.data(), cache.StatsRequest(l, n), &stats,
                               &pool);
    }
    (void)cache.Append(l, k.data(), v.data(), pos.data(), n);
    if (cache.policy_needs().attention) cache.ObserveAttention(l, stats);
    (void)cache.ApplyPolicy(l);
  }
}

void BM_ModelDecode(benchmark::State& state) {
  static const char* kSpecs[] = {"f16", "window:budget=1024 + f16", "sink:n=4,budget=1024 + f16",
                                 "h2o:budget=1024 + f16", "keyformer:budget=1024,gen=100000 + f16"};
  const std::string spec = kSpecs[state.range(0)];
  const LlamaModel& m = *SmolModel();
  const LlamaConfig& c = m.config();
  std::unique_ptr<KvCache> cache =
      std::move(KvCache::Create({c.n_layers, c.n_kv_heads, c.head_dim}, spec)).value();
  ThreadPool pool(static_cast<int>(state.range(1)));
  const int64_t depth = 8192, held = cache->policy() ? 1024 : depth;
  FillModelCache(*cache, c.n_heads, depth - held, held, pool);
  ForwardScratch scratch;
  std::vector<float> logits(c.n_vocab);
  int32_t pos = static_cast<int32_t>(depth), token = 100;
  for (auto _ : state) {
    if (!LlamaForward(m, &token, &pos, 1, *cache, LogitsFor::kLastToken, logits.data(), scratch,
                      &pool)
             .ok()) {
      state.SkipWithError("forward failed");
      break;
    }
    ++pos;
    token = (token * 31 + 7) % 1000;
  }
  state.counters["tok_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(spec + ", holds " + std::to_string(cache->n_tokens(0, 0)));
}
BENCHMARK(BM_ModelDecode)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}})
    ->Iterations(48)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvpack

BENCHMARK_MAIN();
