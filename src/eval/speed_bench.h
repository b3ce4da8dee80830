// Speed measurement in llama-bench's style: prefill and decode tokens/s at a given context
// depth, plus the machine's memory bandwidth so that decode can be expressed as a fraction
// of its roofline (weights + KV bytes read per token / bandwidth).
//
// Protocol: random tokens are run once through the model with an exact (f32) cache up to
// the largest depth, and their keys/values are kept. For every (depth, threads) point each
// KV spec in turn gets a fresh cache holding the first `depth` of those tokens, appended in
// prefill-sized chunks exactly as a prefill would store them (so the codecs hold real K/V,
// and deep points do not pay a quadratic prefill per spec); then n_decode single-token
// steps are timed per spec, in `repeats` rounds over all the specs of the point (the depth
// grows by n_decode per round), so that a drift of the machine's speed during the point
// falls on every spec alike; then one n_prefill-token chunk per spec. Specs with an
// eviction policy need attention statistics from the real forward pass, so their fill
// runs through Session::Eval (slower, same tokens). All the point's caches are held at
// once (13 specs at depth 8192 of SmolLM2-135M's shape: about 1.3 GB).
#ifndef KVPACK_EVAL_SPEED_BENCH_H_
#define KVPACK_EVAL_SPEED_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/session.h"

namespace kvpack {

// Where one decode step's time went on the calling thread (core/step_breakdown.h), in
// seconds per step, for the repeat whose decode rate is the median (the lower of the two
// middle ones for an even count); the rest of the step is step_s less the three parts.
struct DecodeBreakdown {
  double step_s = 0.0;
  double products_s = 0.0, products_wait_s = 0.0;    // weight products, of which waiting
  double attention_s = 0.0, attention_wait_s = 0.0;  // attention, of which waiting
  double append_s = 0.0;                             // the cache's appends and eviction
};

struct SpeedPoint {
  std::string kv_spec;
  int n_threads = 1;
  int64_t depth = 0;
  double prefill_tok_s = 0.0;      // median over repeats, n_prefill tokens after `depth`
  double decode_tok_s = 0.0;       // median over repeats, n_decode tokens after `depth`
  double bytes_per_token = 0.0;    // weights + KV payload read by one decode step
  double kv_bytes = 0.0;           // KV payload at the decode point
  double kv_bits_per_value = 0.0;  // of the payload at the decode point
  // The huge-page arena (core/huge_page_arena.h) after the point's decode steps, shared by
  // all the point's caches (they are held at once); zero where the arena is off.
  double arena_used_bytes = 0.0;  // buffers in it
  double arena_huge_bytes = 0.0;  // of its chunks, bytes in 2 MiB pages (-1: unknown)
  DecodeBreakdown breakdown;      // when SpeedOptions::breakdown (else zeros)
};

struct SpeedOptions {
  std::vector<int64_t> depths = {0, 512, 2048};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> kv_specs = {"f16"};
  int64_t n_prefill = 128;
  int64_t n_decode = 32;
  int64_t n_batch = 512;  // prefill chunk used to fill the caches
  int repeats = 3;
  bool breakdown = false;  // also time the decode steps' parts (SpeedPoint::breakdown)
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
