#include "eval/speed_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "core/aligned_buffer.h"
#include "core/huge_page_arena.h"
#include "core/huge_pages.h"
#include "core/step_breakdown.h"
#include "core/thread_pool.h"
#include "kv/spec.h"
#include "model/llama_forward.h"
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

namespace {

// Keys and values of `n` tokens per layer, [layer][n, n_kv_heads, head_dim], from a real
// forward pass over `tokens` with an exact cache.
struct KvSnapshot {
  int64_t n = 0;
  std::vector<std::vector<float>> keys, values;
};

Result<KvSnapshot> CaptureKv(std::shared_ptr<const LlamaModel> model,
                             std::span<const int32_t> tokens, int n_threads, int64_t n_batch) {
  SessionOptions so;
  so.n_threads = n_threads;
  so.kv_spec = "f32";
  so.n_ctx = static_cast<int64_t>(tokens.size());
  so.n_batch = n_batch;
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(model, so));
  std::vector<float> logits(session->n_vocab());
  KVPACK_RETURN_IF_ERROR(session->Eval(tokens, LogitsFor::kLastToken, logits.data()));
  const KvCache& cache = session->cache();
  const KvCacheShape& shape = cache.shape();
  const int64_t n = static_cast<int64_t>(tokens.size()), row = shape.n_kv_heads * shape.head_dim;
  KvSnapshot snap;
  snap.n = n;
  std::vector<float> head(n * shape.head_dim);
  for (int l = 0; l < shape.n_layers; ++l) {
    for (int c = 0; c < 2; ++c) {
      const ComponentStore& store = c == 0 ? cache.keys(l) : cache.values(l);
      std::vector<float> all(n * row);
      for (int h = 0; h < shape.n_kv_heads; ++h) {
        store.Decode(h, 0, n, head.data());
        for (int64_t t = 0; t < n; ++t) {
          std::copy_n(&head[t * shape.head_dim], shape.head_dim,
                      &all[t * row + h * shape.head_dim]);
        }
      }
      (c == 0 ? snap.keys : snap.values).push_back(std::move(all));
    }
  }
  return snap;
}

// A cache of `spec` holding the snapshot's first `depth` tokens, appended in chunks of n_batch.
Result<std::unique_ptr<KvCache>> CacheFromSnapshot(const KvSnapshot& snap, const KvCacheShape& shape,
                                                   const std::string& spec, int64_t depth,
                                                   int64_t n_batch) {
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, KvCache::Create(shape, spec));
  const int64_t row = shape.n_kv_heads * shape.head_dim;
  std::vector<int32_t> pos;
  for (int64_t t0 = 0; t0 < depth; t0 += n_batch) {
    const int64_t n = std::min(n_batch, depth - t0);
    pos.resize(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(t0 + i);
    for (int l = 0; l < shape.n_layers; ++l) {
      KVPACK_RETURN_IF_ERROR(cache->Append(l, &snap.keys[l][t0 * row], &snap.values[l][t0 * row],
                                           pos.data(), n));
    }
  }
  return cache;
}

// One spec under measurement: a cache (or, for specs with an eviction policy, a session)
// that tokens are appended to at the next positions, one decode step or one prefill chunk
// per call.
class Timed {
 public:
  virtual ~Timed() = default;
  virtual Status Eval(std::span<const int32_t> tokens) = 0;
  virtual MemoryUsage Memory() const = 0;
};

