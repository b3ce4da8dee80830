#include "kv/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/vec.h"

namespace kvpack {
namespace {

constexpr int64_t kTile = 128;     // cached tokens scored per Scores call
constexpr int64_t kRowBlock = 16;  // query rows per work item
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The hash of every noise value of one query row; a key's value hashes this with its
// position, so a row costs one SplitMix64 per key.
uint64_t NoiseRowKey(uint64_t stream, int q_head, int64_t q_pos) {
  uint64_t h = SplitMix64(stream);
  h = SplitMix64(h ^ static_cast<uint64_t>(q_head));
  return SplitMix64(h ^ static_cast<uint64_t>(q_pos));
}

// Uniform in (0, 1), never 0 or 1 (53 random bits, offset by half a step).
double UnitOpen(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// The same draw in float (24 bits), for the optimized pass: the logarithms dominate the
// statistics pass's cost, and float ones are several times cheaper.
float NoiseFromBitsF(ScoreNoise noise, uint64_t h) {
  const float u = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
  if (noise == ScoreNoise::kGumbel) return -std::log(-std::log(u));
  const float u2 = (static_cast<float>(SplitMix64(h ^ 0xD1B54A32D192ED03ull) >> 40) + 0.5f) *
                   (1.0f / 16777216.0f);
  const float g = std::sqrt(-2.0f * std::log(u)) * std::cos(6.2831853f * u2);
  return static_cast<float>(kGumbelMean) + static_cast<float>(kGumbelStd) * g;
}

// Combines one softmax row into `acc` (sum or max). p: [n] probabilities.
void Reduce(ScoreReduce reduce, const float* p, int64_t n, float* acc) {
  if (reduce == ScoreReduce::kSum) {
    for (int64_t t = 0; t < n; ++t) acc[t] += p[t];
  } else {
    for (int64_t t = 0; t < n; ++t) acc[t] = std::max(acc[t], p[t]);
  }
}

void Combine(ScoreReduce reduce, const std::vector<float>& part, std::vector<float>& total) {
  Reduce(reduce, part.data(), static_cast<int64_t>(part.size()), total.data());
}

// Logits row -> scoring probabilities in place: y = (x + z) / tau, softmax over the finite
// entries; masked entries (-inf) become 0. key_pos(t) gives the noise key of column t.
template <typename KeyPos>
void ScoringSoftmax(float* row, int64_t n, const AttentionStatsRequest& req, int q_head,
                    int64_t q_pos, const KeyPos& key_pos) {
  const float inv_tau = static_cast<float>(1.0 / req.tau);
  const bool random = req.noise == ScoreNoise::kGumbel || req.noise == ScoreNoise::kGaussian;
  const float shift = req.noise == ScoreNoise::kConstant ? static_cast<float>(kGumbelMean) : 0.0f;
  // Masked entries are -inf and stay so: -inf plus noise or times 1/tau is -inf.
  if (random) {
    const uint64_t row_key = NoiseRowKey(req.noise_stream, q_head, q_pos);
    for (int64_t t = 0; t < n; ++t) {
      const uint64_t bits = SplitMix64(row_key ^ static_cast<uint64_t>(key_pos(t)));
      row[t] = (row[t] + shift + NoiseFromBitsF(req.noise, bits)) * inv_tau;
    }
  } else if (shift != 0.0f || inv_tau != 1.0f) {
    for (int64_t t = 0; t < n; ++t) row[t] = (row[t] + shift) * inv_tau;
  }
  const float mx = MaxF32(row, static_cast<size_t>(n));
  if (mx == kNegInf) {
    std::fill(row, row + n, 0.0f);
    return;
  }
  const float inv = 1.0f / ExpSubtractSum(row, static_cast<size_t>(n), mx);
  for (int64_t t = 0; t < n; ++t) row[t] *= inv;
}

}  // namespace

double ScoreNoiseSample(ScoreNoise noise, uint64_t stream, int q_head, int64_t q_pos,
                        int64_t k_pos) {
  if (noise == ScoreNoise::kNone) return 0.0;
  if (noise == ScoreNoise::kConstant) return kGumbelMean;
  const uint64_t h = SplitMix64(NoiseRowKey(stream, q_head, q_pos) ^ static_cast<uint64_t>(k_pos));
  const double u = UnitOpen(h);
  if (noise == ScoreNoise::kGumbel) return -std::log(-std::log(u));
  // Box-Muller with a second, independent uniform.
  const double u2 = UnitOpen(SplitMix64(h ^ 0xD1B54A32D192ED03ull));
  const double g = std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * u2);
  return kGumbelMean + kGumbelStd * g;
}

void AccumulateAttentionStats(const KvCache& cache, int layer, const AttentionChunk& chunk,
                              const int32_t* pos, const AttentionStatsRequest& request,
                              AttentionStats* out, ThreadPool* pool) {
  const int n_kv = cache.shape().n_kv_heads;
  const int d = cache.shape().head_dim;
  const int n_rep = chunk.n_heads / n_kv;
  const ComponentStore& keys = cache.keys(layer);
  const int64_t n_row_blocks = (chunk.n_rows + kRowBlock - 1) / kRowBlock;
  const int64_t n_items = n_kv * n_row_blocks;
  // Each work item (KV head g, row block rb) combines its rows into its own partial array
  // over the tokens those rows see; partials are combined in item order afterwards.
  std::vector<std::vector<float>> partial(n_items);

  pool->ParallelFor(n_items, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> qbuf, sbuf, tile;
    for (int64_t w = begin; w < end; ++w) {
      const int g = static_cast<int>(w / n_row_blocks);
      const int64_t row0 = (w % n_row_blocks) * kRowBlock;
      const int64_t row1 = std::min(chunk.n_rows, row0 + kRowBlock);
      const int64_t n_rows = row1 - row0;
      const int n_q = static_cast<int>(n_rows) * n_rep;
      const int64_t n_cached = cache.n_tokens(layer, g);
      const int64_t width = n_cached + row1;  // cached tokens + chunk tokens 0..row1-1
      const std::vector<int32_t>& cached_pos = cache.positions(layer, g);
      // qbuf[(r * n_rep + j), :] = q[row0 + r, g * n_rep + j, :] * scale (as Attend).
      qbuf.resize(static_cast<size_t>(n_q) * d);
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int j = 0; j < n_rep; ++j) {
          const float* src = chunk.q + ((row0 + r) * chunk.n_heads + g * n_rep + j) * d;
          float* dst = &qbuf[(r * n_rep + j) * d];
          for (int c = 0; c < d; ++c) dst[c] = src[c] * chunk.scale;
        }
      }
      sbuf.resize(static_cast<size_t>(n_q) * width);  // [n_q, width] logits
      for (int64_t t0 = 0; t0 < n_cached; t0 += kTile) {
        const int64_t t1 = std::min(n_cached, t0 + kTile), n = t1 - t0;
        tile.resize(static_cast<size_t>(n_q) * n);
        keys.Scores(g, qbuf.data(), n_q, t0, t1, tile.data());
        for (int qi = 0; qi < n_q; ++qi) {
          std::copy(&tile[qi * n], &tile[qi * n] + n, &sbuf[qi * width + t0]);
        }
      }
      for (int qi = 0; qi < n_q; ++qi) {
        const int64_t r = row0 + qi / n_rep;
        float* srow = &sbuf[qi * width + n_cached];
        for (int64_t t = 0; t < row1; ++t) {
          srow[t] = t <= r ? DotF32(&qbuf[qi * d], chunk.k + (t * n_kv + g) * d, d) : kNegInf;
        }
      }
      std::vector<float>& acc = partial[w];
      acc.assign(width, 0.0f);
      auto key_pos = [&](int64_t t) -> int64_t {
        return t < n_cached ? cached_pos[t] : pos[t - n_cached];
      };
      for (int qi = 0; qi < n_q; ++qi) {
        const int64_t r = row0 + qi / n_rep;
        float* srow = &sbuf[qi * width];
        ScoringSoftmax(srow, width, request, g * n_rep + qi % n_rep, pos[r], key_pos);
        Reduce(request.reduce, srow, width, acc.data());
      }
    }
  });

  out->per_head.resize(n_kv);
  for (int g = 0; g < n_kv; ++g) {
    std::vector<float>& total = out->per_head[g];
    total.assign(cache.n_tokens(layer, g) + chunk.n_rows, 0.0f);
    for (int64_t rb = 0; rb < n_row_blocks; ++rb)
      Combine(request.reduce, partial[g * n_row_blocks + rb], total);
  }
}

