// Tokenizer tests: llama.cpp's own test vectors (data/tokenizer-tests, produced with
// add_special=false, parse_special=false as in llama.cpp's tests/test-tokenizer-0.cpp),
// round trips, streaming decode and the bundled stories260K vocabulary.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/pretokenizer.h"
#include "io/tokenizer.h"
#include "io/utf8.h"

namespace kvpack {
namespace {

const std::string kVocabDir = KVPACK_SOURCE_DIR "/data/tokenizer-tests/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Same parsing as test-tokenizer-0.cpp: strings separated by "\n__ggml_vocab_test__\n"; one
// line of space-separated ids per string in the .out file.
std::vector<VocabCase> ReadCases(const std::string& vocab) {
  const std::string raw = ReadFile(kVocabDir + vocab + ".gguf.inp");
  const std::string out = ReadFile(kVocabDir + vocab + ".gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<int32_t>> outputs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    for (int32_t id; ids >> id;) v.push_back(id);
    outputs.push_back(std::move(v));
  }
  std::vector<VocabCase> cases;
  EXPECT_EQ(inputs.size(), outputs.size()) << vocab;
  for (size_t i = 0; i < std::min(inputs.size(), outputs.size()); ++i) {
    cases.push_back({inputs[i], outputs[i]});
  }
  return cases;
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  auto gguf = GgufFile::Open(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status().message();
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::FromGguf(*gguf.value());
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  if (!tok.ok()) return nullptr;
  return std::move(tok).value();
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class TokenizerVocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerVocabTest, MatchesLlamaCppVectors) {
  const std::string vocab = GetParam();
  auto tok = LoadTokenizer(kVocabDir + vocab + ".gguf");
  ASSERT_NE(tok, nullptr);
  const auto cases = ReadCases(vocab);
  ASSERT_GE(cases.size(), 40u);
  int passed = 0;
  for (const auto& c : cases) {
    const auto ids = tok->Encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(Join(ids), Join(c.ids)) << vocab << " text='" << c.text << "'";
    passed += ids == c.ids;
  }
  std::printf("[ %s ] %d/%zu vectors match\n", vocab.c_str(), passed, cases.size());
}

TEST_P(TokenizerVocabTest, RoundTrip) {
  const std::string vocab = GetParam();
  auto tok = LoadTokenizer(kVocabDir + vocab + ".gguf");
  ASSERT_NE(tok, nullptr);
  for (const auto& c : ReadCases(vocab)) {
    // Byte-level BPE and SPM with byte fallback are lossless on every string here.
    EXPECT_EQ(tok->Decode(tok->Encode(c.text, false)), c.text) << vocab;
    if (tok->add_bos()) {
      EXPECT_EQ(tok->Decode(tok->Encode(c.text, true)), c.text) << vocab << " with BOS";
    }
    // Streaming gives the same bytes as Decode, and never a split character.
    const auto ids = tok->Encode(c.text, true);
    StreamingDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = stream.Push(id);
      EXPECT_EQ(utf8::IncompleteTailLength(part), 0u);
      streamed += part;
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, tok->Decode(ids)) << vocab;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, TokenizerVocabTest,
                         ::testing::Values("ggml-vocab-llama-spm", "ggml-vocab-phi-3",
                                           "ggml-vocab-gpt-2", "ggml-vocab-starcoder",
                                           "ggml-vocab-deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(TokenizerTest, LlamaSpmBasics) {
  auto tok = LoadTokenizer(kVocabDir + "ggml-vocab-llama-spm.gguf");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kSpm);
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_FALSE(tok->IsEog(1));
  // BOS is prepended with add_special only.
  const auto with = tok->Encode("Hello", true);
  const auto without = tok->Encode("Hello", false);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with[0], 1);
  // Control tokens in the text are plain text unless parse_special.
  const auto plain = tok->Encode("<s>hi", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  const auto parsed = tok->Encode("<s>hi", false, true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed[0], 1);
  // Byte fallback: U+1F999 is not in the vocabulary.
  const auto llama = tok->Encode("\xF0\x9F\xA6\x99", false);
  EXPECT_EQ(tok->Decode(llama), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(tok->TokenPiece(3 + 0x41), "A");  // <0x41>
  EXPECT_EQ(tok->TokenPiece(1), "<s>");
  EXPECT_EQ(tok->Decode({1, 2}), "");  // control tokens render as nothing
}

TEST(TokenizerTest, InvalidIdsAndInputsDoNotCrash) {
  for (const char* vocab : {"ggml-vocab-llama-spm", "ggml-vocab-gpt-2"}) {
    auto tok = LoadTokenizer(kVocabDir + vocab + ".gguf");
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->TokenPiece(-1), "");
    EXPECT_EQ(tok->TokenPiece(tok->n_vocab()), "");
    EXPECT_EQ(tok->TokenPiece(INT32_MAX), "");
    EXPECT_EQ(tok->Decode({-5, tok->n_vocab() + 7}), "");
    EXPECT_FALSE(tok->IsEog(-1));
    EXPECT_TRUE(tok->Encode("", false).empty());
    // Malformed UTF-8 of every kind still encodes.
    const std::string bad = std::string("a\x80\xC3 \xE2\x82\xF0\x9F\xA6 \xFF\xED\xA0\x80 z") +
                            std::string(1, '\0') + "\xC0\x80";
    const auto ids = tok->Encode(bad, true, true);
    EXPECT_FALSE(ids.empty());
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok->n_vocab());
    }
    if (tok->kind() == Tokenizer::Kind::kSpm) {
      // Byte fallback is exact, as long as a truncated lead byte does not swallow part of an
      // escaped space (then, as in llama.cpp, U+2581's bytes come back as byte tokens).
      const std::string bad_no_space = "a\x80\xC3x\xE2\x82y\xF0\x9F\xA6z\xFF\xED\xA0\x80\xC0\x80";
      EXPECT_EQ(tok->Decode(tok->Encode(bad_no_space, false)), bad_no_space);
    }
  }
}

TEST(TokenizerTest, Gpt2SpecialTokens) {
  auto tok = LoadTokenizer(kVocabDir + "ggml-vocab-gpt-2.gguf");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kBpe);
  EXPECT_EQ(tok->eos(), 50256);
  EXPECT_TRUE(tok->IsEog(50256));
  EXPECT_FALSE(tok->add_bos());
  const auto parsed = tok->Encode("a<|endoftext|>b", false, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{64, 50256, 65}));
  const auto plain = tok->Encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok->Decode(plain), "a<|endoftext|>b");
  EXPECT_EQ(tok->TokenPiece(50256), "<|endoftext|>");
  EXPECT_EQ(tok->TokenPiece(tok->TextToToken("\xC4\xA0the")), " the");  // "Ġthe"
}

