// Perplexity protocol checks on the real stories260K model.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "eval/perplexity.h"

namespace kvpack {
namespace {

const std::string kDir = KVPACK_SOURCE_DIR;

TEST(PerplexityE2e, WindowsAndScoringFollowTheProtocol) {
  Result<TextModel> m = TextModel::Load(kDir + "/models/stories260K.gguf");
  ASSERT_TRUE(m.ok());
  std::ifstream in(kDir + "/data/tinystories/tinystories_val_head.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str().substr(0, 8000);
  const std::vector<int32_t> tokens = m->tokenizer->Encode(text, true);
  ASSERT_EQ(tokens[0], m->tokenizer->bos());

  SessionOptions so;
  so.n_ctx = 128;
  so.n_batch = 128;
  so.n_threads = 2;
  auto session = Session::Create(m->llama, so);
  ASSERT_TRUE(session.ok());
  PerplexityOptions po;
  po.n_ctx = 128;
  Result<PerplexityResult> r = RunPerplexity(**session, tokens, m->tokenizer->bos(), po);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int64_t n_windows = static_cast<int64_t>(tokens.size()) / 128;
  EXPECT_EQ(r->n_windows, n_windows);
  EXPECT_EQ(r->n_scored, n_windows * (128 / 2 - 1));
  // A trained TinyStories model on TinyStories text: far better than uniform over 512
  // tokens (PPL 512), and not implausibly perfect.
  EXPECT_GT(r->ppl, 1.5);
  EXPECT_LT(r->ppl, 20.0);
  EXPECT_GT(r->ppl_stderr, 0.0);
  EXPECT_LT(r->ppl_stderr, r->ppl * 0.2);

  // Independent recomputation of the same quantity by token-by-token decode.
  so.n_batch = 1;
  auto slow = Session::Create(m->llama, so);
  ASSERT_TRUE(slow.ok());
  Result<PerplexityResult> r1 = RunPerplexity(**slow, tokens, m->tokenizer->bos(), po);
  ASSERT_TRUE(r1.ok());
  EXPECT_NEAR(r1->ppl, r->ppl, 1e-4 * r->ppl);
}

// --kld semantics: an f32 session against an f32 reference gives KLD exactly 0 and full
// top-1 agreement; a 2-bit cache gives a clearly positive KLD; the reported reference PPL is
// the f32 run's own PPL.
TEST(PerplexityE2e, KlDivergenceAgainstAnF32Reference) {
  Result<TextModel> m = TextModel::Load(kDir + "/models/stories260K.gguf");
  ASSERT_TRUE(m.ok());
  std::ifstream in(kDir + "/data/tinystories/tinystories_val_head.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<int32_t> tokens = m->tokenizer->Encode(ss.str().substr(0, 3000), true);
  SessionOptions so{.n_ctx = 128, .n_threads = 2, .n_batch = 128, .kv_spec = "f32"};
  auto ref = Session::Create(m->llama, so);
  auto same = Session::Create(m->llama, so);
  ASSERT_TRUE(ref.ok() && same.ok());
  PerplexityOptions po{.n_ctx = 128, .max_windows = 3, .reference = ref->get()};
  Result<PerplexityResult> r = RunPerplexity(**same, tokens, m->tokenizer->bos(), po);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_kld);
  EXPECT_EQ(r->kld.n, r->n_scored);
  EXPECT_EQ(r->kld.max, 0.0);
  EXPECT_EQ(r->kld.same_top1, 1.0);
  EXPECT_DOUBLE_EQ(r->reference_ppl, r->ppl);

  so.kv_spec = "kivi:bits=2,residual=32";
  so.n_batch = 1;
  auto lossy = Session::Create(m->llama, so);
  ASSERT_TRUE(lossy.ok());
  Result<PerplexityResult> q = RunPerplexity(**lossy, tokens, m->tokenizer->bos(), po);
  ASSERT_TRUE(q.ok());
  EXPECT_DOUBLE_EQ(q->reference_ppl, r->ppl);
  EXPECT_GT(q->kld.mean, 1e-3);
  EXPECT_GE(q->kld.p99, q->kld.median);
  EXPECT_LT(q->kld.same_top1, 1.0);
  EXPECT_GT(q->kld.same_top1, 0.5);  // degraded, not destroyed (measured 0.87 at 512 ctx)
}

TEST(PerplexityE2e, TooShortTextIsAnError) {
  Result<TextModel> m = TextModel::Load(kDir + "/models/stories260K.gguf");
  ASSERT_TRUE(m.ok());
  auto session = Session::Create(m->llama, {.n_ctx = 512});
  const std::vector<int32_t> tokens = m->tokenizer->Encode("Once upon a time", true);
  Result<PerplexityResult> r = RunPerplexity(**session, tokens, 1, {.n_ctx = 512});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fewer than one window"), std::string::npos);
}

TEST(PerplexityE2e, NllIsStable) {
  const float logits[3] = {1000.0f, 0.0f, -1000.0f};
  EXPECT_NEAR(NegLogLikelihood(logits, 3, 0), 0.0, 1e-12);
  EXPECT_NEAR(NegLogLikelihood(logits, 3, 1), 1000.0, 1e-9);
  const float flat[4] = {0, 0, 0, 0};
  EXPECT_NEAR(NegLogLikelihood(flat, 4, 2), std::log(4.0), 1e-12);
}

}  // namespace
}  // namespace kvpack
