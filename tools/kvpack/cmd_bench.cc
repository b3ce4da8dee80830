#include <cstdio>
#include <memory>
#include <map>
#include <set>
#include <sstream>

#include "core/huge_page_arena.h"
#include "core/huge_pages.h"
#include "eval/speed_bench.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {
namespace {

template <typename T>
std::vector<T> ParseList(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    T v;
    if (is >> v) out.push_back(v);
  }
  return out;
}

// The weights' page size moves decode speed (core/huge_pages.h) and depends on how the file
// entered the page cache, so a benchmark says which it had.
void PrintWeightPages(const GgufFile& file) {
  const auto pages = HugePagesOf(file.bytes(), file.file_size());
  if (!pages) {
    std::printf("weights: %s, page sizes unknown (no /proc/self/smaps)\n",
                FormatBytes(file.file_size()).c_str());
    return;
  }
  std::printf("weights: %s mapped, %s of it in huge pages\n",
              FormatBytes(pages->range_bytes).c_str(), FormatBytes(pages->huge_bytes).c_str());
}

// The caches' page size moves decode speed at long depth as well (core/huge_page_arena.h).
void PrintCachePages(const std::vector<SpeedPoint>& points) {
  if (!BufferArena()) {
    std::printf("KV caches: huge-page arena off (sanitizer build or KVPACK_HUGE_PAGES=0)\n");
    return;
  }
  std::set<std::pair<int64_t, int>> seen;
  for (const SpeedPoint& p : points) {
    if (!seen.insert({p.depth, p.n_threads}).second) continue;
    std::printf("KV caches at depth %lld, %d thread(s): %s of buffers in the huge-page arena, "
                "%s of its pages huge\n",
                static_cast<long long>(p.depth), p.n_threads, FormatBytes(p.arena_used_bytes).c_str(),
                p.arena_huge_bytes < 0 ? "unknown" : FormatBytes(p.arena_huge_bytes).c_str());
  }
}

// Where a decode step's time goes on the calling thread (eval/speed_bench.h,
// DecodeBreakdown): milliseconds per step of the median repeat.
void PrintBreakdown(const std::vector<SpeedPoint>& points) {
  std::printf("\nwhere a decode step goes on the calling thread (ms per step, the median repeat; "
              "waits are for the pool's workers):\n"
              "| kv | threads | depth | step | weight products | of which waiting | attention | "
              "of which waiting | appends | rest |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const SpeedPoint& p : points) {
    const DecodeBreakdown& b = p.breakdown;
    const double rest = b.step_s - b.products_s - b.attention_s - b.append_s;
    std::printf("| %s | %d | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                p.kv_spec.c_str(), p.n_threads, static_cast<long long>(p.depth), 1e3 * b.step_s,
                1e3 * b.products_s, 1e3 * b.products_wait_s, 1e3 * b.attention_s,
                1e3 * b.attention_wait_s, 1e3 * b.append_s, 1e3 * rest);
  }
}

}  // namespace

Runner RegisterBench(CLI::App& app) {
  struct Args {
    std::string model, depths = "0,512,2048", threads = "1,2", kv = "f16";
    int64_t n_prefill = 128, n_decode = 32, n_batch = 512;
    int repeats = 3;
    bool breakdown = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "prefill/decode tokens/s at context depths, with the memory-bandwidth roofline");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("-d,--depths", args->depths, "comma-separated context depths")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "comma-separated thread counts")->capture_default_str();
  cmd->add_option("--kv", args->kv, "KV spec(s), separated by ';' (the first is the baseline of the ratio column)")->capture_default_str();
  cmd->add_option("-p,--n-prefill", args->n_prefill, "prompt tokens timed")->capture_default_str();
  cmd->add_option("-n,--n-decode", args->n_decode, "decode steps timed")->capture_default_str();
  cmd->add_option("-b,--batch", args->n_batch, "prefill chunk used to fill the caches")
      ->capture_default_str();
  cmd->add_option("-r,--repeats", args->repeats, "repeats (median reported)")->capture_default_str();
  cmd->add_flag("--breakdown", args->breakdown,
                "also print where a decode step's time goes on the calling thread (weight "
                "products, attention, appends, the rest; of the median repeat)");

  return [args]() -> int {
    auto model = LlamaModel::Load(args->model);
    if (!model.ok()) return ReportError(model.status());
    SpeedOptions o;
    o.depths = ParseList<int64_t>(args->depths);
    o.threads = ParseList<int>(args->threads);
    o.kv_specs.clear();
    std::stringstream ss(args->kv);
    for (std::string s; std::getline(ss, s, ';');) o.kv_specs.push_back(s);
    o.n_prefill = args->n_prefill;
    o.n_decode = args->n_decode;
    o.repeats = args->repeats;
    o.n_batch = args->n_batch;
    o.breakdown = args->breakdown;
    if (o.n_batch < 1 || o.depths.empty() || o.threads.empty() || o.kv_specs.empty() || o.repeats < 1 ||
        o.n_prefill < 1 || o.n_decode < 1) {
      return ReportError(InvalidArgument("empty or invalid list in the bench options"));
    }
    std::map<int, double> bandwidth, read_bandwidth;
    for (int t : o.threads) {
      bandwidth[t] = MeasureCopyBandwidth(t);
      read_bandwidth[t] = MeasureReadBandwidth(t);
    }
    auto points = MeasureSpeed(*model, o);
    if (!points.ok()) return ReportError(points.status());
    // Ratios are against the first spec at the same (depth, threads), measured in this run.
    std::map<std::pair<int64_t, int>, double> base;
    for (const SpeedPoint& p : *points) base.try_emplace({p.depth, p.n_threads}, p.decode_tok_s);
    std::printf("| kv | threads | depth | KV bits/value | KV bytes | prefill tok/s | decode tok/s | "
                "decode vs %s | bytes/token | decode / copy roofline | decode / read roofline |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n",
                o.kv_specs[0].c_str());
    for (const SpeedPoint& p : *points) {
      const double roof = bandwidth[p.n_threads] / p.bytes_per_token;
      const double read_roof = read_bandwidth[p.n_threads] / p.bytes_per_token;
      std::printf("| %s | %d | %lld | %.2f | %s | %.1f | %.2f | %.2fx | %s | %.0f%% | %.0f%% |\n",
                  p.kv_spec.c_str(), p.n_threads, static_cast<long long>(p.depth),
                  p.kv_bits_per_value, FormatBytes(p.kv_bytes).c_str(), p.prefill_tok_s,
                  p.decode_tok_s, p.decode_tok_s / base[{p.depth, p.n_threads}],
                  FormatBytes(p.bytes_per_token).c_str(), 100.0 * p.decode_tok_s / roof,
                  100.0 * p.decode_tok_s / read_roof);
    }
    if (o.breakdown) PrintBreakdown(*points);
    PrintWeightPages((*model)->file());
    PrintCachePages(*points);
    for (int t : o.threads) {
      std::printf("threads %d: copy bandwidth %.1f GB/s, read bandwidth %.1f GB/s\n", t,
                  bandwidth[t] / 1e9, read_bandwidth[t] / 1e9);
    }
    return 0;
  };
}

}  // namespace kvpack::cli