// A cache built from the snapshot, driven by LlamaForward directly.
class TimedCache final : public Timed {
 public:
  TimedCache(const LlamaModel& model, std::unique_ptr<KvCache> cache, int64_t depth,
             ThreadPool* pool)
      : model_(model), cache_(std::move(cache)), pos_(static_cast<int32_t>(depth)), pool_(pool),
        logits_(model.weights().output.n_out) {}
  Status Eval(std::span<const int32_t> tokens) override {
    std::vector<int32_t> pos(tokens.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = pos_++;
    return LlamaForward(model_, tokens.data(), pos.data(), static_cast<int>(tokens.size()),
                        *cache_, LogitsFor::kLastToken, logits_.data(), scratch_, pool_);
  }
  MemoryUsage Memory() const override { return cache_->Memory(); }

 private:
  const LlamaModel& model_;
  std::unique_ptr<KvCache> cache_;
  int32_t pos_;
  ThreadPool* pool_;
  ForwardScratch scratch_;
  std::vector<float> logits_;
};

// A session filled through Session::Eval (the policy sees the real attention).
class TimedSession final : public Timed {
 public:
  explicit TimedSession(std::unique_ptr<Session> session)
      : session_(std::move(session)), logits_(session_->n_vocab()) {}
  Status Eval(std::span<const int32_t> tokens) override {
    return session_->Eval(tokens, LogitsFor::kLastToken, logits_.data());
  }
  MemoryUsage Memory() const override { return session_->cache().Memory(); }

 private:
  std::unique_ptr<Session> session_;
  std::vector<float> logits_;
};

Result<std::unique_ptr<Timed>> MakeTimedSession(std::shared_ptr<const LlamaModel> model,
                                                const std::string& spec,
                                                std::span<const int32_t> fill, int n_threads,
                                                const SpeedOptions& o) {
  SessionOptions so;
  so.n_threads = n_threads;
  so.kv_spec = spec;
  so.n_ctx = static_cast<int64_t>(fill.size()) + o.repeats * o.n_decode + o.n_prefill;
  so.n_batch = o.n_batch;
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(model, so));
  std::vector<float> logits(session->n_vocab());
  if (!fill.empty()) KVPACK_RETURN_IF_ERROR(session->Eval(fill, LogitsFor::kLastToken, logits.data()));
  return std::unique_ptr<Timed>(new TimedSession(std::move(session)));
}

double TimeTokens(Timed& t, std::span<const int32_t> tokens, bool one_by_one, Status& status) {
  const auto t0 = Clock::now();
  if (one_by_one) {
    for (size_t i = 0; i < tokens.size() && status.ok(); ++i) status = t.Eval(tokens.subspan(i, 1));
  } else {
    status = t.Eval(tokens);
  }
  return static_cast<double>(tokens.size()) /
         std::chrono::duration<double>(Clock::now() - t0).count();
}

// The parts of the repeat whose rate is the median (the lower middle one), per step.
DecodeBreakdown MedianRepeatBreakdown(const std::vector<double>& rates,
                                      const std::vector<StepBreakdown>& parts, int64_t n_decode) {
  std::vector<size_t> order(rates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rates[a] < rates[b]; });
  const size_t m = order[(order.size() - 1) / 2];
  const StepBreakdown& b = parts[m];
  const double n = static_cast<double>(n_decode);
  DecodeBreakdown d;
  d.step_s = 1.0 / rates[m];
  d.products_s = b.Seconds(StepPart::kProducts) / n;
  d.products_wait_s = b.WaitSeconds(StepPart::kProducts) / n;
  d.attention_s = b.Seconds(StepPart::kAttention) / n;
  d.attention_wait_s = b.WaitSeconds(StepPart::kAttention) / n;
  d.append_s = b.Seconds(StepPart::kAppend) / n;
  return d;
}

}  // namespace

