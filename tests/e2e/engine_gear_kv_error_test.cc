// GEAR's claim on real K/V (METHODS.md 1.7): at 2 bits the relative Frobenius error
// ||X - X^||_F / ||X||_F of every layer's keys and values orders as
//   uniform per-token (flexgen) > KIVI > GEAR-L > GEAR,
// and GEAR-L's error falls as its rank grows. K/V are captured from the engine itself
// (Session with an f32 cache over real text, read back with Decode), then fed to fresh
// stores of each codec.
//
// Protocol: the captured sequence (n tokens, a multiple of 128) is appended to each store as
// one prompt (GEAR: one block, rank_prefill), and also as a 64-token prompt followed by one
// token at a time (GEAR: blocks of n_b with rank_decode; KIVI: its residual rules). The
// error is measured over the first n - 128 tokens, which every codec has quantized in both
// protocols (KIVI keeps up to its 128-token residual in fp16, GEAR its < n_b-token buffer).
//
// Comparisons at equal group size isolate what GEAR adds: GEAR's default 2-bit backbone is
// KIVI with group 64 (METHODS.md 1.7), so it is compared with kivi:group=64 (and with
// kivi's own default group 32 the same way, using gear:group=32). FlexGen's group is 64
// channels (clipped to head_dim). Two steps of the ladder are degenerate by construction and
// are checked as such instead of as strict inequalities:
//  - values, when KIVI's group and FlexGen's both cover the whole head (always on
//    stories260K, head_dim 8; group 64 on kvref-6m): the same per-token quantizer, equal
//    errors up to KIVI's fp16 rounding of values before quantizing (1%);
//  - values on stories260K: a token has 4 x 8 = 32 entries, round(1% of 32) = 0 outliers
//    per side at the default 2%, so gear stores exactly what gear-l stores (checked equal);
//    with sparsity=0.1 (2 per side) gear must beat gear-l there.
// Errors are not at equal bits: every table line prints bits/value too (on stories260K,
// head_dim 8, rank 4 factors cost more than the 2-bit codes; see docs/methods.md).
// Named *E2e: not run under the sanitizers (scripts/test.sh).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/session.h"
#include "kv/codec_registry.h"
#include "kv/codecs/gear_outliers.h"

