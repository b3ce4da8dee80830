// End-to-end on the bundled real model (stories260K, Karpathy's TinyStories llama).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/session.h"

namespace kvpack {
namespace {

const std::string kModel = std::string(KVPACK_SOURCE_DIR) + "/models/stories260K.gguf";

// Golden: the greedy continuation that an independent pure-Python forward pass over the
// same GGUF produced (models/PROVENANCE.md, "Cross-checks"), not one recorded from kvpack.
const char* kGolden =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, "
    "\"Lily, let's go to the park";

std::string GenerateGreedy(const TextModel& m, const std::string& kv, int threads, int n_batch,
                           int n) {
  SessionOptions so;
  so.kv_spec = kv;
  so.n_threads = threads;
  so.n_batch = n_batch;
  so.n_ctx = 512;
  auto session = Session::Create(m.llama, so);
  EXPECT_TRUE(session.ok()) << session.status().message();
  GenerateOptions go;
  go.n_predict = n;
  go.sampler.temperature = 0.0f;
  std::string text;
  auto stats = Generate(**session, *m.tokenizer, m.tokenizer->Encode("Once upon a time", true), go,
                        [&](const std::string& piece) { text += piece; });
  EXPECT_TRUE(stats.ok()) << stats.status().message();
  return text;
}

TEST(StoriesE2e, GreedyGenerationMatchesIndependentGolden) {
  Result<TextModel> m = TextModel::Load(kModel);
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (const char* kv : {"f32", "f16"}) {
    for (int threads : {1, 2}) {
      const std::string text = GenerateGreedy(*m, kv, threads, 2, 60);
      const std::string golden(kGolden);
      ASSERT_GE(text.size(), 100u);
      // 60 tokens cover most of the golden text: compare the common prefix.
      const size_t n = std::min(text.size(), golden.size());
      EXPECT_EQ(text.substr(0, n), golden.substr(0, n)) << kv << " threads " << threads;
    }
  }
}

TEST(StoriesE2e, SamplingIsReproducibleWithASeed) {
  Result<TextModel> m = TextModel::Load(kModel);
  ASSERT_TRUE(m.ok());
  auto run = [&](uint64_t seed) {
    SessionOptions so;
    so.n_ctx = 256;
    auto session = Session::Create(m->llama, so);
    GenerateOptions go;
    go.n_predict = 40;
    go.sampler.temperature = 1.0f;
    go.sampler.top_k = 40;
    go.sampler.top_p = 0.9f;
    go.sampler.repeat_penalty = 1.1f;
    go.sampler.seed = seed;
    auto stats = Generate(**session, *m->tokenizer, m->tokenizer->Encode("Tom had a dog", true), go,
                          nullptr);
    EXPECT_TRUE(stats.ok());
    return stats->tokens;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

// Generation with an eviction policy: compact positions let it run past the context (the
// cache stays at its budget), original positions are refused up front.
TEST(StoriesE2e, GenerationWithACompactPolicyRunsPastTheContext) {
  Result<TextModel> m = TextModel::Load(kModel);
  ASSERT_TRUE(m.ok());
  GenerateOptions go;
  go.n_predict = 120;
  go.stop_at_eog = false;
  const std::vector<int32_t> prompt = m->tokenizer->Encode("Once upon a time", true);
  SessionOptions so{.n_ctx = 64, .n_threads = 1, .n_batch = 16,
                    .kv_spec = "sink:n=4,budget=32,positions=compact + f32"};
  auto session = Session::Create(m->llama, so);
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto stats = Generate(**session, *m->tokenizer, prompt, go, nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  EXPECT_EQ(stats->n_generated, 120);
  EXPECT_LE((*session)->cache().max_tokens(), 32);

  so.kv_spec = "sink:n=4,budget=32 + f32";  // original positions grow with the stream
  auto original = Session::Create(m->llama, so);
  ASSERT_TRUE(original.ok());
  auto refused = Generate(**original, *m->tokenizer, prompt, go, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange);
}

TEST(StoriesE2e, PromptLongerThanTheContextIsRefusedAndSessionStaysUsable) {
  Result<TextModel> m = TextModel::Load(kModel);
  ASSERT_TRUE(m.ok());
  SessionOptions so;
  so.n_ctx = 16;
  auto session = Session::Create(m->llama, so);
  ASSERT_TRUE(session.ok());
  std::vector<int32_t> prompt(17, 100);
  std::vector<float> logits((*session)->n_vocab());
  Status s = (*session)->Eval(prompt, LogitsFor::kLastToken, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*session)->n_past(), 0);
  prompt.resize(8);
  EXPECT_TRUE((*session)->Eval(prompt, LogitsFor::kLastToken, logits.data()).ok());
  EXPECT_FALSE(Session::Create(m->llama, {.n_ctx = 0, .n_threads = 1, .n_batch = 1,
                                          .kv_spec = "nonsense:x=1"}).ok());
}

}  // namespace
}  // namespace kvpack
