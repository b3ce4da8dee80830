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
// read of 136 MiB; ReadStreams/<k>: the same read as k streams at once. Vpdpbusd*: the CPU's
// rate of the int8 dot instruction (below).
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

// A plain read of 136 MiB as k streams at once: the buffer cut into k parts, 64 bytes of each
// part in turn (ReadStreams/1 is one stream in order), summed as 64-bit integers. Whether one
// core reads memory faster from several streams than from one decides how the weight rows are
// walked (ops/q8_0_dot.cc: its AVX2 kernel reads two).
void BM_ReadStreams(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0));
  constexpr size_t kBytes = size_t{136} << 20, kLine = 64, kWords = kLine / sizeof(uint64_t);
  AlignedBuffer<uint64_t> buf(kBytes / sizeof(uint64_t));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  const size_t part = buf.size() / k;  // words per stream, a multiple of kWords
  for (auto _ : state) {
    uint64_t sum0 = 0, sum1 = 0;
    for (size_t off = 0; off < part; off += kWords) {
      for (size_t s = 0; s < k; ++s) {
        const uint64_t* line = &buf[s * part + off];
        for (size_t w = 0; w < kWords; w += 2) {
          sum0 += line[w];
          sum1 += line[w + 1];
        }
      }
    }
    benchmark::DoNotOptimize(sum0 + sum1);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_ReadStreams)
    ->Name("ReadStreams")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMicrosecond);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The CPU's rate of 512-bit vpdpbusd (64 int8 products each), the instruction of the 2- and
// 4-bit KV codecs' attention kernels, 48 per pass in one asm block whose accumulators are
// fixed registers (zmm0-zmm15). (Session 28's loop kept them in an array that GCC put on
// the stack, so each vpdpbusd loaded and stored its accumulator: 0.31 ns, a rate of that
// round trip, not of the instruction.) ns/vpdpbusd: the time per instruction (per vpdpwssd
// in Vpdpwssd/16).
//   Vpdpbusd/16: 16 accumulators, register operands;
//   Vpdpbusd/8: 8 accumulators (a dot waits 4 cycles for its accumulator here);
//   VpdpbusdBroadcast: 16 accumulators, the signed operand a 4-byte broadcast from memory,
//     as the key kernels read their query (ops/packed_scores.cc);
//   Vpdpwssd/16: Vpdpbusd/16 with the int16 dot (32 products each) of the 8-bit codes'
//     kernels, to compare the two instructions' rates.
#define KVPACK_DOT(r) "vpdpbusd %%zmm17, %%zmm16, %%zmm" #r "\n\t"
#define KVPACK_DOT_WORDS(r) "vpdpwssd %%zmm17, %%zmm16, %%zmm" #r "\n\t"
#define KVPACK_DOT_MEM(off, r) "vpdpbusd " #off "(%0)%{1to16%}, %%zmm16, %%zmm" #r "\n\t"
#define KVPACK_DOTS16 \
  KVPACK_DOT(0) KVPACK_DOT(1) KVPACK_DOT(2) KVPACK_DOT(3) KVPACK_DOT(4) KVPACK_DOT(5) \
  KVPACK_DOT(6) KVPACK_DOT(7) KVPACK_DOT(8) KVPACK_DOT(9) KVPACK_DOT(10) KVPACK_DOT(11) \
  KVPACK_DOT(12) KVPACK_DOT(13) KVPACK_DOT(14) KVPACK_DOT(15)
#define KVPACK_DOTS_WORDS16                                                                 \
  KVPACK_DOT_WORDS(0) KVPACK_DOT_WORDS(1) KVPACK_DOT_WORDS(2) KVPACK_DOT_WORDS(3)           \
  KVPACK_DOT_WORDS(4) KVPACK_DOT_WORDS(5) KVPACK_DOT_WORDS(6) KVPACK_DOT_WORDS(7)           \
  KVPACK_DOT_WORDS(8) KVPACK_DOT_WORDS(9) KVPACK_DOT_WORDS(10) KVPACK_DOT_WORDS(11)         \
  KVPACK_DOT_WORDS(12) KVPACK_DOT_WORDS(13) KVPACK_DOT_WORDS(14) KVPACK_DOT_WORDS(15)
#define KVPACK_DOTS8 \
  KVPACK_DOT(0) KVPACK_DOT(1) KVPACK_DOT(2) KVPACK_DOT(3) KVPACK_DOT(4) KVPACK_DOT(5) \
  KVPACK_DOT(6) KVPACK_DOT(7)
