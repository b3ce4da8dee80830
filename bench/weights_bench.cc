// The other half of a decode step: the q8_0 weight rows times one token's q8_0 activations
// (ops/q8_0_dot.h's DotQ8_0Q8_0Rows, the kernel every q8_0 matrix-vector product of decode
// runs), where the weights sit in cache and where they come from memory, against a plain
// read of the same bytes (`kvpack bench`'s read roofline, MeasureReadBandwidth). Whether
// decode's weight products are bound by the CPU or by memory decides what a faster kernel
// can buy: if the kernel's rate from memory is well below its rate in cache and close to the
// read roofline, only fewer bytes help.
//   build/release/bench/weights_bench --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true
// Q8_0Rows/<n_in>/<n_rows>: n_in 576 (SmolLM2-135M's embedding) or 1536 (its FFN); 512 rows
// are 306 KiB or 816 KiB (in L2), and 87381 rows of 1536 are 136 MiB, SmolLM2-135M's weights
// in q8_0, read once per iteration as a decode step reads them. ReadRoofline/<MiB>: the plain
// read of 136 MiB. Vpdpbusd: the CPU's rate of the int8 dot instruction (below).
#include <benchmark/benchmark.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include <cstdint>
#include <random>
#include <vector>

#include "core/aligned_buffer.h"
#include "eval/speed_bench.h"
#include "ops/ggml_quants.h"
#include "ops/q8_0_dot.h"

namespace kvpack {
namespace {

void BM_Q8_0Rows(benchmark::State& state) {
  const size_t n_in = static_cast<size_t>(state.range(0));
  const size_t n_rows = static_cast<size_t>(state.range(1));
  const size_t row_bytes = n_in / 32 * sizeof(BlockQ8_0);
  // In 2 MiB pages where the system allows (core/huge_page_arena.h), as a model file's
  // weights are when the page cache holds them in huge pages (bench prints how many).
  AlignedBuffer<uint8_t> rows(n_rows * row_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> row(n_in);
  for (size_t r = 0; r < n_rows; ++r) {
    for (float& v : row) v = g(rng);
    QuantizeRowQ8_0(row.data(), &rows[r * row_bytes], static_cast<int64_t>(n_in));
  }
  for (float& v : row) v = g(rng);
  Q8_0Activations x;
  x.Quantize(row.data(), 1, n_in);
  std::vector<float> y(n_rows);
  for (auto _ : state) {
    DotQ8_0Q8_0Rows(rows.data(), row_bytes, n_rows, x, 0, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * rows.size()));
}
BENCHMARK(BM_Q8_0Rows)
    ->Name("Q8_0Rows")
    ->Args({576, 512})
    ->Args({1536, 512})
    ->Args({1536, 87381})
    ->Unit(benchmark::kMicrosecond);

// kvpack bench's own measurement (eval/speed_bench.h), one repeat per iteration: it allocates
// and fills its buffer, then times only the read, which manual time reports.
void BM_ReadRoofline(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  for (auto _ : state) {
    state.SetIterationTime(static_cast<double>(bytes) / MeasureReadBandwidth(1, bytes, 1));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_ReadRoofline)
    ->Name("ReadRoofline")
    ->Arg(136)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The CPU's rate of 512-bit vpdpbusd (64 int8 products each), the instruction that bounds
// the 2-bit KV codecs' attention kernels: 12 independent accumulators per loop pass, so
// that the rate and not the latency is measured; the ns/vpdpbusd counter is the time per
// instruction.
__attribute__((target("avx512f,avx512vnni"))) void VpdpbusdLoop(int64_t passes) {
  __m512i acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_epi32(k);
  const __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(2);
  for (int64_t i = 0; i < passes; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) {
      asm volatile("vpdpbusd %2, %1, %0" : "+v"(acc[k]) : "v"(u), "v"(s));
    }
  }
  for (int k = 0; k < 12; ++k) benchmark::DoNotOptimize(acc[k]);
}

void BM_Vpdpbusd(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) {
    state.SkipWithError("no AVX512-VNNI on this CPU");
    return;
  }
  constexpr int64_t kPasses = 1 << 20;
  for (auto _ : state) VpdpbusdLoop(kPasses);
  state.counters["ns/vpdpbusd"] = benchmark::Counter(
      static_cast<double>(kPasses * 12),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Vpdpbusd)->Name("Vpdpbusd")->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace kvpack

BENCHMARK_MAIN();
