// Eviction through the engine (Session + LlamaForward) on a small random model: a budget
// larger than the sequence is bit-identical to no policy, budgets hold after every Eval
// with chunked prefill, positions=compact streams past n_ctx while positions=original
// refuses with a clear error, seeded Keyformer is reproducible, and a policy that asks for
// pre-RoPE projections receives them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/session.h"
#include "model/synthetic_model.h"

namespace kvpack {
namespace {

std::shared_ptr<const LlamaModel> TinyModel() {
  static std::shared_ptr<const LlamaModel> model = [] {
    SyntheticShape s;
    s.name = "evict";
    s.n_vocab = 300, s.n_embd = 64, s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.n_ff = 96;
    s.n_ctx = 256;
    const std::string path = ::testing::TempDir() + "/kvpack_eviction_tiny.gguf";
    EXPECT_TRUE(WriteSyntheticModel(s, GgmlType::kF32, 77, path).ok());
    Result<std::shared_ptr<const LlamaModel>> m = LlamaModel::Load(path);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return *m;
  }();
  return model;
}

std::vector<int32_t> Tokens(int n, int seed = 1) {
  std::vector<int32_t> t(n);
  uint32_t x = seed;
  for (auto& v : t) v = static_cast<int32_t>((x = x * 1664525u + 1013904223u) % 300);
  return t;
}

std::unique_ptr<Session> MakeSession(const std::string& kv, int64_t n_ctx = 256,
                                     int64_t n_batch = 16) {
  SessionOptions o;
  o.kv_spec = kv;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.n_threads = 2;
  Result<std::unique_ptr<Session>> s = Session::Create(TinyModel(), o);
  EXPECT_TRUE(s.ok()) << kv << ": " << s.status().message();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Logits of a 40-token prompt (every token) followed by 20 decode steps.
std::vector<float> Logits(Session& s, uint64_t* evicted_tokens = nullptr) {
  const std::vector<int32_t> tokens = Tokens(60);
  const int64_t V = s.n_vocab();
  std::vector<float> out(60 * V);
  EXPECT_TRUE(s.Eval(std::span(tokens).first(40), LogitsFor::kEveryToken, out.data()).ok());
  for (int i = 40; i < 60; ++i) {
    EXPECT_TRUE(s.Eval(std::span(tokens).subspan(i, 1), LogitsFor::kLastToken, &out[i * V]).ok());
  }
  return out;
}

TEST(SessionEvictionTest, BudgetAboveTheSequenceIsBitIdenticalToNoPolicy) {
  std::unique_ptr<Session> plain = MakeSession("f32");
  const std::vector<float> want = Logits(*plain);
  for (const char* spec :
       {"window:budget=200 + f32", "sink:n=4,window=100 + f32", "h2o:budget=100 + f32",
        "keyformer:budget=64 + f32", "keyformer:budget=64,positions=compact + f32"}) {
    std::unique_ptr<Session> s = MakeSession(spec);
    const std::vector<float> got = Logits(*s);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << spec << " logit " << i;
  }
}

TEST(SessionEvictionTest, BudgetHoldsAfterEveryEvalAndPeakIsBudgetPlusChunk) {
  for (const char* spec : {"h2o:budget=0.5 + f16", "keyformer:budget=0.5 + f16",
                           "sink:n=4,budget=0.5,positions=compact + f16",
                           "window:budget=0.5 + kivi:bits=4,residual=32"}) {
    std::unique_ptr<Session> s = MakeSession(spec, 256, 16);
    const std::vector<int32_t> tokens = Tokens(70);
    std::vector<float> logits(s->n_vocab());
    ASSERT_TRUE(s->Eval(std::span(tokens).first(40), LogitsFor::kLastToken, logits.data()).ok());
    const KvCache& c = s->cache();
    EXPECT_EQ(c.policy()->token_budget(), 20);
    for (int i = 40; i <= 70; ++i) {
      for (int l = 0; l < 2; ++l) {
        for (int h = 0; h < 2; ++h) ASSERT_EQ(c.n_tokens(l, h), 20) << spec << " at " << i;
      }
      if (i == 70) break;
      ASSERT_TRUE(
          s->Eval(std::span(tokens).subspan(i, 1), LogitsFor::kLastToken, logits.data()).ok());
    }
    if (std::string(spec).find("f16") != std::string::npos) {
      // f16: 2 heads, head_dim 16, K and V: 128 bytes per token and layer. The peak: the
      // prompt's second chunk of 16 in layer 1 (16 + 16 held) while layer 0 is back at 20.
      EXPECT_EQ(c.Memory().payload_bytes(), 2u * 20 * 128);
      EXPECT_EQ(c.peak_bytes(), (32u + 20u) * 128);
    }
  }
}

TEST(SessionEvictionTest, CompactPositionsStreamPastTheContext) {
  const std::vector<int32_t> tokens = Tokens(150);
  std::vector<float> logits(300);
  std::unique_ptr<Session> compact =
      MakeSession("sink:n=4,window=28,positions=compact + f32", /*n_ctx=*/64, /*n_batch=*/8);
  ASSERT_TRUE(compact->BeginSequence({.n_prompt = 8}).ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_TRUE(
        compact->Eval(std::span(tokens).subspan(i, 1), LogitsFor::kLastToken, logits.data()).ok())
        << i;
  }
  EXPECT_EQ(compact->n_past(), 150);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(compact->cache().positions(1, 1).back(), 31);

  std::unique_ptr<Session> original = MakeSession("sink:n=4,window=28 + f32", 64, 8);
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(
        original->Eval(std::span(tokens).subspan(i, 1), LogitsFor::kLastToken, logits.data()).ok());
  }
  const Status s =
      original->Eval(std::span(tokens).subspan(64, 1), LogitsFor::kLastToken, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("positions=compact"), std::string::npos) << s.message();

  // A chunk that cannot fit even right after an eviction is refused up front.
  std::unique_ptr<Session> tight = MakeSession("window:budget=60,positions=compact + f32", 64, 8);
  std::vector<float> every(100 * 300);
  const Status t = tight->Eval(std::span(tokens).first(100), LogitsFor::kEveryToken, every.data());
  EXPECT_EQ(t.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(tight->n_past(), 0);
}

TEST(SessionEvictionTest, SeededKeyformerIsReproducible) {
  const std::string spec = "keyformer:budget=0.4,seed=3,gen=20 + f16";
  std::unique_ptr<Session> a = MakeSession(spec), c = MakeSession(spec);
  EXPECT_EQ(Logits(*a), Logits(*c));
  ASSERT_TRUE(a->Reset().ok());
  ASSERT_TRUE(c->Reset().ok());
  EXPECT_EQ(Logits(*a), Logits(*c));
}

// A policy that only records what ObservePreRope receives.
class RecordingPolicy final : public EvictionPolicy {
 public:
  std::string spec() const override { return "recording"; }
  PolicyNeeds needs() const override { return {.pre_rope_qkv = true}; }
  PositionMode positions() const override { return PositionMode::kOriginal; }
  Status Begin(int, int, const SequencePlan&) override { return Status::Ok(); }
  int64_t token_budget() const override { return 1 << 20; }
  void ObservePreRope(const ChunkContext& ctx, const PreRopeChunk& chunk) override {
    if (ctx.layer != 1) return;
    const int64_t n = chunk.n_rows * 2 * 16;  // n_kv_heads * head_dim
    k.insert(k.end(), chunk.k, chunk.k + n);
  }
  bool Plan(const ChunkContext&, int, std::span<const int32_t>,
            std::vector<int64_t>*) const override {
    return false;
  }
  std::vector<float> k;  // layer 1 keys before RoPE, [n_seen, n_kv_heads, head_dim]
};

TEST(SessionEvictionTest, PreRopePoliciesSeeUnrotatedKeys) {
  const LlamaModel& m = *TinyModel();
  Result<std::unique_ptr<KvCache>> cache = KvCache::Create({2, 2, 16}, "f32");
  ASSERT_TRUE(cache.ok());
  auto owned = std::make_unique<RecordingPolicy>();
  RecordingPolicy* policy = owned.get();
  ASSERT_TRUE((*cache)->SetPolicy(std::move(owned)).ok());
  const std::vector<int32_t> tokens = Tokens(5);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  ForwardScratch scratch;
  ThreadPool pool(1);
  std::vector<float> logits(300);
  ASSERT_TRUE(LlamaForward(m, tokens.data(), pos.data(), 5, **cache, LogitsFor::kLastToken,
                           logits.data(), scratch, &pool)
                  .ok());
  ASSERT_EQ(policy->k.size(), 5u * 2 * 16);
  RopeParams rope;
  rope.n_rot = m.config().n_rot;
  rope.freq_base = m.config().rope_freq_base;
  for (int t = 0; t < 5; ++t) {
    for (int h = 0; h < 2; ++h) {
      std::vector<float> want(&policy->k[(t * 2 + h) * 16], &policy->k[(t * 2 + h) * 16] + 16);
      ApplyRope(want.data(), 1, 16, t, rope);
      std::vector<float> stored(16);
      (*cache)->keys(1).Decode(h, t, t + 1, stored.data());
      for (int c = 0; c < 16; ++c) ASSERT_FLOAT_EQ(stored[c], want[c]) << t << " " << h;
    }
  }
}

}  // namespace
}  // namespace kvpack
