// Speed measurement in llama-bench's style: prefill and decode tokens/s at a given context
// depth, plus the machine's memory bandwidth so that decode can be expressed as a fraction
// of its roofline (weights + KV bytes read per token / bandwidth).
#ifndef KVPACK_EVAL_SPEED_BENCH_H_
#define KVPACK_EVAL_SPEED_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/session.h"

namespace kvpack {

struct SpeedPoint {
  std::string kv_spec;
  int n_threads = 1;
  int64_t depth = 0;
  double prefill_tok_s = 0.0;      // median over repeats, n_prefill tokens after `depth`
  double decode_tok_s = 0.0;       // median over repeats, n_decode tokens after `depth`
  double bytes_per_token = 0.0;    // weights + KV payload read by one decode step
  double kv_bytes = 0.0;           // KV payload at the decode point
};

struct SpeedOptions {
  std::vector<int64_t> depths = {0, 512, 2048};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> kv_specs = {"f16"};
  int64_t n_prefill = 128;
  int64_t n_decode = 32;
  int repeats = 3;
};

Result<std::vector<SpeedPoint>> MeasureSpeed(std::shared_ptr<const LlamaModel> model,
                                             const SpeedOptions& options);

// STREAM-style copy bandwidth in bytes/s ((read + written bytes) / time), median of repeats,
// over buffers much larger than the caches, with n_threads threads.
double MeasureCopyBandwidth(int n_threads, size_t bytes = size_t{256} << 20, int repeats = 5);
// Read-only bandwidth in bytes/s (a SIMD reduction over the buffer), the access pattern of a
// decode step; usually higher than the copy figure.
double MeasureReadBandwidth(int n_threads, size_t bytes = size_t{256} << 20, int repeats = 5);

}  // namespace kvpack

#endif  // KVPACK_EVAL_SPEED_BENCH_H_