void AccumulateAttentionStatsRef(const KvCache& cache, int layer, const AttentionChunk& chunk,
                                 const int32_t* pos, const AttentionStatsRequest& request,
                                 AttentionStats* out) {
  const int n_kv = cache.shape().n_kv_heads;
  const int d = cache.shape().head_dim;
  const int n_rep = chunk.n_heads / n_kv;
  out->per_head.assign(n_kv, {});
  for (int g = 0; g < n_kv; ++g) {
    const int64_t n_cached = cache.n_tokens(layer, g);
    std::vector<float> kc(n_cached * d);
    cache.keys(layer).Decode(g, 0, n_cached, kc.data());
    std::vector<double> acc(n_cached + chunk.n_rows, 0.0);
    for (int64_t r = 0; r < chunk.n_rows; ++r) {
      const int64_t n = n_cached + r + 1;  // visible tokens
      for (int j = 0; j < n_rep; ++j) {
        const int h = g * n_rep + j;
        const float* q = chunk.q + (r * chunk.n_heads + h) * d;
        std::vector<double> y(n);
        for (int64_t t = 0; t < n; ++t) {
          const float* k = t < n_cached ? &kc[t * d] : chunk.k + ((t - n_cached) * n_kv + g) * d;
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
          const int64_t k_pos = t < n_cached ? cache.positions(layer, g)[t] : pos[t - n_cached];
          const double z = ScoreNoiseSample(request.noise, request.noise_stream, h, pos[r], k_pos);
          y[t] = (dot * chunk.scale + z) / request.tau;
        }
        const double mx = *std::max_element(y.begin(), y.end());
        double sum = 0.0;
        for (double& x : y) sum += (x = std::exp(x - mx));
        for (int64_t t = 0; t < n; ++t) {
          const double p = y[t] / sum;
          acc[t] = request.reduce == ScoreReduce::kSum ? acc[t] + p : std::max(acc[t], p);
        }
      }
    }
    out->per_head[g].assign(acc.begin(), acc.end());
  }
}

}  // namespace kvpack
