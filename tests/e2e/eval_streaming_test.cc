// Streaming perplexity and passkey harnesses on the real stories260K model: the streaming
// protocol equals a whole-sequence forward for a full cache, KLD against oneself is zero,
// bounded caches report the budget's bytes, compact positions stream past n_ctx, and the
// passkey prompts, file reader and scoring do what docs/evaluation.md says. The model runs
// are named *E2e: under sanitizers they take tens of seconds, so the ASan pass skips them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "eval/passkey.h"
#include "eval/streaming_perplexity.h"

namespace kvpack {
namespace {

const std::string kDir = KVPACK_SOURCE_DIR;

const TextModel& Stories() {
  static const TextModel m = [] {
    Result<TextModel> r = TextModel::Load(kDir + "/models/stories260K.gguf");
    EXPECT_TRUE(r.ok()) << r.status().message();
    return *r;
  }();
  return m;
}

std::vector<int32_t> StoryTokens(size_t n_bytes) {
  std::ifstream in(kDir + "/data/tinystories/tinystories_val_head.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return Stories().tokenizer->Encode(ss.str().substr(0, n_bytes), true);
}

std::unique_ptr<Session> MakeSession(const std::string& kv, int64_t n_ctx, int64_t n_batch) {
  SessionOptions o;
  o.kv_spec = kv;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.n_threads = 2;
  Result<std::unique_ptr<Session>> s = Session::Create(Stories().llama, o);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

TEST(StreamingPerplexityE2e, FullCacheEqualsOneForwardOverTheStream) {
  const std::vector<int32_t> tokens = StoryTokens(4000);
  const int64_t n = 200;
  std::unique_ptr<Session> s = MakeSession("f32", n, 1);
  StreamingOptions so;
  so.n_tokens = n;
  so.n_streams = 2;
  so.report_every = 64;
  std::vector<float> logits;
  so.record_logits = &logits;
  Result<StreamingResult> r = RunStreamingPerplexity(*s, tokens, Stories().tokenizer->bos(), so);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->total.n_scored, 2 * (n - 1));
  ASSERT_EQ(r->curve.size(), 4u);  // 64, 128, 192, 200
  EXPECT_EQ(r->curve.back().n_seen, n);
  EXPECT_NEAR(r->curve.back().ppl, r->total.ppl, 1e-9 * r->total.ppl);

  // The same NLL from one whole-segment forward per stream.
  std::unique_ptr<Session> whole = MakeSession("f32", n, n);
  NllAccumulator acc;
  const int64_t V = whole->n_vocab();
  std::vector<float> all(n * V);
  for (int64_t st = 0; st < 2; ++st) {
    std::vector<int32_t> seg(tokens.begin() + st * n, tokens.begin() + (st + 1) * n);
    seg[0] = Stories().tokenizer->bos();
    ASSERT_TRUE(whole->Reset().ok());
    ASSERT_TRUE(whole->Eval(seg, LogitsFor::kEveryToken, all.data()).ok());
    for (int64_t i = 0; i + 1 < n; ++i) acc.Add(NegLogLikelihood(&all[i * V], V, seg[i + 1]));
  }
  EXPECT_NEAR(r->total.ppl, acc.Result().ppl, 1e-4 * r->total.ppl);

  // Against its own logits: KLD 0, every top-1 the same.
  std::unique_ptr<Session> again = MakeSession("f32", n, 1);
  StreamingOptions ro = so;
  ro.record_logits = nullptr;
  ro.reference_logits = &logits;
  Result<StreamingResult> self = RunStreamingPerplexity(*again, tokens, 1, ro);
  ASSERT_TRUE(self.ok());
  ASSERT_TRUE(self->has_kld);
  EXPECT_NEAR(self->kld.mean, 0.0, 1e-9);
  EXPECT_EQ(self->kld.same_top1, 1.0);
}

TEST(StreamingPerplexityE2e, BoundedCacheHoldsTheBudgetAndStreamsPastTheContext) {
  const std::vector<int32_t> tokens = StoryTokens(6000);
  const int64_t n = 300;
  // Fraction budgets resolve against the stream: 0.25 * 300 = 75 tokens.
  std::unique_ptr<Session> s = MakeSession("h2o:budget=0.25 + f16", n, 1);
  StreamingOptions so;
  so.n_tokens = n;
  so.report_every = 100;
  Result<StreamingResult> r = RunStreamingPerplexity(*s, tokens, 1, so);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->budget, 75);
  EXPECT_EQ(r->curve.back().n_cached, 75);
  // stories260K: 5 layers, 4 KV heads, head_dim 8, f16 K and V.
  EXPECT_EQ(r->curve.back().kv_bytes, size_t{5} * 75 * 4 * 8 * 2 * 2);
  EXPECT_GT(r->total.ppl, 1.0);
  EXPECT_LT(r->total.ppl, 50.0);

  // positions=compact: a 64-position session streams 300 tokens.
  std::unique_ptr<Session> c = MakeSession("sink:n=4,window=28,positions=compact + f32", 64, 1);
  Result<StreamingResult> rc = RunStreamingPerplexity(*c, tokens, 1, so);
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  EXPECT_TRUE(std::isfinite(rc->total.ppl));
  EXPECT_EQ(rc->curve.back().n_cached, 32);
}

TEST(PasskeyTest, PromptsHaveTheKeyAtTheRequestedDepthAndLength) {
  const Tokenizer& tok = *Stories().tokenizer;
  for (double depth : {0.0, 0.5, 1.0}) {
    Result<PasskeyPrompt> p = MakePasskeyPrompt(tok, 400, depth, 42);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->key.size(), 5u);
    EXPECT_LE(p->n_tokens, 400);
    EXPECT_GT(p->n_tokens, 300);  // within a couple of filler lines of the target
    const std::string key_line = "The pass key is " + p->key + ". Remember it.";
    const size_t at = p->text.find(key_line);
    ASSERT_NE(at, std::string::npos);
    // Depth counts filler: between the instruction line and the question.
    const size_t filler_begin = p->text.find('\n') + 1;
    const size_t question = p->text.rfind("What is the pass key?");
    const double filler = static_cast<double>(question - filler_begin) - 60;  // minus key line
    EXPECT_NEAR((at - filler_begin) / filler, depth, 0.1) << depth;
    EXPECT_EQ(p->text.substr(question), "What is the pass key? The pass key is");
  }
  EXPECT_EQ(MakePasskeyPrompt(tok, 400, 0.5, 42)->key, MakePasskeyPrompt(tok, 400, 0.5, 42)->key);
  EXPECT_FALSE(MakePasskeyPrompt(tok, 10, 0.5, 1).ok());
  EXPECT_TRUE(PasskeyMatches(" 12345. Remember", "12345"));
  EXPECT_TRUE(PasskeyMatches(" 1 2 3 4 5", "12345"));
  EXPECT_FALSE(PasskeyMatches(" 1234", "12345"));
  EXPECT_FALSE(PasskeyMatches(" 54321", "12345"));
}

TEST(PasskeyE2e, ReportsWhetherEvictionKeptTheKey) {
  const Tokenizer& tok = *Stories().tokenizer;
  Result<PasskeyPrompt> early = MakePasskeyPrompt(tok, 300, 0.0, 5);
  Result<PasskeyPrompt> late = MakePasskeyPrompt(tok, 300, 1.0, 5);
  ASSERT_TRUE(early.ok() && late.ok());
  EXPECT_GT(early->key_end, early->key_begin);
  const std::vector<int32_t> ids = tok.Encode(early->text, true);
  EXPECT_EQ(tok.Decode({ids.begin() + early->key_begin, ids.begin() + early->key_end})
                    .find(early->key.substr(1)) != std::string::npos,
            true);
  auto retained = [&](const char* kv, const PasskeyPrompt& p) {
    std::unique_ptr<Session> s = MakeSession(kv, 512, 64);
    Result<PasskeyAnswer> a = AnswerPasskey(*s, tok, p, 2);
    EXPECT_TRUE(a.ok()) << a.status().message();
    return a->key_retained;
  };
  EXPECT_EQ(retained("f16", *early), 1.0);
  EXPECT_EQ(retained("window:budget=0.3 + f16", *early), 0.0);
  EXPECT_EQ(retained("window:budget=0.3 + f16", *late), 1.0);
  EXPECT_EQ(retained("window:budget=0.3,positions=compact + f32", *late), -1.0);  // n/a
}

TEST(PasskeyE2e, ReadsKivisFileAndRunsAgainstEveryCache) {
  const Tokenizer& tok = *Stories().tokenizer;
  Result<std::vector<PasskeyPrompt>> file =
      LoadPasskeyFile(tok, kDir + "/data/passkey/kivi_passkey_examples.jsonl");
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->size(), 5u);
  EXPECT_EQ((*file)[0].key, "74509");
  for (const PasskeyPrompt& p : *file) {
    EXPECT_GT(p.depth, 0.0);
    EXPECT_LT(p.depth, 1.0);
    EXPECT_GT(p.n_tokens, 5000);
  }
  // stories260K cannot retrieve anything; the harness still runs for every cache.
  PasskeyOptions po;
  po.lengths = {160};
  po.depths = {0.0, 1.0};
  po.trials = 2;
  for (const char* kv :
       {"f16", "keyformer:budget=0.5 + f16", "sink:n=4,budget=0.5 + kivi:bits=4"}) {
    std::unique_ptr<Session> s = MakeSession(kv, 512, 64);
    Result<std::vector<PasskeyCell>> cells = RunPasskey(*s, tok, po);
    ASSERT_TRUE(cells.ok()) << cells.status().message();
    ASSERT_EQ(cells->size(), 2u);
    for (const PasskeyCell& c : *cells) {
      EXPECT_EQ(c.n_trials, 2);
      EXPECT_GE(c.n_correct, 0);
    }
  }
}

}  // namespace
}  // namespace kvpack
