// Attention through the codec seam against the double-precision two-pass oracle, and the
// plain codecs' storage contract.
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "kv/attention.h"
#include "kv/kv_cache.h"

namespace kvpack {
namespace {

std::vector<float> RandomVector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Case {
  const char* spec;
  int64_t n_cached;
  int64_t n_rows;
  int threads;
};

class AttendTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttendTest, MatchesReference) {
  const Case c = GetParam();
  const int n_kv = 2, n_heads = 6, d = 16;
  std::mt19937 rng(42);
  Result<std::unique_ptr<KvCache>> cache = KvCache::Create({1, n_kv, d}, c.spec);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  // Fill the cache in a few appends of uneven size.
  int32_t pos = 0;
  for (int64_t left = c.n_cached; left > 0;) {
    const int64_t n = std::min<int64_t>(left, 37 + pos % 11);
    auto k = RandomVector(n * n_kv * d, rng), v = RandomVector(n * n_kv * d, rng);
    std::vector<int32_t> p(n);
    for (auto& x : p) x = pos++;
    ASSERT_TRUE((*cache)->Append(0, k.data(), v.data(), p.data(), n).ok());
    left -= n;
  }
  auto q = RandomVector(c.n_rows * n_heads * d, rng, 2.0f);
  auto k = RandomVector(c.n_rows * n_kv * d, rng), v = RandomVector(c.n_rows * n_kv * d, rng);
  AttentionChunk chunk{q.data(), k.data(), v.data(), c.n_rows, n_heads, 0.25f};
  std::vector<float> out(c.n_rows * n_heads * d), ref(out.size());
  ThreadPool pool(c.threads);
  Attend(**cache, 0, chunk, out.data(), &pool);
  AttendRef(**cache, 0, chunk, ref.data());
  // The output is a convex combination of value rows (|v| <~ 5): float rounding in the
  // softmax (relative ~n*eps) and in the dot products gives an absolute error far below 1e-4.
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4f) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttendTest,
    ::testing::Values(Case{"f32", 0, 1, 1}, Case{"f32", 0, 40, 2}, Case{"f32", 300, 1, 1},
                      Case{"f32", 3000, 1, 2}, Case{"f16", 3000, 3, 2}, Case{"bf16", 700, 20, 2},
                      Case{"k=f16 v=f32", 1100, 17, 2}, Case{"f16", 3000, 1, 3},
                      Case{"f32", 1500, 40, 3}));

// A decode step's shares (kv/attention_plan.h) cut heads of unequal length, empty ones
// included, at points that depend on the thread count: every count gives the oracle's output.
// KIVI-8's cost model (ComponentStore::ReadCost) moves the cuts off the token-even ones, into
// its quantized part or its fp16 residual; its 8-bit codes are scored with float queries at
// this head size and accumulated with int16 weights, within the same bound (as GEAR-8's in
// kv_gear_test.cc).
TEST(AttendTest, DecodeSharesOfUnequalHeadsMatchReference) {
  const int n_kv = 3, n_heads = 6, d = 16;
  for (const char* spec : {"f32", "f16", "kivi:bits=8,group=8,residual=256"}) {
    for (const auto& kept : {std::vector<int64_t>{1400, 1400, 1400},
                             std::vector<int64_t>{1400, 0, 700},
                             std::vector<int64_t>{90, 1400, 5}}) {
      std::mt19937 rng(11);
      Result<std::unique_ptr<KvCache>> cache = KvCache::Create({1, n_kv, d}, spec);
      ASSERT_TRUE(cache.ok()) << cache.status().message();
      const int64_t n = 1400;
      auto k = RandomVector(n * n_kv * d, rng), v = RandomVector(n * n_kv * d, rng);
      std::vector<int32_t> p(n);
      for (int32_t i = 0; i < n; ++i) p[i] = i;
      ASSERT_TRUE((*cache)->Append(0, k.data(), v.data(), p.data(), n).ok());
      for (int g = 0; g < n_kv; ++g) {
        std::vector<int64_t> keep;
        for (int64_t t = 0; t < kept[g]; ++t) keep.push_back(t * n / kept[g]);
        ASSERT_TRUE((*cache)->Retain(0, g, keep).ok());
        ASSERT_EQ((*cache)->n_tokens(0, g), kept[g]);
      }
      for (int64_t rows : {1, 3}) {
        auto q = RandomVector(rows * n_heads * d, rng, 2.0f);
        auto kc = RandomVector(rows * n_kv * d, rng), vc = RandomVector(rows * n_kv * d, rng);
        AttentionChunk chunk{q.data(), kc.data(), vc.data(), rows, n_heads, 0.25f};
        std::vector<float> ref(rows * n_heads * d), out(ref.size());
        AttendRef(**cache, 0, chunk, ref.data());
        for (int threads : {1, 2, 3, 8}) {
          SCOPED_TRACE(::testing::Message() << spec << " heads " << kept[0] << "/" << kept[1]
                                            << "/" << kept[2] << " rows " << rows
                                            << " threads " << threads);
          ThreadPool pool(threads);
          Attend(**cache, 0, chunk, out.data(), &pool);
          // The bound of MatchesReference above.
          for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4f) << i;
        }
      }
    }
  }
}

