// Attention-side cost of each KV codec: one decode step's Scores + Accumulate over one
// layer's cache (3 KV heads, head_dim 64, GQA group of 3 query rows: SmolLM2-135M's shape)
// at several depths, per codec, on random Gaussian K/V, for one layer or for 30 (see below).
// Reported as bytes of cache per second and ns per cached token and layer; compare codecs
// against f16 in the same run. Scores/<spec> and Accumulate/<spec> time the two halves alone
// (keys and values) over the same caches, for where a codec's time goes. GEAR's parts from
// memory: the rank-0 specs below are its backbone alone (gear-l) and its backbone with the
// outliers (gear), so gear-l less the first is the low-rank part and gear less the second
// the low-rank part with the outliers present.
//   build/release/bench/kv_codec_bench --benchmark_filter='^ScoresAccumulateCold/.*/8192/30'
// AppendToken/<spec>: the other side of a decode step, one token appended to one layer's key
// and value stores after a 512-token prompt (a fixed 16384 appends, so that GEAR's 64-token
// block compression is amortised as in generation).
//   build/release/bench/kv_codec_bench --benchmark_filter=AppendToken
//   KV_CODEC_BENCH_SPECS="f16;kivi:bits=8,group=64" build/release/bench/kv_codec_bench ...
//   (another spec list than kSpecs below)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/attention.h"
#include "kv/codec_registry.h"
#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {
namespace {

constexpr int kHeads = 3, kDim = 64, kGroup = 3;

// state.range(0): depth; state.range(1): layers. With 30 layers (SmolLM2-135M's count) the
// caches of all layers are read in turn, as in a decode step: 8192 tokens of f16 is 180 MiB,
// far beyond the CPU caches, so the codecs are measured on data that comes from memory; one
// layer at 512 tokens stays in cache (the compute-bound view). But 30 layers of a 2-bit cache
// are small enough (18 MiB of KIVI-2 keys at 8192) to stay in a 32 MiB L3 from one iteration
// to the next, which a decode step never sees: there the weights (136 MiB) pass through the
// caches between two reads of a layer. The ...Cold benchmarks (`sweep`) therefore read
// kSweepBytes of another buffer before each iteration, untimed, so that every layer's cache
// comes from memory as in the model.
enum class Parts { kBoth, kScores, kAccumulate };

constexpr size_t kSweepBytes = size_t{96} << 20;

// Reads kSweepBytes of a buffer of its own (evicting everything else from the caches).
void SweepCaches() {
  static const std::vector<uint64_t> buffer(kSweepBytes / sizeof(uint64_t), 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < buffer.size(); i += 8) sum += buffer[i];  // one word per line
  benchmark::DoNotOptimize(sum);
}

void BM_Attention(benchmark::State& state, const std::string& spec_text, Parts parts, bool sweep) {
  const int64_t depth = state.range(0);
  const int n_layers = static_cast<int>(state.range(1));
  Result<KvSpec> spec = ParseKvSpec(spec_text);
  if (!spec.ok()) {
    state.SkipWithError(spec.status().message().c_str());
    return;
  }
  std::vector<std::unique_ptr<ComponentStore>> keys, values;
  for (int l = 0; l < n_layers; ++l) {
    auto k = CreateStore(spec->keys, {l, kHeads, kDim, KvComponent::kKey});
    auto v = CreateStore(spec->values, {l, kHeads, kDim, KvComponent::kValue});
    if (!k.ok() || !v.ok()) {
      state.SkipWithError("store creation failed");
      return;
    }
    keys.push_back(std::move(*k));
    values.push_back(std::move(*v));
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> rows(512 * kHeads * kDim);
  for (int l = 0; l < n_layers; ++l) {
    for (int64_t t = 0; t < depth; t += 512) {
      const int64_t n = std::min<int64_t>(512, depth - t);
      for (auto& x : rows) x = g(rng);
      (void)keys[l]->Append(rows.data(), n);
      (void)values[l]->Append(rows.data(), n);
    }
  }
  // 64-byte aligned, as attention's buffers are (kv/attention.cc).
  AlignedBuffer<float> q(kGroup * kDim), out(kGroup * kDim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = g(rng);
  out.Zero();
  const int64_t tile = AttentionTileTokens(kGroup);  // as attention calls the codecs
  AlignedBuffer<float> scores(kGroup * tile);
  scores.Zero();
  keys[0]->Scores(0, q.data(), kGroup, 0, std::min(depth, tile), scores.data());
  for (auto _ : state) {
    if (sweep) {
      state.PauseTiming();
      SweepCaches();
      state.ResumeTiming();
    }
    for (int l = 0; l < n_layers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        for (int64_t t0 = 0; t0 < depth; t0 += tile) {
          const int64_t t1 = std::min(depth, t0 + tile);
          // Attention's prefetches one call ahead (kv/attention.cc), within a layer: the
          // next layer's attention comes after the weights in a decode step.
          if (parts == Parts::kBoth) values[l]->Prefetch(h, t0, t1);
          if (parts != Parts::kAccumulate) {
            keys[l]->Scores(h, q.data(), kGroup, t0, t1, scores.data());
          }
          if (parts == Parts::kBoth) {
            if (t1 < depth) {
              keys[l]->Prefetch(h, t1, std::min(depth, t1 + tile));
            } else if (h + 1 < kHeads) {
              keys[l]->Prefetch(h + 1, 0, std::min(depth, tile));
            }
          }
          // Probabilities stand-in: the scores themselves (the work does not depend on values;
          // Accumulate alone reads the first tile's scores, filled once above).
          if (parts != Parts::kScores) {
            values[l]->Accumulate(h, scores.data(), kGroup, t0, t1, out.data());
          }
        }
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  MemoryUsage m;
  for (int l = 0; l < n_layers; ++l) {
    if (parts != Parts::kAccumulate) m += keys[l]->Memory();
    if (parts != Parts::kScores) m += values[l]->Memory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.payload_bytes()));
  state.counters["ns/token"] = benchmark::Counter(
      static_cast<double>(depth * kHeads * n_layers),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["bits/value"] = m.bits_per_value();
}

void BM_AppendToken(benchmark::State& state, const std::string& spec_text) {
  Result<KvSpec> spec = ParseKvSpec(spec_text);
  if (!spec.ok()) {
    state.SkipWithError(spec.status().message().c_str());
    return;
  }
  auto k = CreateStore(spec->keys, {0, kHeads, kDim, KvComponent::kKey});
  auto v = CreateStore(spec->values, {0, kHeads, kDim, KvComponent::kValue});
  if (!k.ok() || !v.ok()) {
    state.SkipWithError("store creation failed");
    return;
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr int64_t kPrompt = 512, kDistinct = 256;
  std::vector<float> rows((kPrompt + kDistinct) * kHeads * kDim);
  for (auto& x : rows) x = g(rng);
  if (!(*k)->Append(rows.data(), kPrompt).ok() || !(*v)->Append(rows.data(), kPrompt).ok()) {
    state.SkipWithError("prompt append failed");
    return;
  }
  int64_t t = 0;
  for (auto _ : state) {
    const float* row = &rows[(kPrompt + t++ % kDistinct) * kHeads * kDim];
    if (!(*k)->Append(row, 1).ok() || !(*v)->Append(row, 1).ok()) {
      state.SkipWithError("append failed");
      return;
    }
  }
}

const char* const kSpecs[] = {"f16", "bf16", "q8_0", "q4_0", "flexgen:bits=8", "kivi:bits=8",
                              "kcvt:bits=8", "flexgen:bits=4", "flexgen:bits=2",
                              "kivi:bits=4", "kivi:bits=2", "kcvt:bits=4", "hf:nbits=4",
                              "gear-l:bits=2", "gear:bits=2",
                              "gear-l:bits=2,rank_prefill=0,rank_decode=0",
                              "gear:bits=2,rank_prefill=0,rank_decode=0"};

// KV_CODEC_BENCH_SPECS="a;b;..." replaces kSpecs (a spec outside the list, e.g. another
// group size or residual, without editing this file).
std::vector<std::string> BenchSpecs() {
  std::vector<std::string> specs;
  if (const char* env = std::getenv("KV_CODEC_BENCH_SPECS")) {
    std::string list = env;
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(';', start), list.size());
      if (end > start) specs.push_back(list.substr(start, end - start));
      start = end + 1;
    }
    return specs;
  }
  return {std::begin(kSpecs), std::end(kSpecs)};
}

[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string& s : BenchSpecs()) {
    for (const auto& [name, parts] :
         {std::pair{"ScoresAccumulate", Parts::kBoth}, std::pair{"Scores", Parts::kScores},
          std::pair{"Accumulate", Parts::kAccumulate}}) {
      const Parts p = parts;
      benchmark::RegisterBenchmark((name + std::string("/") + s).c_str(),
                                   [s, p](benchmark::State& st) { BM_Attention(st, s, p, false); })
          ->Args({512, 1})
          ->Args({8192, 1})
          ->Args({8192, 30})
          ->Unit(benchmark::kMicrosecond);
      // The same after the sweep: ScoresAccumulateCold/<spec>/<depth>/30.
      benchmark::RegisterBenchmark((name + std::string("Cold/") + s).c_str(),
                                   [s, p](benchmark::State& st) { BM_Attention(st, s, p, true); })
          ->Args({512, 30})
          ->Args({8192, 30})
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("AppendToken/" + std::string(s)).c_str(),
                                 [s](benchmark::State& st) { BM_AppendToken(st, s); })
        ->Iterations(16384)
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace kvpack

BENCHMARK_MAIN();
