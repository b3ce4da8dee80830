#include "eval/speed_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

double MeasureCopyBandwidth(int n_threads, size_t bytes, int repeats) {
  AlignedBuffer<uint8_t> src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 0, bytes);
  ThreadPool pool(n_threads);
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    pool.ParallelFor(static_cast<int64_t>(bytes), 4096, [&](int64_t b, int64_t e, int) {
      std::memcpy(dst.data() + b, src.data() + b, e - b);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(2.0 * static_cast<double>(bytes) / s);
  }
  return Median(rates);
}

double MeasureReadBandwidth(int n_threads, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float);
  AlignedBuffer<float> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
  ThreadPool pool(n_threads);
  std::vector<double> rates;
  std::vector<float> sink(n_threads);
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    pool.ParallelFor(static_cast<int64_t>(n), 1024, [&](int64_t b, int64_t e, int t) {
      sink[t] += DotF32(buf.data() + b, buf.data() + b, e - b);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s);
  }
  return sink[0] > 0 ? Median(rates) : 0.0;
}

Result<std::vector<SpeedPoint>> MeasureSpeed(std::shared_ptr<const LlamaModel> model,
                                             const SpeedOptions& o) {
  std::vector<SpeedPoint> points;
  const int64_t n_vocab = model->weights().output.n_out;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(n_vocab - 1));
  const double weight_bytes = static_cast<double>(model->weights().DecodeBytesPerToken(model->config()));
  for (const std::string& spec : o.kv_specs) {
    for (int threads : o.threads) {
      for (int64_t depth : o.depths) {
        SessionOptions so;
        so.n_threads = threads;
        so.kv_spec = spec;
        so.n_ctx = depth + std::max(o.n_prefill, o.n_decode) + 1;
        so.n_batch = 512;
        KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(model, so));
        std::vector<int32_t> fill(depth), prompt(o.n_prefill);
        for (auto& t : fill) t = tok(rng);
        for (auto& t : prompt) t = tok(rng);
        std::vector<float> logits(n_vocab);
        std::vector<double> prefill_rates, decode_rates;
        SpeedPoint p;
        for (int r = 0; r < o.repeats; ++r) {
          KVPACK_RETURN_IF_ERROR(session->Reset());
          if (depth > 0) KVPACK_RETURN_IF_ERROR(session->Eval(fill, LogitsFor::kLastToken, logits.data()));
          auto t0 = Clock::now();
          KVPACK_RETURN_IF_ERROR(session->Eval(prompt, LogitsFor::kLastToken, logits.data()));
          prefill_rates.push_back(o.n_prefill / std::chrono::duration<double>(Clock::now() - t0).count());
          // Decode at the same depth: rebuild the cache to `depth` tokens.
          KVPACK_RETURN_IF_ERROR(session->Reset());
          if (depth > 0) KVPACK_RETURN_IF_ERROR(session->Eval(fill, LogitsFor::kLastToken, logits.data()));
          p.kv_bytes = static_cast<double>(session->cache().Memory().payload_bytes());
          t0 = Clock::now();
          for (int64_t i = 0; i < o.n_decode; ++i) {
            const int32_t next = tok(rng);
            KVPACK_RETURN_IF_ERROR(session->Eval({&next, 1}, LogitsFor::kLastToken, logits.data()));
          }
          decode_rates.push_back(o.n_decode / std::chrono::duration<double>(Clock::now() - t0).count());
        }
        p.kv_spec = spec;
        p.n_threads = threads;
        p.depth = depth;
        p.prefill_tok_s = Median(prefill_rates);
        p.decode_tok_s = Median(decode_rates);
        p.bytes_per_token = weight_bytes + p.kv_bytes;
        points.push_back(p);
      }
    }
  }
  return points;
}

}  // namespace kvpack
