// The optimized forward pass against the scalar reference forward on random models of
// llama and qwen2 shapes (GQA, QKV bias, tied and untied output, f32 and q8_0 weights),
// and prefill-then-decode against decode-only.
//
// Tolerance: the reference accumulates in double, the optimized path in float. Each dot
// product of length n <= 96 has relative error <= gamma_n ~ 1.1e-5 of sum|a_i b_i|; through
// 2 layers with RMSNorm, attention and the output projection the logits (|logit| ~ 1..10)
// differ by far less than 1e-3 * (1 + |logit|), which is what we assert. A real bug (a wrong
// RoPE pair, a missing bias, an off-by-one mask) moves logits by O(0.1..1).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/llama_forward.h"
#include "model/llama_ref.h"
#include "model/synthetic_model.h"

namespace kvpack {
namespace {

struct ModelCase {
  const char* name;
  const char* arch;
  bool tied;
  GgmlType type;
};

std::string WriteModel(const ModelCase& c) {
  SyntheticShape s;
  s.arch = c.arch;
  s.name = c.name;
  s.n_vocab = 300, s.n_embd = 64, s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.n_ff = 96;
  s.n_ctx = 256;
  s.tied_output = c.tied;
  const std::string path = ::testing::TempDir() + "/kvpack_" + c.name + ".gguf";
  Status st = WriteSyntheticModel(s, c.type, 1234, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

std::vector<int32_t> RandomTokens(int n, int n_vocab) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> tok(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = tok(rng);
  return t;
}

void ExpectLogitsClose(const float* a, const float* b, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-3f * (1.0f + std::fabs(b[i]))) << what << " logit " << i;
  }
}

class ForwardTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ForwardTest, ChunkedPrefillMatchesScalarReference) {
  const ModelCase c = GetParam();
  Result<std::shared_ptr<const LlamaModel>> model = LlamaModel::Load(WriteModel(c));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const LlamaModel& m = **model;
  EXPECT_EQ(m.weights().tied_output, c.tied);
  EXPECT_EQ(m.config().qkv_bias, std::string(c.arch) == "qwen2");
  const int n = 23;
  const int64_t V = m.config().n_vocab;
  const std::vector<int32_t> tokens = RandomTokens(n, static_cast<int>(V));

  LlamaRef ref(m);
  std::vector<float> ref_logits;
  for (int32_t t : tokens) {
    std::vector<float> l = ref.Step(t);
    ref_logits.insert(ref_logits.end(), l.begin(), l.end());
  }
  for (int threads : {1, 2}) {
    Result<std::unique_ptr<KvCache>> cache =
        KvCache::Create({m.config().n_layers, m.config().n_kv_heads, m.config().head_dim}, "f32");
    ASSERT_TRUE(cache.ok());
    ThreadPool pool(threads);
    ForwardScratch scratch;
    std::vector<float> logits(n * V);
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = i;
    // Chunks of 10, 10, 3 tokens.
    for (int b = 0; b < n; b += 10) {
      const int len = std::min(10, n - b);
      ASSERT_TRUE(LlamaForward(m, &tokens[b], &pos[b], len, **cache, LogitsFor::kEveryToken,
                               &logits[b * V], scratch, &pool)
                      .ok());
    }
    ExpectLogitsClose(logits.data(), ref_logits.data(), n * V,
                      std::string(c.name) + " threads " + std::to_string(threads));
  }
}

TEST_P(ForwardTest, PrefillThenDecodeMatchesDecodeOnly) {
  const ModelCase c = GetParam();
  Result<std::shared_ptr<const LlamaModel>> model = LlamaModel::Load(WriteModel(c));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const LlamaModel& m = **model;
  const int n = 20, n_prompt = 12;
  const int64_t V = m.config().n_vocab;
  const std::vector<int32_t> tokens = RandomTokens(n, static_cast<int>(V));
  const KvCacheShape shape{m.config().n_layers, m.config().n_kv_heads, m.config().head_dim};
  ThreadPool pool(2);

  auto a = KvCache::Create(shape, "f32"), b = KvCache::Create(shape, "f32");
  ASSERT_TRUE(a.ok() && b.ok());
  ForwardScratch sa, sb;
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = i;
  std::vector<float> la(n * V), lb(n * V);
  ASSERT_TRUE(LlamaForward(m, tokens.data(), pos.data(), n_prompt, **a, LogitsFor::kEveryToken,
                           la.data(), sa, &pool).ok());
  for (int i = n_prompt; i < n; ++i) {
    ASSERT_TRUE(LlamaForward(m, &tokens[i], &pos[i], 1, **a, LogitsFor::kLastToken, &la[i * V], sa,
                             &pool).ok());
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(LlamaForward(m, &tokens[i], &pos[i], 1, **b, LogitsFor::kLastToken, &lb[i * V], sb,
                             &pool).ok());
  }
  for (int i = 0; i < n; ++i) {
    ExpectLogitsClose(&la[i * V], &lb[i * V], V, std::string(c.name) + " token " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, ForwardTest,
    ::testing::Values(ModelCase{"llama_tied_f32", "llama", true, GgmlType::kF32},
                      ModelCase{"llama_untied_q8_0", "llama", false, GgmlType::kQ8_0},
                      ModelCase{"llama_tied_f16", "llama", true, GgmlType::kF16},
                      ModelCase{"qwen2_untied_f32", "qwen2", false, GgmlType::kF32},
                      ModelCase{"qwen2_tied_q8_0", "qwen2", true, GgmlType::kQ8_0}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ForwardTest, RejectsTokensOutsideTheVocabulary) {
  Result<std::shared_ptr<const LlamaModel>> model =
      LlamaModel::Load(WriteModel({"oov", "llama", true, GgmlType::kF32}));
  ASSERT_TRUE(model.ok());
  auto cache = KvCache::Create({2, 2, 16}, "f32");
  ThreadPool pool(1);
  ForwardScratch s;
  std::vector<float> logits(300);
  const int32_t bad = 300, pos = 0;
  Status st = LlamaForward(**model, &bad, &pos, 1, **cache, LogitsFor::kLastToken, logits.data(),
                           s, &pool);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace kvpack