Result<std::vector<SpeedPoint>> MeasureSpeed(std::shared_ptr<const LlamaModel> model,
                                             const SpeedOptions& o) {
  std::vector<KvSpec> specs;
  for (const std::string& text : o.kv_specs) {
    KVPACK_ASSIGN_OR_RETURN(KvSpec spec, ParseKvSpec(text));
    specs.push_back(std::move(spec));
  }
  const int64_t n_vocab = model->weights().output.n_out;
  const int64_t max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  if (max_depth + o.repeats * o.n_decode + o.n_prefill > model->config().n_ctx_train) {
    return InvalidArgument("depth " + std::to_string(max_depth) + " + timed tokens exceed the "
                           "model's context of " + std::to_string(model->config().n_ctx_train));
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> fill(max_depth);
  for (auto& t : fill) t = tok(rng);
  KvSnapshot snap;
  if (max_depth > 0) {
    const int threads = *std::max_element(o.threads.begin(), o.threads.end());
    KVPACK_ASSIGN_OR_RETURN(snap, CaptureKv(model, fill, threads, o.n_batch));
  }
  const LlamaConfig& c = model->config();
  const KvCacheShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const double weight_bytes = static_cast<double>(model->weights().DecodeBytesPerToken(c));
  std::vector<SpeedPoint> points;
  std::vector<int32_t> tokens(o.n_decode), prompt(o.n_prefill);
  for (int64_t depth : o.depths) {
    for (int threads : o.threads) {
      // Every spec's cache first, then the repeats in rounds over the specs, so that a drift
      // of the machine's speed (other tenants, memory bandwidth) falls on all specs alike.
      ThreadPool pool(threads);
      std::vector<std::unique_ptr<Timed>> timed;
      for (size_t s = 0; s < specs.size(); ++s) {
        if (specs[s].policy) {
          KVPACK_ASSIGN_OR_RETURN(
              std::unique_ptr<Timed> t,
              MakeTimedSession(model, o.kv_specs[s], {fill.data(), size_t(depth)}, threads, o));
          timed.push_back(std::move(t));
        } else {
          KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                                  CacheFromSnapshot(snap, shape, o.kv_specs[s], depth, o.n_batch));
          timed.push_back(std::make_unique<TimedCache>(*model, std::move(cache), depth, &pool));
        }
      }
      std::vector<SpeedPoint> round(specs.size());
      std::vector<std::vector<double>> rates(specs.size());
      for (size_t s = 0; s < specs.size(); ++s) {
        round[s].kv_spec = o.kv_specs[s];
        round[s].n_threads = threads;
        round[s].depth = depth;
        const MemoryUsage m = timed[s]->Memory();
        round[s].kv_bytes = static_cast<double>(m.payload_bytes());
        round[s].kv_bits_per_value = m.bits_per_value();
      }
      Status status;
      std::vector<std::vector<StepBreakdown>> parts(specs.size());
      for (int r = 0; r < o.repeats; ++r) {
        for (size_t s = 0; s < specs.size(); ++s) {
          for (auto& t : tokens) t = tok(rng);
          StepBreakdown b;
          {
            // Inactive (every mark a no-op) unless the options ask for the breakdown.
            const StepBreakdownScope scope(o.breakdown ? &b : nullptr);
            rates[s].push_back(TimeTokens(*timed[s], tokens, true, status));
          }
          KVPACK_RETURN_IF_ERROR(status);
          parts[s].push_back(b);
        }
      }
      double arena_used = 0.0, arena_huge = 0.0;
      if (const HugePageArena* arena = BufferArena()) {
        arena_used = static_cast<double>(arena->GetStats().used_bytes);
        const auto pages = HugePagesOf(arena->ChunkRanges());
        arena_huge = pages ? static_cast<double>(pages->huge_bytes) : -1.0;
      }
      for (size_t s = 0; s < specs.size(); ++s) {
        round[s].arena_used_bytes = arena_used;
        round[s].arena_huge_bytes = arena_huge;
        for (auto& t : prompt) t = tok(rng);
        round[s].prefill_tok_s = TimeTokens(*timed[s], prompt, false, status);
        KVPACK_RETURN_IF_ERROR(status);
        round[s].decode_tok_s = Median(rates[s]);
        if (o.breakdown) {
          round[s].breakdown = MedianRepeatBreakdown(rates[s], parts[s], o.n_decode);
        }
        round[s].bytes_per_token = weight_bytes + round[s].kv_bytes;
        points.push_back(round[s]);
      }
    }
  }
  return points;
}

}  // namespace kvpack
