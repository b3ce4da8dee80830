// KvCache::Append: keys and values appended at once on a pool of two threads hold the same
// bits as one after the other, for every kind of store; input that either store refuses
// (non-finite, or beyond the fp16 range of a quantized store's parameters) changes neither
// store, with or without a pool.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace kvpack {
namespace {

constexpr KvCacheShape kShape{2, 3, 64};

std::vector<float> Normal(int64_t n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n_tokens * kShape.n_kv_heads * kShape.head_dim);
  for (float& v : x) v = g(rng);
  return x;
}

// Every layer's keys and values, decoded, in one vector.
std::vector<float> DecodeAll(const KvCache& cache) {
  std::vector<float> all;
  for (int l = 0; l < kShape.n_layers; ++l) {
    for (int h = 0; h < kShape.n_kv_heads; ++h) {
      const int64_t n = cache.n_tokens(l, h);
      std::vector<float> k(n * kShape.head_dim), v(n * kShape.head_dim);
      cache.keys(l).Decode(h, 0, n, k.data());
      cache.values(l).Decode(h, 0, n, v.data());
      all.insert(all.end(), k.begin(), k.end());
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  return all;
}

// A prompt of 300 tokens, then 140 decode steps (enough for KIVI's and HF's residuals to
// flush and GEAR's blocks to compress), into `cache` with `pool` (or none).
void Fill(KvCache& cache, ThreadPool* pool) {
  int32_t next = 0;
  auto append = [&](int64_t n, uint32_t seed) {
    const std::vector<float> k = Normal(n, seed), v = Normal(n, seed + 1000);
    std::vector<int32_t> pos(n);
    for (int32_t& p : pos) p = next++;
    for (int l = 0; l < kShape.n_layers; ++l) {
      ASSERT_TRUE(cache.Append(l, k.data(), v.data(), pos.data(), n, pool).ok());
    }
  };
  append(300, 1);
  for (uint32_t step = 0; step < 140; ++step) append(1, 2 + step);
}

const char* const kSpecs[] = {"f32",           "f16",         "bf16",           "q8_0",
                              "q4_0",          "kivi:bits=2", "kivi:bits=8",    "flexgen:bits=4",
                              "kcvt:bits=2",   "hf:nbits=4",  "hf:nbits=2,mode=hf",
                              "gear:bits=2",   "gear-l:bits=4",
                              "k=kivi:bits=4 v=f16"};

TEST(KvCacheAppendTest, TwoThreadsStoreTheSameBitsAsOne) {
  ThreadPool pool(2);
  for (const char* spec : kSpecs) {
    SCOPED_TRACE(spec);
    auto serial = KvCache::Create(kShape, spec);
    auto parallel = KvCache::Create(kShape, spec);
    ASSERT_TRUE(serial.ok() && parallel.ok());
    Fill(**serial, nullptr);
    Fill(**parallel, &pool);
    const std::vector<float> a = DecodeAll(**serial), b = DecodeAll(**parallel);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    EXPECT_EQ((*serial)->Memory().payload_bytes(), (*parallel)->Memory().payload_bytes());
  }
}

// A bad value in the keys or in the values alone: the step fails and neither store changes.
TEST(KvCacheAppendTest, RefusedInputChangesNeitherStore) {
  ThreadPool pool(2);
  constexpr float kBeyondFp16 = 1.0e6f;
  for (const char* spec : {"kivi:bits=4", "q4_0", "f16", "k=f16 v=kivi:bits=2"}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), kBeyondFp16}) {
        for (bool in_keys : {true, false}) {
          SCOPED_TRACE(std::string(spec) + (p ? " pool" : " no pool") + " bad " +
                       std::to_string(bad) + (in_keys ? " in keys" : " in values"));
          auto cache = KvCache::Create(kShape, spec);
          ASSERT_TRUE(cache.ok());
          Fill(**cache, p);
          const std::vector<float> before = DecodeAll(**cache);
          const size_t bytes = (*cache)->Memory().payload_bytes();
          std::vector<float> k = Normal(1, 77), v = Normal(1, 78);
          (in_keys ? k : v)[kShape.head_dim + 5] = bad;  // second head
          const int32_t pos = 10000;
          const Status st = (*cache)->Append(1, k.data(), v.data(), &pos, 1, p);
          // Every store here refuses both: f16 and the quantized codecs' fp16 parameters
          // end at 65504 (kv_plain_input_test.cc, kv_quant_input_test.cc).
          EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
          EXPECT_NE(st.message().find(in_keys ? "keys" : "values"), std::string::npos)
              << st.message();
          for (int h = 0; h < kShape.n_kv_heads; ++h) {
            EXPECT_EQ((*cache)->keys(1).n_tokens(h), 440);
            EXPECT_EQ((*cache)->values(1).n_tokens(h), 440);
            EXPECT_EQ((*cache)->n_tokens(1, h), 440);
          }
          EXPECT_EQ((*cache)->Memory().payload_bytes(), bytes);
          const std::vector<float> after = DecodeAll(**cache);
          ASSERT_EQ(after.size(), before.size());
          EXPECT_EQ(0, std::memcmp(after.data(), before.data(), after.size() * sizeof(float)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
