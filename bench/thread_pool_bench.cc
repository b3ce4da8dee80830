// The cost of one fork-join of core/thread_pool.h: ParallelFor over n elements with trivial
// work (one add per element), so that the time is the pool's hand-off, the workers' claims and
// the caller's wait. A decode step makes about 150 of them (5 per layer of SmolLM2-135M's
// shape since session 50, 8 before; docs/performance-history.md, sessions 35 and 50). With
// no work in the blocks both threads race for every block, and each claim moves a cache line
// between the cores: this is the pool's worst case, not a decode step's.
//   build/release/bench/thread_pool_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true
// ForkJoin/<threads>/<n>: n 576 (SmolLM2-135M's embedding rows, with the decode products'
// grain of 8).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace kvpack {
namespace {

void BM_ForkJoin(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t n = state.range(1);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : state) {
    pool.ParallelFor(n, 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) y[i] += 1.0f;
    });
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_ForkJoin)
    ->Name("ForkJoin")
    ->Args({1, 576})
    ->Args({2, 576})
    ->UseRealTime()
    ->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace kvpack

BENCHMARK_MAIN();
