// Where GEAR's attention time goes (the paper's Figure 3a breakdown, Kang et al. 2024,
// section 5.3), on the fused kernels of one layer-sized store: a decode step's
// Scores (keys) + Accumulate (values) over every cached token of every KV head, in tiles of
// 128 tokens as kv/attention.cc walks them, for GEAR, GEAR-L and plain KIVI-2.
//
//   BM_Attention/<spec>/<depth>: the fused calls (the codec's Scores + Accumulate);
//   BM_Breakdown/<spec>/<depth>: each part on its own (GearStore::ScoresOf/AccumulateOf),
//     reported as counters: quantized (backbone codes), lowrank ((q.B).A^T, (p.A).B^T),
//     sparse (outlier entries), buffer (fp16 streaming buffer) in % of their sum;
//   BM_PowerIteration/{fast,twin}/<n>/<rank>: one block's compression by power iteration
//     (kv/lowrank.h), its contiguous-loop version against the scalar twin.
//
// Shape: 4 KV heads, head_dim 64, 2 query heads per KV head (n_q = 2), depth 2048 and 8192:
// a prompt of depth/2 tokens (one GEAR block, rank_prefill) and then one token at a time
// (GEAR: blocks of n_b, rank_decode). Data: N(0,1) with per-channel offsets (keys' typical
// structure). Single thread. Only the attention-side cost is timed: compression (outlier
// selection, power iteration) happens once per block at append time and is not in here.
// Measurements are reported, not asserted.
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/codec_registry.h"
#include "kv/codecs/gear_codec.h"
#include "kv/lowrank.h"

namespace kvpack {
namespace {

constexpr int kHeads = 4, kDim = 64, kQueries = 2;
constexpr int64_t kTile = 128;

struct Layer {
  std::unique_ptr<ComponentStore> keys, values;
};

std::vector<float> Rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n * kHeads * kDim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = dist(rng) + 0.25f * static_cast<float>(i % 11);
  return x;
}

const Layer& GetLayer(const std::string& spec, int64_t depth) {
  static std::map<std::pair<std::string, int64_t>, Layer> cache;
  auto it = cache.find({spec, depth});
  if (it != cache.end()) return it->second;
  Layer layer;
  const std::vector<float> k = Rows(depth, 1), v = Rows(depth, 2);
  for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
    auto store = CreateStore(*ParseMethodSpec(spec), {0, kHeads, kDim, c});
    if (!store.ok()) std::abort();
    const std::vector<float>& x = c == KvComponent::kKey ? k : v;
    const int64_t prompt = depth / 2, row = kHeads * kDim;
    if (!(*store)->Append(x.data(), prompt).ok()) std::abort();
    for (int64_t t = prompt; t < depth; ++t) {
      if (!(*store)->Append(&x[t * row], 1).ok()) std::abort();
    }
    (c == KvComponent::kKey ? layer.keys : layer.values) = std::move(store).value();
  }
  return cache.emplace(std::make_pair(spec, depth), std::move(layer)).first->second;
}

struct Inputs {
  std::vector<float> q = std::vector<float>(kQueries * kDim), p, scores, out;
  Inputs() : p(kQueries * kTile), scores(kQueries * kTile), out(kQueries * kDim) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (float& x : q) x = u(rng) - 0.5f;
    for (float& x : p) x = u(rng) / kTile;
  }
};