// The thread pool's chunks are claimed, not assigned (core/thread_pool.h): the same call must
// give the same bits every time, whatever thread ran which chunk (a long cache in segments,
// and many row blocks).
TEST(AttendDeterminismTest, SameBitsWhicheverThreadRunsAnItem) {
  const int n_kv = 2, n_heads = 6, d = 16;
  for (const auto& [spec, n_cached, n_rows] :
       {std::tuple{"kivi:bits=2", int64_t{3000}, int64_t{1}},
        std::tuple{"f16", int64_t{3000}, int64_t{1}},
        std::tuple{"f32", int64_t{600}, int64_t{70}}}) {
    SCOPED_TRACE(spec);
    std::mt19937 rng(7);
    Result<std::unique_ptr<KvCache>> cache = KvCache::Create({1, n_kv, d}, spec);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    auto k = RandomVector(n_cached * n_kv * d, rng), v = RandomVector(n_cached * n_kv * d, rng);
    std::vector<int32_t> p(n_cached);
    for (int32_t i = 0; i < n_cached; ++i) p[i] = i;
    ASSERT_TRUE((*cache)->Append(0, k.data(), v.data(), p.data(), n_cached).ok());
    auto q = RandomVector(n_rows * n_heads * d, rng, 2.0f);
    auto kc = RandomVector(n_rows * n_kv * d, rng), vc = RandomVector(n_rows * n_kv * d, rng);
    AttentionChunk chunk{q.data(), kc.data(), vc.data(), n_rows, n_heads, 0.25f};
    ThreadPool pool(3);
    std::vector<float> first(n_rows * n_heads * d), out(first.size());
    Attend(**cache, 0, chunk, first.data(), &pool);
    for (int rep = 0; rep < 40; ++rep) {
      Attend(**cache, 0, chunk, out.data(), &pool);
      ASSERT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float))) << rep;
    }
  }
}

TEST(PlainCodecTest, StoresExactlyAndAccountsBytes) {
  const int n_kv = 3, d = 8;
  std::mt19937 rng(1);
  for (const char* spec : {"f32", "f16", "bf16"}) {
    Result<std::unique_ptr<KvCache>> cache = KvCache::Create({2, n_kv, d}, spec);
    ASSERT_TRUE(cache.ok());
    auto k = RandomVector(10 * n_kv * d, rng), v = RandomVector(10 * n_kv * d, rng);
    std::vector<int32_t> pos(10);
    for (int i = 0; i < 10; ++i) pos[i] = i;
    ASSERT_TRUE((*cache)->Append(1, k.data(), v.data(), pos.data(), 10).ok());
    const size_t elem = std::string(spec) == "f32" ? 4 : 2;
    const MemoryUsage m = (*cache)->Memory();
    EXPECT_EQ(m.payload_bytes(), 2 * 10 * n_kv * d * elem) << spec;
    EXPECT_DOUBLE_EQ(m.bits_per_value(), 8.0 * elem);
    std::vector<float> dec(10 * d);
    (*cache)->keys(1).Decode(2, 0, 10, dec.data());
    for (int t = 0; t < 10; ++t) {
      for (int c = 0; c < d; ++c) {
        const float x = k[(t * n_kv + 2) * d + c];
        const float expect = elem == 4 ? x
                             : std::string(spec) == "f16" ? Fp16ToFp32(Fp32ToFp16(x))
                                                           : Bf16ToFp32(Fp32ToBf16(x));
        ASSERT_EQ(dec[t * d + c], expect);
      }
    }
    // Retain keeps exactly the chosen tokens and frees the rest.
    std::vector<int64_t> keep = {1, 4, 9};
    ASSERT_TRUE((*cache)->Retain(1, 2, keep).ok());
    EXPECT_EQ((*cache)->n_tokens(1, 2), 3);
    EXPECT_EQ((*cache)->positions(1, 2), (std::vector<int32_t>{1, 4, 9}));
    (*cache)->values(1).Decode(2, 0, 3, dec.data());
    EXPECT_EQ(dec[2 * d], elem == 4 ? v[(9 * n_kv + 2) * d] : dec[2 * d]);
    EXPECT_EQ((*cache)->Memory().payload_bytes(), 2 * (10 * 2 + 3) * d * elem);
    EXPECT_FALSE((*cache)->Retain(1, 2, std::vector<int64_t>{2, 1}).ok());
  }
}

TEST(PlainCodecTest, RejectsNonFiniteInputWithoutChangingTheCache) {
  Result<std::unique_ptr<KvCache>> cache = KvCache::Create({1, 1, 4}, "f16");
  ASSERT_TRUE(cache.ok());
  std::vector<float> k = {1, 2, 3, NAN}, v = {1, 2, 3, 4};
  int32_t pos = 0;
  Status s = (*cache)->Append(0, k.data(), v.data(), &pos, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("non-finite"), std::string::npos);
  EXPECT_EQ((*cache)->n_tokens(0, 0), 0);
  k[3] = 4;
  v[0] = INFINITY;
  EXPECT_FALSE((*cache)->Append(0, k.data(), v.data(), &pos, 1).ok());
  EXPECT_EQ((*cache)->keys(0).n_tokens(0), 0);
  EXPECT_EQ((*cache)->Memory().payload_bytes(), 0u);
}

}  // namespace
}  // namespace kvpack
