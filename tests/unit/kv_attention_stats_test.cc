// The eviction statistics pass (kv/attention_stats.h) against its double-precision oracle,
// over plain and quantized key codecs, every noise kind, temperatures, GQA groups, chunked
// rows and thread counts; plus the properties a policy relies on.
//
// Tolerance: every probability is computed from float logits (dot products of length 16
// with |q.k| * scale <~ 10, relative error ~ 16 eps) and a float softmax over <= 700 terms,
// so each probability is off by < ~1e-5 relative; a combined score sums at most
// n_rows * n_rep = 60 of them. We assert |a - b| <= 1e-4 * (1 + |b|) * n_rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kv/attention_stats.h"

namespace kvpack {
namespace {

std::vector<float> RandomVector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

constexpr int kKv = 2, kHeads = 6, kDim = 16;

// A one-layer cache holding n_cached tokens at positions 0..n_cached-1.
std::unique_ptr<KvCache> FilledCache(const char* spec, int64_t n_cached, std::mt19937& rng) {
  Result<std::unique_ptr<KvCache>> cache = KvCache::Create({1, kKv, kDim}, spec);
  EXPECT_TRUE(cache.ok()) << cache.status().message();
  int32_t pos = 0;
  for (int64_t left = n_cached; left > 0;) {
    const int64_t n = std::min<int64_t>(left, 50);
    auto k = RandomVector(n * kKv * kDim, rng), v = RandomVector(n * kKv * kDim, rng);
    std::vector<int32_t> p(n);
    for (auto& x : p) x = pos++;
    EXPECT_TRUE((*cache)->Append(0, k.data(), v.data(), p.data(), n).ok());
    left -= n;
  }
  return std::move(cache).value();
}

struct Case {
  const char* spec;
  int64_t n_cached;
  int64_t n_rows;
  ScoreNoise noise;
  double tau;
  ScoreReduce reduce;
};

class StatsTest : public ::testing::TestWithParam<Case> {};

TEST_P(StatsTest, MatchesReferenceAndIgnoresThreadCount) {
  const Case c = GetParam();
  std::mt19937 rng(7);
  std::unique_ptr<KvCache> cache = FilledCache(c.spec, c.n_cached, rng);
  auto q = RandomVector(c.n_rows * kHeads * kDim, rng, 2.0f);
  auto k = RandomVector(c.n_rows * kKv * kDim, rng), v = RandomVector(c.n_rows * kKv * kDim, rng);
  std::vector<int32_t> pos(c.n_rows);
  for (int64_t i = 0; i < c.n_rows; ++i) pos[i] = static_cast<int32_t>(c.n_cached + i);
  const AttentionChunk chunk{q.data(), k.data(), v.data(), c.n_rows, kHeads, 0.25f};
  AttentionStatsRequest req;
  req.noise = c.noise;
  req.tau = c.tau;
  req.reduce = c.reduce;
  req.noise_stream = 99;

  AttentionStats ref, one, three;
  AccumulateAttentionStatsRef(*cache, 0, chunk, pos.data(), req, &ref);
  ThreadPool pool1(1), pool3(3);
  AccumulateAttentionStats(*cache, 0, chunk, pos.data(), req, &one, &pool1);
  AccumulateAttentionStats(*cache, 0, chunk, pos.data(), req, &three, &pool3);
  ASSERT_EQ(one.per_head.size(), static_cast<size_t>(kKv));
  for (int g = 0; g < kKv; ++g) {
    ASSERT_EQ(one.per_head[g].size(), static_cast<size_t>(c.n_cached + c.n_rows));
    EXPECT_EQ(one.per_head[g], three.per_head[g]) << "thread count changed the result";
    double total = 0.0;
    for (size_t t = 0; t < ref.per_head[g].size(); ++t) {
      const float b = ref.per_head[g][t];
      ASSERT_NEAR(one.per_head[g][t], b, 1e-4 * (1 + std::fabs(b)) * c.n_rows)
          << "head " << g << " token " << t;
      total += one.per_head[g][t];
    }
    if (c.reduce == ScoreReduce::kSum) {
      // Every softmax row sums to one: the group's n_rep heads times the chunk's rows.
      EXPECT_NEAR(total, static_cast<double>(c.n_rows) * kHeads / kKv, 1e-3 * c.n_rows);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, StatsTest,
    ::testing::Values(Case{"f32", 0, 1, ScoreNoise::kNone, 1.0, ScoreReduce::kSum},
                      Case{"f32", 300, 1, ScoreNoise::kNone, 1.0, ScoreReduce::kSum},
                      Case{"f32", 130, 20, ScoreNoise::kGumbel, 1.0, ScoreReduce::kSum},
                      Case{"f16", 257, 3, ScoreNoise::kGumbel, 1.7, ScoreReduce::kSum},
                      Case{"f32", 40, 37, ScoreNoise::kGaussian, 2.0, ScoreReduce::kSum},
                      Case{"f32", 90, 5, ScoreNoise::kConstant, 1.3, ScoreReduce::kSum},
                      Case{"f32", 600, 17, ScoreNoise::kNone, 1.0, ScoreReduce::kMax},
                      // 8 bits: float key scores, so the pass must match its reference to float
                      // rounding (2/4-bit keys use an int8 query, bounded in the conformance test).
                      Case{"kivi:bits=8,group=32,residual=64", 200, 2, ScoreNoise::kGumbel, 1.0,
                           ScoreReduce::kSum},
                      Case{"k=kcvt v=f16", 0, 9, ScoreNoise::kNone, 1.0, ScoreReduce::kSum}));

TEST(StatsTest, ConstantNoiseEqualsNoNoise) {
  // softmax((x + c) / tau) == softmax(x / tau): the constant ablation only shifts logits.
  std::mt19937 rng(3);
  std::unique_ptr<KvCache> cache = FilledCache("f32", 100, rng);
  auto q = RandomVector(4 * kHeads * kDim, rng), k = RandomVector(4 * kKv * kDim, rng);
  std::vector<int32_t> pos = {100, 101, 102, 103};
  const AttentionChunk chunk{q.data(), k.data(), k.data(), 4, kHeads, 0.25f};
  AttentionStatsRequest none, constant;
  none.tau = constant.tau = 1.5;
  constant.noise = ScoreNoise::kConstant;
  AttentionStats a, b;
  ThreadPool pool(2);
  AccumulateAttentionStats(*cache, 0, chunk, pos.data(), none, &a, &pool);
  AccumulateAttentionStats(*cache, 0, chunk, pos.data(), constant, &b, &pool);
  for (int g = 0; g < kKv; ++g) {
    for (size_t t = 0; t < a.per_head[g].size(); ++t) {
      EXPECT_NEAR(a.per_head[g][t], b.per_head[g][t], 1e-5 * (1 + a.per_head[g][t]));
    }
  }
}

TEST(StatsTest, NoiseIsReproducibleAndHasTheRightMoments) {
  for (ScoreNoise noise : {ScoreNoise::kGumbel, ScoreNoise::kGaussian}) {
    double sum = 0.0, sum_sq = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const double z = ScoreNoiseSample(noise, 5, i % 7, i / 7, i % 1000);
      ASSERT_EQ(z, ScoreNoiseSample(noise, 5, i % 7, i / 7, i % 1000));
      sum += z;
      sum_sq += z * z;
    }
    const double mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
    // Standard error of the mean ~ 1.28 / sqrt(2e5) = 0.003.
    EXPECT_NEAR(mean, kGumbelMean, 0.015);
    EXPECT_NEAR(sd, kGumbelStd, 0.015);
  }
  EXPECT_NE(ScoreNoiseSample(ScoreNoise::kGumbel, 1, 0, 5, 3),
            ScoreNoiseSample(ScoreNoise::kGumbel, 2, 0, 5, 3));
  EXPECT_EQ(ScoreNoiseSample(ScoreNoise::kNone, 1, 0, 5, 3), 0.0);
}

TEST(StatsTest, CausalRowsSeeOnlyTheirPast) {
  // An empty cache and a chunk of 3 rows: the last token is seen only by the last row
  // (its own self-attention), the first by every row.
  std::mt19937 rng(11);
  std::unique_ptr<KvCache> cache = FilledCache("f32", 0, rng);
  auto q = RandomVector(3 * kHeads * kDim, rng), k = RandomVector(3 * kKv * kDim, rng);
  std::vector<int32_t> pos = {0, 1, 2};
  const AttentionChunk chunk{q.data(), k.data(), k.data(), 3, kHeads, 0.25f};
  AttentionStats s;
  ThreadPool pool(1);
  AccumulateAttentionStats(*cache, 0, chunk, pos.data(), {}, &s, &pool);
  const int n_rep = kHeads / kKv;
  for (int g = 0; g < kKv; ++g) {
    // Row 0 gives token 0 probability 1 for each of the group's heads.
    EXPECT_GT(s.per_head[g][0], n_rep * 1.0f - 1e-5f);
    EXPECT_LT(s.per_head[g][2], n_rep * 1.0f + 1e-5f);
    EXPECT_NEAR(s.per_head[g][0] + s.per_head[g][1] + s.per_head[g][2], 3.0 * n_rep, 1e-4);
  }
}

}  // namespace
}  // namespace kvpack
