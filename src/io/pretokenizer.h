// Regex pre-tokenizers for byte-level BPE vocabularies (GGUF `tokenizer.ggml.pre`).
//
// Design goals: the same word boundaries as llama.cpp's `unicode_regex_split` for every
// supported pre-tokenizer name: regexes applied in sequence, each one splitting every piece
// left by the previous one, with both the matches and the unmatched gaps kept as pieces;
// lookaheads never see past the piece being split. Regexes run in PCRE2 (UTF + UCP), which
// handles \p{L}, \p{N} and look-ahead natively where llama.cpp needs std::regex tricks.
// Non-goals: pre-tokenizers llama.cpp implements with custom code only (kimi-k2, afmoe),
// or with huge hand-written character classes (deepseek-llm): those names are rejected.
#ifndef KVPACK_IO_PRETOKENIZER_H_
#define KVPACK_IO_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvpack/status.h"

namespace kvpack {

// What a `tokenizer.ggml.pre` name implies beyond its regexes (llama-vocab.cpp, load()).
struct PreTokenizerTraits {
  std::string kind;            // canonical family name ("gpt2", "llama3", "qwen2", ...)
  bool ignore_merges = false;  // a word that is itself a token is emitted whole (llama3)
  bool add_bos = false;        // default for tokenizer.ggml.add_bos_token when absent
};

class PreTokenizer {
 public:
  // `name` is the GGUF value of tokenizer.ggml.pre; an empty name means the key is absent,
  // which selects llama.cpp's "default" regex list. Unknown names are InvalidArgument.
  static Result<std::unique_ptr<PreTokenizer>> Create(std::string_view name);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  const PreTokenizerTraits& traits() const { return traits_; }

  // Splits well-formed UTF-8 `text` (see utf8::Sanitize) into non-empty pieces whose
  // concatenation is `text`. Thread-safe.
  std::vector<std::string> Split(std::string_view text) const;

 private:
  struct Regex;
  PreTokenizer() = default;

  PreTokenizerTraits traits_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvpack

#endif  // KVPACK_IO_PRETOKENIZER_H_