#define KVPACK_DOTS_MEM16(o)                                                                \
  KVPACK_DOT_MEM(o##0, 0) KVPACK_DOT_MEM(o##4, 1) KVPACK_DOT_MEM(o##8, 2)                   \
  KVPACK_DOT_MEM(o##12, 3) KVPACK_DOT_MEM(o##16, 4) KVPACK_DOT_MEM(o##20, 5)                \
  KVPACK_DOT_MEM(o##24, 6) KVPACK_DOT_MEM(o##28, 7) KVPACK_DOT_MEM(o##32, 8)                \
  KVPACK_DOT_MEM(o##36, 9) KVPACK_DOT_MEM(o##40, 10) KVPACK_DOT_MEM(o##44, 11)              \
  KVPACK_DOT_MEM(o##48, 12) KVPACK_DOT_MEM(o##52, 13) KVPACK_DOT_MEM(o##56, 14)             \
  KVPACK_DOT_MEM(o##60, 15)
#define KVPACK_ZMM_CLOBBERS                                                                 \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17"

enum class DotLoop { kRegisters16, kRegisters8, kBroadcast16, kWordRegisters16 };
constexpr int kDotsPerPass = 48;

template <DotLoop kLoop>
__attribute__((target("avx512f,avx512vnni"))) void VpdpbusdLoop(int64_t passes) {
  alignas(64) static int8_t memory[512] = {1, 2, 3};  // the broadcasts read within 264 bytes
  asm volatile(
      "vpternlogd $0xff, %%zmm16, %%zmm16, %%zmm16\n\t"
      "vpabsb %%zmm16, %%zmm16\n\t"  // all bytes 1
      "vpaddb %%zmm16, %%zmm16, %%zmm17\n\t" ::
          : KVPACK_ZMM_CLOBBERS);
  for (int64_t i = 0; i < passes; ++i) {
    if constexpr (kLoop == DotLoop::kRegisters16) {
      asm volatile(KVPACK_DOTS16 KVPACK_DOTS16 KVPACK_DOTS16 ::: KVPACK_ZMM_CLOBBERS);
    } else if constexpr (kLoop == DotLoop::kRegisters8) {
      asm volatile(KVPACK_DOTS8 KVPACK_DOTS8 KVPACK_DOTS8 KVPACK_DOTS8 KVPACK_DOTS8
                       KVPACK_DOTS8 ::: KVPACK_ZMM_CLOBBERS);
    } else if constexpr (kLoop == DotLoop::kWordRegisters16) {
      asm volatile(KVPACK_DOTS_WORDS16 KVPACK_DOTS_WORDS16 KVPACK_DOTS_WORDS16 ::
                       : KVPACK_ZMM_CLOBBERS);
    } else {
      asm volatile(KVPACK_DOTS_MEM16() KVPACK_DOTS_MEM16(1) KVPACK_DOTS_MEM16(2)
                   :
                   : "r"(memory)
                   : KVPACK_ZMM_CLOBBERS);
    }
  }
}
#undef KVPACK_DOT
#undef KVPACK_DOT_MEM
#undef KVPACK_DOT_WORDS
#undef KVPACK_DOTS_WORDS16
#undef KVPACK_DOTS16
#undef KVPACK_DOTS8
#undef KVPACK_DOTS_MEM16
#undef KVPACK_ZMM_CLOBBERS

template <DotLoop kLoop>
void BM_Vpdpbusd(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) {
    state.SkipWithError("no AVX512-VNNI on this CPU");
    return;
  }
  constexpr int64_t kPasses = 1 << 18;
  for (auto _ : state) VpdpbusdLoop<kLoop>(kPasses);
  state.counters["ns/vpdpbusd"] = benchmark::Counter(
      static_cast<double>(kPasses * kDotsPerPass),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Vpdpbusd<DotLoop::kRegisters16>)->Name("Vpdpbusd/16")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Vpdpbusd<DotLoop::kRegisters8>)->Name("Vpdpbusd/8")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Vpdpbusd<DotLoop::kBroadcast16>)
    ->Name("VpdpbusdBroadcast")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Vpdpbusd<DotLoop::kWordRegisters16>)
    ->Name("Vpdpwssd/16")
    ->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace kvpack

BENCHMARK_MAIN();