void BM_Attention(benchmark::State& state, std::string spec) {
  const int64_t depth = state.range(0);
  const Layer& layer = GetLayer(spec, depth);
  Inputs in;
  for (auto _ : state) {
    for (int h = 0; h < kHeads; ++h) {
      for (int64_t t0 = 0; t0 < depth; t0 += kTile) {
        const int64_t t1 = std::min(depth, t0 + kTile);
        layer.keys->Scores(h, in.q.data(), kQueries, t0, t1, in.scores.data());
        layer.values->Accumulate(h, in.p.data(), kQueries, t0, t1, in.out.data());
      }
    }
    benchmark::DoNotOptimize(in.scores.data());
    benchmark::DoNotOptimize(in.out.data());
  }
  const MemoryUsage mk = layer.keys->Memory(), mv = layer.values->Memory();
  state.counters["K_bits"] = mk.bits_per_value();
  state.counters["V_bits"] = mv.bits_per_value();
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(depth * kHeads),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Breakdown(benchmark::State& state, std::string spec) {
  const int64_t depth = state.range(0);
  const Layer& layer = GetLayer(spec, depth);
  const auto* keys = dynamic_cast<const GearStore*>(layer.keys.get());
  const auto* values = dynamic_cast<const GearStore*>(layer.values.get());
  if (!keys || !values) {
    state.SkipWithError("not a GEAR store");
    return;
  }
  Inputs in;
  const GearPart parts[] = {GearPart::kQuantized, GearPart::kLowRank, GearPart::kSparse,
                            GearPart::kBuffer};
  double seconds[4] = {0, 0, 0, 0};
  for (auto _ : state) {
    for (int i = 0; i < 4; ++i) {
      const auto start = std::chrono::steady_clock::now();
      for (int h = 0; h < kHeads; ++h) {
        for (int64_t t0 = 0; t0 < depth; t0 += kTile) {
          const int64_t t1 = std::min(depth, t0 + kTile);
          keys->ScoresOf(parts[i], h, in.q.data(), kQueries, t0, t1, in.scores.data());
          values->AccumulateOf(parts[i], h, in.p.data(), kQueries, t0, t1, in.out.data());
        }
      }
      benchmark::DoNotOptimize(in.scores.data());
      benchmark::DoNotOptimize(in.out.data());
      seconds[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  const double total = seconds[0] + seconds[1] + seconds[2] + seconds[3];
  const char* names[] = {"quantized%", "lowrank%", "sparse%", "buffer%"};
  for (int i = 0; i < 4; ++i) state.counters[names[i]] = 100.0 * seconds[i] / total;
}

// One block's power iteration (GEAR's compression, paid at append time), the contiguous-loop
// version against its scalar twin (bit-identical factors): head_dim 64, 3 iterations, n
// tokens at rank r. Args: n, r, and 1 for the twin.
void BM_PowerIteration(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int r = static_cast<int>(state.range(1));
  const bool twin = state.range(2) != 0;
  const std::vector<float> x = Rows(n, 5);  // [n, kHeads * kDim]: head 0's columns are used
  const int64_t ld = kHeads * kDim;
  for (auto _ : state) {
    const LowRankFactors f = twin ? PowerIterationLowRankRef(x.data(), n, kDim, ld, r, 3, 7)
                                  : PowerIterationLowRank(x.data(), n, kDim, ld, r, 3, 7);
    benchmark::DoNotOptimize(f.b.data());
  }
}

}  // namespace
}  // namespace kvpack

int main(int argc, char** argv) {
  for (const char* spec : {"kivi:bits=2", "gear-l", "gear"}) {
    benchmark::RegisterBenchmark((std::string("BM_Attention/") + spec).c_str(),
                                 kvpack::BM_Attention, std::string(spec))
        ->Arg(2048)
        ->Arg(8192)
        ->Unit(benchmark::kMicrosecond);
  }
  for (const char* spec : {"gear-l", "gear"}) {
    benchmark::RegisterBenchmark((std::string("BM_Breakdown/") + spec).c_str(),
                                 kvpack::BM_Breakdown, std::string(spec))
        ->Arg(2048)
        ->Arg(8192)
        ->Unit(benchmark::kMicrosecond);
  }
  for (int twin : {0, 1}) {
    benchmark::RegisterBenchmark(twin ? "BM_PowerIteration/twin" : "BM_PowerIteration/fast",
                                 kvpack::BM_PowerIteration)
        ->Args({64, 2, twin})
        ->Args({512, 4, twin})
        ->Args({8192, 4, twin})
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
