// Tokenizer loading from metadata built in memory: errors name the offending field, odd
// but legal metadata loads, and tiny vocabularies exercise the merge rules directly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/tokenizer.h"

namespace kvpack {
namespace {

struct Loaded {
  std::vector<uint8_t> bytes;  // must outlive the GgufFile
  std::unique_ptr<GgufFile> gguf;
};

Result<std::unique_ptr<Tokenizer>> Build(const GgufWriter& writer, Loaded* keep) {
  keep->bytes = writer.Serialize();
  auto gguf = GgufFile::FromBuffer(keep->bytes.data(), keep->bytes.size(), "test.gguf");
  if (!gguf.ok()) return gguf.status();
  keep->gguf = std::move(gguf).value();
  return Tokenizer::FromGguf(*keep->gguf);
}

GgufWriter TinyBpe() {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  // "Ġ" (U+0120) is GPT-2's spelling of a space byte.
  w.SetStringArray("tokenizer.ggml.tokens",
                   {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "a", "<|end|>"});
  w.SetInt32Array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 3});
  w.SetStringArray("tokenizer.ggml.merges", {"a b", "\xC4\xA0 a"});
  return w;
}

GgufWriter TinySpm() {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  // "▁a" outranks "ab", so "▁ab" becomes "▁a" + "b" although "ab" is a token.
  for (const auto& [text, score] : std::vector<std::pair<std::string, float>>{
           {"\xE2\x96\x81", -1}, {"a", -2}, {"b", -3}, {"\xE2\x96\x81" "a", -4}, {"ab", -5}}) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(1);
  }
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  return w;
}

TEST(TokenizerGgufTest, UnknownModelIsNamed) {
  GgufWriter w = TinyBpe();
  w.SetString("tokenizer.ggml.model", "bert");
  Loaded keep;
  auto tok = Build(w, &keep);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("'bert'"), std::string::npos) << tok.status().message();
}

TEST(TokenizerGgufTest, UnknownPreIsNamed) {
  GgufWriter w = TinyBpe();
  w.SetString("tokenizer.ggml.pre", "made-up-pre");
  Loaded keep;
  auto tok = Build(w, &keep);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("made-up-pre"), std::string::npos);
}

TEST(TokenizerGgufTest, MissingFieldsAndMismatchedArrays) {
  {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetStringArray("tokenizer.ggml.tokens", {"a"});
    Loaded keep;
    auto tok = Build(w, &keep);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("merges"), std::string::npos);
  }
  {
    GgufWriter w = TinySpm();
    w.SetFloat32Array("tokenizer.ggml.scores", {1.0f, 2.0f});
    Loaded keep;
    auto tok = Build(w, &keep);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("scores"), std::string::npos);
  }
  {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "llama");
    Loaded keep;
    auto tok = Build(w, &keep);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("tokenizer.ggml.tokens"), std::string::npos);
  }
  {
    GgufWriter w = TinySpm();
    w.SetString("tokenizer.ggml.add_bos_token", "yes");  // wrong type
    Loaded keep;
    EXPECT_FALSE(Build(w, &keep).ok());
  }
}

TEST(TokenizerGgufTest, TinyBpeMergesByRank) {
  GgufWriter w = TinyBpe();  // no `pre` key: llama.cpp's default regexes
  w.SetUint32("tokenizer.ggml.eos_token_id", 5);
  w.SetUint32("tokenizer.ggml.bos_token_id", 4000000000u);  // out of range: ignored
  Loaded keep;
  auto tok = Build(w, &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tokenizer& t = *tok.value();
  EXPECT_EQ(t.pre_name(), "");
  EXPECT_EQ(t.bos(), -1);  // gpt2's default (11) does not exist in 6 tokens
  EXPECT_EQ(t.eos(), 5);
  EXPECT_TRUE(t.IsEog(5));
  EXPECT_EQ(t.Encode("ab", false), (std::vector<int32_t>{2}));
  EXPECT_EQ(t.Encode("ba", false), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(t.Encode("ab a", false), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(t.Encode("a<|end|>", false, true), (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(t.Decode({2, 4, 5}), "ab a");
  EXPECT_EQ(t.Encode("zz", false), (std::vector<int32_t>{}));  // unknown bytes are dropped
}

TEST(TokenizerGgufTest, TinySpmMergesByScore) {
  Loaded keep;
  auto tok = Build(TinySpm(), &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tokenizer& t = *tok.value();
  const int32_t kSpace = 259, kA = 260, kB = 261, kSpaceA = 262, kAB = 263;
  EXPECT_EQ(t.Encode("ab", false), (std::vector<int32_t>{kSpaceA, kB}));
  EXPECT_EQ(t.Encode("ab", true), (std::vector<int32_t>{1, kSpaceA, kB}));
  // After a parsed special token the space prefix applies again.
  EXPECT_EQ(t.Encode("a</s>ab", false, true), (std::vector<int32_t>{kSpaceA, 2, kSpaceA, kB}));
  EXPECT_EQ(t.Encode("c", false), (std::vector<int32_t>{kSpace, 3 + 'c'}));  // byte fallback
  EXPECT_EQ(t.Decode(t.Encode("b ab c", true)), "b ab c");
  (void)kA;
  (void)kAB;

  GgufWriter no_prefix = TinySpm();
  no_prefix.SetBool("tokenizer.ggml.add_space_prefix", false);
  Loaded keep2;
  auto tok2 = Build(no_prefix, &keep2);
  ASSERT_TRUE(tok2.ok());
  EXPECT_EQ(tok2.value()->Encode("ab", false), (std::vector<int32_t>{kAB}));
  EXPECT_EQ(tok2.value()->Decode({kSpaceA}), " a");
}

}  // namespace
}  // namespace kvpack