TEST(TokenizerTest, StreamingHoldsBackSplitCharacters) {
  auto tok = LoadTokenizer(kVocabDir + "ggml-vocab-llama-spm.gguf");
  ASSERT_NE(tok, nullptr);
  // "🦙" (F0 9F A6 99) is encoded as four byte tokens.
  const std::string text = "x \xF0\x9F\xA6\x99 y \xE6\x88\x91";
  const auto ids = tok->Encode(text, true);
  StreamingDecoder stream(*tok);
  std::vector<std::string> parts;
  std::string all;
  for (int32_t id : ids) {
    parts.push_back(stream.Push(id));
    all += parts.back();
  }
  all += stream.Flush();
  EXPECT_EQ(all, text);
  bool saw_empty_mid_char = false;
  for (const auto& p : parts) {
    EXPECT_EQ(utf8::IncompleteTailLength(p), 0u);
    saw_empty_mid_char |= p.empty();
  }
  EXPECT_TRUE(saw_empty_mid_char);  // the first byte tokens of the emoji produced nothing
  // Reset starts a new sequence; a truncated stream flushes its partial bytes.
  stream.Reset();
  EXPECT_EQ(stream.Push(3 + 0xF0), "");
  EXPECT_EQ(stream.Push(3 + 0x9F), "");
  EXPECT_EQ(stream.Flush(), "\xF0\x9F");
}

TEST(TokenizerTest, Stories260K) {
  auto tok = LoadTokenizer(KVPACK_SOURCE_DIR "/models/stories260K.gguf");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), 512);
  const auto ids = tok->Encode("Once upon a time", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);  // BOS
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 512);
  }
  EXPECT_LT(ids.size(), 17u);  // merges happened: fewer tokens than characters + BOS
  EXPECT_EQ(tok->Decode(ids), "Once upon a time");
  EXPECT_EQ(tok->TokenPiece(ids[1]).substr(0, 1), " ");
}

TEST(PreTokenizerTest, UnknownNameIsAnErrorNamingIt) {
  auto pre = PreTokenizer::Create("no-such-pre");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pre.status().message().find("no-such-pre"), std::string::npos);
  EXPECT_TRUE(PreTokenizer::Create("").ok());  // absent key: llama.cpp's default list
}

TEST(PreTokenizerTest, SplitsLikeLlamaCpp) {
  auto gpt2 = PreTokenizer::Create("gpt-2");
  ASSERT_TRUE(gpt2.ok());
  EXPECT_EQ(gpt2.value()->Split("Hello world's  end\t\tx"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " end", "\t", "\t", "x"}));
  auto llama3 = PreTokenizer::Create("llama-bpe");
  ASSERT_TRUE(llama3.ok());
  EXPECT_TRUE(llama3.value()->traits().ignore_merges);
  EXPECT_EQ(llama3.value()->Split("12345 I'M\n\n"),
            (std::vector<std::string>{"123", "45", " I", "'M", "\n\n"}));
  auto starcoder = PreTokenizer::Create("starcoder");
  ASSERT_TRUE(starcoder.ok());
  EXPECT_EQ(starcoder.value()->Split("a 42"), (std::vector<std::string>{"a", " ", "4", "2"}));
  auto deepseek = PreTokenizer::Create("deepseek-coder");
  ASSERT_TRUE(deepseek.ok());
  EXPECT_EQ(deepseek.value()->Split("ab\ncd 7"),
            (std::vector<std::string>{"ab", "\n", "cd", " ", "7"}));
}

}  // namespace
}  // namespace kvpack
