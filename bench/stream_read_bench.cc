// How fast one core reads memory in runs of a given length. At depth 512 a quantized cache's
// streams are 1 to 16 KiB a head (codes, parameters, KIVI's fp16 window, one after the
// other) and `f16`'s 64 KiB; this measures what that length alone costs, with and without
// the software prefetch the attention kernels use (docs/performance-history.md, session 55).
//
//   build/release/bench/stream_read_bench --benchmark_repetitions=3
//   (add --benchmark_report_aggregates_only=true for the medians alone)
//
// StreamRead/<run bytes>/<runs in flight>/<prefetch>: every iteration reads kReadBytes as
// runs of <run bytes> at random run-aligned places of a buffer far larger than the caches,
// <runs in flight> of them at a time, a line of each in turn; <prefetch> 0 asks for nothing,
// 1 for the line 4 KiB ahead into L1 (prefetcht0), 2 into L2 (prefetcht1), within the run.
// One 8-byte word per 64-byte line is summed: the whole line comes from memory either way.
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

constexpr size_t kBufferBytes = size_t{512} << 20;
constexpr size_t kReadBytes = size_t{32} << 20;
constexpr size_t kLine = 64, kAhead = 4096;

// The buffer, in 2 MiB pages where the kernel gives them (as the KV arena's), written once.
const uint64_t* Buffer() {
  static const uint64_t* buffer = [] {
    void* p = std::aligned_alloc(size_t{2} << 20, kBufferBytes);
    if (p == nullptr) std::abort();
    madvise(p, kBufferBytes, MADV_HUGEPAGE);
    auto* words = static_cast<uint64_t*>(p);
    for (size_t i = 0; i < kBufferBytes / sizeof(uint64_t); ++i) words[i] = i;
    return words;
  }();
  return buffer;
}

template <int kPrefetch>
uint64_t ReadRuns(const char* base, const size_t* starts, int n_runs, size_t run_bytes) {
  uint64_t sum = 0;
  for (size_t off = 0; off < run_bytes; off += kLine) {
    for (int r = 0; r < n_runs; ++r) {
      const char* line = base + starts[r] + off;
      if constexpr (kPrefetch != 0) {
        if (off + kAhead < run_bytes) __builtin_prefetch(line + kAhead, 0, kPrefetch == 1 ? 3 : 2);
      }
      sum += *reinterpret_cast<const uint64_t*>(line);
    }
  }
  return sum;
}

void BM_StreamRead(benchmark::State& state) {
  const size_t run_bytes = static_cast<size_t>(state.range(0));
  const int n_runs = static_cast<int>(state.range(1));
  const int prefetch = static_cast<int>(state.range(2));
  const char* base = reinterpret_cast<const char*>(Buffer());
  std::mt19937_64 rng(1);
  const size_t n_places = kBufferBytes / run_bytes;
  std::vector<size_t> starts(kReadBytes / run_bytes);
  uint64_t sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t& s : starts) s = (rng() % n_places) * run_bytes;
    state.ResumeTiming();
    for (size_t i = 0; i + n_runs <= starts.size(); i += n_runs) {
      if (prefetch == 0) sum += ReadRuns<0>(base, &starts[i], n_runs, run_bytes);
      if (prefetch == 1) sum += ReadRuns<1>(base, &starts[i], n_runs, run_bytes);
      if (prefetch == 2) sum += ReadRuns<2>(base, &starts[i], n_runs, run_bytes);
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(starts.size() / n_runs * n_runs * run_bytes));
}

BENCHMARK(BM_StreamRead)
    ->Name("StreamRead")
    ->ArgsProduct({{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}, {1}, {0, 1, 2}})
    ->ArgsProduct({{16 << 10}, {2, 3, 4, 8}, {0}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