namespace kvpack {
namespace {

const std::string kDir = KVPACK_SOURCE_DIR;

struct Captured {
  int n_layers = 0, n_heads = 0, d = 0;
  int64_t n = 0;
  std::vector<std::vector<float>> k, v;  // per layer: [n, n_kv_heads, head_dim]
};

Captured Capture(const std::string& model, const std::string& text_file, int64_t n_tokens) {
  Captured c;
  Result<TextModel> m = TextModel::Load(kDir + "/models/" + model);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return c;
  std::ifstream in(kDir + "/data/" + text_file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> tokens = m->tokenizer->Encode(ss.str().substr(0, 40000), true);
  EXPECT_GE(static_cast<int64_t>(tokens.size()), n_tokens);
  tokens.resize(n_tokens);
  SessionOptions so;
  so.kv_spec = "f32";
  so.n_ctx = n_tokens;
  so.n_batch = n_tokens;
  so.n_threads = 2;
  auto session = Session::Create(m->llama, so);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return c;
  std::vector<float> logits((*session)->n_vocab());
  EXPECT_TRUE((*session)->Eval(tokens, LogitsFor::kLastToken, logits.data()).ok());
  const KvCache& cache = (*session)->cache();
  c.n_layers = cache.shape().n_layers;
  c.n_heads = cache.shape().n_kv_heads;
  c.d = cache.shape().head_dim;
  c.n = n_tokens;
  std::vector<float> head(n_tokens * c.d);
  for (int l = 0; l < c.n_layers; ++l) {
    for (const ComponentStore* s : {&cache.keys(l), &cache.values(l)}) {
      std::vector<float> rows(n_tokens * c.n_heads * c.d);
      for (int h = 0; h < c.n_heads; ++h) {
        s->Decode(h, 0, n_tokens, head.data());
        for (int64_t t = 0; t < n_tokens; ++t) {
          std::copy_n(&head[t * c.d], c.d, &rows[(t * c.n_heads + h) * c.d]);
        }
      }
      (s == &cache.keys(l) ? c.k : c.v).push_back(std::move(rows));
    }
  }
  return c;
}

enum class Protocol { kPrompt, kDecode };

// Relative Frobenius error of a fresh store fed x [n, n_kv_heads, head_dim] by `protocol`,
// over tokens [0, n - 128).
double RelError(const Captured& c, const std::vector<float>& x, ComponentStore& store,
                Protocol protocol) {
  const int64_t row_len = static_cast<int64_t>(c.n_heads) * c.d;
  if (protocol == Protocol::kPrompt) {
    EXPECT_TRUE(store.Append(x.data(), c.n).ok());
  } else {
    EXPECT_TRUE(store.Append(x.data(), 64).ok());
    for (int64_t t = 64; t < c.n; ++t) EXPECT_TRUE(store.Append(&x[t * row_len], 1).ok());
  }
  const int64_t n_eval = c.n - 128;
  double err = 0.0, ref = 0.0;
  std::vector<float> dec(n_eval * c.d);
  for (int h = 0; h < c.n_heads; ++h) {
    store.Decode(h, 0, n_eval, dec.data());
    for (int64_t t = 0; t < n_eval; ++t) {
      for (int ch = 0; ch < c.d; ++ch) {
        const double xv = x[(t * c.n_heads + h) * c.d + ch], e = xv - dec[t * c.d + ch];
        err += e * e;
        ref += xv * xv;
      }
    }
  }
  return std::sqrt(err / ref);
}

struct Measured {
  double error;
  double bits_per_value;
};

Measured Measure(const Captured& c, int l, KvComponent comp, const std::string& spec,
                 Protocol protocol) {
  const std::vector<float>& x = comp == KvComponent::kKey ? c.k[l] : c.v[l];
  auto store = CreateStore(*ParseMethodSpec(spec), {l, c.n_heads, c.d, comp});
  EXPECT_TRUE(store.ok()) << spec;
  if (!store.ok()) return {0.0, 0.0};
  return {RelError(c, x, **store, protocol), (*store)->Memory().bits_per_value()};
}

// One comparison at equal quantizer group: {flexgen, kivi, gear-l, gear}.
struct Ladder {
  int kivi_group;
  std::vector<std::string> specs;
};

void CheckModel(const char* model, const char* text, int64_t n) {
  const Captured c = Capture(model, text, n);
  ASSERT_GT(c.n_layers, 0);
  const std::vector<Ladder> ladders = {
      {64, {"flexgen:bits=2", "kivi:bits=2,group=64", "gear-l", "gear"}},
      {32, {"flexgen:bits=2", "kivi:bits=2", "gear-l:group=32", "gear:group=32"}},
  };
  const std::vector<std::string> four_bit = {"flexgen:bits=4", "kivi:bits=4", "kcvt:bits=4",
                                             "gear-l:bits=4", "gear:bits=4"};
  // Values: FlexGen and KIVI are the same per-token quantizer when both groups cover the
  // whole head; GEAR adds nothing to GEAR-L when a token's n_kv_heads * head_dim entries are
  // too few for one outlier per side at 2% (stories260K: 32 entries).
  const bool no_value_outliers = OutliersPerSide(0.02, int64_t{c.n_heads} * c.d) == 0;
  std::printf("%s, %lld tokens of %s, %d layers, %d KV heads, head_dim %d; relative error "
              "(bits/value)\n",
              model, static_cast<long long>(n), text, c.n_layers, c.n_heads, c.d);
  for (Protocol p : {Protocol::kPrompt, Protocol::kDecode}) {
    const char* pname = p == Protocol::kPrompt ? "prompt" : "decode";
    for (KvComponent comp : {KvComponent::kKey, KvComponent::kValue}) {
      const bool values = comp == KvComponent::kValue;
      const char* cname = values ? "V" : "K";
      for (int l = 0; l < c.n_layers; ++l) {
        const std::string where =
            std::string(pname) + " " + cname + " layer " + std::to_string(l) + ": ";
        for (const Ladder& ladder : ladders) {
          std::vector<double> e;
          std::printf("  %s 2-bit:", where.c_str());
          for (const std::string& s : ladder.specs) {
            const Measured m = Measure(c, l, comp, s, p);
            e.push_back(m.error);
            std::printf(" %s=%.4f (%.2f)", s.c_str(), m.error, m.bits_per_value);
          }
          std::printf("\n");
          if (values && std::min(64, c.d) == std::min(ladder.kivi_group, c.d)) {
            // The same quantizer; KIVI quantizes values after rounding them to fp16.
            EXPECT_NEAR(e[1], e[0], 0.01 * e[0]) << where << ladder.specs[1];
          } else {
            EXPECT_LT(e[1], e[0]) << where << ladder.specs[1] << " vs " << ladder.specs[0];
          }
          EXPECT_LT(e[2], e[1]) << where << ladder.specs[2] << " vs " << ladder.specs[1];
          if (values && no_value_outliers) {
            EXPECT_EQ(e[3], e[2]) << where << ladder.specs[3] << " has no outlier to keep";
            // With room for outliers (10%: 2 per side of 32), GEAR improves on GEAR-L.
            const std::string& gear = ladder.specs[3];
            const std::string gear10 =
                gear + (gear.find(':') == std::string::npos ? ":" : ",") + "sparsity=0.1";
            const double e10 = Measure(c, l, comp, gear10, p).error;
            std::printf("  %s 2-bit: %s sparsity=0.1: %.4f\n", where.c_str(),
                        ladder.specs[3].c_str(), e10);
            EXPECT_LT(e10, e[2]) << where << "sparsity=0.1";
          } else {
            EXPECT_LT(e[3], e[2]) << where << ladder.specs[3] << " vs " << ladder.specs[2];
          }
        }
        std::printf("  %s 4-bit:", where.c_str());
        for (const std::string& s : four_bit) {
          const Measured m = Measure(c, l, comp, s, p);
          std::printf(" %s=%.4f (%.2f)", s.c_str(), m.error, m.bits_per_value);
        }
        std::printf("\n");
        // GEAR-L's error falls as its rank grows (prompt block: rank_prefill).
        if (p == Protocol::kPrompt) {
          std::printf("  %s gear-l rank:", where.c_str());
          double prev = INFINITY;
          for (int r : {0, 1, 2, 4, 8}) {
            const double e =
                Measure(c, l, comp, "gear-l:rank_prefill=" + std::to_string(r), p).error;
            std::printf(" r%d=%.4f", r, e);
            EXPECT_LT(e, prev) << where << "rank " << r;
            prev = e;
          }
          std::printf("\n");
        }
      }
    }
  }
}

// The codecs inside a real session: prefill in chunks, then greedy decoding through the
// fused attention, with the cache holding what was appended.
TEST(GearRealKvE2e, GreedyGenerationThroughGearCaches) {
  Result<TextModel> m = TextModel::Load(kDir + "/models/stories260K.gguf");
  ASSERT_TRUE(m.ok());
  const std::vector<int32_t> prompt = m->tokenizer->Encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside", true);
  std::string reference;
  for (const char* spec : {"f32", "gear", "gear-l", "k=gear:bits=4 v=gear-l:bits=4",
                           "gear:bits=8,buffer=7"}) {
    SessionOptions so;
    so.kv_spec = spec;
    so.n_ctx = 256;
    so.n_batch = 8;  // a chunked prefill: the first chunk is GEAR's prompt block
    so.n_threads = 2;
    auto session = Session::Create(m->llama, so);
    ASSERT_TRUE(session.ok()) << session.status().message();
    GenerateOptions go;
    go.n_predict = 60;
    go.sampler.temperature = 0.0f;
    std::string text;
    auto stats = Generate(**session, *m->tokenizer, prompt, go,
                          [&](const std::string& piece) { text += piece; });
    ASSERT_TRUE(stats.ok()) << spec << ": " << stats.status().message();
    const KvCache& cache = (*session)->cache();
    for (int l = 0; l < cache.shape().n_layers; ++l) {
      for (int h = 0; h < cache.shape().n_kv_heads; ++h) {
        ASSERT_EQ(cache.keys(l).n_tokens(h), cache.n_tokens(l, h)) << spec;
        ASSERT_EQ(cache.values(l).n_tokens(h), cache.n_tokens(l, h)) << spec;
      }
    }
    if (reference.empty()) reference = text;
    size_t same = 0;
    while (same < std::min(text.size(), reference.size()) && text[same] == reference[same]) ++same;
    std::printf("  %-32s %.1f bits/value, first %zu chars as f32: %s\n", spec,
                cache.Memory().bits_per_value(), same, text.substr(0, 80).c_str());
    EXPECT_GT(text.size(), 100u) << spec;
    // 8-bit GEAR changes the cache by ~0.5%: greedy text should follow f32's for a while.
    if (std::string(spec) == "gear:bits=8,buffer=7") {
      EXPECT_GE(same, 20u);
    }
  }
}

TEST(GearRealKvE2e, ErrorOrderingOnStories260K) {
  CheckModel("stories260K.gguf", "tinystories/tinystories_val_head.txt", 512);
}

TEST(GearRealKvE2e, ErrorOrderingOnKvref6m) {
  CheckModel("kvref-6m.gguf", "wikitext-2/wiki.test.raw", 1024);
}

}  // namespace
}  // namespace kvpack
