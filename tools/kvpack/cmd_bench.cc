#include <cstdio>
#include <memory>
#include <map>
#include <sstream>

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

}  // namespace

Runner RegisterBench(CLI::App& app) {
  struct Args {
    std::string model, depths = "0,512,2048", threads = "1,2", kv = "f16";
    int64_t n_prefill = 128, n_decode = 32;
    int repeats = 3;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "prefill/decode tokens/s at context depths, with the memory-bandwidth roofline");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("-d,--depths", args->depths, "comma-separated context depths")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "comma-separated thread counts")->capture_default_str();
  cmd->add_option("--kv", args->kv, "KV spec(s), separated by ';'")->capture_default_str();
  cmd->add_option("-p,--n-prefill", args->n_prefill, "prompt tokens timed")->capture_default_str();
  cmd->add_option("-n,--n-decode", args->n_decode, "decode steps timed")->capture_default_str();
  cmd->add_option("-r,--repeats", args->repeats, "repeats (median reported)")->capture_default_str();

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
    if (o.depths.empty() || o.threads.empty() || o.kv_specs.empty() || o.repeats < 1 ||
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
    std::printf("| kv | threads | depth | prefill tok/s | decode tok/s | bytes/token | copy GB/s | "
                "roofline tok/s | decode / roofline | read GB/s | decode / read roofline |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const SpeedPoint& p : *points) {
      const double bw = bandwidth[p.n_threads];
      const double roof = bw / p.bytes_per_token;
      const double read_bw = read_bandwidth[p.n_threads];
      std::printf("| %s | %d | %lld | %.1f | %.2f | %s | %.1f | %.1f | %.0f%% | %.1f | %.0f%% |\n",
                  p.kv_spec.c_str(), p.n_threads, static_cast<long long>(p.depth), p.prefill_tok_s,
                  p.decode_tok_s, FormatBytes(p.bytes_per_token).c_str(), bw / 1e9, roof,
                  100.0 * p.decode_tok_s / roof, read_bw / 1e9,
                  100.0 * p.decode_tok_s * p.bytes_per_token / read_bw);
    }
    return 0;
  };
}

}  // namespace kvpack::cli
